"""History tables (SCD type 2) on the real stack, compared with a plain-Python replay.

The expected versions come from the records read back from Kafka with a plain client, decided
by the independent oracle (support/oracle.py) and replayed by `quality.history_replay`; the
history table is read with pyiceberg. Streams arrive cut in runs, with replays and late events.
"""

from __future__ import annotations

import os
import random
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_assets.pipeline.evolution.evolve import backfill_from_ledger, evolve_iceberg
from cdc_assets.pipeline.health.health import iceberg_differences
from cdc_assets.pipeline.maintenance.maintenance import maintain_table
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.pipeline.upsert.history import compare_history, read_as_of, update_history
from cdc_assets.pipeline.upsert.upsert import PLACEHOLDER_CONNECTORS
from cdc_assets.quality import rules
from cdc_assets.quality.history_replay import Key, order_key, replay_history
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.layers import history_layout
from cdc_assets.settings import Settings
from cdc_assets.spec.models import HistorySpec, TableSpec
from cdc_assets.sql.upsert import data_names, movable_keys
from cdc_assets_dev.demo.events import DebeziumEventFactory, produce, workload
from cdc_assets_tests.integration.test_evolve import evolve_spec, later, with_nickname
from cdc_assets_tests.integration.test_ingest import consume_all, isolated, read_table, same
from cdc_assets_tests.integration.test_maintenance import with_retention
from cdc_assets_tests.integration.test_upsert import (
    _shuffle_chunks,
    example_spec,
    ingest,
    upsert,
)
from cdc_assets_tests.support.bad_records import base_row, users_spec
from cdc_assets_tests.support.oracle import expected_outcome

LONG = os.environ.get("CDC_ASSETS_HYPOTHESIS") == "long"
EXAMPLES = 25 if LONG else 3


def with_history(spec: TableSpec) -> TableSpec:
    return spec.model_copy(update={"history": HistorySpec(mode="scd2")})


def expected_history(spec: TableSpec, kafka: KafkaResource) -> dict[Key, list[dict[str, Any]]]:
    rows = []
    for p, o, ts, k, v in consume_all(kafka, spec.source.topic):
        outcome = expected_outcome(spec, p, o, ts, k, v)
        if outcome.status == "ledger":
            assert outcome.row is not None
            rows.append(outcome.row)
    return replay_history(
        rows,
        data_columns=data_names(spec),
        key_fields=[(c.name, c.sink_name) for c in spec.key_columns],
        shard_column=spec.shard_column,
        carry_unavailable=spec.source.connector in PLACEHOLDER_CONNECTORS,
        old_keys=movable_keys(spec),
    )


def assert_history_matches(
    spec: TableSpec, iceberg: IcebergCatalogResource, expected: dict[Key, list[dict[str, Any]]]
) -> None:
    layout = history_layout(spec)
    keys = spec.key_sink_names
    actual: dict[Key, list[dict[str, Any]]] = {}
    for row in read_table(iceberg, layout.namespace, layout.name):
        actual.setdefault(tuple(row[k] for k in keys), []).append(row)
    for versions in actual.values():
        versions.sort(key=order_key)
    assert sorted(actual, key=repr) == sorted(expected, key=repr), "keys differ"
    diffs = []
    for key, want in expected.items():
        got = actual[key]
        if [order_key(v) for v in got] != [order_key(v) for v in want]:
            diffs.append(
                f"{key}: versions at {[order_key(v) for v in got]}, oracle "
                f"{[order_key(v) for v in want]}"
            )
            continue
        for i, (w, g) in enumerate(zip(want, got, strict=True)):
            diffs += [
                f"{key} version {i} {c}: oracle {w[c]!r} history {g[c]!r}"
                for c in layout.column_names
                if not same(w[c], g[c], c)
            ]
    assert not diffs, "\n".join(diffs[:30])


def run_history(spark: Any, iceberg: IcebergCatalogResource, spec: TableSpec) -> Any:
    return update_history(spark, "lake", iceberg.load_catalog(), spec)


def test_truncate_key_change_late_and_recreated_keys(
    spark: Any, iceberg: IcebergCatalogResource, kafka: KafkaResource
) -> None:
    spec = with_history(isolated(users_spec(), kafka=kafka))
    ensure_tables(spark, "lake", spec)
    f = DebeziumEventFactory(spec)
    bootstrap = kafka.resolved_bootstrap()
    rows = {i: base_row(id=i, login_count=i) for i in range(1, 6)}
    first = [f.create(r) for r in rows.values()]
    old_update = f.update(rows[1], {**rows[1], "login_count": 100})
    late_update = f.update(rows[3], {**rows[3], "login_count": 33})  # delivered last
    with f.statement():  # a primary-key change: delete of the old key, insert of the new one
        key_change = [f.delete(rows[2]), f.tombstone(rows[2]), f.create({**rows[2], "id": 20})]
    moved = f.update(rows[5], {**rows[5], "id": 50})  # one update carrying both keys
    produce([*first, old_update, *key_change, moved], spec.source.topic, bootstrap)
    ingest(spark, iceberg, kafka, spec)
    result = run_history(spark, iceberg, spec)
    assert result.mode == "full"
    assert_history_matches(spec, iceberg, expected_history(spec, kafka))

    truncate = f.truncate()
    after_truncate = [truncate, f.create(base_row(id=6)), f.create(base_row(id=3))]
    deleted = [f.delete(base_row(id=6)), f.tombstone(base_row(id=6)), f.create(base_row(id=6))]
    # the truncate delivered twice (a connector replay): one truncate version per key
    produce([*after_truncate, old_update, *deleted, truncate], spec.source.topic, bootstrap)
    ingest(spark, iceberg, kafka, spec)
    result = run_history(spark, iceberg, spec)
    assert result.mode == "full"
    assert "truncate" in result.reason
    assert_history_matches(spec, iceberg, expected_history(spec, kafka))

    produce(
        [late_update, f.update(base_row(id=6), base_row(id=6, login_count=9))],
        spec.source.topic,
        bootstrap,
    )
    ingest(spark, iceberg, kafka, spec)
    result = run_history(spark, iceberg, spec)
    assert result.mode == "incremental"
    assert result.touched_keys == 2
    expected = expected_history(spec, kafka)
    assert_history_matches(spec, iceberg, expected)
    # the late update sits before the truncate: a version of key 3 closed by it
    late = [v for v in expected[(3,)] if v["_op"] == "u"]
    assert late
    assert late[0]["_closed_by"] == "t"
    again = run_history(spark, iceberg, spec)
    assert again.mode == "up-to-date"


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=not LONG,
)
@given(
    table=st.sampled_from(["users", "orders", "order_items"]),
    seed=st.integers(0, 10_000),
    keys=st.integers(3, 25),
    events=st.integers(20, 160),
    cuts=st.lists(st.integers(0, 400), max_size=3),
    replays=st.lists(st.tuples(st.integers(0, 400), st.integers(1, 40)), max_size=3),
    late=st.lists(st.integers(0, 400), max_size=6),
    partitions=st.integers(1, 3),
)
def test_random_streams_give_the_replayed_history(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    table: str,
    seed: int,
    keys: int,
    events: int,
    cuts: list[int],
    replays: list[tuple[int, int]],
    late: list[int],
    partitions: int,
) -> None:
    spec = with_history(
        isolated(example_spec(it_settings, table), partitions=partitions, kafka=kafka)
    )
    ensure_tables(spark, "lake", spec)
    records = workload(spec, random.Random(seed), keys=keys, events=events, key_changes=True)
    bootstrap = kafka.resolved_bootstrap()
    for chunk in _shuffle_chunks(records, cuts, replays, late):
        produce(chunk, spec.source.topic, bootstrap)
        ingest(spark, iceberg, kafka, spec)
        run_history(spark, iceberg, spec)
    assert_history_matches(spec, iceberg, expected_history(spec, kafka))


def test_the_check_turns_red_on_a_lost_version_and_a_full_run_restores_it(
    spark: Any, iceberg: IcebergCatalogResource, kafka: KafkaResource
) -> None:
    spec = with_history(isolated(users_spec(), kafka=kafka))
    ensure_tables(spark, "lake", spec)
    f = DebeziumEventFactory(spec)
    rows = {i: base_row(id=i, login_count=i) for i in range(1, 8)}
    events = [f.create(r) for r in rows.values()]
    events += [f.update(rows[i], {**rows[i], "login_count": 10 * i}) for i in (1, 2, 3)]
    events += [f.delete(rows[4]), f.tombstone(rows[4])]
    produce(events, spec.source.topic, kafka.resolved_bootstrap())
    ingest(spark, iceberg, kafka, spec)
    upsert(spark, iceberg, spec)
    run_history(spark, iceberg, spec)
    catalog = iceberg.load_catalog()
    good = rules.history_verdict(compare_history(spark, "lake", catalog, spec))
    assert good.passed, good.summary
    assert good.metadata["keys_compared"] == 7
    assert good.metadata["versions_compared"] == 7 + 3 + 1

    # The history as of now is base: two independent paths to the same rows.
    now = read_as_of(catalog, spec, datetime.now(UTC) + timedelta(days=1)).to_pylist()
    base = read_table(iceberg, spec.sink.namespace, spec.name)
    names = data_names(spec)
    assert sorted(now, key=lambda r: r["id"]) == sorted(
        ({c: r[c] for c in names} for r in base), key=lambda r: r["id"]
    )
    # As of the first change's time only that change had happened (ids 1..7 created in turn).
    history = read_table(iceberg, spec.sink.namespace, f"{spec.name}_history")
    first = min(history, key=lambda r: (r["_seq_major"], r["_seq_minor"], r["_seq_row"]))
    then = read_as_of(catalog, spec, first["_valid_from"]).to_pylist()
    assert [r["id"] for r in then] == [first["id"]]

    table = f"lake.{spec.sink.namespace}.{spec.name}_history"
    spark.sql(f"DELETE FROM {table} WHERE id = 2 AND _op = 'u'")  # a version lost
    lost = rules.history_verdict(compare_history(spark, "lake", catalog, spec))
    assert not lost.passed
    assert lost.metadata["keys_differing"] == 1
    assert lost.metadata["keys_without_one_current_version"] == 1  # key 2 has none now
    assert "key (2,)" in lost.metadata["examples"][0]  # type: ignore[index]
    assert run_history(spark, iceberg, spec).mode == "up-to-date"  # nothing new in the ledger
    restored = update_history(spark, "lake", iceberg.load_catalog(), spec, full=True)
    assert restored.mode == "full"
    assert rules.history_verdict(compare_history(spark, "lake", catalog, spec)).passed
    assert_history_matches(spec, iceberg, expected_history(spec, kafka))


def test_history_follows_an_added_column_and_its_backfill(
    spark: Any, iceberg: IcebergCatalogResource, kafka: KafkaResource, it_settings: Settings
) -> None:
    v1 = with_history(isolated(example_spec(it_settings, "users"), kafka=kafka))
    plan, v2 = evolve_spec(v1, with_nickname(v1))
    ensure_tables(spark, "lake", v1)
    rng = random.Random(7)
    bootstrap = kafka.resolved_bootstrap()
    produce(workload(v1, rng, keys=12, events=50), v1.source.topic, bootstrap)
    ingest(spark, iceberg, kafka, v1)
    run_history(spark, iceberg, v1)
    # The source added the column; the jobs still run v1 (its values reach _row_json only).
    produce(later(workload(v2, rng, keys=12, events=50), 1), v1.source.topic, bootstrap)
    ingest(spark, iceberg, kafka, v1)
    assert run_history(spark, iceberg, v1).mode == "incremental"
    catalog = iceberg.load_catalog()
    evolve_iceberg(catalog, v1, v2, plan)
    assert not iceberg_differences(catalog, v2)["history"]
    backfill_from_ledger(spark, "lake", catalog, v2, ["nickname"])
    # The backfill rewrote ledger rows: the next run reads the whole ledger again.
    result = run_history(spark, iceberg, v2)
    assert result.mode == "full"
    assert "rewritten" in result.reason
    expected = expected_history(v2, kafka)
    assert_history_matches(v2, iceberg, expected)
    nicknames = [v["nickname"] for versions in expected.values() for v in versions]
    assert any(n is not None for n in nicknames)
    assert any(n is None for n in nicknames)  # versions from before the source had it


def test_maintenance_keeps_what_the_next_history_run_resumes_from(
    spark: Any, iceberg: IcebergCatalogResource, kafka: KafkaResource, it_settings: Settings
) -> None:
    spec = with_history(isolated(example_spec(it_settings, "users"), kafka=kafka))
    spec = with_retention(spec, snapshot_retention_hours=1, retain_last_snapshots=1)
    ensure_tables(spark, "lake", spec)
    rng = random.Random(11)
    records = workload(spec, rng, keys=10, events=90)
    bootstrap = kafka.resolved_bootstrap()
    for i, chunk in enumerate((records[:30], records[30:60])):
        produce(chunk, spec.source.topic, bootstrap)
        ingest(spark, iceberg, kafka, spec)
        upsert(spark, iceberg, spec)
        if i == 0:  # the history lags: base has read a ledger snapshot it has not
            run_history(spark, iceberg, spec)
    # Every snapshot past its retention a month from now: only the protected ones stay.
    result = maintain_table(
        spark, "lake", iceberg.load_catalog(), spec, now=datetime.now(UTC) + timedelta(days=30)
    )
    assert not result.failed, result.failed
    expired = {
        s.layer: s.counts.get("snapshots_expired", 0)
        for s in result.steps
        if s.step == "expire_snapshots"
    }
    assert "history" in expired
    assert expired["cdc"] > 0
    produce(records[60:], spec.source.topic, bootstrap)
    ingest(spark, iceberg, kafka, spec)
    after = run_history(spark, iceberg, spec)
    assert after.mode == "incremental", after.reason
    assert_history_matches(spec, iceberg, expected_history(spec, kafka))
