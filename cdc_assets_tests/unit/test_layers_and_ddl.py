"""Per-layer layouts and the Spark DDL rendered from them."""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp

from cdc_assets.schema.layers import all_layouts, base_layout, ledger_layout
from cdc_assets.spec import load_specs
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.ddl import render_create_table, render_identifier_fields
from cdc_assets_tests.conftest import PROJECT_ROOT


def specs() -> dict[str, TableSpec]:
    return {s.name: s for s in load_specs(PROJECT_ROOT / "table_specs")}


def test_layer_names_and_partitioning() -> None:
    users = specs()["users"]
    layouts = all_layouts(users)
    assert {k: (v.namespace, v.name) for k, v in layouts.items()} == {
        "cdc": ("app", "users_cdc"),
        "bucketed": ("app", "users_bucketed"),
        "base": ("app", "users"),
        "dead_letter": ("app", "users_dlt"),
        "tombstones": ("app", "users_tombstones"),
    }
    assert layouts["cdc"].partition_by == ("dt", "hr")
    assert layouts["base"].partition_by == ("bucket(16, id)",)
    assert layouts["bucketed"].partition_by == layouts["base"].partition_by
    assert layouts["tombstones"].partition_by == layouts["base"].partition_by
    assert layouts["tombstones"].identifier_fields == ("id",)


def test_only_base_keys_are_required() -> None:
    items = specs()["order_items"]
    base = {c.name: c.required for c in base_layout(items).columns if not c.name.startswith("_")}
    assert base == {
        "order_id": True,
        "line_no": True,
        "sku": False,
        "quantity": False,
        "unit_price": False,
        "attributes": False,
        "added_at": False,
    }
    ledger = ledger_layout(items)
    assert not any(c.required for c in ledger.columns if c.spec_id is not None)
    assert base_layout(items).identifier_fields == ("order_id", "line_no")


def test_spec_ids_carry_through_renames() -> None:
    users = specs()["users"]
    ids = {c.name: c.spec_id for c in base_layout(users).columns if c.spec_id}
    assert ids["created_at"] == 7


def test_rendered_ddl_is_valid_spark_sql() -> None:
    for spec in specs().values():
        for layout in all_layouts(spec).values():
            sql = render_create_table("lake", layout)
            parsed = sqlglot.parse_one(sql, read="spark")
            assert isinstance(parsed, exp.Create)
            cols = [c.name for c in parsed.find_all(exp.ColumnDef)]
            assert cols == layout.column_names


def test_base_ddl_details() -> None:
    sql = render_create_table("lake", base_layout(specs()["orders"]))
    assert sql.startswith("CREATE TABLE IF NOT EXISTS `lake`.`shop`.`orders` (\n")
    assert "  `order_id` BIGINT NOT NULL,\n" in sql
    assert "  `amount` DECIMAL(12,2),\n" in sql
    assert "  `placed_at` TIMESTAMP,\n" in sql
    assert "  `shipped_at` TIMESTAMP_NTZ,\n" in sql
    assert "PARTITIONED BY (bucket(8, `order_id`))" in sql
    assert "'write.merge.mode' = 'merge-on-read'" in sql
    assert "'format-version' = '2'" in sql
    ident = render_identifier_fields("lake", base_layout(specs()["orders"]))
    assert ident == "ALTER TABLE `lake`.`shop`.`orders` SET IDENTIFIER FIELDS `order_id`"


def test_spec_properties_override_defaults() -> None:
    layout = base_layout(specs()["users"])
    assert layout.properties["write.target-file-size-bytes"] == "134217728"
    assert layout.properties["write.delete.mode"] == "merge-on-read"


def test_comment_quotes_are_escaped() -> None:
    spec = specs()["users"].model_copy(update={"description": "it's \\ here"})
    sql = render_create_table("lake", base_layout(spec))
    assert "COMMENT 'it\\'s \\\\ here'" in sql
    sqlglot.parse_one(sql, read="spark")


def test_creation_is_the_alteration_from_an_empty_table() -> None:
    """Onboarding as evolution: CREATE TABLE renders the planner's alteration from nothing, so
    a new table and an evolved one cannot differ in columns, order, types, docs or properties."""
    from cdc_assets.schema.alter import COMMENT_PROPERTY, LiveTable, plan_alteration, plan_creation
    from cdc_assets.schema.layers import all_layouts
    from cdc_assets.spec import load_specs
    from cdc_assets.sql.ddl import render_create_table
    from cdc_assets_tests.conftest import PROJECT_ROOT

    for spec in load_specs(PROJECT_ROOT / "table_specs"):
        for layout in all_layouts(spec).values():
            creation = plan_creation(layout)
            assert creation.adds == layout.columns
            assert creation.updates == creation.deletes == creation.moves == ()
            sql = render_create_table("lake", layout)
            for key, value in creation.set_properties.items():
                assert (value if key == COMMENT_PROPERTY else key) in sql
            # An evolution, unlike a creation, cannot add a required column.
            if any(c.required for c in layout.columns):
                with pytest.raises(ValueError, match="must be optional"):
                    plan_alteration(LiveTable(()), layout)
