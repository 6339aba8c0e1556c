"""Renames and a drop on a live MariaDB, through Debezium (issue 61).

A table of the test's own on the real-sources stack, captured by a connector of its own that
writes the schema-change topic. Between two pipeline cycles the source runs ``RENAME COLUMN``
on a NOT NULL column, ``CHANGE COLUMN`` on a nullable one and ``DROP COLUMN``, with rows changed
after each. The ingest reads those rows with the old spec first (the sensor's evolution comes
after, as in a deployment), so the renamed values are missing from what it wrote and a row
without the NOT NULL column is a dead letter. After the evolution the sensor starts, base must
equal the live source (each renamed column under its Iceberg name) and no dead letter is left.
Before the fix the evolution reported success and every row changed after the rename kept a
null, or stayed missing from base.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from confluent_kafka import Consumer, TopicPartition

from cdc_assets.checks.runner import CheckOutcome, run_checks
from cdc_assets.definitions import build_defs
from cdc_assets.pipeline.bootstrap.source_compare import compare_source
from cdc_assets.pipeline.evolution.schema_topic import read_schema_changes
from cdc_assets.pipeline.ingest.ingest import ingest_incremental, ledger_identifier
from cdc_assets.pipeline.shared.offsets import ledger_mark
from cdc_assets.pipeline.shared.tables import SOURCE_STATE_PROPERTY, ensure_tables
from cdc_assets.pipeline.upsert.upsert import build_bucketed, merge_base
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.layers import base_layout, dead_letter_layout, ledger_layout
from cdc_assets.settings import Settings
from cdc_assets.spec.load import load_spec
from cdc_assets.spec.models import TableSpec
from cdc_assets.spec.versions import write_spec
from cdc_assets_dev.stack import sources
from cdc_assets_dev.stack.local_stack import StackState
from cdc_assets_tests.integration.test_ingest import read_table
from cdc_assets_tests.integration.test_two_servers import drift_detected
from cdc_assets_tests.support import extra_connector

pytestmark = pytest.mark.integration

DELIVERY_TIMEOUT_S = 120.0


@dataclass
class Source:
    home: Settings
    bootstrap: str
    database: str
    url: str
    specs_dir: Path
    kafka: KafkaResource
    prefix: str
    markers: Iterator[int]
    name: str = "people"

    def spec(self) -> TableSpec:
        return load_spec(self.specs_dir / f"{self.name}.yaml")

    def execute(self, sql: str) -> None:
        sources.mariadb_execute(self.home, sql, self.database)

    def defs(self, resources: dict[str, Any]) -> dg.Definitions:
        settings = replace(self.home, specs_dir=self.specs_dir)
        return build_defs(settings=settings, resource_overrides={**resources, "kafka": self.kafka})


@pytest.fixture(scope="module")
def source(
    sources_home: Settings, sources_stack: StackState, spark: Any, tmp_path_factory: Any
) -> Iterator[Source]:
    tag = uuid.uuid4().hex[:6]
    database = f"renames_{tag}"
    sources.mariadb_execute(
        sources_home,
        f"CREATE DATABASE `{database}`; USE `{database}`; CREATE TABLE people ("
        "id BIGINT NOT NULL PRIMARY KEY, email VARCHAR(255) NOT NULL, "
        "display_name VARCHAR(50), country CHAR(2), score INT, amount DECIMAL(10,4), "
        "seen DATETIME(3));"
        "INSERT INTO people VALUES (1, 'one@x', 'One', 'DE', 1, 1.2500, '2026-01-02 03:04:05.678'),"
        " (2, 'two@x', 'Two', 'FR', 2, 2.1234, NULL),"
        " (3, 'three@x', NULL, 'IT', 3, -3.5000, '2025-12-31 23:59:59.999');"
        # renamed to accounts_v2 by a test below: the connector captures both names
        "CREATE TABLE accounts (id BIGINT NOT NULL PRIMARY KEY, owner VARCHAR(64), "
        "balance DECIMAL(12,2));"
        "INSERT INTO accounts VALUES (1, 'a', 1.00), (2, 'b', 2.00), (3, 'c', 3.00);",
    )
    prefix = f"ren{tag}"
    kafka = KafkaResource(
        bootstrap_servers=sources_stack.bootstrap_servers, home=str(sources_home.home)
    )
    connector = extra_connector.register(
        sources_home,
        sources_stack.bootstrap_servers,
        "mariadb",
        tag,
        [f"{database}.people", f"{database}.accounts", f"{database}.accounts_v2"],
        prefix=prefix,
        schema_changes=True,
    )
    try:
        spec = TableSpec.model_validate(
            {
                "spec_version": 1,
                "name": "people",
                "source": {
                    "connector": "mariadb",
                    "database": database,
                    "table": "people",
                    "topic": f"{prefix}.{database}.people",
                },
                "columns": [
                    {"id": 1, "name": "id", "type": "bigint", "nullable": False},
                    {"id": 2, "name": "email", "type": "varchar(255)", "nullable": False},
                    {"id": 3, "name": "display_name", "type": "varchar(50)"},
                    {"id": 4, "name": "country", "type": "char(2)"},
                    {"id": 5, "name": "score", "type": "int"},
                    {"id": 6, "name": "amount", "type": "decimal(10,4)"},
                    {"id": 7, "name": "seen", "type": "datetime(3)"},
                ],
                "primary_key": ["id"],
                "sink": {"namespace": f"ren_{tag}"},
                "base": {"buckets": 2},
            }
        )
        specs_dir = tmp_path_factory.mktemp("renames-specs")
        write_spec(spec, specs_dir / "people.yaml")
        ensure_tables(spark, "lake", spec)
        yield Source(
            sources_home,
            sources_stack.bootstrap_servers,
            database,
            sources.mariadb_jdbc_url(sources_home, database),
            specs_dir,
            kafka,
            prefix,
            iter(range(9_000_000, 2**62)),
        )
    finally:
        extra_connector.remove(sources_home, connector, kafka.admin())


def wait_delivered(source: Source, email_column: str) -> None:
    """Insert and delete a marker row; return when its delete is on the topic."""
    key = next(source.markers)
    source.execute(
        f"INSERT INTO people (id, {email_column}) VALUES ({key}, 'marker');"
        f"DELETE FROM people WHERE id = {key};"
    )
    topic = source.spec().source.topic
    consumer = Consumer(
        {
            "bootstrap.servers": source.bootstrap,
            "group.id": f"renames-{uuid.uuid4().hex[:8]}",
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


def cycle(source: Source, spark: Any, iceberg: IcebergCatalogResource) -> int:
    """Ingest and upsert with the current spec; the ingest's dead letters."""
    spec = source.spec()
    result = ingest_incremental(spark, "lake", iceberg.load_catalog(), source.kafka, spec)
    build_bucketed(spark, "lake", iceberg.load_catalog(), spec)
    merge_base(spark, "lake", iceberg.load_catalog(), spec)
    return int(result.dead)


def test_renames_and_a_drop_on_the_live_source_lose_no_value(
    source: Source, spark: Any, iceberg: IcebergCatalogResource, resources: dict[str, Any]
) -> None:
    wait_delivered(source, "email")
    assert cycle(source, spark, iceberg) == 0
    diff = compare_source(spark, "lake", source.spec(), source.url)
    assert diff.equal, diff.summary()

    source.execute(
        "UPDATE people SET score = 10 WHERE id = 1;"
        "ALTER TABLE people RENAME COLUMN email TO email_address;"
        "UPDATE people SET email_address = 'uno@x', score = 11 WHERE id = 1;"
        "INSERT INTO people (id, email_address, display_name, country, score)"
        " VALUES (4, 'four@x', 'Four', 'ES', 4);"
        "ALTER TABLE people CHANGE COLUMN display_name full_name VARCHAR(50);"
        "UPDATE people SET full_name = 'Deux' WHERE id = 2;"
        "INSERT INTO people (id, email_address, full_name, country, score)"
        " VALUES (5, 'five@x', 'Five', 'PT', 5);"
        "ALTER TABLE people DROP COLUMN country;"
        "UPDATE people SET score = 33 WHERE id = 3;"
        "INSERT INTO people (id, email_address, full_name, score) VALUES (6, 'six@x', 'Six', 6);"
        "DELETE FROM people WHERE id = 2;"
    )
    wait_delivered(source, "email_address")
    # The old spec reads the new shape first: NOT NULL email is missing, so those rows wait
    # as dead letters; full_name's values are only in the row images.
    assert cycle(source, spark, iceberg) > 0

    instance = dg.DagsterInstance.ephemeral()
    defs = source.defs(resources)
    sensor = defs.get_sensor_def("schema_changes")
    context = dg.build_sensor_context(instance=instance, resources={"kafka": source.kafka})
    result = sensor(context)
    assert isinstance(result, dg.SensorResult)
    (request,) = result.run_requests or []
    run = defs.resolve_job_def("evolve_schemas").execute_in_process(
        instance=instance,
        run_config=request.run_config,
        asset_selection=list(request.asset_selection or []),
    )
    assert run.success
    evolved = source.spec()
    assert evolved.spec_version == 2
    columns = {c.id: c for c in evolved.columns}
    assert (columns[2].name, columns[2].sink_name, columns[2].former_names) == (
        "email_address",
        "email",
        ["email"],
    )
    assert (columns[3].name, columns[3].sink_name) == ("full_name", "display_name")
    assert columns[4].dropped

    assert cycle(source, spark, iceberg) == 0
    diff = compare_source(spark, "lake", evolved, source.url)
    assert diff.equal, diff.summary()
    dead = dead_letter_layout(evolved)
    assert not read_table(iceberg, dead.namespace, dead.name)


def test_a_retyped_column_on_the_live_source_keeps_old_values_and_mirrors_new_ones(
    source: Source, spark: Any, iceberg: IcebergCatalogResource, resources: dict[str, Any]
) -> None:
    """Issue 54 item 4 on the live MariaDB after the renames: ``score`` INT -> VARCHAR(20),
    which Iceberg cannot promote. The sensor's evolution keeps the old column (its Iceberg
    name and values) and adds ``score__string``; base then equals the live source."""
    source.execute(
        "ALTER TABLE people MODIFY score VARCHAR(20);"
        "UPDATE people SET score = 'high' WHERE id = 1;"
        "INSERT INTO people (id, email_address, full_name, score) VALUES (7, 'seven@x', 'S', '7b');"
    )
    wait_delivered(source, "email_address")
    assert cycle(source, spark, iceberg) > 0  # 'high' is no int: dead letters until evolved

    instance = dg.DagsterInstance.ephemeral()
    defs = source.defs(resources)
    sensor = defs.get_sensor_def("schema_changes")
    context = dg.build_sensor_context(instance=instance, resources={"kafka": source.kafka})
    result = sensor(context)
    assert isinstance(result, dg.SensorResult)
    (request,) = result.run_requests or []
    run = defs.resolve_job_def("evolve_schemas").execute_in_process(
        instance=instance,
        run_config=request.run_config,
        asset_selection=list(request.asset_selection or []),
    )
    assert run.success
    evolved = source.spec()
    columns = {c.name: c for c in evolved.columns}
    assert (columns["score"].sink_name, columns["score"].type) == ("score__string", "varchar(20)")
    retired = next(c for c in evolved.columns if c.sink_name == "score")
    assert retired.dropped
    assert cycle(source, spark, iceberg) == 0
    diff = compare_source(spark, "lake", evolved, source.url)
    assert diff.equal, diff.summary()
    base = base_layout(evolved)
    rows = {r["id"]: r for r in read_table(iceberg, base.namespace, base.name)}
    assert rows[1]["score__string"] == "high"
    assert rows[3]["score"] == 33  # last changed before the ALTER: the old value stays
    assert rows[3]["score__string"] == "33"  # and converts into the new column
    dead = dead_letter_layout(evolved)
    assert not read_table(iceberg, dead.namespace, dead.name)


def test_a_decimal_s_scale_and_a_datetime_s_zone_on_the_live_source(
    source: Source, spark: Any, iceberg: IcebergCatalogResource, resources: dict[str, Any]
) -> None:
    """Issue 54 item 4 on the live MariaDB: ``amount`` DECIMAL(10,4) -> DECIMAL(10,2) (MariaDB
    rounds its stored values, without a row event) and ``seen`` DATETIME(3) -> TIMESTAMP(3).
    The ingest reads the rows changed after the ALTER with the old spec first: the decimal's
    bytes at the old scale (other values) and the zoned timestamp not at all (dead letters).
    The sensor's evolution, bounded by the ALTER's binlog position, fills the new columns from
    the old values before it, exactly, and from the images after it. The one old value the new
    scale would round (1.2345) is counted, and is the only difference from the live source."""
    source.execute(
        "UPDATE people SET amount = 1.2345 WHERE id = 1;"
        "UPDATE people SET amount = 4.4000, seen = '2026-02-03 04:05:06.007' WHERE id = 4;"
        "ALTER TABLE people MODIFY amount DECIMAL(10,2), MODIFY seen TIMESTAMP(3) NULL;"
        "UPDATE people SET amount = 10.55, seen = '2026-03-04 05:06:07.890' WHERE id = 3;"
        "INSERT INTO people (id, email_address, full_name, amount, seen)"
        " VALUES (8, 'eight@x', 'E', 8.08, '2026-05-06 07:08:09.100');"
    )
    wait_delivered(source, "email_address")
    assert cycle(source, spark, iceberg) > 0  # zoned strings are no epoch millis

    instance = dg.DagsterInstance.ephemeral()
    defs = source.defs(resources)
    sensor = defs.get_sensor_def("schema_changes")
    context = dg.build_sensor_context(instance=instance, resources={"kafka": source.kafka})
    result = sensor(context)
    assert isinstance(result, dg.SensorResult)
    (request,) = result.run_requests or []
    assert "source_position" in json.dumps(request.run_config)
    run = defs.resolve_job_def("evolve_schemas").execute_in_process(
        instance=instance,
        run_config=request.run_config,
        asset_selection=list(request.asset_selection or []),
    )
    assert run.success
    evolved = source.spec()
    columns = evolved.columns_by_name
    assert columns["amount"].sink_name == "amount__decimal_10_2"
    assert columns["seen"].sink_name == "seen__timestamptz"
    assert all(c.dropped for c in evolved.columns if c.sink_name in ("amount", "seen"))
    (materialization,) = run.get_asset_materialization_events()
    metadata = materialization.materialization.metadata
    assert metadata["backfill_rejected_rows"].value >= 1  # 1.2345 at least
    assert metadata["backfill_rejected_examples"].value
    assert cycle(source, spark, iceberg) == 0
    diff = compare_source(spark, "lake", evolved, source.url)
    # MariaDB rounded 1.2345 to 1.23 in place; the mirror does not round: that value is null
    # in the new column, and the evolution's backfill counted it (and 2.1234 in the ledger rows
    # of the key deleted earlier).
    assert (diff.missing, diff.extra, diff.differing) == (0, 0, 1), diff.summary()
    assert diff.by_column == {"amount__decimal_10_2": 1}, diff.summary()
    base = base_layout(evolved)
    rows = {r["id"]: r for r in read_table(iceberg, base.namespace, base.name)}
    assert rows[1]["amount__decimal_10_2"] is None
    assert rows[1]["amount"] == Decimal("1.2345")  # the old column keeps the old value
    assert rows[4]["amount__decimal_10_2"] == Decimal("4.40")
    assert rows[4]["seen__timestamptz"] == datetime(2026, 2, 3, 4, 5, 6, 7000, tzinfo=UTC)
    assert rows[3]["amount__decimal_10_2"] == Decimal("10.55")
    assert rows[8]["amount__decimal_10_2"] == Decimal("8.08")
    assert rows[1]["seen__timestamptz"] == datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    assert rows[1]["seen"] == datetime(2026, 1, 2, 3, 4, 5, 678000)
    assert rows[3]["seen__timestamptz"] == datetime(2026, 3, 4, 5, 6, 7, 890000, tzinfo=UTC)
    assert rows[8]["seen__timestamptz"] == datetime(2026, 5, 6, 7, 8, 9, 100000, tzinfo=UTC)
    dead = dead_letter_layout(evolved)
    assert not read_table(iceberg, dead.namespace, dead.name)


def wait_schema_record(source: Source, ddl: str) -> None:
    """Return when the connector has recorded ``ddl`` on its schema-change topic."""
    deadline = time.monotonic() + DELIVERY_TIMEOUT_S
    while time.monotonic() < deadline:
        seen, _ = read_schema_changes(source.kafka, source.prefix, {})
        if any(s.change.ddl.strip() == ddl for s in seen):
            return
        time.sleep(1)
    raise AssertionError(f"{ddl!r} not on {source.prefix} within {DELIVERY_TIMEOUT_S:.0f} s")


def base_table(spec: TableSpec) -> str:
    layout = base_layout(spec)
    return f"{layout.namespace}.{layout.name}"


def wait_marker(source: Source, table: str, insert: str = "(id) VALUES ({key})") -> None:
    """Insert (``insert``: the columns and values, with ``{key}``) and delete a marker row in
    ``table``; return when its delete is on the table's topic."""
    key = next(source.markers)
    values = insert.format(key=key)
    source.execute(f"INSERT INTO {table} {values}; DELETE FROM {table} WHERE id = {key};")
    consumer = Consumer(
        {
            "bootstrap.servers": source.bootstrap,
            "group.id": f"renames-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    topic = f"{source.prefix}.{source.database}.{table}"
    deadline = time.monotonic() + DELIVERY_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            if topic not in source.kafka.admin().list_topics(timeout=10).topics:
                time.sleep(0.5)
                continue
            consumer.assign([TopicPartition(topic, 0, 0)])
            msg = consumer.poll(0.5)
            while msg is not None or time.monotonic() < deadline:
                if msg is not None and msg.error() is None and msg.value() is not None:
                    event = json.loads(msg.value())["payload"]
                    if event.get("op") == "d" and (event.get("before") or {}).get("id") == key:
                        return
                msg = consumer.poll(0.5)
    finally:
        consumer.close()
    raise AssertionError(f"marker {key} not on {topic} within {DELIVERY_TIMEOUT_S:.0f} s")


def test_a_renamed_source_table_is_followed_and_no_change_is_lost(
    source: Source,
    spark: Any,
    iceberg: IcebergCatalogResource,
    resources: dict[str, Any],
    tmp_path: Path,
) -> None:
    """Issue 54 item 6 on the live MariaDB: ``RENAME TABLE accounts TO accounts_v2`` with
    changes on both sides that no ingest has read yet. The drift check shows the rename (red),
    its sensor's evolution follows it (the spec reads accounts_v2's topic and records the old
    name), the old topic is read to its end first, and base equals the live source, each
    change once: the ledger numbers the new topic's records on after the old one's."""
    acc = replace(source, specs_dir=tmp_path, name="accounts")
    spec = TableSpec.model_validate(
        {
            "spec_version": 1,
            "name": "accounts",
            "source": {
                "connector": "mariadb",
                "database": source.database,
                "table": "accounts",
                "topic": f"{source.prefix}.{source.database}.accounts",
            },
            "columns": [
                {"id": 1, "name": "id", "type": "bigint", "nullable": False},
                {"id": 2, "name": "owner", "type": "varchar(64)"},
                {"id": 3, "name": "balance", "type": "decimal(12,2)"},
            ],
            "primary_key": ["id"],
            "sink": {"namespace": f"acc_{source.prefix}"},
            "base": {"buckets": 2},
        }
    )
    write_spec(spec, tmp_path / "accounts.yaml")
    ensure_tables(spark, "lake", spec)
    wait_marker(acc, "accounts")
    assert cycle(acc, spark, iceberg) == 0
    assert compare_source(spark, "lake", spec, acc.url).equal

    acc.execute(
        "UPDATE accounts SET balance = 20.50 WHERE id = 1;"
        "INSERT INTO accounts VALUES (4, 'd', 4.00);"
        "RENAME TABLE accounts TO accounts_v2;"
        "UPDATE accounts_v2 SET owner = 'A', balance = 21.00 WHERE id = 1;"
        "DELETE FROM accounts_v2 WHERE id = 2;"
        "INSERT INTO accounts_v2 VALUES (5, 'e', 5.00);"
        "UPDATE accounts_v2 SET balance = 44.00 WHERE id = 4;"
    )
    wait_schema_record(acc, "RENAME TABLE accounts TO accounts_v2")
    wait_marker(acc, "accounts_v2")
    instance = dg.DagsterInstance.ephemeral()
    defs = acc.defs(resources)
    outcomes, _ = run_checks(defs, instance, checks=["schema_drift"])
    assert [(o.passed, o.severity) for o in outcomes] == [(False, "ERROR")]
    assert "renamed to" in outcomes[0].description

    (pulled,) = drift_detected(defs, instance)
    held = iceberg.load_catalog().load_table(base_table(spec)).properties
    assert "renamed to" in held[SOURCE_STATE_PROPERTY]
    config = pulled.run_config["ops"]["schema__accounts_schema"]["config"]
    assert "accounts_v2" in config["proposed_spec"]
    # push: the schema-change sensor reads the RENAME record and asks for the same evolution
    sensor = defs.get_sensor_def("schema_changes")
    context = dg.build_sensor_context(instance=instance, resources={"kafka": acc.kafka})
    result = sensor(context)
    assert isinstance(result, dg.SensorResult)
    (request,) = result.run_requests or []
    pushed = request.run_config["ops"]["schema__accounts_schema"]["config"]
    assert pushed["proposed_spec"] == config["proposed_spec"]
    run = defs.resolve_job_def("evolve_schemas").execute_in_process(
        instance=instance,
        run_config=request.run_config,
        asset_selection=list(request.asset_selection or []),
    )
    assert run.success
    followed = acc.spec()
    assert (followed.spec_version, followed.source.table) == (2, "accounts_v2")
    assert followed.source.topic == f"{source.prefix}.{source.database}.accounts_v2"
    assert followed.source.former_topics == [spec.source.topic]
    # the evolution read the old topic to its end before moving the spec
    layout = ledger_layout(spec)
    ledger = f"{layout.namespace}.{layout.name}"
    assert ledger_mark(iceberg.load_catalog().load_table(ledger)).topic == spec.source.topic

    assert cycle(acc, spark, iceberg) == 0
    diff = compare_source(spark, "lake", followed, acc.url)
    assert diff.equal, diff.summary()
    rows = spark.sql(
        f"SELECT _kafka_partition AS p, _kafka_offset AS o FROM {ledger_identifier('lake', spec)}"
    ).collect()
    assert len({(r["p"], r["o"]) for r in rows}) == len(rows)  # no offset used twice
    mark = ledger_mark(iceberg.load_catalog().load_table(ledger))
    assert mark.topic == followed.source.topic
    # numbered on from the old topic's end
    (old,) = acc.kafka.topic_offsets(spec.source.topic)
    assert mark.shift == {0: old.latest}
    # the code location reloads the changed spec file (sensors/spec_directory)
    outcomes, _ = run_checks(acc.defs(resources), instance, checks=["schema_drift"])
    assert [o.passed for o in outcomes] == [True], outcomes[0].description
    assert drift_detected(acc.defs(resources), instance) == []
    held = iceberg.load_catalog().load_table(base_table(followed)).properties
    assert SOURCE_STATE_PROPERTY not in held  # marked renamed by the first drift run, cleared
    sensor = acc.defs(resources).get_sensor_def("schema_changes")
    later = sensor(
        dg.build_sensor_context(
            instance=instance, resources={"kafka": acc.kafka}, cursor=result.cursor
        )
    )
    assert not (isinstance(later, dg.SensorResult) and later.run_requests)

    # the new name goes on
    acc.execute(
        "UPDATE accounts_v2 SET owner = 'C' WHERE id = 3; DELETE FROM accounts_v2 WHERE id = 5;"
    )
    wait_marker(acc, "accounts_v2")
    assert cycle(acc, spark, iceberg) == 0
    diff = compare_source(spark, "lake", acc.spec(), acc.url)
    assert diff.equal, diff.summary()


def test_a_renamed_then_dropped_source_table_is_reported_and_its_mirror_kept(
    source: Source, spark: Any, iceberg: IcebergCatalogResource, resources: dict[str, Any]
) -> None:
    """Issue 54 item 6, on the live MariaDB after the test above: the table renamed away turns
    schema_drift red (its changes now go to a topic no spec reads), renamed back it is green
    again, dropped it warns; the mirror keeps every row and no evolution is asked for."""
    defs = source.defs(resources)
    instance = dg.DagsterInstance.ephemeral()

    def drift() -> CheckOutcome:
        outcomes, _ = run_checks(defs, instance, checks=["schema_drift"])
        (outcome,) = outcomes
        return outcome

    assert drift().passed
    base = base_layout(source.spec())
    rows = len(read_table(iceberg, base.namespace, base.name))
    assert rows > 0

    source.execute("RENAME TABLE people TO people_old")
    wait_schema_record(source, "RENAME TABLE people TO people_old")
    renamed = drift()
    assert (renamed.passed, renamed.severity) == (False, "ERROR")
    assert f"{source.database}.people was renamed to {source.database}.people_old" in (
        renamed.description
    )
    assert renamed.metadata["source_table"] == {"people": "renamed"}

    source.execute("RENAME TABLE people_old TO people")
    wait_schema_record(source, "RENAME TABLE people_old TO people")
    assert drift().passed

    source.execute("DROP TABLE people")
    wait_schema_record(source, f"DROP TABLE `{source.database}`.`people`")
    dropped = drift()
    assert (dropped.passed, dropped.severity) == (False, "WARN")
    assert "was dropped" in dropped.description
    assert "nothing is deleted" in dropped.description
    # the drift job marks base for readers outside Dagster
    drift_detected(defs, instance)
    marked = iceberg.load_catalog().load_table(f"{base.namespace}.{base.name}").properties
    assert "was dropped" in marked[SOURCE_STATE_PROPERTY]
    # the drop is no shape: the push sensor asks for no evolution
    sensor = defs.get_sensor_def("schema_changes")
    context = dg.build_sensor_context(instance=instance, resources={"kafka": source.kafka})
    result = sensor(context)
    assert not (isinstance(result, dg.SensorResult) and result.run_requests)
    # and the mirror keeps what the source held
    cycle(source, spark, iceberg)
    assert len(read_table(iceberg, base.namespace, base.name)) == rows
