"""PostgreSQL's column numbers prove renames and drops on the pull path (issue 54 item 2): the
audit DDL they render, and the plans it leads to, against the plans without it."""

from __future__ import annotations

import sqlglot

from cdc_assets.schema.changes import AddColumn, RenameColumn
from cdc_assets.spec import load_specs
from cdc_assets.spec.ddl_import import plan_from_ddl, read_audit
from cdc_assets.spec.information_schema import (
    SourceIdentity,
    attnums_query,
    identity_audit,
    with_attnums,
)
from cdc_assets.spec.models import TableSpec
from cdc_assets_tests.conftest import PROJECT_ROOT

COLUMNS = [
    ("order_id", "bigint NOT NULL"),
    ("user_id", "bigint NOT NULL"),
    ("status", "varchar(20) NOT NULL"),
    ("amount", "numeric(12,2) NOT NULL"),
    ("tax", "numeric(12,2)"),
    ("currency", "char(3) NOT NULL"),
    ("discount_rate", "numeric(5,4)"),
    ("placed_at", "timestamptz NOT NULL"),
    ("shipped_at", "timestamp"),
    ("delivery_date", "date"),
    ("note", "text"),
]


def orders() -> TableSpec:
    """The orders spec, its columns numbered 1..11 as onboarding from a live table does."""
    spec = next(s for s in load_specs(PROJECT_ROOT / "table_specs") if s.name == "orders")
    return with_attnums(spec, {name: i for i, (name, _) in enumerate(COLUMNS, start=1)})


def live_ddl(columns: list[tuple[str, str]]) -> str:
    body = ",\n".join(f'  "{n}" {t}' for n, t in columns)
    return f'CREATE TABLE "orders" (\n{body},\n  PRIMARY KEY ("order_id")\n)'


def identity(
    live: dict[str, int], dropped: frozenset[int] | set[int] = frozenset()
) -> SourceIdentity:
    return SourceIdentity(live, frozenset(dropped))


def numbered(columns: list[tuple[str, str]]) -> dict[str, int]:
    return {name: i for i, (name, _) in enumerate(columns, start=1)}


def test_onboarding_numbers_every_live_column_and_keeps_known_numbers() -> None:
    spec = orders()
    assert [c.source_attnum for c in spec.columns] == list(range(1, 12))
    # known numbers are never overwritten; a dropped column gets none; nothing to add: same spec
    assert with_attnums(spec, {"note": 40}) is spec
    again = with_attnums(spec.model_copy(), {})
    assert [c.source_attnum for c in again.columns] == list(range(1, 12))


def test_a_renamed_column_keeps_its_id_where_the_numbers_prove_it() -> None:
    spec = orders()
    renamed = [(("remark" if n == "note" else n), t) for n, t in COLUMNS]
    ddl = live_ddl(renamed)
    audit = identity_audit(spec, identity(numbered(renamed)))
    assert audit == ['ALTER TABLE "public"."orders" RENAME COLUMN "note" TO "remark"']
    assert read_audit(audit, spec).renames == {"note": "remark"}
    _, plan = plan_from_ddl(spec, ddl, audit)
    assert plan.supported, plan.describe()
    assert [type(c) for c in plan.changes] == [RenameColumn], plan.describe()
    assert plan.changes[0].id == 11  # type: ignore[attr-defined]
    # Without the numbers the same shape is a new column, and the old one's disappearance is
    # refused as ambiguous: the rows not changed since would keep their value under the old
    # name only.
    _, unproved = plan_from_ddl(spec, ddl)
    assert [type(c) for c in unproved.changes] == [AddColumn]
    assert [r.column for r in unproved.rejections if r.blocks] == ["note"]


def test_a_dropped_column_is_proved_even_when_another_is_added_at_once() -> None:
    spec = orders()
    live = [c for c in COLUMNS if c[0] != "tax"] + [("coupon", "text")]
    numbers = {n: i for i, (n, _) in enumerate(COLUMNS, start=1) if n != "tax"} | {"coupon": 12}
    audit = identity_audit(spec, identity(numbers, {5}))
    assert audit == ['ALTER TABLE "public"."orders" DROP COLUMN "tax"']
    _, plan = plan_from_ddl(spec, live_ddl(live), audit)
    assert plan.supported, plan.describe()
    kinds = sorted(type(c).__name__ for c in plan.changes)
    assert kinds == ["AddColumn", "SoftDropColumn"], plan.describe()
    assert not plan.rejections


def test_numbers_prove_nothing_for_a_table_created_anew() -> None:
    spec = orders()
    # the table was dropped and created again: old numbers are not listed, or a spec's name is
    # live under another number
    shuffled = {name: 12 - i for name, i in numbered(COLUMNS).items()}
    assert identity_audit(spec, identity(shuffled)) == []
    fewer = {n: i for n, i in numbered(COLUMNS).items() if n != "note"}
    assert identity_audit(spec, identity(fewer)) == []  # 11 gone but not listed as dropped
    # a column dropped and added again under its name: its number is dropped, and so it is
    # reported (the plan still takes the live name for the same column: a documented limit)
    again = numbered(COLUMNS) | {"note": 12}
    audit = identity_audit(spec, identity(again, {11}))
    assert audit == ['ALTER TABLE "public"."orders" DROP COLUMN "note"']


def test_a_column_without_a_number_and_a_soft_dropped_one_are_left_alone() -> None:
    spec = next(s for s in load_specs(PROJECT_ROOT / "table_specs") if s.name == "orders")
    assert identity_audit(spec, identity({"remark": 11})) == []


def test_rows_and_query() -> None:
    rows = [
        {"name": "id", "attnum": 1, "dropped": False},
        {"name": "........pg.dropped.2........", "attnum": 2, "dropped": True},
        {"name": "email", "attnum": 3, "dropped": False},
    ]
    assert SourceIdentity.from_rows(rows) == SourceIdentity({"id": 1, "email": 3}, frozenset({2}))
    spec = orders()
    assert sqlglot.parse_one(attnums_query(spec), read="postgres") is not None
    assert "'orders'" in attnums_query(spec)
    assert "'public'" in attnums_query(spec)
