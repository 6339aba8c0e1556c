"""PostgreSQL's shape from the Kafka Connect schema embedded in Debezium row events."""

from __future__ import annotations

import random

import pytest

from cdc_assets.spec import load_specs
from cdc_assets.spec.connect_schema import (
    column_type,
    create_table_from_fields,
    differs,
    pg_type,
    row_fields,
)
from cdc_assets.spec.ddl_import import plan_from_ddl
from cdc_assets.spec.models import TableSpec
from cdc_assets_dev.demo.events import workload
from cdc_assets_tests.conftest import PROJECT_ROOT


def _orders() -> TableSpec:
    return next(s for s in load_specs(PROJECT_ROOT / "table_specs") if s.name == "orders")


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ({"type": "int16"}, "smallint"),
        ({"type": "int32"}, "integer"),
        ({"type": "int64"}, "bigint"),
        ({"type": "float32"}, "real"),
        ({"type": "float64"}, "double precision"),
        ({"type": "boolean"}, "boolean"),
        ({"type": "string"}, "text"),
        ({"type": "bytes"}, "bytea"),
        ({"type": "int32", "name": "io.debezium.time.Date"}, "date"),
        ({"type": "int64", "name": "io.debezium.time.MicroTimestamp"}, "timestamp"),
        ({"type": "string", "name": "io.debezium.time.ZonedTimestamp"}, "timestamptz"),
        ({"type": "string", "name": "io.debezium.data.Uuid"}, "uuid"),
        ({"type": "string", "name": "io.debezium.data.Json"}, "jsonb"),
        (
            {
                "type": "bytes",
                "name": "org.apache.kafka.connect.data.Decimal",
                "parameters": {"scale": "2", "connect.decimal.precision": "12"},
            },
            "numeric(12,2)",
        ),
        ({"type": "struct", "name": "io.debezium.data.VariableScaleDecimal"}, "numeric"),
        (
            {
                "type": "string",
                "parameters": {
                    "__debezium.source.column.type": "VARCHAR",
                    "__debezium.source.column.length": "40",
                },
            },
            "varchar(40)",
        ),
    ],
)
def test_connect_types_map_to_postgres(field: dict[str, object], expected: str) -> None:
    assert pg_type(field) == expected


def test_the_spec_own_events_describe_the_spec() -> None:
    spec = _orders()
    event = next(
        r for r in workload(spec, random.Random(1), keys=3, events=5, embed_schema=True) if r.value
    )
    fields = row_fields(event.value)
    assert fields is not None
    assert not differs(spec, fields)
    _, plan = plan_from_ddl(spec, create_table_from_fields(spec, fields))
    assert plan.supported
    assert not plan.changes, plan.describe()


def test_events_without_a_schema_give_nothing() -> None:
    spec = _orders()
    event = next(r for r in workload(spec, random.Random(1), keys=3, events=5) if r.value)
    assert row_fields(event.value) is None
    assert row_fields(None) is None
    assert row_fields(b"{") is None


DECIMAL_16_2 = {
    "type": "bytes",
    "name": "org.apache.kafka.connect.data.Decimal",
    "parameters": {"scale": "2", "connect.decimal.precision": "16"},
}


@pytest.mark.parametrize(
    ("spec_type", "field", "expected"),
    [
        # lossy mappings keep the spec's text: a varchar arrives as a string, a numeric as numeric
        ("varchar(20)", {"type": "string"}, "varchar(20)"),
        ("char(3)", {"type": "string"}, "char(3)"),
        (
            "timestamptz",
            {"type": "string", "name": "io.debezium.time.ZonedTimestamp"},
            "timestamptz",
        ),
        (
            "numeric(12,2)",
            {"type": "struct", "name": "io.debezium.data.VariableScaleDecimal"},
            "numeric(12,2)",
        ),
        # spellings of the same type are no change
        ("int", {"type": "int32"}, "int"),
        ("decimal(16, 2)", DECIMAL_16_2, "decimal(16, 2)"),
        ("int8", {"type": "int64"}, "int8"),
        # exact statements that differ are the source's new type
        ("numeric(12,2)", DECIMAL_16_2, "numeric(16,2)"),
        ("integer", {"type": "int64"}, "bigint"),
        ("real", {"type": "float64"}, "double precision"),
        (
            "varchar(20)",
            {
                "type": "string",
                "parameters": {
                    "__debezium.source.column.type": "VARCHAR",
                    "__debezium.source.column.length": "40",
                },
            },
            "varchar(40)",
        ),
        (None, {"type": "string"}, "text"),
    ],
)
def test_known_columns_keep_the_spec_type_unless_the_schema_is_exact(
    spec_type: str | None, field: dict[str, object], expected: str
) -> None:
    assert column_type(spec_type, field) == expected


def test_a_decimal_widening_in_the_embedded_schema_is_a_change() -> None:
    spec = _orders()
    event = next(
        r for r in workload(spec, random.Random(1), keys=3, events=5, embed_schema=True) if r.value
    )
    fields = [dict(f) for f in row_fields(event.value) or []]
    amount = next(f for f in fields if f["field"] == "amount")
    amount["parameters"] = {"scale": "2", "connect.decimal.precision": "16"}
    assert differs(spec, fields)
    _, plan = plan_from_ddl(spec, create_table_from_fields(spec, fields))
    assert plan.supported, plan.describe()
    assert "widen column amount: decimal(12,2) -> decimal(16,2)" in plan.describe()


def test_defaults_known_columns_keep_theirs_and_new_ones_take_the_schema_s() -> None:
    """An event's schema states a default only for some types: a known column keeps the spec's
    (or every push evolution would drop the defaults that pull detection reads back), and a
    column added with a constant default gets it, so that older rows read it."""
    spec = _orders()
    data = spec.model_dump(mode="json", by_alias=True)
    next(c for c in data["columns"] if c["name"] == "status")["default"] = "pending"
    with_default = TableSpec.model_validate(data)
    events = workload(spec, random.Random(3), keys=3, events=5, embed_schema=True)
    fields = row_fields(next(r for r in events if r.value).value)
    assert fields is not None
    added = [
        {"type": "string", "optional": False, "default": "open", "field": "stage"},
        {"type": "int32", "optional": True, "default": 0, "field": "tries"},
        {"type": "boolean", "optional": True, "default": False, "field": "gift"},
        {
            "type": "int32",
            "optional": True,
            "name": "io.debezium.time.Date",
            "default": 19000,
            "field": "due",
        },
        {
            "type": "bytes",
            "optional": True,
            "name": "org.apache.kafka.connect.data.Decimal",
            "parameters": {"scale": "2", "connect.decimal.precision": "10"},
            "default": "/4M=",  # -125 unscaled
            "field": "fee",
        },
        # a timestamp's default is not the column's text: left out
        {
            "type": "int64",
            "optional": True,
            "name": "io.debezium.time.MicroTimestamp",
            "default": 0,
            "field": "seen",
        },
    ]
    ddl = create_table_from_fields(with_default, [*fields, *added])
    (status,) = [line for line in ddl.splitlines() if line.startswith('  "status"')]
    assert status.endswith("NOT NULL DEFAULT 'pending',")
    _, plan = plan_from_ddl(with_default, ddl)
    assert plan.supported, plan.describe()
    changes = {c.column.name: c.column for c in plan.changes if hasattr(c, "column")}
    assert {n: (c.default, c.backfill_default) for n, c in changes.items()} == {
        "stage": ("open", True),
        "tries": ("0", True),
        "gift": ("false", True),
        "due": ("2022-01-08", True),
        "fee": ("-1.25", True),
        "seen": (None, False),
    }
    assert not [c for c in plan.changes if not hasattr(c, "column")], plan.describe()


def test_a_number_that_arrives_as_a_plain_string_changed_type() -> None:
    """``ALTER COLUMN tax TYPE text``: a plain Connect string does not say which text type, but
    a numeric column sent as one is no longer numeric; a text column sent as one is unchanged."""
    spec = _orders()
    events = workload(spec, random.Random(3), keys=3, events=5, embed_schema=True)
    fields = row_fields(next(r for r in events if r.value).value)
    assert fields is not None
    retyped = [
        {"type": "string", "optional": True, "field": f["field"]}
        if f["field"] in ("tax", "note")
        else f
        for f in fields
    ]
    assert differs(spec, retyped)
    ddl = create_table_from_fields(spec, retyped)
    assert '"tax" text' in ddl
    assert '"note" text' in ddl
    _, plan = plan_from_ddl(spec, ddl)
    assert plan.supported, plan.describe()
    assert [type(c).__name__ for c in plan.changes] == ["RetireColumn", "AddColumn"]
    assert "column tax: decimal(12,2) -> string" in plan.describe()
