"""A run worker that builds its run's tables only (``CDC_ASSETS_RUN_TABLES``, set per run on
Kubernetes by the sensors' ``dagster-k8s/config`` tag)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from cdc_assets.assets.keys import asset_key, table_of
from cdc_assets.definitions import build_defs
from cdc_assets.run_tables import MAX_ENV_CHARS, RUN_TABLES_ENV, run_tables, tables_from_env
from cdc_assets.settings import load_settings
from cdc_assets_tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.defs


def test_run_tables_of_table_keys_and_checks() -> None:
    keys = [asset_key("cdc", "users"), asset_key("base", "orders")]
    checks = [dg.AssetCheckKey(asset_key("base", "items"), "keys_unique")]
    assert run_tables(keys, checks) == ["items", "orders", "users"]
    assert run_tables([], checks) == ["items"]


def test_run_tables_fall_back_to_everything() -> None:
    # No selection is the whole job; a view reads tables the selection does not name.
    assert run_tables(None, None) is None
    assert run_tables([], None) is None
    assert run_tables([asset_key("cdc", "users"), dg.AssetKey(["view", "v"])], None) is None
    many = [asset_key("cdc", f"table_{i:06d}") for i in range(MAX_ENV_CHARS // 10)]
    assert run_tables(many, None) is None


def test_tables_from_env() -> None:
    assert tables_from_env({}) is None
    assert tables_from_env({RUN_TABLES_ENV: "a,b,"}) == frozenset({"a", "b"})


def test_build_defs_for_some_tables(tmp_path: Path) -> None:
    settings = load_settings(
        {"CDC_ASSETS_HOME": str(tmp_path), "CDC_ASSETS_SPECS": str(PROJECT_ROOT / "table_specs")}
    )
    every = build_defs(settings=settings)
    some = build_defs(settings=settings, only_tables={"users"})
    every_keys = set(every.resolve_asset_graph().get_all_asset_keys())
    some_keys = set(some.resolve_asset_graph().get_all_asset_keys())
    assert some_keys == {k for k in every_keys if table_of(k) == "users"}
    assert {j.name for j in some.jobs or []} == {j.name for j in every.jobs or []}
