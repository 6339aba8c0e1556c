"""Crashes, hour rebuilds, redrive and the new-offsets sensor on the real stack."""

from __future__ import annotations

import random
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg
from confluent_kafka import Producer

from cdc_assets.assets.keys import asset_key, table_of
from cdc_assets.definitions import build_defs
from cdc_assets.pipeline.health import health
from cdc_assets.pipeline.ingest.ingest import ingest_incremental, rebuild_hour
from cdc_assets.pipeline.ingest.redrive import redrive
from cdc_assets.pipeline.shared.offsets import committed_offsets
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.quality.rules import schema_converged_verdict
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.layers import dead_letter_layout, ledger_layout
from cdc_assets.settings import Settings
from cdc_assets.spec.models import TableSpec
from cdc_assets_dev.demo.events import DebeziumEventFactory, KafkaRecord, produce, workload
from cdc_assets_tests.integration.test_ingest import (
    assert_ledger_matches,
    consume_all,
    isolated,
    read_table,
)
from cdc_assets_tests.support.bad_records import base_row, users_spec
from cdc_assets_tests.support.child import run_until_failpoint
from cdc_assets_tests.support.oracle import expected_outcome
from cdc_assets_tests.support.runs import record_run

INGEST = """
from cdc_assets.pipeline.ingest.ingest import ingest_incremental
ingest_incremental(spark, "lake", res["iceberg"].load_catalog(), res["kafka"], spec)
"""


def oracle_check(
    spec: TableSpec, kafka: KafkaResource, iceberg: IcebergCatalogResource
) -> Counter[str]:
    records = consume_all(kafka, spec.source.topic)
    outcomes = {(p, o): expected_outcome(spec, p, o, ts, k, v) for p, o, ts, k, v in records}
    ledger = read_table(iceberg, spec.sink.namespace, ledger_layout(spec).name)
    assert_ledger_matches(spec, outcomes, ledger)
    dead = read_table(iceberg, spec.sink.namespace, dead_letter_layout(spec).name)
    dead_keys = [(r["partition"], r["offset"]) for r in dead]
    assert len(dead_keys) == len(set(dead_keys)), "duplicate dead letters"
    assert sorted(dead_keys) == sorted(k for k, o in outcomes.items() if o.status == "dead")
    return Counter(o.status for o in outcomes.values())


def test_crash_at_any_step_then_rerun_neither_loses_nor_duplicates(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    tmp_path: Path,
) -> None:
    spec = isolated(users_spec(), partitions=2, kafka=kafka)
    ensure_tables(spark, "lake", spec)
    rng = random.Random(11)
    bootstrap = kafka.resolved_bootstrap()
    factory = DebeziumEventFactory(spec)
    bad = KafkaRecord(b'{"id":1}', b'{"op":"c","after":{"id":null}}')
    table_name = f"{spec.sink.namespace}.{ledger_layout(spec).name}"

    for failpoint in ("during_ledger_write", "after_dead_letters", "after_ledger_commit"):
        batch = [*workload(spec, rng, keys=20, events=120), bad, factory.heartbeat()]
        produce(batch, spec.source.topic, bootstrap)
        before = committed_offsets(iceberg.load_catalog().load_table(table_name))
        run_until_failpoint(it_settings, spec, INGEST, failpoint, tmp_path)
        after = committed_offsets(iceberg.load_catalog().load_table(table_name))
        if failpoint == "after_ledger_commit":
            assert after != before, "the commit happened before the crash"
        else:
            assert after == before, f"{failpoint}: offsets moved without the ledger commit"
        rerun = ingest_incremental(spark, "lake", iceberg.load_catalog(), kafka, spec)
        if failpoint == "after_ledger_commit":
            assert rerun.read == 0
        counts = oracle_check(spec, kafka, iceberg)
        assert counts["dead"] >= 1


def test_rebuilding_an_hour_replaces_exactly_that_hour(
    spark: Any, iceberg: IcebergCatalogResource, kafka: KafkaResource
) -> None:
    spec = isolated(users_spec(), kafka=kafka)
    ensure_tables(spark, "lake", spec)
    factory = DebeziumEventFactory(spec)
    ten = datetime(2026, 2, 1, 10, tzinfo=UTC)
    producer = Producer(kafka.client_conf())
    for i in range(60):
        record = factory.create(base_row(id=i + 1, email=f"u{i}@example.com"))
        stamp = ten + timedelta(minutes=i * 2)  # 30 records at 10:xx, 30 at 11:xx
        producer.produce(
            spec.source.topic,
            key=record.key,
            value=record.value,
            timestamp=int(stamp.timestamp() * 1000),
        )
    assert producer.flush(30) == 0
    first = ingest_incremental(spark, "lake", iceberg.load_catalog(), kafka, spec)
    assert first.hours == ["2026-02-01-10:00", "2026-02-01-11:00"]
    ledger = f"lake.{spec.sink.namespace}.{ledger_layout(spec).name}"
    table_name = f"{spec.sink.namespace}.{ledger_layout(spec).name}"
    offsets = committed_offsets(iceberg.load_catalog().load_table(table_name))

    spark.sql(f"DELETE FROM {ledger} WHERE hr = 10 AND _kafka_offset % 3 = 0")  # damage 10:xx
    eleven = {
        r["_kafka_offset"]: r["_processed_at"]
        for r in read_table(iceberg, spec.sink.namespace, ledger_layout(spec).name)
        if r["hr"] == 11
    }
    for _ in range(2):  # idempotent
        result = rebuild_hour(
            spark, "lake", iceberg.load_catalog(), kafka, spec, "2026-02-01-10:00"
        )
        assert (result.read, result.ledger) == (30, 30)
        rows = read_table(iceberg, spec.sink.namespace, ledger_layout(spec).name)
        assert sorted(r["_kafka_offset"] for r in rows if r["hr"] == 10) == list(range(30))
        assert {r["_kafka_offset"]: r["_processed_at"] for r in rows if r["hr"] == 11} == eleven
    assert committed_offsets(iceberg.load_catalog().load_table(table_name)) == offsets
    oracle_check(spec, kafka, iceberg)


def test_redrive_after_a_spec_fix(
    spark: Any, iceberg: IcebergCatalogResource, kafka: KafkaResource
) -> None:
    spec = isolated(users_spec(), kafka=kafka)
    ensure_tables(spark, "lake", spec)
    factory = DebeziumEventFactory(spec)
    records = [
        factory.create(base_row(id=i, country="GBR" if i % 2 else "GB")) for i in range(1, 11)
    ]
    produce(records, spec.source.topic, kafka.resolved_bootstrap())
    first = ingest_incremental(spark, "lake", iceberg.load_catalog(), kafka, spec)
    assert (first.ledger, first.dead) == (5, 5)
    assert first.dead_reasons == {"column 'country': value does not fit char(2)": 5}
    # the source holds those values: schema_converged sees the spec behind it (red after grace)
    refused = health.refused_values(iceberg.load_catalog(), spec)
    assert list(refused) == ["country"]
    assert refused["country"][0] == 5
    now_ms = int(time.time() * 1000)
    verdict = schema_converged_verdict(
        {}, known=set(), now_ms=now_ms + 60_000, grace_minutes=0, refused=refused
    )
    assert (verdict.passed, verdict.severity) == (False, "ERROR")

    unchanged = redrive(spark, "lake", spec)
    assert (unchanged.to_ledger, unchanged.still_dead) == (0, 5)

    columns = [
        c.model_copy(update={"type": "char(3)"}) if c.name == "country" else c for c in spec.columns
    ]
    fixed = spec.model_copy(update={"columns": columns})
    result = redrive(spark, "lake", fixed)
    assert (result.replayed, result.to_ledger, result.still_dead) == (5, 5, 0)
    assert redrive(spark, "lake", fixed).replayed == 0
    rows = read_table(iceberg, spec.sink.namespace, ledger_layout(spec).name)
    assert sorted(r["id"] for r in rows) == list(range(1, 11))
    assert sorted(r["country"] for r in rows if r["id"] % 2) == ["GBR"] * 5
    assert read_table(iceberg, spec.sink.namespace, dead_letter_layout(spec).name) == []
    assert health.refused_values(iceberg.load_catalog(), fixed) == {}


def test_sensor_requests_one_run_for_the_tables_with_new_offsets(
    it_settings: Settings, resources: dict[str, Any], kafka: KafkaResource
) -> None:
    busy = isolated(users_spec(), kafka=kafka)
    other = isolated(users_spec(), kafka=kafka).model_copy(update={"name": "other_users"})
    quiet = isolated(users_spec(), kafka=kafka).model_copy(update={"name": "quiet_users"})
    bootstrap = kafka.resolved_bootstrap()
    produce(workload(busy, random.Random(3), keys=3, events=5), busy.source.topic, bootstrap)
    produce(workload(other, random.Random(4), keys=3, events=5), other.source.topic, bootstrap)
    defs = build_defs(
        specs=[busy, other, quiet], settings=it_settings, resource_overrides=resources
    )
    sensor = defs.get_sensor_def("new_kafka_offsets")

    def tick(instance: dg.DagsterInstance, cursor: str | None) -> dg.SensorResult:
        context = dg.build_sensor_context(
            instance=instance, cursor=cursor, resources={"kafka": kafka}
        )
        return sensor(context)  # type: ignore[no-any-return]

    with dg.instance_for_test() as instance:
        first = tick(instance, None)
        # one run for both tables that grew (one Spark driver), none for the quiet one: their
        # ingest and upsert in one run (one launch through the daemon)
        assert [r.asset_selection for r in first.run_requests] == [
            [
                asset_key(layer, t)
                for t in ("other_users", "users")
                for layer in ("cdc", "bucketed", "base")
            ]
        ]
        assert sensor.job_name == "sync_tables"
        assert first.run_requests[0].tags["cdc/tables"] == "other_users,users"
        # the ingest's own accounting runs with it; whole-table checks are on their schedule
        assert first.run_requests[0].asset_check_keys == [
            dg.AssetCheckKey(asset_key("cdc", t), "offsets_accounted")
            for t in ("other_users", "users")
        ]
        assert "cdc/table" not in first.run_requests[0].tags
        assert first.run_requests[0].partition_key == datetime.now(UTC).strftime("%Y-%m-%d-%H:00")
        again = tick(instance, first.cursor)
        assert again.run_requests == []
        produce([DebeziumEventFactory(busy).heartbeat()], busy.source.topic, bootstrap)
        third = tick(instance, again.cursor)
        assert [r.tags["cdc/table"] for r in third.run_requests] == ["users"]
        # While an ingest run selecting the table is queued or running (started by anyone: the
        # sensor, the UI, a backfill) the sensor waits for it, and no pile of runs that would
        # find nothing builds up; the cursor stays, so the next tick after it asks. Tables not in
        # that run go on.
        running = record_run(
            instance,
            "ingest_ledgers",
            dg.DagsterRunStatus.STARTED,
            asset_selection={asset_key("cdc", "users")},
        )
        produce([DebeziumEventFactory(busy).heartbeat()], busy.source.topic, bootstrap)
        produce([DebeziumEventFactory(other).heartbeat()], other.source.topic, bootstrap)
        waiting = tick(instance, third.cursor)
        assert [_tables(r) for r in waiting.run_requests] == [{"other_users"}]
        instance.report_run_canceled(running)
        after = tick(instance, waiting.cursor)
        assert [_tables(r) for r in after.run_requests] == [{"users"}]


def _tables(request: dg.RunRequest) -> set[str]:
    return {t for k in request.asset_selection or [] if (t := table_of(k)) is not None}
