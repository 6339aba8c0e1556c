"""One local stack (real Kafka broker, SQLite JDBC catalog, warehouse) and one Spark session for
the whole integration session, in a temporary home that shares the project's jar cache. The demo
(`cdc-assets run`) runs once on that stack, for the tests that look at what it leaves behind.

The real sources (MariaDB, PostgreSQL, Kafka Connect with Debezium; `stack up --sources`) run once
per session too, on a stack of their own: their events would change what the demo's tests count.
Every module that uses them sees what earlier modules wrote, so tests compare whole tables (source
against a base built from the whole topic) rather than assume an empty source."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from cdc_assets.cli import console, main
from cdc_assets.jars.maven import ensure_jars
from cdc_assets.jars.own import spark_jars
from cdc_assets.resources import (
    IcebergCatalogResource,
    KafkaResource,
    SparkResource,
    build_resources,
)
from cdc_assets.settings import ENV_HOME, ENV_SPECS, Settings, load_settings
from cdc_assets_dev.stack import spark_connect
from cdc_assets_dev.stack.local_stack import StackState, stack_down, stack_up
from cdc_assets_tests.conftest import PROJECT_ROOT


def make_home(base: Path) -> Settings:
    """Settings for a fresh home whose jar cache links to the project's (filled once)."""
    project = load_settings({**os.environ, "CDC_ASSETS_SPECS": str(PROJECT_ROOT / "table_specs")})
    for kind in ("spark", "kafka"):
        ensure_jars(kind, project, quiet=True)
    base.mkdir(parents=True, exist_ok=True)
    (base / "jars").symlink_to(project.jars_dir, target_is_directory=True)
    return replace(project, home=base, kafka_bootstrap=None, catalog_uri=None, warehouse=None)


@pytest.fixture(scope="session")
def it_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return make_home(tmp_path_factory.mktemp("it") / "home")


@pytest.fixture
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """A stack of the test's own, for its broker to be killed (the session's stays up)."""
    home = make_home(tmp_path_factory.mktemp("broker") / "home")
    stack_up(home)
    try:
        yield home
    finally:
        stack_down(home, purge=True)


@pytest.fixture(scope="session")
def stack(it_settings: Settings) -> Iterator[StackState]:
    state = stack_up(it_settings)
    try:
        yield state
    finally:
        stack_down(it_settings, purge=True)


@pytest.fixture(scope="session")
def sources_home() -> Iterator[Settings]:
    """The home of the real-sources stack. PostgreSQL runs as the `postgres` system user (initdb
    refuses root), which cannot enter pytest's 0700 temporary directories: a home of our own that
    others may traverse."""
    base = Path(tempfile.mkdtemp(prefix="cdc-sources-"))
    base.chmod(0o711)
    settings = make_home(base / "home")
    try:
        yield settings
    finally:
        try:
            stack_down(settings, purge=True)
        finally:
            shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def sources_stack(sources_home: Settings) -> StackState:
    """Kafka, MariaDB, PostgreSQL and Kafka Connect with both connectors RUNNING."""
    return stack_up(sources_home, sources=True)


@pytest.fixture(scope="session")
def resources(it_settings: Settings, stack: StackState) -> dict[str, Any]:
    res = build_resources(it_settings)
    res["spark"] = res["spark"].model_copy(update={"master": "local[2]", "shuffle_partitions": 4})
    if os.environ.get("CDC_ASSETS_TEST_SPARK") == "connect":
        # The same tests through a Spark Connect server of the session's stack (stack_down
        # stops it); the default is a driver in the test process.
        spark_jars(it_settings)
        port = spark_connect.start_server(it_settings, res["spark"].conf())
        res["spark"] = res["spark"].model_copy(update={"remote": spark_connect.remote_url(port)})
    return res


@pytest.fixture(scope="session")
def spark_resource(resources: dict[str, Any]) -> SparkResource:
    spark: SparkResource = resources["spark"]
    return spark


@pytest.fixture(scope="session")
def spark(spark_resource: SparkResource) -> Iterator[Any]:
    session = spark_resource.get_session()
    yield session
    session.stop()


@pytest.fixture(scope="session")
def iceberg(resources: dict[str, Any]) -> IcebergCatalogResource:
    catalog: IcebergCatalogResource = resources["iceberg"]
    return catalog


@pytest.fixture(scope="session")
def kafka(resources: dict[str, Any]) -> KafkaResource:
    res: KafkaResource = resources["kafka"]
    return res


@dataclass(frozen=True)
class DemoRun:
    """What `cdc-assets checks --demo --events 300` (CI's check command: the demo, then every
    asset check) left: its Dagster instance, its printed output and the check outcomes."""

    dagster_home: Path
    output: str
    checks: list[dict[str, Any]]


@pytest.fixture(scope="session")
def demo_home(
    it_settings: Settings,
    stack: StackState,
    spark: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> DemoRun:
    """The demo and its checks, run once per session on the session's stack, in a Dagster home
    of its own. The command exits 0: no check failed with error severity."""
    home = tmp_path_factory.mktemp("dagster")
    outcomes = home / "checks.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ENV_HOME, str(it_settings.home))
        mp.setenv(ENV_SPECS, str(it_settings.specs_dir))
        mp.setenv("DAGSTER_HOME", str(home))
        # The command prints through its rich console: capture it there, and echo it so that
        # pytest shows it with the first test using the fixture (on failure, or with -s).
        captured = console.capture()
        try:
            with captured:
                code = main(["checks", "--demo", "--events", "300", "--json", str(outcomes)])
        finally:
            sys.stdout.write(captured.get())
    output = captured.get()
    assert code == 0, output
    checks = json.loads(outcomes.read_text(encoding="utf-8"))
    return DemoRun(dagster_home=home, output=output, checks=checks)
