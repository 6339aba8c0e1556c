"""The upsert's SQL rendering, plan reading and bootstrap mapping, without Spark."""

from __future__ import annotations

import pytest
import sqlglot

from cdc_assets.schema.position import Position
from cdc_assets.schema.wire import plan_fields
from cdc_assets.spec import load_specs
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.bootstrap import dump_value, render_bootstrap_select, resolve_columns
from cdc_assets.sql.ddl import spark_type
from cdc_assets.sql.plan import parse_tree, shuffles_between_scan_and_join
from cdc_assets.sql.upsert import (
    ChangeWindow,
    may_delete,
    old_key_deletes,
    render_base_merge,
    render_late_keys,
    render_newest_changes,
    render_pinned_changes,
    render_tombstone_merge,
    render_window_probe,
)
from cdc_assets_tests.conftest import PROJECT_ROOT

SPECS = {s.name: s for s in load_specs(PROJECT_ROOT / "table_specs")}
WINDOW = ChangeWindow(
    ledger="`lake`.`app`.`users_cdc`",
    snapshot_id=42,
    start={0: 10},
    end={0: 20, 1: 5},
    min_dt="2026-01-01",
)


def test_positions_order_numerically_and_round_trip() -> None:
    assert Position.parse("3:1200:4") == Position(3, 1200, 4)
    assert Position.parse("24023128") == Position(24023128, 0, 0)
    assert Position(3, 999, 9) < Position(3, 1000, 0) < Position(4, 0, 0)
    assert Position.parse(Position(10, 2, 1).text()) == Position(10, 2, 1)
    for bad in ("", "a:b", "1:2:3:4", "1.5"):
        with pytest.raises(ValueError, match="is not a source position"):
            Position.parse(bad)


def test_window_reads_offset_ranges_of_one_ledger_snapshot() -> None:
    sql = render_window_probe(WINDOW)
    assert "VERSION AS OF 42" in sql
    assert "l._kafka_partition = 0 AND l._kafka_offset >= 10 AND l._kafka_offset < 20" in sql
    assert "l._kafka_partition = 1 AND l._kafka_offset >= 0 AND l._kafka_offset < 5" in sql
    assert "l.dt >= '2026-01-01'" in sql
    redriven = ChangeWindow(**{**WINDOW.__dict__, "extra_files": ("file:/w/a.parquet",)})
    assert "OR l._file IN ('file:/w/a.parquet')" in render_window_probe(redriven)
    assert "_before_json" in sql  # moves are counted (placeholder sources) ...
    assert "_before_json" not in render_window_probe(WINDOW, count_moves=False)  # ... or not
    assert "count_if(l._op = 'd') AS delete_candidates" in sql


def test_changes_that_may_become_deletes() -> None:
    users = SPECS["users"]  # an integer key: updates that keep it are told by their prefix
    condition = may_delete(users, "l")
    assert condition.startswith("(l._op = 'd' OR (l._op = 'u' AND l._before_json IS NOT NULL")
    assert "startswith(l._before_json" in condition
    sqlglot.parse_one(f"SELECT count_if({condition}) FROM t l", read="spark")


def test_newest_changes_apply_floor_tombstones_and_placeholders() -> None:
    users = SPECS["users"]
    floored = ChangeWindow(**{**WINDOW.__dict__, "floor": Position(3, 500, 0)})
    sql = render_newest_changes(users, floored, "`t`", carry_unavailable=False)
    assert "> named_struct('p0', CAST(3 AS BIGINT), 'p1', CAST(500 AS BIGINT)" in sql
    assert "row_number() OVER (PARTITION BY c.`id` ORDER BY named_struct(" in sql
    assert "NOT EXISTS (SELECT 1 FROM `t` t WHERE t.`id` = n.`id`" in sql
    assert "UNION ALL" in sql  # integer key: updates that move a row delete the old key
    assert "max_by(named_struct('v'" not in sql
    orders = SPECS["orders"]
    carried = render_newest_changes(orders, WINDOW, "`t`", carry_unavailable=True)
    assert carried.count("max_by(named_struct('v'") == len(orders.columns) - 1


def test_old_key_deletes_need_a_plain_key_encoding() -> None:
    users = SPECS["users"]
    sql = old_key_deletes(users, WINDOW, ["id", "email", "_op", "_kafka_offset"])
    assert sql is not None
    assert "try_cast(get_json_object(l._before_json, '$.id') AS BIGINT) AS `id`" in sql
    dated = users.model_copy(
        update={
            "columns": [
                c.model_copy(update={"type": "date"}) if c.name == "id" else c
                for c in users.columns
            ]
        }
    )
    assert old_key_deletes(dated, WINDOW, ["id"]) is None
    composite = old_key_deletes(SPECS["order_items"], WINDOW, ["order_id", "line_no"])
    assert composite is not None
    # either key column moving counts, and the OR must not escape the other conditions
    assert composite.endswith("<=> l.`line_no`))")
    assert " AND (NOT (try_cast(get_json_object(l._before_json, '$.order_id')" in composite


@pytest.mark.parametrize("name", sorted(SPECS))
def test_rendered_statements_parse_as_spark_sql(name: str) -> None:
    spec = SPECS[name]
    statements = [
        render_newest_changes(spec, WINDOW, "`lake`.`ns`.`t`", carry_unavailable=True),
        render_tombstone_merge(spec, "`lake`.`ns`.`tomb`", "`lake`.`ns`.`b`"),
        render_base_merge(spec, "`lake`.`ns`.`base`", "`lake`.`ns`.`b`"),
        render_late_keys(spec, WINDOW, "`lake`.`ns`.`base`"),
        render_newest_changes(
            spec, WINDOW, "`lake`.`ns`.`t`", carry_unavailable=True, late="cdc_late_ns_t"
        ),
    ]
    for sql in statements:
        sqlglot.parse_one(sql.replace(" VERSION AS OF 42", ""), read="spark")


def test_keys_with_a_late_change_take_their_whole_ledger_history() -> None:
    spec = SPECS["orders"]
    late = render_late_keys(spec, WINDOW, "base")
    assert "JOIN base b ON l.`order_id` = b.`order_id`" in late
    assert "< named_struct('o0', CAST(coalesce(b._seq_major" in late
    sql = render_newest_changes(spec, WINDOW, "tomb", carry_unavailable=True, late="late_v")
    assert "LEFT ANTI JOIN late_v k ON l.`order_id` = k.`order_id`" in sql
    assert "LEFT SEMI JOIN late_v k ON l.`order_id` = k.`order_id`" in sql
    # without placeholders nothing is carried, so nothing is recomputed
    plain = render_newest_changes(spec, WINDOW, "tomb", carry_unavailable=False, late="late_v")
    assert "late_v" not in plain


def test_base_merge_applies_only_newer_changes_and_keeps_placeholders() -> None:
    sql = render_base_merge(SPECS["order_items"], "b", "s")
    assert "ON t.`order_id` = s.`order_id` AND t.`line_no` = s.`line_no`" in sql
    assert "WHEN MATCHED AND s._op = 'd' AND named_struct(" in sql
    assert "WHEN NOT MATCHED AND s._op <> 'd' THEN INSERT" in sql
    assert "array_contains(split(coalesce(s._unavailable, ''), ','), 'sku') THEN t.`sku`" in sql
    assert "NOT MATCHED BY SOURCE" not in sql
    # with placeholders a change equal to the stored row's applies too (late-change recompute)
    assert ") >= named_struct(" in sql
    plain = render_base_merge(SPECS["order_items"], "b", "s", keep_unavailable=False)
    assert ") > named_struct(" in plain
    assert "t.`sku` = s.`sku`" in plain
    assert "_unavailable" not in plain
    truncated = render_base_merge(SPECS["order_items"], "b", "s", Position(7, 0, 0))
    assert "WHEN NOT MATCHED BY SOURCE AND named_struct(" in truncated


HEAD = """== Physical Plan ==
WriteDelta org.apache.iceberg.spark.source.SparkPositionDeltaWrite@6cf6b7e5
+- AdaptiveSparkPlan isFinalPlan=false
   +- Exchange hashpartitioning(_spec_id#2810, _partition#2811), REBALANCE_PARTITIONS_BY_COL
      +- MergeRowsExec[__row_operation#2792, id#2793L]
         +- SortMergeJoin [id#2719L], [id#2734L], RightOuter
            :- Sort [id#2719L ASC NULLS FIRST], false, 0
"""
TAIL = """            +- Sort [id#2734L ASC NULLS FIRST], false, 0
               +- BatchScan lake.ns.users_bucketed[id#2734L] lake.ns.users_bucketed
"""
SPJ_PLAN = (
    HEAD
    + """            :  +- Project [id#2719L, email#2720]
            :     +- BatchScan lake.ns.users[id#2719L, email#2720] lake.ns.users (branch=null)
"""
    + TAIL
)
SHUFFLED_PLAN = (
    HEAD
    + """            :  +- Exchange hashpartitioning(id#2719L, 4), ENSURE_REQUIREMENTS
            :     +- Project [id#2719L, email#2720]
            :        +- BatchScan lake.ns.users[id#2719L, email#2720] lake.ns.users
"""
    + TAIL
)


def test_pinned_changes_read_one_snapshot_in_the_layout() -> None:
    from cdc_assets.schema.layers import bucketed_layout

    layout = bucketed_layout(SPECS["users"])
    columns = [(c.name, c.type) for c in layout.columns]
    added = layout.columns[1].name  # a column the snapshot was written without
    renamed = layout.columns[2].name  # a column renamed since the snapshot was written
    written_as: dict[str, str | None] = {c.name: c.name for c in layout.columns[3:]}
    written_as |= {added: None, renamed: "old_name"}  # columns[0] is read by its own name
    sql = render_pinned_changes("`lake`.`app`.`users_bucketed`", 7, columns, written_as)
    assert sql.endswith("FROM `lake`.`app`.`users_bucketed` VERSION AS OF 7")
    assert f"CAST(NULL AS {spark_type(layout.columns[1].type)}) AS `{added}`" in sql
    assert f"`old_name` AS `{renamed}`" in sql
    assert sql.startswith(f"SELECT `{layout.columns[0].name}`, ")
    # Every layout column, in the layout's order, and nothing else.
    tree = sqlglot.parse_one(sql.replace(" VERSION AS OF 7", ""), read="spark")
    assert [e.alias_or_name for e in tree.expressions] == layout.column_names


def test_plan_reader_finds_a_shuffle_on_the_base_side() -> None:
    spj, shuffled = SPJ_PLAN, SHUFFLED_PLAN
    assert shuffles_between_scan_and_join(spj, "lake.ns.users") == [False]
    assert shuffles_between_scan_and_join(shuffled, "lake.ns.users") == [True]
    assert shuffles_between_scan_and_join(spj, "lake.ns.users_bucketed") == [False]
    assert shuffles_between_scan_and_join(spj, "lake.ns.orders") is None
    depths = [n.depth for n in parse_tree(spj.split("== Physical Plan ==")[1])]
    assert depths == sorted(depths[:7]) + depths[7:]


def test_bootstrap_maps_dump_columns_through_the_spec() -> None:
    users: TableSpec = SPECS["users"]
    dump = [
        "ID",
        "Email",
        "display_name",
        "country",
        "is_active",
        "login_count",
        "created_ms",
        "updated_at",
    ]
    columns = resolve_columns(users, dump)
    assert columns["id"] == "ID"
    plans = {p.name: p for p in plan_fields(users)}
    created = dump_value(plans["created_ms"], "created_ms")
    # Years 1-9999 only, as the ledger decodes it: anything else is a bad value of the dump.
    assert created.startswith("CASE WHEN try_cast(`created_ms` AS BIGINT) BETWEEN -62135596800000")
    assert created.endswith("THEN timestamp_millis(try_cast(`created_ms` AS BIGINT)) END")
    sql = render_bootstrap_select(users, "v", columns, Position(3, 100, 0))
    assert "AS `created_at`" in sql
    assert "CAST(3 AS BIGINT) AS _seq_major" in sql
    with pytest.raises(ValueError, match=r"no column\(s\) \['email'\]"):
        resolve_columns(users, [c for c in dump if c != "Email"])
