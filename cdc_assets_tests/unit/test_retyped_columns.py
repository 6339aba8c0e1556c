"""A source type Iceberg cannot promote to (issue 54 item 4): the old column is kept with its
values under a retired spec name, a new column takes the source field with the new type
(pure: the plan, the names, the next spec version)."""

from __future__ import annotations

import pytest

from cdc_assets.schema.changes import AddColumn, RetireColumn
from cdc_assets.schema.evolution import apply_plan, classify
from cdc_assets.spec.ddl_import import plan_from_ddl
from cdc_assets_tests.unit.test_ddl_import import PG_V1, accounts
from cdc_assets_tests.unit.test_evolution_policy import under

pytestmark = pytest.mark.unit

TO_TEXT = PG_V1.replace("balance numeric(12,2),", "balance text,")
SCALE_DOWN = PG_V1.replace("balance numeric(12,2),", "balance numeric(12,1),")
NAME_TO_INT = PG_V1.replace("name character varying(40),", "name integer,")


@pytest.mark.parametrize("policy", ["evolve", "lenient"])
def test_a_type_iceberg_cannot_promote_becomes_a_new_column(policy: str) -> None:
    current = under(policy)
    _, plan = plan_from_ddl(current, TO_TEXT)
    assert plan.supported, plan.describe()
    retire, add = plan.changes
    assert isinstance(retire, RetireColumn)
    assert isinstance(add, AddColumn)
    assert (retire.name, retire.retired, retire.sink_name) == ("balance", "balance__v1", "balance")
    assert str(retire.new) == "string"
    assert "cannot be promoted" in str(retire)
    evolved = apply_plan(current, plan)
    old = next(c for c in evolved.columns if c.id == retire.id)
    assert (old.name, old.sink_name, old.dropped, old.nullable) == (
        "balance__v1",
        "balance",
        True,
        True,
    )
    assert old.type == "decimal(12,2)"  # values already written keep their type
    assert old.former_names == []  # never reads the field again
    new = evolved.columns_by_name["balance"]
    assert (new.id, new.type, new.sink_name, new.nullable) == (5, "text", "balance__string", True)
    names = [c.name for c in evolved.columns]
    assert names.index("balance") == names.index("balance__v1") + 1
    assert evolved.spec_version == 2


def test_scale_down_and_string_to_number_name_the_new_iceberg_type() -> None:
    _, plan = plan_from_ddl(accounts(), SCALE_DOWN)
    assert [c.column.sink_name for c in plan.changes if isinstance(c, AddColumn)] == [
        "balance__decimal_12_1"
    ]
    _, plan = plan_from_ddl(accounts(), NAME_TO_INT)
    assert [c.column.sink_name for c in plan.changes if isinstance(c, AddColumn)] == ["name__int"]


def test_a_taken_name_gets_a_suffix() -> None:
    current = accounts()
    evolved = apply_plan(current, plan_from_ddl(current, TO_TEXT)[1])
    # text to a number again: the names chosen are free and read plainly
    again = evolved
    text_again = PG_V1.replace("balance numeric(12,2),", "balance numeric(12,3),")
    plan = plan_from_ddl(again, text_again)[1]
    assert plan.supported, plan.describe()
    third = apply_plan(again, plan)
    sinks = [c.sink_name for c in third.columns]
    assert len(sinks) == len(set(sinks))
    assert "balance__decimal_12_3" in sinks
    assert "balance__v2" in {c.name for c in third.columns}


@pytest.mark.parametrize("policy", ["freeze", "fail"])
def test_freeze_and_fail_still_refuse(policy: str) -> None:
    _, plan = plan_from_ddl(under(policy), TO_TEXT)
    assert not plan.changes
    assert not plan.supported


def test_a_key_column_a_reviewed_spec_and_a_sharded_table_are_refused() -> None:
    key = PG_V1.replace("id bigint NOT NULL,", "id text NOT NULL,")
    _, plan = plan_from_ddl(accounts(), key)
    assert [r.column for r in plan.rejections] == ["id"]
    assert "key or bucket column" in plan.rejections[0].reason
    # a reviewed spec file says what it wants: a person writes the new column
    proposed, _ = plan_from_ddl(accounts(), TO_TEXT)
    reviewed = classify(accounts(), proposed)
    assert not reviewed.supported
    assert "changes the type category" in reviewed.rejections[0].reason


def test_the_evolved_spec_has_the_source_shape_so_nothing_is_asked_again() -> None:
    current = accounts()
    evolved = apply_plan(current, plan_from_ddl(current, TO_TEXT)[1])
    _, again = plan_from_ddl(evolved, TO_TEXT)
    assert again.supported
    assert not again.changes, again.describe()
    # an older record of the old shape (a replay) does not flip it back
    _, replayed = plan_from_ddl(evolved, PG_V1)
    assert not any(isinstance(c, RetireColumn) for c in replayed.changes), replayed.describe()
