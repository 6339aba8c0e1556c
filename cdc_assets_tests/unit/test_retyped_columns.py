"""A source type Iceberg cannot promote to (issue 54 item 4): the old column is kept with its
values under a retired spec name, a new column takes the source field with the new type
(pure: the plan, the names, the next spec version)."""

from __future__ import annotations

import pytest

from cdc_assets.schema.changes import AddColumn, RetireColumn
from cdc_assets.schema.evolution import apply_plan, classify
from cdc_assets.schema.retype import (
    converted_columns,
    image_readable,
    retired_conversions,
    value_converts,
)
from cdc_assets.schema.types import SinkType
from cdc_assets.schema.wire import Wire
from cdc_assets.spec.connect_schema import shape_change_lsn
from cdc_assets.spec.ddl_import import plan_from_ddl, spec_from_ddl
from cdc_assets.sql.backfill import exact_conversion
from cdc_assets_tests.unit.test_ddl_import import PG_V1, accounts
from cdc_assets_tests.unit.test_evolution_policy import under

pytestmark = pytest.mark.unit

NAME = "name character varying(40),"
TO_INT = PG_V1.replace(NAME, "name integer,")
TO_TEXT = PG_V1.replace(NAME, "name text,")  # same Iceberg type: no retype
DECIMAL_TO_TEXT = PG_V1.replace("balance numeric(12,2),", "balance text,")
SCALE_DOWN = PG_V1.replace("balance numeric(12,2),", "balance numeric(12,1),")


@pytest.mark.parametrize("policy", ["evolve", "lenient"])
def test_a_type_iceberg_cannot_promote_becomes_a_new_column(policy: str) -> None:
    current = under(policy)
    _, plan = plan_from_ddl(current, TO_INT)
    assert plan.supported, plan.describe()
    retire, add = plan.changes
    assert isinstance(retire, RetireColumn)
    assert isinstance(add, AddColumn)
    assert (retire.name, retire.retired, retire.sink_name) == ("name", "name__v1", "name")
    assert str(retire.new) == "int"
    assert "cannot be promoted" in str(retire)
    evolved = apply_plan(current, plan)
    old = next(c for c in evolved.columns if c.id == retire.id)
    assert (old.name, old.sink_name, old.dropped, old.nullable) == ("name__v1", "name", True, True)
    assert old.type == "varchar(40)"  # values already written keep their type
    assert old.former_names == []  # never reads the field again
    new = evolved.columns_by_name["name"]
    assert (new.id, new.type, new.sink_name, new.nullable) == (5, "int", "name__int", True)
    names = [c.name for c in evolved.columns]
    assert names.index("name") == names.index("name__v1") + 1
    assert evolved.spec_version == 2


def test_old_values_that_would_read_as_other_values_are_refused() -> None:
    """A date's day number read as an integer is not its value, and the integer column cannot
    take the date's value either: a row image does not say which type wrote it."""
    _, plan = plan_from_ddl(accounts(), PG_V1.replace("opened date", "opened integer"))
    assert not plan.changes
    (refusal,) = plan.rejections
    assert "sent as date_days" in refusal.reason
    assert "cannot be filled exactly" in refusal.reason


def test_a_decimal_into_text_is_filled_from_the_old_column_s_text() -> None:
    """``numeric(12,2)`` -> ``text``: the bytes read as text are not the value (and text that is
    valid base64 would read as bytes under the old type), so the rows before the change take
    the old column's value as text (every digit of its scale, as the source's cast writes it)
    and only the images after it are read."""
    current = accounts()
    _, plan = plan_from_ddl(current, DECIMAL_TO_TEXT)
    assert plan.supported, plan.describe()
    evolved = apply_plan(current, plan)
    assert evolved.columns_by_name["balance"].sink_name == "balance__string"
    ((sink, converted),) = converted_columns(current, evolved).items()
    assert (sink, converted.retired, converted.misread) == ("balance__string", "balance", True)
    value, inexact = exact_conversion("x", converted.old, converted.new)
    assert (value, inexact) == ("CAST(x AS STRING)", "false")


@pytest.mark.parametrize(
    ("ddl", "sink", "new_type"),
    [
        (SCALE_DOWN, "balance__decimal_12_1", "decimal(12,1)"),
        (PG_V1.replace("balance numeric(12,2),", "balance numeric(14,4),"), "balance__decimal_14_4",
         "decimal(14,4)"),
    ],
)  # fmt: skip
def test_a_decimal_s_new_scale_is_a_new_column_filled_from_the_old(
    ddl: str, sink: str, new_type: str
) -> None:
    """Iceberg keeps a decimal's scale: the new column takes the old column's values where they
    convert exactly, and the images only after the change (the bytes carry no scale)."""
    current = accounts()
    _, plan = plan_from_ddl(current, ddl)
    assert plan.supported, plan.describe()
    retire, add = plan.changes
    assert isinstance(retire, RetireColumn)
    assert isinstance(add, AddColumn)
    evolved = apply_plan(current, plan)
    new = evolved.columns_by_name["balance"]
    assert (new.sink_name, new.type) == (sink, new_type)
    (converted,) = converted_columns(current, evolved).items()
    assert converted[0] == sink
    assert converted[1].retired == "balance"
    assert converted[1].misread  # unscaled bytes: the old scale misreads the new ones
    assert str(converted[1].old) == "decimal(12,2)"
    # the check, which has the current spec only, finds the same conversion
    assert retired_conversions(evolved) == dict([converted])
    again = apply_plan(evolved, plan_from_ddl(evolved, PG_V1.replace("(12,2)", "(12,3)"))[1])
    (newest,) = retired_conversions(again).values()
    assert (newest.retired, str(newest.old)) == (sink, new_type)


def test_a_smaller_precision_at_the_same_scale_changes_nothing() -> None:
    """The column's type holds every value the narrower source type can send."""
    ddl = PG_V1.replace("balance numeric(12,2),", "balance numeric(8,2),")
    _, plan = plan_from_ddl(accounts(), ddl)
    assert not any(isinstance(c, RetireColumn | AddColumn) for c in plan.changes)


TS_V1 = PG_V1.replace("opened date,", "opened timestamp without time zone,")
TS_ZONED = PG_V1.replace("opened date,", "opened timestamp with time zone,")


@pytest.mark.parametrize(
    ("was", "now", "sink"),
    [(TS_V1, TS_ZONED, "opened__timestamptz"), (TS_ZONED, TS_V1, "opened__timestamp")],
)
def test_a_timestamp_that_gains_or_loses_its_zone_is_a_new_column(
    was: str, now: str, sink: str
) -> None:
    current = spec_from_ddl(was, "postgresql", "bank", "bank.public.accounts", "bank")
    _, plan = plan_from_ddl(current, now)
    assert plan.supported, plan.describe()
    evolved = apply_plan(current, plan)
    assert evolved.columns_by_name["opened"].sink_name == sink
    assert evolved.columns_by_name["opened__v1"].dropped
    (conversion,) = converted_columns(current, evolved).values()
    # epoch numbers and zoned strings: each encoding refuses the other's values
    assert not conversion.misread


def test_image_readable_retypes_are_not_converted_from_the_old_column() -> None:
    current = accounts()
    evolved = apply_plan(current, plan_from_ddl(current, TO_INT)[1])
    assert converted_columns(current, evolved) == {}
    assert image_readable(Wire.STRING, Wire.INT)
    assert not image_readable(Wire.DECIMAL_BYTES, Wire.STRING)


def test_exact_conversions_render_and_refuse_what_they_cannot_hold() -> None:
    value, inexact = exact_conversion("x", SinkType("decimal", 12, 4), SinkType("decimal", 12, 2))
    cast = "try_cast(x AS DECIMAL(12,2))"
    assert value == f"CASE WHEN {cast} = x THEN {cast} END"
    assert inexact == f"(x IS NOT NULL AND NOT coalesce({cast} = x, false))"
    value, inexact = exact_conversion("x", SinkType("timestamp"), SinkType("timestamptz"))
    assert "convert_timezone('UTC', current_timezone(), x)" in value
    assert inexact == "false"
    value, _ = exact_conversion("x", SinkType("timestamptz"), SinkType("timestamp"))
    assert value == "convert_timezone(current_timezone(), 'UTC', CAST(x AS TIMESTAMP_NTZ))"
    with pytest.raises(ValueError, match="not converted"):
        exact_conversion("x", SinkType("string"), SinkType("int"))
    assert not value_converts(SinkType("decimal", 12, 2), SinkType("decimal", 12, 2))
    assert not value_converts(SinkType("timestamp"), SinkType("date"))


def test_retyped_again_the_names_stay_free_and_plain() -> None:
    current = accounts()
    evolved = apply_plan(current, plan_from_ddl(current, TO_INT)[1])
    to_long = PG_V1.replace(NAME, "name double precision,")
    plan = plan_from_ddl(evolved, to_long)[1]
    assert plan.supported, plan.describe()
    third = apply_plan(evolved, plan)
    sinks = [c.sink_name for c in third.columns]
    assert len(sinks) == len(set(sinks))
    assert third.columns_by_name["name"].sink_name == "name__double"
    assert {"name__v1", "name__v2"} <= {c.name for c in third.columns}


def test_back_to_a_type_the_column_had_is_taken_as_an_older_record() -> None:
    """The known limit: a record of the type a column was retired from looks the same as the
    source changing back. It changes nothing; values the current type refuses become dead
    letters (the checks show them) until a person decides."""
    current = accounts()
    evolved = apply_plan(current, plan_from_ddl(current, TO_INT)[1])
    _, back = plan_from_ddl(evolved, PG_V1)
    assert not back.changes, back.describe()


@pytest.mark.parametrize("policy", ["freeze", "fail"])
def test_freeze_and_fail_still_refuse(policy: str) -> None:
    _, plan = plan_from_ddl(under(policy), TO_INT)
    assert not plan.changes
    assert not plan.supported


def test_a_key_column_and_a_reviewed_spec_are_refused() -> None:
    key = PG_V1.replace("id bigint NOT NULL,", "id text NOT NULL,")
    _, plan = plan_from_ddl(accounts(), key)
    assert [r.column for r in plan.rejections] == ["id"]
    assert "key or bucket column" in plan.rejections[0].reason
    # a reviewed spec file says what it wants: a person writes the new column
    proposed, _ = plan_from_ddl(accounts(), TO_INT)
    reviewed = classify(accounts(), proposed)
    assert not reviewed.supported
    assert "turns a string into a number" in reviewed.rejections[0].reason


def test_the_same_iceberg_type_is_no_retype() -> None:
    _, plan = plan_from_ddl(accounts(), TO_TEXT)
    assert not any(isinstance(c, RetireColumn) for c in plan.changes)


def test_the_evolved_spec_has_the_source_shape_so_nothing_is_asked_again() -> None:
    current = accounts()
    evolved = apply_plan(current, plan_from_ddl(current, TO_INT)[1])
    _, again = plan_from_ddl(evolved, TO_INT)
    assert again.supported
    assert not again.changes, again.describe()
    # an older record of the old shape (a replay) does not flip it back
    _, replayed = plan_from_ddl(evolved, PG_V1)
    assert not any(isinstance(c, RetireColumn) for c in replayed.changes), replayed.describe()


OLD = [{"field": "tax", "type": "bytes", "parameters": {"scale": "2"}}]
NEW = [{"field": "tax", "type": "bytes", "parameters": {"scale": "4"}}]


def test_the_shape_change_is_placed_only_when_the_records_read_show_it() -> None:
    seen = [(0, 10, OLD), (0, None, None), (0, 20, OLD), (0, 30, NEW), (0, 40, NEW)]
    assert shape_change_lsn(seen, NEW) == 20
    # a second partition that has not changed since: its records are older
    assert shape_change_lsn([*seen, (1, 15, OLD)], NEW) == 20
    # the change is older than the records read: not known where
    assert shape_change_lsn([(0, 30, NEW), (0, 40, NEW)], NEW) is None
    assert shape_change_lsn([*seen, (1, 35, NEW)], NEW) is None
    # back to the old shape after it, or an older shape after a newer one: not one change
    assert shape_change_lsn([*seen, (0, 50, OLD)], NEW) is None
    assert shape_change_lsn([*seen, (1, 35, OLD)], NEW) is None
    assert shape_change_lsn([], NEW) is None
