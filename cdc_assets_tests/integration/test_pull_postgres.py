"""Pull detection end to end on PostgreSQL (issue 26): a table onboarded from its
information_schema, mirrored through a Debezium connector of its own; a real ``ALTER TABLE ...
ADD COLUMN`` on the live source is seen by ``check_schema_drift`` through the
information_schema, the ``schema_drift_detected`` sensor starts the evolution, and base converges
to the source, new column included. The MariaDB side runs in ``test_two_servers``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from confluent_kafka import Consumer, TopicPartition

from cdc_assets.checks.runner import run_checks
from cdc_assets.definitions import build_defs
from cdc_assets.pipeline.bootstrap.source_compare import compare_source
from cdc_assets.pipeline.bootstrap.source_schema import import_source_spec
from cdc_assets.pipeline.evolution.spec_store import base_table
from cdc_assets.pipeline.ingest.ingest import ingest_incremental
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.pipeline.upsert.upsert import build_bucketed, merge_base
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.layers import dead_letter_layout
from cdc_assets.settings import Settings, source_url_variable
from cdc_assets.spec.information_schema import SourceTable
from cdc_assets.spec.load import load_spec
from cdc_assets.spec.models import TableSpec
from cdc_assets.spec.versions import write_spec
from cdc_assets_dev.stack import sources
from cdc_assets_dev.stack.local_stack import StackState
from cdc_assets_tests.integration.test_two_servers import drift_detected
from cdc_assets_tests.support import extra_connector

pytestmark = pytest.mark.integration

DELIVERY_TIMEOUT_S = 120.0


@dataclass
class PgTable:
    home: Settings
    bootstrap: str
    table: str
    url: str
    specs_dir: Path
    kafka: KafkaResource
    connector: extra_connector.ExtraConnector
    markers: Iterator[int]

    def spec(self) -> TableSpec:
        return load_spec(self.specs_dir / f"{self.table}.yaml")

    def execute(self, sql: str) -> None:
        sources.postgres_execute(self.home, sql, "shop")

    def defs(self, resources: dict[str, Any]) -> dg.Definitions:
        variable = source_url_variable("shop", self.spec().source.server_name)
        settings = replace(self.home, specs_dir=self.specs_dir, source_urls={variable: self.url})
        return build_defs(settings=settings, resource_overrides={**resources, "kafka": self.kafka})


# The module's tables: name -> (columns, rows). One publication and one connector capture them
# all (a connector and its snapshot per table cost half a minute each); each table has a spec
# directory of its own, so a drift check or a sensor sees only its table.
TABLES = {
    "pull": (
        "id bigint PRIMARY KEY, note text, amount numeric(10,2)",
        "(1, 'one', 1.50), (2, 'two', 2.25)",
    ),
    "people": (
        "id bigint PRIMARY KEY, email text, country text NOT NULL DEFAULT 'NL', "
        "score integer NOT NULL DEFAULT 0, amount numeric(10,2)",
        "(1, 'a1@x', 'NL', 10, 1.50), (2, 'a2@x', 'DE', 20, 2.25), "
        "(3, 'a3@x', 'FR', 30, 3.00), (4, NULL, 'BE', 40, NULL)",
    ),
    "typed": (
        "id bigint PRIMARY KEY, score integer, amount numeric(10,2), fee numeric(8,2), note text",
        "(1, 10, 1.25, 1.50, 'one'), (2, 20, 2.50, 0.05, 'two'), (3, 30, 3.75, 12, 'three'), "
        "(4, NULL, NULL, NULL, 'x')",
    ),
}


@pytest.fixture(scope="module")
def pg_tables(
    sources_home: Settings, sources_stack: StackState, spark: Any, tmp_path_factory: Any
) -> Iterator[dict[str, PgTable]]:
    """The live PostgreSQL tables ``<name>_<tag>`` of ``TABLES``, mirrored through a Debezium
    connector of the module's own and each onboarded from its information_schema; removed
    after."""
    home, tag = sources_home, uuid.uuid4().hex[:6]
    names = {name: f"{name}_{tag}" for name in TABLES}
    sources.postgres_execute(
        home,
        "".join(
            f"CREATE TABLE public.{table} ({TABLES[name][0]});"
            f"GRANT SELECT ON public.{table} TO {sources.CDC_USER};"
            f"INSERT INTO public.{table} VALUES {TABLES[name][1]};"
            for name, table in names.items()
        )
        + f"CREATE PUBLICATION pub_{tag} FOR TABLE "
        + ", ".join(f"public.{t}" for t in names.values())
        + ";",
        "shop",
    )
    url = next(u for db, kind, u in sources.jdbc_urls(home) if (db, kind) == ("shop", "postgres"))
    connector = extra_connector.register(
        home,
        sources_stack.bootstrap_servers,
        "postgres",
        tag,
        [f"public.{t}" for t in names.values()],
        overrides={"publication.name": f"pub_{tag}"},
    )
    kafka = KafkaResource(bootstrap_servers=sources_stack.bootstrap_servers, home=str(home.home))
    try:
        out = {}
        for name, table in names.items():
            # Onboarding is evolution from an empty schema: version 1 from the
            # information_schema.
            spec, _ = import_source_spec(
                spark,
                url,
                SourceTable("postgresql", "shop", table, "public"),
                topic_prefix=connector.prefix,
                namespace=table,
            )
            assert spec.source.server_name == connector.prefix
            specs_dir = tmp_path_factory.mktemp(f"{name}-pg-specs")
            write_spec(spec, specs_dir / f"{table}.yaml")
            ensure_tables(spark, "lake", spec)
            out[name] = PgTable(
                home,
                sources_stack.bootstrap_servers,
                table,
                url,
                specs_dir,
                kafka,
                connector,
                iter(range(9_000_000, 2**62)),
            )
        yield out
    finally:
        extra_connector.remove(home, connector, kafka.admin())
        sources.postgres_execute(
            home,
            f"DROP PUBLICATION pub_{tag};"
            + "".join(f"DROP TABLE public.{t};" for t in names.values()),
            "shop",
        )


@pytest.fixture
def pg(pg_tables: dict[str, PgTable]) -> PgTable:
    return pg_tables["pull"]


@pytest.fixture
def people(pg_tables: dict[str, PgTable]) -> PgTable:
    return pg_tables["people"]


@pytest.fixture
def typed(pg_tables: dict[str, PgTable]) -> PgTable:
    return pg_tables["typed"]


def wait_delivered(pg: PgTable) -> None:
    """Insert and delete a marker row; return when its delete is on the topic."""
    key = next(pg.markers)
    pg.execute(
        f"INSERT INTO public.{pg.table} (id) VALUES ({key});"
        f"DELETE FROM public.{pg.table} WHERE id = {key};"
    )
    topic = pg.spec().source.topic
    consumer = Consumer(
        {
            "bootstrap.servers": pg.bootstrap,
            "group.id": f"pull-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    deadline = time.monotonic() + DELIVERY_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None or msg.value() is None:
                continue
            event = json.loads(msg.value())["payload"]
            if event.get("op") == "d" and (event.get("before") or {}).get("id") == key:
                return
    finally:
        consumer.close()
    raise AssertionError(f"marker {key} not delivered within {DELIVERY_TIMEOUT_S:.0f} s")


def converge(pg: PgTable, spark: Any, iceberg: IcebergCatalogResource) -> None:
    wait_delivered(pg)
    spec = pg.spec()
    result = ingest_incremental(spark, "lake", iceberg.load_catalog(), pg.kafka, spec)
    assert result.dead == 0, result.dead_reasons
    build_bucketed(spark, "lake", iceberg.load_catalog(), spec)
    merge_base(spark, "lake", iceberg.load_catalog(), spec)
    diff = compare_source(spark, "lake", spec, pg.url)
    assert diff.equal, diff.summary()


def test_a_column_added_on_the_live_source_arrives_through_pull_detection(
    pg: PgTable, spark: Any, iceberg: IcebergCatalogResource, resources: dict[str, Any]
) -> None:
    instance = dg.DagsterInstance.ephemeral()
    pg.execute(f"UPDATE public.{pg.table} SET amount = 3.75 WHERE id = 2;")
    converge(pg, spark, iceberg)
    assert drift_detected(pg.defs(resources), instance) == []

    pg.execute(f"ALTER TABLE public.{pg.table} ADD COLUMN coupon text;")
    pg.execute(
        f"UPDATE public.{pg.table} SET coupon = 'SPRING' WHERE id = 1;"
        f"INSERT INTO public.{pg.table} VALUES (3, 'three', 3.00, 'FALL');"
    )
    wait_delivered(pg)
    defs = pg.defs(resources)
    (request,) = drift_detected(defs, instance)
    assert request.tags["cdc/table"] == pg.table
    run = defs.resolve_job_def("evolve_schemas").execute_in_process(
        instance=instance,
        run_config=request.run_config,
        asset_selection=list(request.asset_selection or []),
    )
    assert run.success
    evolved = pg.spec()
    assert evolved.spec_version == 2
    assert [c.name for c in evolved.columns] == ["id", "note", "amount", "coupon"]
    converge(pg, spark, iceberg)  # base == source, the coupons included
    assert drift_detected(pg.defs(resources), instance) == []

    # maintain_when_clean: a clean drift check starts maintenance of the table, which runs
    defs = pg.defs(resources)
    (maintain,) = drift_detected(defs, instance, maintain_when_clean=True)
    assert maintain.job_name == "maintain_tables"
    assert maintain.tags["cdc/table"] == pg.table
    run = defs.resolve_job_def("maintain_tables").execute_in_process(
        instance=instance, run_config=maintain.run_config
    )
    assert run.success
    converge(pg, spark, iceberg)  # still equal after compaction and expiry

    # The source_values check compares base with the live source, value for value: green now;
    # a base value the source does not hold, with no change in flight, turns it red (ERROR).
    (equal,), _ = run_checks(pg.defs(resources), instance, checks=["source_values"])
    assert equal.passed, equal.description
    table = f"lake.{base_table(pg.spec())}"
    spark.sql(f"UPDATE {table} SET note = 'not the source' WHERE id = 1")
    (diverged,), _ = run_checks(pg.defs(resources), instance, checks=["source_values"])
    assert (diverged.passed, diverged.severity) == (False, "ERROR")
    assert "1 differing (note 1), with no change in flight" in diverged.description
    assert diverged.metadata["examples"] == ["(1,): note: source 'one' base 'not the source'"]
    spark.sql(f"UPDATE {table} SET note = 'one' WHERE id = 1")


def ingest_and_upsert(pg: PgTable, spark: Any, iceberg: IcebergCatalogResource) -> int:
    """One ingest and upsert with the spec as it is now; the dead letters it wrote."""
    wait_delivered(pg)
    spec = pg.spec()
    result = ingest_incremental(spark, "lake", iceberg.load_catalog(), pg.kafka, spec)
    build_bucketed(spark, "lake", iceberg.load_catalog(), spec)
    merge_base(spark, "lake", iceberg.load_catalog(), spec)
    return int(result.dead)


def base_rows(spark: Any, pg: PgTable) -> dict[int, dict[str, Any]]:
    spec = pg.spec()
    rows = spark.table(f"lake.{base_table(spec)}").collect()
    return {r["id"]: r.asDict() for r in rows}


def test_renames_and_drops_on_the_live_source_keep_each_column_s_values(
    people: PgTable, spark: Any, iceberg: IcebergCatalogResource, resources: dict[str, Any]
) -> None:
    """Real ALTERs on PostgreSQL (issue 54 items 2, 3, 5 and 7). The table's text cannot tell a
    rename from a drop plus an add; the column numbers (``pg_attribute.attnum``) can. A rename
    keeps the column (same id, same Iceberg field), so rows not changed since keep their value
    under the new name; a drop is soft; NOT NULL dropped and a column added with a default
    converge. First through pull detection, then through the row-schema sensor (push), whose
    evolution reads the numbers itself. Each ingest runs with the spec it has before the
    evolution (as a running deployment does), and base equals the live source after each."""
    pg = people
    instance = dg.DagsterInstance.ephemeral()
    converge(pg, spark, iceberg)
    v1 = pg.spec()
    assert [c.source_attnum for c in v1.columns] == [1, 2, 3, 4, 5]
    email_field = iceberg.load_catalog().load_table(base_table(v1)).schema().find_field("email")

    pg.execute(
        f"ALTER TABLE public.{pg.table} RENAME COLUMN email TO email_address;"
        f"ALTER TABLE public.{pg.table} DROP COLUMN country;"
        f"ALTER TABLE public.{pg.table} ALTER COLUMN score DROP NOT NULL;"
        f"ALTER TABLE public.{pg.table} ADD COLUMN status text NOT NULL DEFAULT 'open';"
        f"UPDATE public.{pg.table} SET email_address = 'b1@x' WHERE id = 1;"
        f"UPDATE public.{pg.table} SET score = NULL WHERE id = 2;"
        f"INSERT INTO public.{pg.table} (id, email_address, score, amount, status) "
        "VALUES (5, 'b5@x', 50, 5.50, 'closed');"
    )
    # The old spec meets the new shape first: the rows without the dropped NOT NULL country
    # are dead letters until the evolution redrives them.
    assert ingest_and_upsert(pg, spark, iceberg) == 4
    defs = pg.defs(resources)
    (request,) = drift_detected(defs, instance)
    config = request.run_config["ops"][f"schema__{pg.table}_schema"]["config"]
    assert 'RENAME COLUMN "email" TO "email_address"' in " ".join(config["audit_ddl"])
    run = defs.resolve_job_def("evolve_schemas").execute_in_process(
        instance=instance,
        run_config=request.run_config,
        asset_selection=list(request.asset_selection or []),
    )
    assert run.success
    v2 = pg.spec()
    by_id = {c.id: c for c in v2.columns}
    assert (by_id[2].name, by_id[2].former_names, by_id[2].dropped) == (
        "email_address",
        ["email"],
        False,
    )
    assert by_id[3].name == "country"
    assert by_id[3].dropped
    assert by_id[4].nullable
    status = v2.columns_by_name["status"]
    assert (status.backfill_default, status.source_attnum) == (True, 6)
    converge(pg, spark, iceberg)  # base == source: 3's address was never changed since
    rows = base_rows(spark, pg)
    assert rows[3]["email"] == "a3@x"  # the Iceberg column keeps its name and field id
    assert rows[1]["email"] == "b1@x"
    assert rows[3]["status"] == "open"
    table = iceberg.load_catalog().load_table(base_table(v2))
    assert table.schema().find_field("email").field_id == email_field.field_id
    assert drift_detected(pg.defs(resources), instance) == []

    # Push: the row-schema sensor sees the events' new name; the evolution proves the rename
    # by the numbers, which it reads from the source.
    pg.execute(
        f"ALTER TABLE public.{pg.table} RENAME COLUMN email_address TO contact;"
        f"UPDATE public.{pg.table} SET contact = 'c2@x' WHERE id = 2;"
    )
    ingest_and_upsert(pg, spark, iceberg)
    defs = pg.defs(resources)
    sensor = defs.get_sensor_def("schema_changes")
    result = sensor(dg.build_sensor_context(instance=instance, resources={"kafka": pg.kafka}))
    assert isinstance(result, dg.SensorResult)
    (push,) = result.run_requests or []
    run = defs.resolve_job_def("evolve_schemas").execute_in_process(
        instance=instance,
        run_config=push.run_config,
        asset_selection=list(push.asset_selection or []),
    )
    assert run.success
    v3 = pg.spec()
    contact = v3.columns_by_name["contact"]
    assert (contact.id, contact.former_names) == (2, ["email_address", "email"])
    converge(pg, spark, iceberg)
    rows = base_rows(spark, pg)
    assert (rows[3]["email"], rows[2]["email"]) == ("a3@x", "c2@x")
    assert drift_detected(pg.defs(resources), instance) == []


def test_types_iceberg_cannot_promote_on_the_live_source(
    typed: PgTable, spark: Any, iceberg: IcebergCatalogResource, resources: dict[str, Any]
) -> None:
    """Real ``ALTER COLUMN ... TYPE`` on PostgreSQL (issue 54 items 4 and 7): integer -> text,
    numeric(10,2) -> numeric(12,4) and numeric(8,2) -> text. PostgreSQL rewrites the rows
    without a change event. The ingest reads the rows changed after the ALTER with the old spec
    first (text that is no integer: dead letters; the new scale's bytes read at the old one, and
    text that is valid base64 read as bytes: other values); the
    row-schema sensor places the change at the last event of the old shape (its LSN), and the
    evolution fills the new columns from the old values before it, converted exactly, and from
    the images after it. Base equals the live source, and no dead letter is left."""
    pg = typed
    converge(pg, spark, iceberg)
    pg.execute(
        f"ALTER TABLE public.{pg.table} ALTER COLUMN score TYPE text USING score::text, "
        "ALTER COLUMN amount TYPE numeric(12,4), ALTER COLUMN fee TYPE text;"
        f"UPDATE public.{pg.table} SET score = 'x2', amount = 2.1234, fee = 'free' WHERE id = 2;"
        f"UPDATE public.{pg.table} SET note = 'three!' WHERE id = 3;"
        f"INSERT INTO public.{pg.table} VALUES (5, 'five', 5.0505, 'n/a', 'five');"
    )
    # 'x2' and 'five' are no integers, '12.00' no base64; 'free' is, and reads as other bytes
    assert ingest_and_upsert(pg, spark, iceberg) == 3
    instance = dg.DagsterInstance.ephemeral()
    defs = pg.defs(resources)
    sensor = defs.get_sensor_def("schema_changes")
    result = sensor(dg.build_sensor_context(instance=instance, resources={"kafka": pg.kafka}))
    assert isinstance(result, dg.SensorResult)
    (request,) = result.run_requests or []
    config = request.run_config["ops"][f"schema__{pg.table}_schema"]["config"]
    assert "lsn" in json.loads(config["source_position"])
    run = defs.resolve_job_def("evolve_schemas").execute_in_process(
        instance=instance,
        run_config=request.run_config,
        asset_selection=list(request.asset_selection or []),
    )
    assert run.success
    evolved = pg.spec()
    columns = evolved.columns_by_name
    assert columns["score"].sink_name == "score__string"
    assert columns["amount"].sink_name == "amount__decimal_12_4"
    assert columns["fee"].sink_name == "fee__string"
    (materialization,) = run.get_asset_materialization_events()
    assert materialization.materialization.metadata["backfill_rejected_rows"].value == 0
    converge(pg, spark, iceberg)  # base == source, no dead letter left
    rows = base_rows(spark, pg)
    assert (rows[1]["score__string"], rows[1]["amount__decimal_12_4"]) == ("10", Decimal("1.25"))
    assert (rows[2]["score__string"], rows[2]["amount__decimal_12_4"]) == (
        "x2",
        Decimal("2.1234"),
    )
    assert rows[5]["amount__decimal_12_4"] == Decimal("5.0505")
    # the old column's text before the ALTER (PostgreSQL's cast writes the scale's zeros), the
    # images after it ('free' was read as unscaled bytes by the old spec)
    assert [rows[k]["fee__string"] for k in (1, 2, 3, 4, 5)] == [
        "1.50",
        "free",
        "12.00",
        None,
        "n/a",
    ]
    assert rows[1]["score"] == 10  # the old column keeps its values
    dead = dead_letter_layout(evolved)
    assert spark.table(f"lake.{dead.namespace}.{dead.name}").count() == 0
    assert drift_detected(pg.defs(resources), instance) == []
