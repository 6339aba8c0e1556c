"""The pure halves of schema evolution's I/O: table alterations, backfill SQL, history rows."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest
import sqlglot

from cdc_assets.schema.alter import (
    AlterationError,
    LiveField,
    LiveTable,
    TableAlteration,
    plan_alteration,
)
from cdc_assets.schema.evolution import apply_plan, classify
from cdc_assets.schema.history import HistoryEntry, schema_history_layout
from cdc_assets.schema.layers import TableLayout, all_layouts, ledger_layout
from cdc_assets.spec import load_specs
from cdc_assets.spec.models import ColumnSpec, TableSpec
from cdc_assets.sql.backfill import (
    backfill_min_dt,
    render_ledger_counts,
    render_ledger_update,
    render_ledger_values,
    render_position_update,
)
from cdc_assets_tests.conftest import PROJECT_ROOT

USERS = next(s for s in load_specs(PROJECT_ROOT / "table_specs") if s.name == "users")


def evolved(spec: TableSpec, **column_changes: dict[str, str]) -> TableSpec:
    """``spec`` one version up with a nickname column after display_name and ``column_changes``."""
    data = spec.model_dump(mode="json", by_alias=True)
    columns = data["columns"]
    for c in columns:
        c.update(column_changes.get(c["name"], {}))
    at = next(i for i, c in enumerate(columns) if c["name"] == "display_name") + 1
    columns.insert(at, ColumnSpec(id=50, name="nickname", type="varchar(40)").model_dump())
    plan = classify(spec, TableSpec.model_validate({**data, "spec_version": 2}))
    assert plan.supported, plan.describe()
    return apply_plan(spec, plan)


def live_of(layout: TableLayout, *, shuffle: int | None = None) -> LiveTable:
    fields = [LiveField(c.name, str(c.type), c.required, c.doc) for c in layout.columns]
    if shuffle is not None:
        random.Random(shuffle).shuffle(fields)
    return LiveTable(
        tuple(fields),
        tuple(sorted(layout.identifier_fields)),
        {**layout.properties, **({"comment": layout.comment} if layout.comment else {})},
    )


def applied_order(live: LiveTable, change: TableAlteration) -> list[str]:
    """The column order after the change, applied as pyiceberg does: adds last, then moves."""
    order = [f.name for f in live.fields if f.name not in change.deletes]
    order += [c.name for c in change.adds]
    for name, after in change.moves:
        order.remove(name)
        order.insert(0 if after is None else order.index(after) + 1, name)
    return order


def test_an_added_column_is_added_and_moved_into_place() -> None:
    v2 = evolved(USERS)
    for layer, layout in all_layouts(v2).items():
        live = live_of(all_layouts(USERS)[layer])
        change = plan_alteration(live, layout, all_layouts(USERS)[layer])
        assert applied_order(live, change) == layout.column_names
        if "nickname" in layout.column_names:
            assert [c.name for c in change.adds] == ["nickname"]
            assert change.moves == (("nickname", "display_name"),)
        else:
            assert change.empty, layer


@pytest.mark.parametrize("seed", range(5))
def test_moves_restore_the_layout_order(seed: int) -> None:
    layout = ledger_layout(USERS)
    live = live_of(layout, shuffle=seed)
    change = plan_alteration(live, layout, layout)
    assert applied_order(live, change) == layout.column_names
    assert not change.adds


def test_a_matching_table_plans_nothing() -> None:
    layout = ledger_layout(USERS)
    assert plan_alteration(live_of(layout), layout, layout).empty


def test_widening_optional_and_drops() -> None:
    v1_layout = ledger_layout(USERS)
    target = ledger_layout(evolved(USERS, login_count={"type": "bigint"}))
    change = plan_alteration(live_of(v1_layout), target, v1_layout)
    assert [(u.name, str(u.type)) for u in change.updates] == [("login_count", "long")]
    # a column the previous version had and the target lacks is a hard drop
    fewer = TableLayout(
        v1_layout.namespace,
        v1_layout.name,
        tuple(c for c in v1_layout.columns if c.name != "country"),
        v1_layout.partition_by,
        v1_layout.properties,
    )
    assert plan_alteration(live_of(v1_layout), fewer, v1_layout).deletes == ("country",)


def test_unknown_columns_and_narrowing_are_refused() -> None:
    layout = ledger_layout(USERS)
    live = live_of(layout)
    rogue = LiveTable((*live.fields, LiveField("rogue", "string")), (), live.properties)
    with pytest.raises(AlterationError, match="rogue"):
        plan_alteration(rogue, layout, layout)
    wide = LiveTable(
        tuple(LiveField(f.name, "long") if f.name == "hr" else f for f in live.fields),
        (),
        live.properties,
    )
    with pytest.raises(AlterationError, match="not a widening"):
        plan_alteration(wide, layout, layout)


def test_backfill_statements_parse_as_spark_sql() -> None:
    v2 = evolved(USERS)
    ledger = "`lake`.`app`.`users_cdc`"
    values = render_ledger_values(
        v2, ledger, 42, ["nickname"], min_dt="2026-01-01", exclude_files=("file:/a.parquet",)
    )
    assert "from_json(l._row_json, 'map<string,string>')" in values
    assert "l._file NOT IN ('file:/a.parquet')" in values
    statements = [
        render_ledger_counts(values),
        render_ledger_update(ledger, values, ["nickname"], min_dt="2026-01-01"),
        render_position_update(v2, "`lake`.`app`.`users`", ledger, 42, ["nickname"]),
    ]
    for sql in statements:
        sqlglot.parse_one(sql.replace(" VERSION AS OF 42", ""), read="spark")
    assert "t._seq_major <=> s._seq_major" in statements[2]
    assert backfill_min_dt(datetime(2026, 1, 2, 3, tzinfo=UTC), 24) == "2026-01-01"
    assert backfill_min_dt(None, 24) is None


def test_position_update_with_nulls_writes_carried_nulls_and_leaves_uncarried_columns() -> None:
    v2 = evolved(USERS)
    ledger = "`lake`.`app`.`users_cdc`"
    plain = render_position_update(v2, "`lake`.`app`.`users`", ledger, 42, ["nickname", "id"])
    nulls = render_position_update(
        v2, "`lake`.`app`.`users`", ledger, 42, ["nickname", "id"], nulls=True
    )
    sqlglot.parse_one(nulls.replace(" VERSION AS OF 42", ""), read="spark")
    # Values only: a null in the ledger keeps what the row holds.
    assert "t.`nickname` = coalesce(s.`nickname`, t.`nickname`)" in plain
    # Nulls too: the struct says whether the change carried the column (null struct: it did not,
    # the row keeps its value); a key column is compared as it is, never as a struct.
    assert "named_struct('v', l.`nickname`) END, true) OVER" in nulls
    assert ".v AS `nickname`" not in nulls
    assert ".v AS `nickname`" in plain
    assert (
        "t.`nickname` = CASE WHEN s.`nickname` IS NULL THEN t.`nickname` ELSE s.`nickname`.v END"
        in nulls
    )
    assert "(s.`nickname` IS NOT NULL AND NOT (s.`nickname`.v <=> t.`nickname`))" in nulls
    assert "(s.`id` IS NOT NULL AND NOT (s.`id` <=> t.`id`))" in nulls


def test_history_rows_round_trip_and_plans_decide() -> None:
    entry = HistoryEntry(
        table="users",
        from_version=1,
        to_version=2,
        diff="users: version 1 -> 2",
        trigger="push",
        decision="applied",
        applied_at=datetime(2026, 1, 2, tzinfo=UTC),
        iceberg_schema_ids={"cdc": 1},
        kafka_offsets={0: 5},
    )
    row = entry.to_row()
    assert row["kafka_offsets"] == '{"0":5}'
    assert [c.name for c in schema_history_layout().columns] == list(row)
    assert HistoryEntry.from_row(row) == entry
    v2 = evolved(USERS)
    plan = classify(USERS, TableSpec.model_validate(v2.model_dump(mode="json", by_alias=True)))
    noop = classify(USERS, USERS)
    now = datetime.now(UTC)
    assert HistoryEntry.for_plan(plan, trigger="pull", applied_at=now).decision == "applied"
    assert HistoryEntry.for_plan(noop, trigger="pull", applied_at=now).decision == "no-op"
    with pytest.raises(ValueError, match="time zone"):
        HistoryEntry.for_plan(noop, trigger="pull", applied_at=datetime(2026, 1, 1))
