"""The shipped example specs load and carry the features they exist to show."""

from __future__ import annotations

from cdc_assets.schema.types import SinkType
from cdc_assets.spec import load_specs
from cdc_assets_tests.conftest import PROJECT_ROOT


def test_example_specs_load() -> None:
    specs = {s.name: s for s in load_specs(PROJECT_ROOT / "table_specs")}
    assert sorted(specs) == ["order_items", "orders", "users"]

    users = specs["users"]
    assert users.source.connector == "mysql"
    assert users.pipeline.sensitive
    assert [c.name for c in users.columns if c.sensitive] == ["email"]
    created = users.columns_by_name["created_ms"]
    assert created.sink_name == "created_at"
    assert created.sink_type("mysql") == SinkType("timestamptz")

    orders = specs["orders"]
    assert orders.columns_by_name["amount"].sink_type("postgresql") == SinkType("decimal", 12, 2)
    assert orders.columns_by_name["discount_rate"].sink_type("postgresql") == SinkType(
        "decimal", 9, 4
    )
    assert orders.columns_by_name["placed_at"].sink_type("postgresql") == SinkType("timestamptz")
    assert orders.columns_by_name["shipped_at"].sink_type("postgresql") == SinkType("timestamp")

    items = specs["order_items"]
    assert items.primary_key == ["order_id", "line_no"]
    assert items.bucket_column.name == "order_id"
    # int unsigned does not fit a signed int
    assert items.columns_by_name["quantity"].sink_type("mariadb") == SinkType("long")


def test_column_ids_are_unique_and_stable_per_spec() -> None:
    for spec in load_specs(PROJECT_ROOT / "table_specs"):
        ids = [c.id for c in spec.columns]
        assert len(ids) == len(set(ids)), spec.name
