"""One local stack (real Kafka broker, SQLite JDBC catalog, warehouse) and one Spark session for
the whole integration session, in a temporary home that shares the project's jar cache."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cdc_assets.resources import (
    IcebergCatalogResource,
    KafkaResource,
    SparkResource,
    build_resources,
)
from cdc_assets.resources.jars import ensure_jars
from cdc_assets.resources.local_stack import StackState, stack_down, stack_up
from cdc_assets.settings import Settings, load_settings
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


@pytest.fixture(scope="session")
def stack(it_settings: Settings) -> Iterator[StackState]:
    state = stack_up(it_settings)
    try:
        yield state
    finally:
        stack_down(it_settings, purge=True)


@pytest.fixture(scope="session")
def resources(it_settings: Settings, stack: StackState) -> dict[str, Any]:
    res = build_resources(it_settings)
    res["spark"] = res["spark"].model_copy(update={"master": "local[2]", "shuffle_partitions": 4})
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
