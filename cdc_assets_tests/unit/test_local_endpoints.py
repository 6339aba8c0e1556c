"""The local stack's addresses as the product reads them from the state file, without the stack's
package: catalogs and the object store as recorded; the broker, the registry and the Spark
Connect server only while the recorded pid runs that server."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cdc_assets.errors import StackError
from cdc_assets.local_servers import endpoints, state
from cdc_assets.settings import Settings, load_settings

pytestmark = pytest.mark.unit


def _settings(tmp_path: Path, **env: str) -> Settings:
    return load_settings({"CDC_ASSETS_HOME": str(tmp_path), **env})


def test_nothing_recorded_is_nothing_found(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    assert endpoints.recorded_rest_catalog(settings) is None
    assert endpoints.recorded_catalog_server(settings) is None
    assert endpoints.recorded_object_store(settings) is None
    assert endpoints.running_registry(settings) is None
    assert endpoints.spark_connect_port(settings) is None
    assert endpoints.running_bootstrap(settings) is None
    with pytest.raises(StackError, match="stack up"):
        endpoints.require_bootstrap(settings)
    configured = _settings(tmp_path, CDC_ASSETS_KAFKA_BOOTSTRAP="127.0.0.1:9")
    assert endpoints.require_bootstrap(configured) == "127.0.0.1:9"


def test_catalogs_and_the_object_store_are_taken_as_recorded(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    state.put(
        settings,
        rest_catalog={"pid": 1, "port": 8181, "token": "t", "client_secret": "s"},
        catalog_server={
            "jdbc_url": "jdbc:postgresql://127.0.0.1:5/c",
            "user": "u",
            "password": "p",
        },
        object_store={
            "pid": 2,
            "endpoint": "http://127.0.0.1:7",
            "access_key": "a",
            "secret_key": "k",
            "bucket": "warehouse",
        },
    )
    rest = endpoints.recorded_rest_catalog(settings)
    assert rest is not None
    assert rest.url == "http://127.0.0.1:8181"
    assert rest.client_properties() == {"token": "t"}
    assert rest.credential() == "cdc-assets:s"
    server = endpoints.recorded_catalog_server(settings)
    assert server is not None
    assert server.properties() == {"jdbc.user": "u", "jdbc.password": "p"}
    store = endpoints.recorded_object_store(settings)
    assert store is not None
    assert store.warehouse == "s3://warehouse/"
    assert store.catalog_properties()["s3.endpoint"] == "http://127.0.0.1:7"


def test_a_server_counts_only_while_its_pid_runs_that_server(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    marker = f"{endpoints.SPARK_CONNECT_MARKER}={settings.stack_dir}"
    # A stand-in process with the Spark Connect server's marker on its command line.
    server = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", marker], stdin=subprocess.DEVNULL
    )
    try:
        state.put(
            settings,
            spark_connect={"pid": server.pid, "port": 15002},
            # This process is alive, but it is not a broker or a registry.
            kafka={"pid": os.getpid(), "bootstrap": "127.0.0.1:9092"},
            schema_registry={"pid": os.getpid(), "port": 8081},
        )
        assert endpoints.spark_connect_port(settings) == 15002
        assert endpoints.spark_connect_url(15002) == "sc://127.0.0.1:15002"
        assert endpoints.running_bootstrap(settings) is None
        assert endpoints.running_registry(settings) is None
    finally:
        server.kill()
        server.wait()
    assert endpoints.spark_connect_port(settings) is None  # its pid no longer runs


def test_local_source_urls_are_those_of_the_source_servers_that_run(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    marker = f"--datadir={settings.stack_dir}/mariadb/data"
    # A stand-in for the MariaDB server, with its marker on its command line.
    server = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", marker], stdin=subprocess.DEVNULL
    )
    mariadb_url = "jdbc:mariadb://127.0.0.1:3306/app?user=cdc&password=p"
    try:
        state.update(
            settings,
            "sources",
            password="p",
            mariadb={
                "pid": server.pid,
                "port": 3306,
                "marker": marker,
                "jdbc": {"CDC_ASSETS_SOURCE_URL_MYSQL_APP": mariadb_url},
            },
            # Recorded, but its pid runs no PostgreSQL (this process lacks the marker).
            postgres={
                "pid": os.getpid(),
                "port": 5432,
                "marker": f"-D {settings.stack_dir}/postgres/data",
                "jdbc": {"CDC_ASSETS_SOURCE_URL_POSTGRESQL_SHOP": "jdbc:postgresql://x/shop"},
            },
        )
        assert endpoints.local_source_urls(settings) == {
            "CDC_ASSETS_SOURCE_URL_MYSQL_APP": mariadb_url
        }
        with_urls = endpoints.with_local_sources(settings)
        assert with_urls.source_urls == {"CDC_ASSETS_SOURCE_URL_MYSQL_APP": mariadb_url}
        # URLs the environment configures win over the local ones.
        own = _settings(tmp_path, CDC_ASSETS_SOURCE_URL_APP="jdbc:mariadb://db.example/app")
        assert endpoints.with_local_sources(own).source_urls == own.source_urls
    finally:
        server.kill()
        server.wait()
    assert endpoints.local_source_urls(settings) == {}
    assert endpoints.with_local_sources(settings) is settings
