"""Asset keys name their layer, and read back to (layer, table) without ambiguity."""

import dagster as dg
import pytest

from cdc_assets.assets.keys import TABLE_LAYERS, asset_key, layer_and_table, table_of

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("table", ["users", "users_cdc", "a_topic", "x_schema_schema", "base"])
def test_every_layer_reads_back(table: str) -> None:
    for layer in TABLE_LAYERS:
        assert layer_and_table(asset_key(layer, table)) == (layer, table)


def test_names_say_the_layer() -> None:
    names = {layer: asset_key(layer, "users").to_user_string() for layer in TABLE_LAYERS}
    assert names == {
        "raw": "raw/users_topic",
        "cdc": "cdc/users_cdc",
        "bucketed": "bucketed/users_bucketed",
        "base": "base/users",
        "history": "history/users_history",
        "schema": "schema/users_schema",
    }


def test_other_keys_are_not_tables() -> None:
    assert layer_and_table(dg.AssetKey(["view", "app", "user_orders"])) is None
    assert layer_and_table(dg.AssetKey(["cdc", "users"])) is None  # the key before the rename
    assert layer_and_table(dg.AssetKey(["cdc", "_cdc"])) is None
    assert table_of(asset_key("cdc", "users"), ("base",)) is None
    assert table_of(asset_key("base", "users"), ("base",)) == "users"
