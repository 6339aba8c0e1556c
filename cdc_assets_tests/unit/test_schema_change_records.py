"""Debezium schema-change records -> CREATE TABLE text -> the evolution plan of the push path."""

from __future__ import annotations

import json

import pytest

from cdc_assets.spec import load_specs
from cdc_assets.spec.ddl_import import plan_from_ddl
from cdc_assets.spec.models import ColumnSpec, TableSpec
from cdc_assets.spec.schema_change import create_table_text, parse_schema_change
from cdc_assets_dev.demo.events import DebeziumEventFactory
from cdc_assets_tests.conftest import PROJECT_ROOT


def _spec(name: str) -> TableSpec:
    return next(s for s in load_specs(PROJECT_ROOT / "table_specs") if s.name == name)


@pytest.mark.parametrize("name", ["users", "order_items"])
@pytest.mark.parametrize("embed", [False, True])
def test_the_spec_own_shape_is_no_change(name: str, embed: bool) -> None:
    spec = _spec(name)
    record = DebeziumEventFactory(spec, embed_schema=embed).schema_change(
        "ALTER TABLE x COMMENT ''"
    )
    (change,) = parse_schema_change(record.value)
    assert (change.database, change.table) == (spec.source.database, spec.source.table)
    sensitive = [c.name for c in spec.columns if c.sensitive]
    _, plan = plan_from_ddl(spec, change.create_table, [change.ddl], sensitive=sensitive)
    assert plan.supported
    assert not plan.changes, plan.describe()


def test_an_added_column_is_planned_with_its_position() -> None:
    spec = _spec("users")
    columns = list(spec.columns)
    columns.insert(3, ColumnSpec(id=9, name="nickname", type="varchar(40)"))
    moved = spec.model_copy(update={"columns": columns})
    ddl = "ALTER TABLE users ADD COLUMN nickname varchar(40) AFTER display_name"
    (change,) = parse_schema_change(DebeziumEventFactory(moved).schema_change(ddl).value)
    assert "`nickname` VARCHAR(40)," in change.create_table
    _, plan = plan_from_ddl(spec, change.create_table, [change.ddl], sensitive=["email"])
    assert plan.supported
    assert [str(c) for c in plan.changes] == [
        "add column nickname varchar(40) (id 9, after display_name)"
    ]


def test_types_defaults_and_keys_render_as_mysql() -> None:
    text = create_table_text(
        "t",
        {
            "primaryKeyColumnNames": ["a", "b"],
            "columns": [
                {"name": "b", "typeName": "INT UNSIGNED", "position": 2, "optional": False},
                {
                    "name": "a",
                    "typeName": "DECIMAL",
                    "length": 12,
                    "scale": 2,
                    "position": 1,
                    "optional": False,
                },
                {
                    "name": "c",
                    "typeName": "ENUM",
                    "enumValues": ["x", "it's"],  # bare labels
                    "position": 3,
                    "hasDefaultValue": True,
                    "defaultValueExpression": "x",
                },
                {
                    "name": "s",
                    "typeName": "SET",
                    # Debezium keeps each label as the DDL wrote it, quotes included.
                    "enumValues": ["'ham'", "'it''s'", '"say ""hi"""'],
                    "position": 3,
                },
                {"name": "d", "typeName": "DATETIME", "length": 3, "scale": None, "position": 4},
                {"name": "e", "typeName": "INT", "length": 11, "position": 5},
            ],
        },
    )
    assert text == (
        "CREATE TABLE `t` (\n"
        "  `a` DECIMAL(12,2) NOT NULL,\n"
        "  `b` INT UNSIGNED NOT NULL,\n"
        "  `c` ENUM('x', 'it''s') DEFAULT 'x',\n"
        "  `s` SET('ham', 'it''s', 'say \"hi\"'),\n"
        "  `d` DATETIME(3),\n"
        "  `e` INT,\n"
        "  PRIMARY KEY (`a`, `b`)\n"
        ")"
    )


@pytest.mark.parametrize(
    "value",
    [
        None,
        b"not json",
        b"[]",
        json.dumps({"ddl": "SET x=1"}).encode(),
        json.dumps({"tableChanges": [{"type": "TRUNCATE", "id": '"db"."t"'}]}).encode(),
    ],
)
def test_records_without_table_changes_give_nothing(value: bytes | None) -> None:
    assert parse_schema_change(value) == []
