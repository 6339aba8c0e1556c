"""Upsert crashes, truncates, key changes, late events and redriven rows on the real stack."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from cdc_assets.pipeline.ingest.redrive import redrive
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.pipeline.shared.watermark import DELETE_CANDIDATES, base_state, current_properties
from cdc_assets.pipeline.upsert.upsert import StaleChangesError, build_bucketed, merge_base
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.layers import base_layout, bucketed_layout
from cdc_assets.settings import Settings
from cdc_assets.spec.models import TableSpec
from cdc_assets_dev.demo.events import DebeziumEventFactory, produce, workload
from cdc_assets_tests.integration.test_ingest import isolated, read_table
from cdc_assets_tests.integration.test_upsert import (
    assert_base_matches,
    expected_base,
    ingest,
    upsert,
)
from cdc_assets_tests.support.bad_records import base_row, users_spec
from cdc_assets_tests.support.child import run_until_failpoint

UPSERT = """
from cdc_assets.pipeline.upsert.upsert import build_bucketed, merge_base
build_bucketed(spark, "lake", res["iceberg"].load_catalog(), spec)
merge_base(spark, "lake", res["iceberg"].load_catalog(), spec)
"""


def base_table(iceberg: IcebergCatalogResource, spec: TableSpec) -> Any:
    layout = base_layout(spec)
    return iceberg.load_catalog().load_table(f"{layout.namespace}.{layout.name}")


def test_crash_between_any_two_steps_then_rerun(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    tmp_path: Path,
) -> None:
    spec = isolated(users_spec(), partitions=2, kafka=kafka)
    ensure_tables(spark, "lake", spec)
    rng = random.Random(5)
    records = workload(spec, rng, keys=30, events=240)
    bootstrap = kafka.resolved_bootstrap()
    chunks = [records[:80], records[80:160], records[160:], records[40:120]]
    for failpoint, chunk in zip(
        ("after_tombstones", "after_base_merge", "none", "after_tombstones"), chunks, strict=True
    ):
        produce(chunk, spec.source.topic, bootstrap)
        ingest(spark, iceberg, kafka, spec)
        before = base_state(base_table(iceberg, spec))
        if failpoint == "none":
            # a crash after the bucketed step: base never ran; the next run starts over
            build_bucketed(spark, "lake", iceberg.load_catalog(), spec)
        else:
            run_until_failpoint(it_settings, spec, UPSERT, failpoint, tmp_path)
        after = base_state(base_table(iceberg, spec))
        if failpoint == "after_base_merge":
            assert after.token() != before.token(), "the base commit happened before the crash"
        else:
            assert after.token() == before.token(), f"{failpoint}: base moved without its commit"
        upsert(spark, iceberg, spec)
        assert_base_matches(spec, iceberg, expected_base(spec, kafka))


def test_truncate_key_change_and_late_events(
    spark: Any, iceberg: IcebergCatalogResource, kafka: KafkaResource
) -> None:
    spec = isolated(users_spec(), kafka=kafka)
    ensure_tables(spark, "lake", spec)
    f = DebeziumEventFactory(spec)
    bootstrap = kafka.resolved_bootstrap()
    rows = {i: base_row(id=i, login_count=i) for i in range(1, 6)}
    first = [f.create(r) for r in rows.values()]
    old_update = f.update(rows[1], {**rows[1], "login_count": 100})
    with f.statement():  # a primary-key change: delete of the old key, insert of the new one
        key_change = [f.delete(rows[2]), f.tombstone(rows[2]), f.create({**rows[2], "id": 20})]
    # the same as one update carrying both keys (not Debezium's way, but some producers')
    moved = f.update(rows[5], {**rows[5], "id": 50})
    produce([*first, old_update, *key_change, moved], spec.source.topic, bootstrap)
    ingest(spark, iceberg, kafka, spec)
    upsert(spark, iceberg, spec)
    assert_base_matches(spec, iceberg, expected_base(spec, kafka))
    ids = sorted(r["id"] for r in read_table(iceberg, spec.sink.namespace, spec.name))
    assert ids == [1, 3, 4, 20, 50]

    after_truncate = [f.truncate(), f.create(base_row(id=6)), f.create(base_row(id=3))]
    # the same update delivered again after the truncate (a connector replay): older, ignored
    produce([*after_truncate, old_update], spec.source.topic, bootstrap)
    ingest(spark, iceberg, kafka, spec)
    _, merged = upsert(spark, iceberg, spec)
    assert merged.to_state.floor is not None
    assert_base_matches(spec, iceberg, expected_base(spec, kafka))
    ids = sorted(r["id"] for r in read_table(iceberg, spec.sink.namespace, spec.name))
    assert ids == [3, 6]

    # a delete, then an older update of that key delivered late: the tombstone keeps it deleted
    late_for_6 = f.update(base_row(id=6), base_row(id=6, login_count=7))
    produce([f.delete(base_row(id=6)), f.tombstone(base_row(id=6))], spec.source.topic, bootstrap)
    ingest(spark, iceberg, kafka, spec)
    upsert(spark, iceberg, spec)
    produce([late_for_6], spec.source.topic, bootstrap)
    ingest(spark, iceberg, kafka, spec)
    upsert(spark, iceberg, spec)
    ids = sorted(r["id"] for r in read_table(iceberg, spec.sink.namespace, spec.name))
    assert ids == [3]
    assert_base_matches(spec, iceberg, expected_base(spec, kafka))


def test_a_window_whose_only_delete_is_an_update_moving_its_key(
    spark: Any, iceberg: IcebergCatalogResource, kafka: KafkaResource
) -> None:
    """A window without deletes skips base's probe of them (``cdc.delete-candidates`` 0); an
    update that carries both keys still counts as one, and its old key leaves base for good."""
    spec = isolated(users_spec(), kafka=kafka)
    ensure_tables(spark, "lake", spec)
    f = DebeziumEventFactory(spec)
    bootstrap = kafka.resolved_bootstrap()
    rows = {i: base_row(id=i, login_count=i) for i in (1, 2)}
    creates = [f.create(r) for r in rows.values()]
    late = f.update(rows[1], {**rows[1], "login_count": 99})  # delivered after the move
    moved = f.update(rows[1], {**rows[1], "id": 10})

    def candidates() -> str | None:
        layout = bucketed_layout(spec)
        table = iceberg.load_catalog().load_table(f"{layout.namespace}.{layout.name}")
        return current_properties(table).get(DELETE_CANDIDATES)

    for window, want in (([*creates], "0"), ([moved], "1"), ([late], "0")):
        produce(window, spec.source.topic, bootstrap)
        ingest(spark, iceberg, kafka, spec)
        upsert(spark, iceberg, spec)
        assert candidates() == want
        assert_base_matches(spec, iceberg, expected_base(spec, kafka))
    # the late update of the old key found its tombstone: it did not come back
    ids = sorted(r["id"] for r in read_table(iceberg, spec.sink.namespace, spec.name))
    assert ids == [2, 10]


def test_stale_bucketed_table_is_refused(
    spark: Any, iceberg: IcebergCatalogResource, kafka: KafkaResource
) -> None:
    spec = isolated(users_spec(), kafka=kafka)
    ensure_tables(spark, "lake", spec)
    f = DebeziumEventFactory(spec)
    produce([f.create(base_row(id=1))], spec.source.topic, kafka.resolved_bootstrap())
    ingest(spark, iceberg, kafka, spec)
    build_bucketed(spark, "lake", iceberg.load_catalog(), spec)
    merge_base(spark, "lake", iceberg.load_catalog(), spec)
    produce([f.create(base_row(id=2))], spec.source.topic, kafka.resolved_bootstrap())
    ingest(spark, iceberg, kafka, spec)
    build_bucketed(spark, "lake", iceberg.load_catalog(), spec)
    merge_base(spark, "lake", iceberg.load_catalog(), spec)
    # base moves on without the bucketed table: simulate by rolling the bucketed table back
    bucketed = iceberg.load_catalog().load_table(f"{spec.sink.namespace}.users_bucketed")
    first = bucketed.metadata.snapshots[0].snapshot_id
    spark.sql(
        f"CALL lake.system.rollback_to_snapshot('{spec.sink.namespace}.users_bucketed', {first})"
    )
    with pytest.raises(StaleChangesError, match="materialize the bucketed asset again"):
        merge_base(spark, "lake", iceberg.load_catalog(), spec)


def test_redriven_rows_reach_base(
    spark: Any, iceberg: IcebergCatalogResource, kafka: KafkaResource
) -> None:
    spec = isolated(users_spec(), kafka=kafka)
    ensure_tables(spark, "lake", spec)
    f = DebeziumEventFactory(spec)
    records = [f.create(base_row(id=i, country="GBR" if i % 2 else "GB")) for i in range(1, 7)]
    produce(records, spec.source.topic, kafka.resolved_bootstrap())
    ingest(spark, iceberg, kafka, spec)
    upsert(spark, iceberg, spec)
    assert sorted(r["id"] for r in read_table(iceberg, spec.sink.namespace, spec.name)) == [2, 4, 6]

    columns = [
        c.model_copy(update={"type": "char(3)"}) if c.name == "country" else c for c in spec.columns
    ]
    fixed = spec.model_copy(update={"columns": columns})
    assert redrive(spark, "lake", fixed).to_ledger == 3
    bucketed, merged = upsert(spark, iceberg, fixed)
    assert bucketed.redriven_files >= 1
    assert merged.applied
    assert sorted(r["id"] for r in read_table(iceberg, spec.sink.namespace, spec.name)) == list(
        range(1, 7)
    )
    assert_base_matches(fixed, iceberg, expected_base(fixed, kafka))
