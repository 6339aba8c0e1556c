"""Real Debezium writing Avro through the stack's schema registry, for MariaDB and PostgreSQL.

A connector of this module per database runs Apicurio's Avro converter for keys and values
(`connect.avro_converters`: Confluent wire format, content ids). Rows inserted before the
connectors start arrive as snapshot reads, later updates, deletes and inserts stream; the
ingest decodes every record with the writer schemas of the registry, and base must equal the
source table row for row (the project's source comparison, every column typed). PostgreSQL's
TOASTed note, unchanged by an update, arrives as Debezium's placeholder in Avro too. Then the
randomized workload runs on both servers, and base equals the source again. Push
detection reads the tables' shapes from the Avro records as well (MariaDB's schema-change topic,
PostgreSQL's newest writer schema).
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cdc_assets.pipeline.bootstrap.source_compare import compare_source
from cdc_assets.pipeline.bootstrap.source_schema import import_source_spec
from cdc_assets.pipeline.evolution.schema_topic import newest_row_schema, newest_schema_change
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.settings import Settings
from cdc_assets.spec import load_specs
from cdc_assets.spec.connect_schema import differs
from cdc_assets.spec.information_schema import SourceTable
from cdc_assets.spec.models import TableSpec
from cdc_assets_dev.demo.workload import WorkloadGenerator, script
from cdc_assets_dev.stack import connect, schema_registry, sources
from cdc_assets_dev.stack.local_stack import StackState
from cdc_assets_tests.conftest import PROJECT_ROOT
from cdc_assets_tests.integration.test_sources_bootstrap import (
    ingest_and_upsert,
    insert_orders,
    insert_users,
    isolated,
    maria,
    order_values,
    pg,
    user_values,
)
from cdc_assets_tests.support import extra_connector

pytestmark = pytest.mark.integration

TAG = uuid.uuid4().hex[:6]
FIRST = 830_000
SEEDED = range(FIRST + 1, FIRST + 21)
WAIT_S = 120.0
SEED = 20_261_126
WORKLOAD_KEYS = 7_000_000_000  # above every key other modules write
WORKLOAD_STATEMENTS = 1_500


@pytest.fixture(scope="module")
def avro(
    sources_home: Settings, sources_stack: StackState
) -> Iterator[tuple[KafkaResource, dict[str, extra_connector.ExtraConnector]]]:
    """The registry and one Avro connector per database, started after rows exist."""
    registry = schema_registry.start(sources_home)
    kafka = KafkaResource(
        bootstrap_servers=sources_stack.bootstrap_servers,
        home=str(sources_home.home),
        schema_registry_url=registry.url,
    )
    insert_users(sources_home, SEEDED, seed=5)
    insert_orders(sources_home, SEEDED, big=frozenset({FIRST + 1}), seed=5)
    started: dict[str, extra_connector.ExtraConnector] = {}
    try:
        for server, table in (("mariadb", "app.users"), ("postgres", "public.orders")):
            started[server] = extra_connector.register(
                sources_home,
                sources_stack.bootstrap_servers,
                server,
                TAG,
                [table],
                schema_changes=server == "mariadb",
                overrides=connect.avro_converters(registry.native_url),
            )
        yield kafka, started
    finally:
        for extra in started.values():
            extra_connector.remove(sources_home, extra, kafka.admin())


def _spec(spark: Any, url: str, extra: extra_connector.ExtraConnector) -> TableSpec:
    if extra.server == "mariadb":
        source, topic = SourceTable("mariadb", "app", "users"), extra.topic("app", "users")
    else:
        source = SourceTable("postgresql", "shop", "orders", "public")
        topic = extra.topic("public", "orders")
    spec, _ = import_source_spec(spark, url, source, topic=topic)
    spec = isolated(spec, f"avro{extra.server[0]}")
    ensure_tables(spark, "lake", spec)
    return spec


def _converges(
    spark: Any, iceberg: IcebergCatalogResource, kafka: KafkaResource, spec: TableSpec, url: str
) -> None:
    """Ingest and upsert until base equals the source (the connector delivers on its own time)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        ingest_and_upsert(spark, iceberg, kafka, spec)
        diff = compare_source(spark, "lake", spec, url)
        if diff.equal and diff.source_rows > 0:
            return
        assert time.monotonic() < deadline, diff.summary()
        time.sleep(2)


def test_debezium_avro_converges_to_the_source(
    sources_home: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    avro: tuple[KafkaResource, dict[str, extra_connector.ExtraConnector]],
) -> None:
    kafka, started = avro
    found = {(db, server): url for db, server, url in sources.jdbc_urls(sources_home)}
    urls = {"mariadb": found[("app", "mariadb")], "postgres": found[("shop", "postgres")]}
    specs = {s: _spec(spark, urls[s], c) for s, c in started.items()}
    for server, spec in specs.items():
        # the connector's records are registry-framed Avro, not JSON
        topic = kafka.topic_schemas(spec.source.topic)
        assert topic.schemas, f"{server}: no writer schema registered for {topic.subject}"
        _converges(spark, iceberg, kafka, spec, urls[server])  # the snapshot's reads
    # push detection reads the table's shape from Avro too: MariaDB's schema-change topic (its
    # snapshot's CREATE TABLE), PostgreSQL's newest writer schema
    created = newest_schema_change(kafka, specs["mariadb"])
    assert created is not None
    assert "CREATE TABLE" in created.change.ddl.upper()
    fields = newest_row_schema(kafka, specs["postgres"])
    assert fields is not None
    assert not differs(specs["postgres"], fields)
    assert [f["field"] for f in fields] == [c.name for c in specs["postgres"].columns]

    new = FIRST + 21
    maria(
        sources_home,
        f"""
        UPDATE users SET login_count = login_count + 7, display_name = 'avro'
          WHERE id BETWEEN {FIRST + 1} AND {FIRST + 4};
        DELETE FROM users WHERE id = {FIRST + 5};
        INSERT INTO users VALUES {user_values(new, random.Random(9))};
        """,
    )
    pg(
        sources_home,
        f"""
        UPDATE public.orders SET status = 'shipped' WHERE order_id IN ({FIRST + 1}, {FIRST + 2});
        DELETE FROM public.orders WHERE order_id = {FIRST + 3};
        INSERT INTO public.orders VALUES {order_values(new, random.Random(9))};
        """,
    )
    for server, spec in specs.items():
        _converges(spark, iceberg, kafka, spec, urls[server])

    # The randomized workload (inserts, updates, deletes, key changes, transactions rolled back
    # to a savepoint) on both servers at once, captured in Avro; base equals the source again.
    # The statements follow the example specs (the tables' declared shapes, which the session's
    # JSON connectors and the other modules' mirrors decode too); values only the source's raw
    # types allow (an epoch beyond the users spec's transform, say) would be dead letters there.
    examples = {s.name: s for s in load_specs(PROJECT_ROOT / "table_specs")}
    generators = {
        server: WorkloadGenerator([examples[table]], seed=SEED + n, key_base=WORKLOAD_KEYS)
        for n, (server, table) in enumerate((("mariadb", "users"), ("postgres", "orders")))
    }
    for server, generator in generators.items():
        text = script(generator.statements(WORKLOAD_STATEMENTS))
        if server == "mariadb":
            sources.mariadb_execute(sources_home, text)
        else:
            sources.postgres_execute(sources_home, text, "shop")
    for server, spec in specs.items():
        _converges(spark, iceberg, kafka, spec, urls[server])
    # The workload's rows leave the shared tables again (later modules compare whole tables,
    # some through paths this module does not exercise); the Avro mirrors follow the deletes.
    maria(sources_home, f"DELETE FROM users WHERE id >= {WORKLOAD_KEYS};")
    pg(sources_home, f"DELETE FROM public.orders WHERE order_id >= {WORKLOAD_KEYS};")
    for server, spec in specs.items():
        _converges(spark, iceberg, kafka, spec, urls[server])
