"""History tables (SCD type 2) on the real stack, compared with a plain-Python replay.

The expected versions come from the records read back from Kafka with a plain client, decided
by the independent oracle (support/oracle.py) and replayed by `quality.history_replay`; the
history table is read with pyiceberg. Streams arrive cut in runs, with replays and late events.
"""

from __future__ import annotations

import os
import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_assets.demo.events import DebeziumEventFactory, produce, workload
from cdc_assets.pipeline.history import update_history
from cdc_assets.pipeline.tables import ensure_tables
from cdc_assets.pipeline.upsert import PLACEHOLDER_CONNECTORS
from cdc_assets.quality.history_replay import Key, order_key, replay_history
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.layers import history_layout
from cdc_assets.settings import Settings
from cdc_assets.spec.models import HistorySpec, TableSpec
from cdc_assets.sql.upsert import data_names, movable_keys
from cdc_assets_tests.integration.test_ingest import consume_all, isolated, read_table, same
from cdc_assets_tests.integration.test_upsert import (
    _shuffle_chunks,
    example_spec,
    ingest,
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

    after_truncate = [f.truncate(), f.create(base_row(id=6)), f.create(base_row(id=3))]
    deleted = [f.delete(base_row(id=6)), f.tombstone(base_row(id=6)), f.create(base_row(id=6))]
    produce([*after_truncate, old_update, *deleted], spec.source.topic, bootstrap)
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
