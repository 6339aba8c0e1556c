"""Ledger -> bucketed -> base on the real stack, compared with a plain-Python replay.

The expected base comes from the records read back from Kafka with a plain client, decided by
the independent oracle and replayed one by one in source order (support/base_oracle.py); base is
read with pyiceberg.
"""

from __future__ import annotations

import itertools
import json
import os
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_assets.pipeline.ingest.ingest import ingest_incremental
from cdc_assets.pipeline.shared import small_work
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.pipeline.upsert import upsert as upsert_module
from cdc_assets.pipeline.upsert.upsert import build_bucketed, change_key_ranges, merge_base
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.layers import base_layout, bucketed_layout
from cdc_assets.settings import Settings
from cdc_assets.spec import load_specs
from cdc_assets.spec.models import TableSpec
from cdc_assets_dev.demo.events import KafkaRecord, produce, workload
from cdc_assets_tests.integration.test_ingest import consume_all, isolated, read_table, same
from cdc_assets_tests.support.base_oracle import Key, replay_base
from cdc_assets_tests.support.oracle import expected_outcome

# A few examples per CI run; CDC_ASSETS_HYPOTHESIS=long for a soak run.
LONG = os.environ.get("CDC_ASSETS_HYPOTHESIS") == "long"
EXAMPLES = 25 if LONG else 3


def example_spec(settings_: Settings, name: str) -> TableSpec:
    return next(s for s in load_specs(settings_.specs_dir) if s.name == name)


def upsert(spark: Any, iceberg: IcebergCatalogResource, spec: TableSpec) -> tuple[Any, Any]:
    catalog = iceberg.load_catalog()
    bucketed = build_bucketed(spark, "lake", catalog, spec)
    if not bucketed.up_to_date:
        # the write's own counts (pipeline.shared.observed) against the table pyiceberg reads
        layout = bucketed_layout(spec)
        rows = read_table(iceberg, layout.namespace, layout.name)
        deletes = sum(1 for r in rows if r["_op"] == "d")
        assert (bucketed.rows, bucketed.deletes) == (len(rows), deletes)
    merged = merge_base(spark, "lake", iceberg.load_catalog(), spec)
    return bucketed, merged


def ingest(
    spark: Any, iceberg: IcebergCatalogResource, kafka: KafkaResource, spec: TableSpec
) -> Any:
    return ingest_incremental(spark, "lake", iceberg.load_catalog(), kafka, spec)


def expected_base(
    spec: TableSpec, kafka: KafkaResource, floor: tuple[int, int, int] | None = None
) -> dict[Key, dict[str, Any]]:
    records = consume_all(kafka, spec.source.topic)
    rows = []
    for p, o, ts, k, v in records:
        outcome = expected_outcome(spec, p, o, ts, k, v)
        if outcome.status == "ledger":
            assert outcome.row is not None
            rows.append(outcome.row)
    return replay_base(spec, rows, floor=floor)


def assert_base_matches(
    spec: TableSpec, iceberg: IcebergCatalogResource, expected: dict[Key, dict[str, Any]]
) -> None:
    layout = base_layout(spec)
    keys = [c.sink_name for c in spec.key_columns]
    rows = read_table(iceberg, layout.namespace, layout.name)
    actual = {tuple(r[k] for k in keys): r for r in rows}
    assert len(actual) == len(rows), "base holds a key twice"
    missing = sorted(set(expected) - set(actual), key=repr)[:10]
    extra = sorted(set(actual) - set(expected), key=repr)[:10]
    assert not missing, f"keys missing from base: {missing}"
    assert not extra, f"keys base should not hold: {extra}"
    diffs = [
        f"{key} {c}: oracle {want[c]!r} base {actual[key][c]!r}"
        for key, want in expected.items()
        for c in layout.column_names
        if not same(want[c], actual[key][c], c)
    ]
    assert not diffs, "\n".join(diffs[:30])


@pytest.mark.parametrize(
    ("table", "partitions", "code"),
    [
        ("users", 2, "interpreted"),
        ("orders", 1, "interpreted"),
        ("order_items", 3, "interpreted"),
        # What a table too large to run interpreted gets (pipeline.shared.small_work).
        ("users", 2, "generated"),
    ],
)
def test_upsert_matches_replay_over_several_runs(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    table: str,
    partitions: int,
    code: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # These bases are kilobytes: prune them anyway, to check the pruned MERGEs' results.
    monkeypatch.setattr(upsert_module, "PRUNE_MIN_BYTES", 0)
    asked: list[int | None] = []

    def interpreted_conf(rows: int | None) -> dict[str, str]:
        asked.append(rows)
        return small_work.interpreted_conf(rows) if code == "interpreted" else {}

    monkeypatch.setattr(upsert_module, "interpreted_conf", interpreted_conf)
    spec = isolated(example_spec(it_settings, table), partitions=partitions, kafka=kafka)
    ensure_tables(spark, "lake", spec)
    records = workload(spec, random.Random(3), keys=40, events=300, key_changes=True)
    bootstrap = kafka.resolved_bootstrap()
    for run, chunk in enumerate((records[:120], records[120:], records[100:160])):
        produce(chunk, spec.source.topic, bootstrap)  # the last chunk is a replay
        ingest(spark, iceberg, kafka, spec)
        _, merged = upsert(spark, iceberg, spec)
        assert merged.applied
        # An empty base has no partitions to line up with; from then on no shuffle of base.
        assert merged.storage_partitioned is (run > 0)
        if run == 2:
            # Base has more files than buckets by now: the replay's MERGEs read only the files
            # whose key bounds reach its keys, and base still equals the replay.
            assert merged.key_ranges is not None
        assert_base_matches(spec, iceberg, expected_base(spec, kafka))
    # Both steps sized what their statements read, and counted base once it had rows.
    assert len(asked) == 6
    assert all(rows is not None and 0 < rows < small_work.INTERPRETED_ROWS for rows in asked)
    assert asked[3] > asked[1]
    again_bucketed, again = upsert(spark, iceberg, spec)
    assert again_bucketed.up_to_date
    assert again.up_to_date


def _key_id(record: KafkaRecord) -> Any:
    """The ``id`` in a record's key (None for a record without one)."""
    if record.key is None:
        return None
    document = json.loads(record.key)
    return document.get("payload", document).get("id")


def test_a_bucketed_table_rebuilt_mid_merge_does_not_escape_its_key_ranges(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another upsert of the table (a second process, no pool limit) rebuilds bucketed between
    this MERGE's key-range query and the MERGE, with changes to keys outside those ranges. The
    MERGE reads the snapshot it took the ranges and the state from; the next run applies the
    rest, and base equals the replay (read unpinned, those keys would be inserted twice)."""
    monkeypatch.setattr(upsert_module, "PRUNE_MIN_BYTES", 0)  # a small base, pruned anyway
    spec = isolated(example_spec(it_settings, "users"), partitions=1, kafka=kafka)
    ensure_tables(spark, "lake", spec)
    records = workload(spec, random.Random(17), keys=80, events=600, markers=False)
    bootstrap = kafka.resolved_bootstrap()
    for chunk in (records[:300], records[300:400]):
        produce(chunk, spec.source.topic, bootstrap)
        ingest(spark, iceberg, kafka, spec)
        upsert(spark, iceberg, spec)
    # Later changes of a few low keys, then of the other keys (each key's changes keep order).
    rest = records[400:]
    low = [r for r in rest if (_key_id(r) or 0) <= 8]
    high = [r for r in rest if (_key_id(r) or 0) > 8]
    assert low
    assert high
    produce(low, spec.source.topic, bootstrap)
    ingest(spark, iceberg, kafka, spec)
    build_bucketed(spark, "lake", iceberg.load_catalog(), spec)

    ranges_of = upsert_module.change_key_ranges
    taken, rebuilt = [], []

    def ranges_then_rebuild(spark_: Any, spec_: TableSpec, bucketed: str) -> Any:
        found = ranges_of(spark_, spec_, bucketed)
        taken.append(found)
        produce(high, spec.source.topic, bootstrap)
        ingest(spark, iceberg, kafka, spec)
        rebuilt.append(build_bucketed(spark, "lake", iceberg.load_catalog(), spec))
        return found

    monkeypatch.setattr(upsert_module, "change_key_ranges", ranges_then_rebuild)
    merged = merge_base(spark, "lake", iceberg.load_catalog(), spec)
    monkeypatch.undo()
    assert merged.applied
    assert merged.key_ranges is not None
    assert rebuilt
    assert rebuilt[0].rows > 0
    assert all(top <= 8 for _, top in taken[0].ranges), "the low keys' ranges only"
    _, caught_up = upsert(spark, iceberg, spec)
    assert caught_up.applied
    assert_base_matches(spec, iceberg, expected_base(spec, kafka))


def test_change_key_ranges_split_at_the_widest_gaps(it_settings: Settings, spark: Any) -> None:
    spec = example_spec(it_settings, "users")
    keys = [1, 2, 3, 100, 101, 5000, 2**31]
    spark.createDataFrame([(k,) for k in keys], "id BIGINT").createOrReplaceTempView("cdc_keys")
    found = change_key_ranges(spark, spec, "cdc_keys")
    assert found is not None
    assert found.ranges == ((1, 3), (100, 101), (5000, 5000), (2**31, 2**31))
    spark.createDataFrame([], "id BIGINT").createOrReplaceTempView("cdc_keys")
    assert change_key_ranges(spark, spec, "cdc_keys") is None


def _shuffle_chunks(
    records: list[KafkaRecord],
    cuts: list[int],
    replays: list[tuple[int, int]],
    late: list[int],
) -> list[list[KafkaRecord]]:
    """Runs of records: cut in pieces, with older ranges delivered again (a connector restart)
    and single change events moved to the last run (late, out of order)."""
    moved = {i % len(records) for i in late if records[i % len(records)].value is not None}
    kept = [r for i, r in enumerate(records) if i not in moved]
    bounds = sorted({0, len(kept), *(c % (len(kept) + 1) for c in cuts)})
    chunks = [kept[a:b] for a, b in itertools.pairwise(bounds)] or [[]]
    for i, (start, length) in enumerate(replays):
        start %= len(records)
        chunks[min(i + 1, len(chunks) - 1)].extend(records[start : start + length])
    chunks[-1].extend(records[i] for i in sorted(moved))
    return chunks


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
def test_random_streams_converge_to_the_replay(
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
    spec = isolated(example_spec(it_settings, table), partitions=partitions, kafka=kafka)
    ensure_tables(spark, "lake", spec)
    # Late events too for PostgreSQL: a TOAST placeholder's value comes from the key's newest
    # earlier event in source order, even when that event arrives after it.
    records = workload(spec, random.Random(seed), keys=keys, events=events, key_changes=True)
    bootstrap = kafka.resolved_bootstrap()
    for chunk in _shuffle_chunks(records, cuts, replays, late):
        produce(chunk, spec.source.topic, bootstrap)
        ingest(spark, iceberg, kafka, spec)
        upsert(spark, iceberg, spec)
    assert_base_matches(spec, iceberg, expected_base(spec, kafka))
