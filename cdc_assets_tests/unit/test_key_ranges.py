"""The change set's key ranges that prune the upsert's MERGEs, and the write order that makes
file statistics bound keys: pure rendering and the cut at the widest gaps."""

from __future__ import annotations

import itertools
import random

import pytest
import sqlglot

from cdc_assets.pipeline.upsert.upsert import PRUNE_MIN_BYTES, worth_pruning
from cdc_assets.schema.layers import base_layout, bucketed_layout, tombstones_layout
from cdc_assets.spec import load_specs
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.ddl import render_write_order
from cdc_assets.sql.key_ranges import KeyRanges, key_ranges, prune_column, render_key_ranges
from cdc_assets.sql.upsert import render_base_merge, render_tombstone_merge
from cdc_assets_tests.conftest import PROJECT_ROOT

SPECS = {s.name: s for s in load_specs(PROJECT_ROOT / "table_specs")}


def _with_key_type(spec: TableSpec, sink_type: str) -> TableSpec:
    key = spec.primary_key[0]
    columns = [
        c.model_copy(update={"type": sink_type}) if c.name == key else c for c in spec.columns
    ]
    return spec.model_copy(update={"columns": columns})


def test_the_first_orderable_key_is_pruned_by() -> None:
    assert prune_column(SPECS["users"]) == ("id", True)
    assert prune_column(SPECS["order_items"]) == ("order_id", True)
    assert prune_column(_with_key_type(SPECS["users"], "varchar(20)")) == ("id", False)
    assert prune_column(_with_key_type(SPECS["users"], "uuid")) == ("id", False)  # as a string
    assert prune_column(_with_key_type(SPECS["users"], "decimal(20,0)")) is None
    assert render_key_ranges(_with_key_type(SPECS["users"], "decimal(20,0)"), "b") is None


@pytest.mark.parametrize("name", sorted(SPECS))
def test_range_queries_and_pruned_merges_parse_as_spark_sql(name: str) -> None:
    spec = SPECS[name]
    query = render_key_ranges(spec, "`lake`.`ns`.`b`")
    assert query is not None
    sqlglot.parse_one(query, read="spark")
    ranges = KeyRanges(spec.key_sink_names[0], ((1, 5), (9, 9), (20, 2**40)))
    for sql in (
        render_base_merge(spec, "`lake`.`ns`.`base`", "`lake`.`ns`.`b`", ranges=ranges),
        render_tombstone_merge(spec, "`lake`.`ns`.`t`", "`lake`.`ns`.`b`", ranges),
    ):
        sqlglot.parse_one(sql, read="spark")
        assert "t.`order_id`" in sql or "t.`id`" in sql
        assert " = 9 OR " in sql
        assert f"BETWEEN 20 AND {2**40})" in sql


def test_a_truncate_reads_all_of_base() -> None:
    from cdc_assets.schema.position import Position

    ranges = KeyRanges("id", ((1, 2),))
    with pytest.raises(ValueError, match="reads all of base"):
        render_base_merge(SPECS["users"], "b", "s", Position(1, 0, 0), ranges=ranges)


def test_string_keys_get_their_span_and_quotes_are_escaped() -> None:
    spec = _with_key_type(SPECS["users"], "varchar(20)")
    query = render_key_ranges(spec, "b")
    assert query is not None
    assert "'gap'" not in query
    ranges = key_ranges(spec, [("span", "a'1", "z")])
    assert ranges is not None
    assert ranges.condition("t") == "(t.`id` BETWEEN 'a\\'1' AND 'z')"


def test_no_changes_no_ranges() -> None:
    assert key_ranges(SPECS["users"], [("span", None, None)]) is None
    assert key_ranges(SPECS["users"], []) is None


def _ranges_as_the_query_finds_them(keys: list[int], max_ranges: int) -> KeyRanges | None:
    """What the query's rows would be: the span and the widest gaps (wider than 1)."""
    distinct = sorted(set(keys))
    pairs = [(a, b) for a, b in itertools.pairwise(distinct) if b - a > 1]
    widest = sorted(pairs, key=lambda p: p[1] - p[0], reverse=True)[: max_ranges - 1]
    rows: list[tuple[str, int | str | None, int | str | None]] = [
        ("span", distinct[0], distinct[-1])
    ]
    rows += [("gap", a, b) for a, b in widest]
    return key_ranges(SPECS["users"], rows)


@pytest.mark.parametrize("seed", range(20))
def test_every_key_is_in_a_range_and_the_widest_gaps_are_left_out(seed: int) -> None:
    rng = random.Random(seed)
    hot = [rng.randrange(9_000_000, 10_000_000) for _ in range(rng.randrange(1, 300))]
    stragglers = [rng.randrange(0, 9_000_000) for _ in range(rng.randrange(0, 4))]
    keys = hot + stragglers
    ranges = _ranges_as_the_query_finds_them(keys, 16)
    assert ranges is not None
    assert len(ranges.ranges) <= 16
    assert all(any(low <= k <= high for low, high in ranges.ranges) for k in keys)  # type: ignore[operator]
    bounds = [b for r in ranges.ranges for b in r]
    assert bounds == sorted(bounds)  # disjoint, in key order
    covered = sum(int(high) - int(low) + 1 for low, high in ranges.ranges)
    # A few stragglers among hot keys: each costs a range, not the span between them.
    assert covered <= 1_000_000 + len(stragglers)


def test_base_and_tombstones_write_files_in_key_order() -> None:
    spec = SPECS["order_items"]
    assert render_write_order("lake", base_layout(spec)) == (
        "ALTER TABLE `lake`.`shop`.`order_items` WRITE DISTRIBUTED BY PARTITION "
        "LOCALLY ORDERED BY `order_id`, `line_no`"
    )
    assert tombstones_layout(spec).write_order == ("order_id", "line_no")
    assert render_write_order("lake", bucketed_layout(spec)) is None


def test_only_a_base_of_more_files_than_buckets_and_some_size_is_pruned() -> None:
    big = str(PRUNE_MIN_BYTES)
    assert worth_pruning({"total-data-files": "17", "total-files-size": big}, 16)
    assert not worth_pruning({"total-data-files": "16", "total-files-size": big}, 16)
    # A small table's many small files: reading them all costs less than the range query.
    small = str(PRUNE_MIN_BYTES - 1)
    assert not worth_pruning({"total-data-files": "400", "total-files-size": small}, 16)
    assert not worth_pruning({}, 16)  # an empty base
