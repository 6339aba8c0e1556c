"""Catalog and Spark configuration as plain data: one catalog description, rendered for Spark
and for pyiceberg so both engines always open the same catalog. No I/O here."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import quote

from cdc_assets.sql.decode import ENVELOPE_EXTENSIONS
from cdc_assets.sql.protect import KEY_LITERALS

CatalogType = Literal["jdbc", "rest"]

# The file: file system of a local driver (in the project's jar, java/udf).
LOCAL_FILES_CLASS = "io.cdcassets.spark.LocalFiles"
UDF_JAR_NAME = "cdc-assets-udf.jar"
CLASS_PATH = "spark.driver.extraClassPath"
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
# The decode projection compiles to methods over HotSpot's 8,000-byte JIT limit; without this
# flag they run interpreted (measured: about 20% of ingest time).
JIT_OPTIONS = "-XX:-DontCompileHugeMethods"
# Iceberg plans a scan in the calling thread instead of its worker pool (a JVM system property
# of Iceberg's SystemConfigs). The pool's iterator polls its tasks every 10 ms, which a table of
# a few manifests pays on every scan: a profile of a busy fleet cycle put about 0.3 s per table
# in those sleeps, and a MERGE of 100 keys took 0.87x the time without them. Only for a local
# driver: on an object store, manifests read in parallel pay for the polling.
SERIAL_PLANNING = "-Diceberg.scan.plan-in-worker-pool=false"
# A local driver collects garbage with the throughput collector, not G1 (the JVM's default).
# G1's concurrent threads and write barriers compete with the driver's planning on a machine of
# a few cores: busy fleet cycles took 0.91x the time and 0.88x the CPU with this collector
# (benchmarks/driver_gc.py). A driver elsewhere keeps its JVM's default.
LOCAL_GC = "-XX:+UseParallelGC"
# A JVM that cannot map a class archive runs without it; it must not say so in a run's output.
QUIET_CDS = "-Xlog:cds*=off"
# Storage-partitioned join prerequisites for the MERGE into base (see the design notes); the
# partially clustered distribution stays off because of known wrong-result bugs.
SPJ_CONF = {
    "spark.sql.sources.v2.bucketing.enabled": "true",
    "spark.sql.iceberg.planning.preserve-data-grouping": "true",
    "spark.sql.requireAllClusterKeysForCoPartition": "false",
    "spark.sql.sources.v2.bucketing.partiallyClusteredDistribution.enabled": "false",
}


@dataclass(frozen=True)
class CatalogConfig:
    """An Iceberg catalog reachable from both Spark and pyiceberg.

    ``jdbc``: ``uri`` is a JDBC URL (``jdbc:sqlite:/path/catalog.db`` for the embedded default,
    ``jdbc:postgresql://host/db`` for a shared one). ``rest``: ``uri`` is the REST endpoint.
    ``properties`` are passed to both engines (credentials, ``io-impl``, S3 endpoint, ...).
    """

    name: str
    type: CatalogType
    uri: str
    warehouse: str
    properties: dict[str, str] = field(default_factory=dict)


# The embedded SQLite catalog is written by many processes at once (every Dagster run, the daemon's
# sensors, pyiceberg in checks): a writer waits this long for another's lock instead of failing
# with "database is locked" (SQLite's default is not to wait; sqlite-jdbc's 3 s and Python's 5 s
# ran out on a busy 2-core machine), and the write-ahead log lets readers go on while one writes.
SQLITE_BUSY_TIMEOUT_S = 60


def _sqlalchemy_url(jdbc_url: str, properties: dict[str, str]) -> str:
    """The SQLAlchemy URL pyiceberg's SQL catalog needs for a JDBC URL Spark uses; the JDBC
    catalog's ``jdbc.user`` and ``jdbc.password`` properties become the URL's credentials."""
    if jdbc_url.startswith("jdbc:sqlite:"):
        path = jdbc_url.removeprefix("jdbc:sqlite:").removeprefix("//")
        separator = "&" if "?" in path else "?"
        return f"sqlite:///{path}{separator}timeout={SQLITE_BUSY_TIMEOUT_S}"
    if jdbc_url.startswith("jdbc:postgresql://"):
        rest = jdbc_url.removeprefix("jdbc:postgresql://")
        user = properties.get("jdbc.user")
        if user:
            password = properties.get("jdbc.password")
            secret = f":{quote(password, safe='')}" if password else ""
            rest = f"{quote(user, safe='')}{secret}@{rest}"
        return "postgresql+psycopg2://" + rest
    raise ValueError(f"no pyiceberg equivalent for JDBC URL {jdbc_url!r} (sqlite or postgresql)")


def spark_catalog_conf(catalog: CatalogConfig) -> dict[str, str]:
    """Spark properties that register the catalog under its name."""
    prefix = f"spark.sql.catalog.{catalog.name}"
    conf = {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": catalog.type,
        f"{prefix}.uri": catalog.uri,
        f"{prefix}.warehouse": catalog.warehouse,
    }
    # Other processes (pyiceberg, other runs) commit to the same tables: a cached table would
    # let an insert-only MERGE read a stale snapshot and write duplicates.
    conf[f"{prefix}.cache-enabled"] = "false"
    if catalog.type == "jdbc":
        # V1 adds view support; pyiceberg's SQL catalog reads and writes the same tables.
        conf[f"{prefix}.jdbc.schema-version"] = "V1"
        if catalog.uri.startswith("jdbc:sqlite:"):
            # sqlite-jdbc reads pragmas from the connection properties (jdbc.* are passed on).
            conf[f"{prefix}.jdbc.busy_timeout"] = str(SQLITE_BUSY_TIMEOUT_S * 1000)
            conf[f"{prefix}.jdbc.journal_mode"] = "WAL"
    conf.update({f"{prefix}.{k}": v for k, v in catalog.properties.items()})
    return conf


def pyiceberg_catalog_props(catalog: CatalogConfig) -> dict[str, str]:
    """Properties for ``pyiceberg.catalog.load_catalog(catalog.name, **props)``."""
    if catalog.type == "jdbc":
        props = {"type": "sql", "uri": _sqlalchemy_url(catalog.uri, catalog.properties)}
    else:
        props = {"type": "rest", "uri": catalog.uri}
    props["warehouse"] = catalog.warehouse
    props.update(catalog.properties)
    return props


def spark_conf(
    *,
    master: str,
    app_name: str,
    catalog: CatalogConfig,
    jars: list[str],
    shuffle_partitions: int,
    driver_memory: str,
    ui_enabled: bool,
    extra: dict[str, str],
    java_options: Sequence[str] = (),
    class_archive: Path | None = None,
) -> dict[str, str]:
    """The full Spark configuration of a session; ``extra`` wins over everything.
    ``java_options``: more JVM options for the driver and the executors (the Kafka client's
    system properties, `KafkaSecurity.jvm_options`). ``class_archive``: a local driver's JVM
    maps it (`jars.class_archive`)."""
    conf = {
        "spark.master": master,
        "spark.app.name": app_name,
        # Iceberg's SQL (MERGE, procedures) and the project's envelope reader
        # (cdc_debezium_envelope, in the jar cache's cdc-assets-udf.jar on spark.jars).
        "spark.sql.extensions": (
            f"org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions,{ENVELOPE_EXTENSIONS}"
        ),
        "spark.sql.defaultCatalog": catalog.name,
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.driver.memory": driver_memory,
        "spark.ui.enabled": str(ui_enabled).lower(),
        # The ingest reads many fields of one parsed JSON struct; Spark's JSON expression rewrite
        # would turn each field access into its own from_json call.
        "spark.sql.optimizer.enableJsonExpressionOptimization": "false",
        # Plans in the UI and in explain output show the protections' key literals redacted.
        "spark.sql.redaction.string.regex": KEY_LITERALS,
        DRIVER_JAVA_OPTIONS: JIT_OPTIONS,
        "spark.executor.extraJavaOptions": JIT_OPTIONS,
        **SPJ_CONF,
        **spark_catalog_conf(catalog),
    }
    if master.startswith("local"):
        # A local driver serves only this machine: keep its ports on loopback.
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
        conf[DRIVER_JAVA_OPTIONS] = f"{JIT_OPTIONS} {SERIAL_PLANNING} {LOCAL_GC}"
        if class_archive is not None:
            # Classes parsed and verified once, mapped by every local driver: it starts and
            # runs its first statements in about 0.7x the time (benchmarks/driver_startup.py).
            conf[DRIVER_JAVA_OPTIONS] += f" -XX:SharedArchiveFile={class_archive} {QUIET_CDS}"
        own = [j for j in jars if Path(j).name == UDF_JAR_NAME]
        if own:
            # Local files without a chmod process per file or .crc files beside them
            # (LocalFiles.java): a small commit created dozens of processes. On the JVM's own
            # class path, since spark-submit opens files before it loads spark.jars.
            conf[CLASS_PATH] = own[0]
            conf["spark.hadoop.fs.file.impl"] = LOCAL_FILES_CLASS
    if java_options:
        for key in (DRIVER_JAVA_OPTIONS, "spark.executor.extraJavaOptions"):
            conf[key] = " ".join([conf[key], *java_options])
    if jars:
        conf["spark.jars"] = ",".join(jars)
    ours = conf.get(CLASS_PATH)
    conf.update(extra)
    if ours and extra.get(CLASS_PATH) not in (None, ours):
        # A class path of the caller's adds to ours: fs.file.impl still names our class.
        conf[CLASS_PATH] = f"{ours}{os.pathsep}{extra[CLASS_PATH]}"
    return conf


# Property names whose values are secrets (anywhere in the name, case-insensitive).
_SECRET_KEYS = re.compile(r"(?i)(password|secret|token|credential|session-token|private-key)")


def is_secret_key(key: str) -> bool:
    """True for a property whose value is a secret (see ``_SECRET_KEYS``)."""
    return _SECRET_KEYS.search(key) is not None


def redacted_conf(conf: dict[str, str]) -> tuple[dict[str, str], int]:
    """``conf`` fit to print: secret values (``*.password``, ``*.secret-access-key``, a
    REST catalog's ``token`` or ``credential``) as ``***``, and passwords inside JDBC URLs
    hidden; with how many values were changed."""
    out, changed = {}, 0
    for key, value in conf.items():
        shown = value
        if _SECRET_KEYS.search(key):
            shown = "***"
        elif "password=" in value.lower() or re.search(r"//[^/:@]+:[^/@]*@", value):
            shown = re.sub(r"(?i)(password=)[^&;]*", r"\1***", value)
            shown = re.sub(r"(//[^/:@]+:)[^/@]*@", r"\1***@", shown)
        changed += shown != value
        out[key] = shown
    return out, changed
