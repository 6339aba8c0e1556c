"""One catalog description renders the same catalog for Spark and for pyiceberg."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdc_assets.resources.config import (
    LOCAL_FILES_CLASS,
    SPJ_CONF,
    UDF_JAR_NAME,
    CatalogConfig,
    pyiceberg_catalog_props,
    spark_catalog_conf,
    spark_conf,
)

SQLITE = CatalogConfig("lake", "jdbc", "jdbc:sqlite:/data/catalog.db", "file:///data/wh")


def test_sqlite_catalog_for_both_engines() -> None:
    assert spark_catalog_conf(SQLITE) == {
        "spark.sql.catalog.lake": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.lake.type": "jdbc",
        "spark.sql.catalog.lake.uri": "jdbc:sqlite:/data/catalog.db",
        "spark.sql.catalog.lake.warehouse": "file:///data/wh",
        "spark.sql.catalog.lake.cache-enabled": "false",
        "spark.sql.catalog.lake.jdbc.schema-version": "V1",
        # many processes write the embedded catalog: wait for locks, readers beside a writer
        "spark.sql.catalog.lake.jdbc.busy_timeout": "60000",
        "spark.sql.catalog.lake.jdbc.journal_mode": "WAL",
    }
    assert pyiceberg_catalog_props(SQLITE) == {
        "type": "sql",
        "uri": "sqlite:////data/catalog.db?timeout=60",
        "warehouse": "file:///data/wh",
    }


def test_rest_catalog_with_object_storage() -> None:
    rest = CatalogConfig(
        "lake", "rest", "http://catalog:8181", "s3://lake/wh", {"s3.endpoint": "http://s3:9000"}
    )
    assert spark_catalog_conf(rest)["spark.sql.catalog.lake.s3.endpoint"] == "http://s3:9000"
    assert pyiceberg_catalog_props(rest) == {
        "type": "rest",
        "uri": "http://catalog:8181",
        "warehouse": "s3://lake/wh",
        "s3.endpoint": "http://s3:9000",
    }


def test_postgres_jdbc_maps_to_sqlalchemy() -> None:
    pg = CatalogConfig("lake", "jdbc", "jdbc:postgresql://db:5432/iceberg", "s3://lake/wh")
    assert pyiceberg_catalog_props(pg)["uri"] == "postgresql+psycopg2://db:5432/iceberg"


def test_unknown_jdbc_url_is_an_error() -> None:
    with pytest.raises(ValueError, match="no pyiceberg equivalent"):
        pyiceberg_catalog_props(CatalogConfig("lake", "jdbc", "jdbc:oracle:thin:@x", "file:///w"))


def test_spark_conf_has_iceberg_spj_and_extra_wins() -> None:
    conf = spark_conf(
        master="spark://m:7077",
        app_name="x",
        catalog=SQLITE,
        jars=["/j/a.jar", "/j/b.jar"],
        shuffle_partitions=4,
        driver_memory="1g",
        ui_enabled=False,
        extra={"spark.sql.shuffle.partitions": "64"},
    )
    assert conf["spark.master"] == "spark://m:7077"
    assert conf["spark.jars"] == "/j/a.jar,/j/b.jar"
    assert conf["spark.sql.defaultCatalog"] == "lake"
    assert conf["spark.sql.shuffle.partitions"] == "64"
    assert all(conf[k] == v for k, v in SPJ_CONF.items())
    extensions = conf["spark.sql.extensions"].split(",")
    assert extensions == [
        "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        "io.cdcassets.spark.CdcExtensions",  # the envelope reader, from the project's jar
    ]


def _conf(master: str, jars: list[str], extra: dict[str, str] | None = None) -> dict[str, str]:
    return spark_conf(
        master=master,
        app_name="x",
        catalog=SQLITE,
        jars=jars,
        shuffle_partitions=4,
        driver_memory="1g",
        ui_enabled=False,
        extra=extra or {},
    )


def test_local_driver_uses_the_projects_local_files() -> None:
    conf = _conf("local[2]", ["/j/iceberg.jar", f"/j/udf/{UDF_JAR_NAME}"])
    assert conf["spark.hadoop.fs.file.impl"] == LOCAL_FILES_CLASS
    # On the JVM's class path: spark-submit resolves spark.jars through file: before loading them.
    assert conf["spark.driver.extraClassPath"] == f"/j/udf/{UDF_JAR_NAME}"


def test_a_local_driver_plans_scans_in_its_own_thread_with_the_throughput_collector() -> None:
    local = _conf("local[2]", [])["spark.driver.extraJavaOptions"].split()
    assert local == [
        "-XX:-DontCompileHugeMethods",
        "-Diceberg.scan.plan-in-worker-pool=false",
        "-XX:+UseParallelGC",
    ]
    # A cluster's driver reads manifests from an object store: in Iceberg's pool; its collector
    # is its JVM's default.
    cluster = _conf("spark://m:7077", [])
    assert cluster["spark.driver.extraJavaOptions"] == "-XX:-DontCompileHugeMethods"
    assert cluster["spark.executor.extraJavaOptions"] == "-XX:-DontCompileHugeMethods"


@pytest.mark.parametrize(
    ("master", "jars"),
    [("local[2]", ["/j/iceberg.jar"]), ("spark://m:7077", [f"/j/udf/{UDF_JAR_NAME}"])],
)
def test_hadoops_local_files_without_the_jar_or_on_a_cluster(master: str, jars: list[str]) -> None:
    conf = _conf(master, jars)
    assert "spark.hadoop.fs.file.impl" not in conf
    assert "spark.driver.extraClassPath" not in conf


def test_a_class_path_of_the_callers_adds_to_the_jars() -> None:
    jar = f"/j/udf/{UDF_JAR_NAME}"
    conf = _conf("local[2]", [jar], {"spark.driver.extraClassPath": "/opt/x.jar"})
    assert conf["spark.driver.extraClassPath"] == f"{jar}:/opt/x.jar"
    assert conf["spark.hadoop.fs.file.impl"] == LOCAL_FILES_CLASS
    # Hadoop's own file system, if the caller says so.
    conf = _conf(
        "local[2]", [jar], {"spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.LocalFileSystem"}
    )
    assert conf["spark.hadoop.fs.file.impl"] == "org.apache.hadoop.fs.LocalFileSystem"


def test_a_setting_may_come_from_a_secret_file(tmp_path: Path) -> None:
    from cdc_assets.errors import ConfigError
    from cdc_assets.settings import load_settings

    url = tmp_path / "app-url"
    url.write_text("jdbc:mariadb://127.0.0.1:3306/app?user=app&password=s3cret\n")
    props = tmp_path / "catalog.json"
    props.write_text('{"credential": "id:secret"}')
    settings = load_settings(
        {
            "CDC_ASSETS_SOURCE_URL_APP_FILE": str(url),
            "CDC_ASSETS_CATALOG_PROPERTIES_FILE": str(props),
        }
    )
    assert settings.source_urls == {
        "CDC_ASSETS_SOURCE_URL_APP": "jdbc:mariadb://127.0.0.1:3306/app?user=app&password=s3cret"
    }
    assert settings.catalog_properties == {"credential": "id:secret"}
    with pytest.raises(ConfigError, match="both CDC_ASSETS_SOURCE_URL_APP and"):
        load_settings(
            {"CDC_ASSETS_SOURCE_URL_APP": "x", "CDC_ASSETS_SOURCE_URL_APP_FILE": str(url)}
        )
    with pytest.raises(ConfigError, match="CDC_ASSETS_SOURCE_URL_APP_FILE: cannot read") as err:
        load_settings({"CDC_ASSETS_SOURCE_URL_APP_FILE": str(tmp_path / "missing")})
    assert "s3cret" not in str(err.value)


def test_the_cluster_profiles_catalog_is_rest_unless_asked_for_jdbc() -> None:
    from cdc_assets.errors import ConfigError
    from cdc_assets.settings import load_settings

    assert load_settings({}).cluster_catalog == "rest"
    assert load_settings({"CDC_ASSETS_CLUSTER_CATALOG": " JDBC "}).cluster_catalog == "jdbc"
    with pytest.raises(ConfigError, match="CDC_ASSETS_CLUSTER_CATALOG must be one of rest, jdbc"):
        load_settings({"CDC_ASSETS_CLUSTER_CATALOG": "glue"})


def test_printed_spark_conf_hides_secrets() -> None:
    from cdc_assets.resources.config import redacted_conf

    conf = {
        "spark.sql.catalog.lake.jdbc.password": "pw",
        "spark.sql.catalog.lake.s3.secret-access-key": "sk",
        "spark.sql.catalog.lake.s3.access-key-id": "ak",
        "spark.sql.catalog.lake.token": "tk",
        "spark.sql.catalog.lake.credential": "id:secret",
        "spark.sql.catalog.lake.uri": "jdbc:postgresql://127.0.0.1/cat?user=u&password=pw2",
        "spark.sql.catalog.lake.warehouse": "s3://warehouse/",
        "spark.hadoop.fs.s3a.secret.key": "hk",
    }
    shown, hidden = redacted_conf(conf)
    assert hidden == 6
    assert shown["spark.sql.catalog.lake.jdbc.password"] == "***"
    assert shown["spark.sql.catalog.lake.uri"].endswith("user=u&password=***")
    assert shown["spark.sql.catalog.lake.s3.access-key-id"] == "ak"  # an id, not a secret
    assert shown["spark.sql.catalog.lake.warehouse"] == "s3://warehouse/"
    assert not any(s in v for v in shown.values() for s in ("pw", "sk", "tk", "hk", "id:secret"))


def test_a_local_driver_maps_the_class_archive_quietly_and_a_cluster_driver_does_not() -> None:
    archive = Path("/cache/class-archive/driver-0123.jsa")
    kwargs: dict[str, Any] = {
        "app_name": "x",
        "catalog": SQLITE,
        "jars": [],
        "shuffle_partitions": 4,
        "driver_memory": "1g",
        "ui_enabled": False,
        "extra": {},
        "class_archive": archive,
    }
    local = spark_conf(master="local[2]", **kwargs)["spark.driver.extraJavaOptions"].split()
    assert f"-XX:SharedArchiveFile={archive}" in local
    assert "-Xlog:cds*=off" in local  # a JVM that cannot map it says nothing
    remote = spark_conf(master="spark://m:7077", **kwargs)["spark.driver.extraJavaOptions"]
    assert "SharedArchiveFile" not in remote


def test_the_class_archive_is_keyed_by_the_jars(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataclasses import replace

    from cdc_assets.resources.class_archive import archive_path, existing_archive
    from cdc_assets.settings import load_settings

    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\n")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    settings = replace(load_settings(), home=tmp_path / "home")
    jar = tmp_path / "a.jar"
    jar.write_bytes(b"one")
    path = archive_path(settings, [str(jar)])
    assert path is not None
    assert path.parent == settings.jars_dir / "class-archive"
    assert existing_archive(settings, [str(jar)]) is None  # not made yet
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    assert existing_archive(settings, [str(jar)]) == path
    jar.write_bytes(b"a new build")  # another jar: the archive is not for it
    assert existing_archive(settings, [str(jar)]) is None
    assert existing_archive(settings, [str(tmp_path / "gone.jar")]) is None
