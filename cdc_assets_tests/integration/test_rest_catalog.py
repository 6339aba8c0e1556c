"""The pipeline on an Iceberg REST catalog: the stack's REST server (stack/rest_catalog.py,
Iceberg's reference REST implementation over a SQLite JDBC catalog of its own), used by Spark's
RESTCatalog and pyiceberg's, registered in the session's Spark as a second catalog.

Ledger and base equal the oracle's; a server stopped in the middle of an ingest (after the data
files are written, before the commit) fails that ingest, and after a restart the next one
converges with every record once; a token the server refuses (a wrong one, or none) fails the
preflight naming the setting.
"""

from __future__ import annotations

import random
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cdc_assets.errors import ConfigError
from cdc_assets.pipeline.ingest.ingest import ingest_incremental
from cdc_assets.pipeline.shared.failpoint import HOLD_ENV
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.pipeline.upsert.upsert import build_bucketed, merge_base
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.resources.config import spark_catalog_conf
from cdc_assets.resources.preflight import check_catalog
from cdc_assets.schema.layers import ledger_layout
from cdc_assets.settings import ENV_CATALOG_PROPERTIES, Settings
from cdc_assets.spec.models import TableSpec
from cdc_assets_dev.demo.events import produce, workload
from cdc_assets_dev.stack import rest_catalog
from cdc_assets_tests.integration.test_ingest import (
    assert_ledger_matches,
    consume_all,
    isolated,
    read_table,
)
from cdc_assets_tests.integration.test_upsert import (
    assert_base_matches,
    example_spec,
    expected_base,
)
from cdc_assets_tests.support.oracle import expected_outcome

pytestmark = pytest.mark.integration

CATALOG = "rest_lake"


@pytest.fixture(scope="module")
def rest_settings(it_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A home of its own for the server's state, a SQLite backend and a warehouse directory."""
    base = tmp_path_factory.mktemp("rest")
    settings = replace(it_settings, home=base / "home")
    backend = {
        "uri": f"jdbc:sqlite:{base / 'backend.db'}",
        "warehouse": (base / "warehouse").as_uri(),
    }
    rest_catalog.start(settings, backend)
    yield settings, backend
    rest_catalog.stop(settings)


@pytest.fixture(scope="module")
def rest_iceberg(rest_settings: Any, spark: Any) -> IcebergCatalogResource:
    """The REST catalog for pyiceberg, and registered in the session's Spark under CATALOG."""
    settings, backend = rest_settings
    server = rest_catalog.running(settings)
    assert server is not None
    resource = IcebergCatalogResource(
        name=CATALOG,
        type="rest",
        uri=server.url,
        warehouse=backend["warehouse"],
        properties=server.client_properties(),
    )
    for key, value in spark_catalog_conf(resource.config()).items():
        spark.conf.set(key, value)
    return resource


def _ingest(
    spark: Any, iceberg: IcebergCatalogResource, kafka: KafkaResource, spec: TableSpec
) -> Any:
    return ingest_incremental(spark, CATALOG, iceberg.load_catalog(), kafka, spec)


def _assert_matches_oracle(
    spec: TableSpec, iceberg: IcebergCatalogResource, kafka: KafkaResource
) -> None:
    outcomes = {
        (p, o): expected_outcome(spec, p, o, ts, k, v)
        for p, o, ts, k, v in consume_all(kafka, spec.source.topic)
    }
    layout = ledger_layout(spec)
    assert_ledger_matches(spec, outcomes, read_table(iceberg, layout.namespace, layout.name))


def test_ingest_and_upsert_through_rest(
    it_settings: Settings,
    spark: Any,
    rest_iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
) -> None:
    spec = isolated(example_spec(it_settings, "orders"), kafka=kafka)
    produce(
        workload(spec, random.Random(41), keys=30, events=150),
        spec.source.topic,
        kafka.resolved_bootstrap(),
    )
    ensure_tables(spark, CATALOG, spec)
    result = _ingest(spark, rest_iceberg, kafka, spec)
    assert result.ledger > 100
    _assert_matches_oracle(spec, rest_iceberg, kafka)
    build_bucketed(spark, CATALOG, rest_iceberg.load_catalog(), spec)
    merged = merge_base(spark, CATALOG, rest_iceberg.load_catalog(), spec)
    assert merged.applied
    assert_base_matches(spec, rest_iceberg, expected_base(spec, kafka))


def test_server_stopped_mid_ingest_then_restarted_converges(
    it_settings: Settings,
    spark: Any,
    rest_settings: Any,
    rest_iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    settings, backend = rest_settings
    spec = isolated(example_spec(it_settings, "users"), kafka=kafka)
    bootstrap = kafka.resolved_bootstrap()
    produce(workload(spec, random.Random(8), keys=10, events=40), spec.source.topic, bootstrap)
    ensure_tables(spark, CATALOG, spec)
    _ingest(spark, rest_iceberg, kafka, spec)
    produce(workload(spec, random.Random(9), keys=10, events=40), spec.source.topic, bootstrap)

    monkeypatch.setenv(HOLD_ENV, f"ingest_before_commit={tmp_path}")
    errors: list[BaseException] = []

    def run() -> None:
        try:
            _ingest(spark, rest_iceberg, kafka, spec)
        except BaseException as exc:  # the expected failure, checked below
            errors.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    held = tmp_path / "ingest_before_commit.held"
    for _ in range(600):
        if held.exists() or not worker.is_alive():
            break
        threading.Event().wait(0.1)
    assert held.exists(), errors
    rest_catalog.stop(settings)  # the decoded batch is written; its commit is next
    (tmp_path / "ingest_before_commit.release").touch()
    worker.join(120)
    assert not worker.is_alive()
    assert errors, "an ingest whose catalog was gone at its commit succeeded"
    monkeypatch.delenv(HOLD_ENV)

    rest_catalog.start(settings, backend)
    again = _ingest(spark, rest_iceberg, kafka, spec)
    assert again.ledger > 0
    _assert_matches_oracle(spec, rest_iceberg, kafka)  # every record once


def test_a_refused_token_fails_the_preflight_naming_the_setting(
    rest_settings: Any, rest_iceberg: IcebergCatalogResource
) -> None:
    """The server requires the token the stack made up: a wrong one, or none, is refused before
    anything is written, with an error naming the setting and not echoing the token."""
    settings, _ = rest_settings
    server = rest_catalog.running(settings)
    assert server is not None
    assert server.token
    check_catalog(rest_iceberg.config())  # the right token passes
    for properties in ({"token": "wrong-token"}, {}):
        wrong = rest_iceberg.model_copy(update={"properties": properties})
        with pytest.raises(ConfigError, match=ENV_CATALOG_PROPERTIES) as refused:
            check_catalog(wrong.config())
        assert "wrong-token" not in str(refused.value)
        assert server.token not in str(refused.value)


def test_the_client_credentials_flow(
    rest_settings: Any, rest_iceberg: IcebergCatalogResource, spark: Any
) -> None:
    """A client given ``credential`` (id:secret) instead of a token gets one at the protocol's
    OAuth2 token endpoint: pyiceberg, and Spark's RESTCatalog registered as a catalog of its
    own; a wrong secret is refused there, before anything is written, naming the setting."""
    settings, backend = rest_settings
    server = rest_catalog.running(settings)
    assert server is not None
    credential = server.credential()
    assert credential is not None
    namespace = f"cred_{random.randrange(10**9)}"
    with_credential = rest_iceberg.model_copy(update={"properties": {"credential": credential}})
    check_catalog(with_credential.config())
    with_credential.load_catalog().create_namespace(namespace)
    other = IcebergCatalogResource(
        name="rest_credential",
        type="rest",
        uri=server.url,
        warehouse=backend["warehouse"],
        properties={"credential": credential},
    )
    for key, value in spark_catalog_conf(other.config()).items():
        spark.conf.set(key, value)
    names = [r[0] for r in spark.sql("SHOW NAMESPACES IN rest_credential").collect()]
    assert namespace in names
    wrong = f"{credential.split(':')[0]}:not-the-secret"
    refused = rest_iceberg.model_copy(update={"properties": {"credential": wrong}})
    with pytest.raises(ConfigError, match=ENV_CATALOG_PROPERTIES) as error:
        check_catalog(refused.config())
    assert "not-the-secret" not in str(error.value)
    assert server.client_secret is not None
    assert server.client_secret not in str(error.value)


def test_stack_up_with_the_rest_catalog_points_the_resources_at_it(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """`stack up --rest-catalog`: the server runs over the stack's own catalog, the resources use
    it (type rest) and see what the embedded catalog holds; `stack down` stops it."""
    from cdc_assets.resources import build_resources
    from cdc_assets_dev.stack.local_stack import stack_down, stack_up
    from cdc_assets_tests.integration.conftest import make_home

    settings = make_home(tmp_path_factory.mktemp("rest-stack") / "home")
    stack_up(settings, rest=True)
    try:
        server = rest_catalog.running(settings)
        assert server is not None
        iceberg = build_resources(settings)["iceberg"]
        assert (iceberg.type, iceberg.uri) == ("rest", server.url)
        iceberg.load_catalog().create_namespace("made_through_rest")
        embedded = IcebergCatalogResource(
            name="lake",
            uri=f"jdbc:sqlite:{settings.local_catalog_file}",
            warehouse=settings.local_warehouse.as_uri(),
        )
        assert ("made_through_rest",) in embedded.load_catalog().list_namespaces()
    finally:
        stack_down(settings, purge=True)
    assert rest_catalog.running(settings) is None
