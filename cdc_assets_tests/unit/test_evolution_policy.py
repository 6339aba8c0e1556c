"""A table's ``evolution.policy`` decides what a source schema change does to it: the plan
for each kind of change under each policy, and the ingest's stop under ``fail`` (pure)."""

from __future__ import annotations

import pytest

from cdc_assets.schema.changes import AddColumn, SoftDropColumn
from cdc_assets.schema.evolution import apply_plan, classify
from cdc_assets.schema.policy import fail_stop_reason
from cdc_assets.spec.ddl_import import plan_from_ddl
from cdc_assets.spec.models import TableSpec
from cdc_assets_tests.unit.test_ddl_import import PG_V1, accounts

RENAME = ["ALTER TABLE accounts RENAME COLUMN name TO holder"]
RENAMED = PG_V1.replace("name character varying(40)", "holder character varying(40)")
ADDED = PG_V1.replace("balance numeric(12,2),", "balance numeric(14,2),\n    branch integer,")


def under(policy: str, **evolution: str) -> TableSpec:
    spec = accounts()
    return spec.model_copy(
        update={"evolution": spec.evolution.model_copy(update={"policy": policy, **evolution})}
    )


def test_evolve_is_the_default_and_applies_what_iceberg_can_express() -> None:
    assert accounts().evolution.policy == "evolve"
    _, plan = plan_from_ddl(accounts(), ADDED)
    assert [type(c).__name__ for c in plan.changes] == ["WidenType", "AddColumn"]


@pytest.mark.parametrize("policy", ["freeze", "fail"])
def test_freeze_and_fail_apply_nothing_and_say_why(policy: str) -> None:
    _, plan = plan_from_ddl(under(policy), ADDED)
    assert plan.changes == ()
    (reason,) = plan.rejections
    assert reason.column is None  # the whole table: nothing applicable
    assert f"evolution.policy is {policy}" in reason.reason
    assert "add column branch" in reason.reason
    assert "widen column balance" in reason.reason
    assert plan.applicable.changes == ()
    # a reviewed spec file is not a source's change: it applies under any policy
    proposed, _ = plan_from_ddl(accounts(), ADDED)
    current = under(policy)
    reviewed = proposed.model_copy(update={"evolution": current.evolution})
    assert classify(current, reviewed).supported


def test_lenient_adds_a_renamed_column_and_keeps_the_old_one() -> None:
    current = under("lenient")
    _, plan = plan_from_ddl(current, RENAMED, RENAME)
    assert plan.supported
    assert [type(c) for c in plan.changes] == [SoftDropColumn, AddColumn]
    evolved = apply_plan(current, plan)
    by_name = evolved.columns_by_name
    assert by_name["name"].dropped  # kept in Iceberg, null for new rows
    assert by_name["name"].sink_name == "name"
    holder = by_name["holder"]
    assert (holder.id, holder.sink_name, holder.nullable) == (5, "holder", True)
    assert holder.former_names == []
    # under evolve the same change is an Iceberg-preserving rename of the same column
    _, renamed = plan_from_ddl(accounts(), RENAMED, RENAME)
    assert [type(c).__name__ for c in renamed.changes] == ["RenameColumn"]


def test_lenient_numbers_its_added_columns_as_the_evolved_spec_does() -> None:
    """Found on the live MariaDB: a rename and an added column under lenient gave both added
    columns the same id in the plan, so the backfill (which selects added columns by id) filled
    the renamed column's new one and left the plainly added column null in every row the ingest
    had read before the evolution."""
    both = RENAMED.replace("balance numeric(12,2),", "balance numeric(12,2),\n    branch integer,")
    current = under("lenient")
    _, plan = plan_from_ddl(current, both, RENAME)
    added = {c.column.name: c.column.id for c in plan.changes if isinstance(c, AddColumn)}
    evolved = apply_plan(current, plan)
    assert added == {n: evolved.columns_by_name[n].id for n in ("holder", "branch")}
    assert len(set(added.values())) == 2


def test_lenient_keeps_an_unproved_rename_as_a_drop_plus_an_add() -> None:
    _, evolve = plan_from_ddl(accounts(), RENAMED)
    assert not evolve.supported  # ambiguous without the audit trail
    current = under("lenient")
    _, plan = plan_from_ddl(current, RENAMED)
    assert plan.supported
    evolved = apply_plan(current, plan)
    assert evolved.columns_by_name["name"].dropped
    assert not evolved.columns_by_name["holder"].dropped


def test_lenient_never_drops_in_iceberg() -> None:
    gone = PG_V1.replace("    opened date,\n", "")
    assert gone != PG_V1
    _, hard = plan_from_ddl(under("evolve", drop_columns="hard"), gone)
    assert [type(c).__name__ for c in hard.changes] == ["DropColumn"]
    _, plan = plan_from_ddl(under("lenient", drop_columns="hard"), gone)
    assert [type(c).__name__ for c in plan.changes] == ["SoftDropColumn"]


def test_fail_stops_a_batch_that_carries_a_change() -> None:
    assert fail_stop_reason("evolve", ["tier"], {}) is None
    assert fail_stop_reason("fail", [], {"value is not a JSON object": 3}) is None
    reason = fail_stop_reason(
        "fail",
        ["tier"],
        {"column 'score': value does not fit int": 2, "column 'note': cannot apply x": 1},
    )
    assert reason is not None
    assert "field(s) tier the spec lacks" in reason
    assert "column(s) score (2)" in reason
    assert "note" not in reason  # a transform's failure is bad data, not a schema change
    assert "Nothing of this batch was committed" in reason


def test_a_source_column_added_with_a_constant_default_fills_older_rows() -> None:
    # MariaDB's instant ADD COLUMN ... NOT NULL DEFAULT: the rows it has read the default
    # without a change event; the mirror's older rows must too.
    ddl = PG_V1.replace(
        "opened date,", "opened date,\n    status character varying(10) NOT NULL DEFAULT 'open',"
    )
    current = accounts()
    _, plan = plan_from_ddl(current, ddl)
    assert plan.supported, plan.describe()
    evolved = apply_plan(current, plan)
    status = evolved.columns_by_name["status"]
    assert (status.default, status.backfill_default, status.nullable) == ("open", True, True)
    from cdc_assets.schema.wire import plan_column
    from cdc_assets.sql.decode import json_has_field, ledger_value, map_has_field

    value = ledger_value(plan_column(evolved, status), json_has_field("image"))
    assert "try_cast('open' AS STRING)" in value
    assert "json_object_keys(image), 'status'" in value
    assert "map_contains_key(img, 'status')" in ledger_value(
        plan_column(evolved, status), map_has_field("img")
    )
    # a column without backfill_default decodes as before
    opened = evolved.columns_by_name["opened"]
    assert "try_cast" not in ledger_value(plan_column(evolved, opened), json_has_field("image"))


@pytest.mark.parametrize("default", ["CURRENT_TIMESTAMP", "now()", "nextval('s'::regclass)"])
def test_an_expression_default_is_refused_with_its_reason(default: str) -> None:
    ddl = PG_V1.replace("opened date,", f"opened date,\n    at timestamp DEFAULT {default},")
    _, plan = plan_from_ddl(accounts(), ddl)
    (refusal,) = plan.rejections
    assert refusal.column == "at"
    assert "added with default" in refusal.reason


DEFAULTED = PG_V1.replace(
    "opened date,", "opened date,\n    status character varying(10) NOT NULL DEFAULT 'open',"
)


@pytest.mark.parametrize(
    ("policy", "ddl", "audit"),
    [
        ("evolve", ADDED, []),
        ("evolve", RENAMED, RENAME),
        ("evolve", DEFAULTED, []),
        ("lenient", RENAMED, RENAME),
        ("lenient", RENAMED, []),
        ("lenient", ADDED, []),
        ("lenient", DEFAULTED, []),
    ],
)
def test_an_applied_plan_is_a_fixed_point(policy: str, ddl: str, audit: list[str]) -> None:
    # The schema_changes sensor compares the stream's shape (with the DDLs that led there)
    # with the spec every tick until they agree: once a plan is applied, the same shape must
    # plan nothing, or the sensor would ask for evolutions forever.
    current = under(policy)
    _, plan = plan_from_ddl(current, ddl, audit)
    assert plan.supported, plan.describe()
    evolved = apply_plan(current, plan)
    _, again = plan_from_ddl(evolved, ddl, audit)
    assert (again.changes, again.rejections) == ((), ()), again.describe()


def test_a_reviewed_spec_proves_a_rename_by_the_former_name_it_lists() -> None:
    """Under ``fail`` a person applies the change with a spec file, which carries no DDL: the
    column kept under its id with the old name in ``former_names`` is the rename, applied as
    one (same Iceberg column). Without the former name it stays refused as unproved."""
    current = under("fail")
    data = current.model_dump(mode="json", by_alias=True)
    data["spec_version"] += 1
    column = next(c for c in data["columns"] if c["name"] == "name")
    column.update(name="holder", sink={**column.get("sink", {}), "name": "name"})
    unproved = classify(current, TableSpec.model_validate(data))
    assert not unproved.supported
    assert "former_names" in unproved.describe()
    column["former_names"] = ["name"]
    plan = classify(current, TableSpec.model_validate(data))
    assert plan.supported, plan.describe()
    assert [type(c).__name__ for c in plan.changes] == ["RenameColumn"]
