"""A consistency group in the specs becomes one asset after its tables' histories, with its
check, selected by the micro-batch sensor's runs and by the upsert job."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml

from cdc_assets.assets.keys import asset_key
from cdc_assets.definitions import build_defs
from cdc_assets.errors import SpecError
from cdc_assets.settings import load_settings
from cdc_assets_tests.conftest import PROJECT_ROOT

GROUP = {"group": "shop", "transaction_topic": "mariadb.transaction"}


def specs_dir(tmp: Path, topics: dict[str, str]) -> Path:
    out = tmp / "specs"
    out.mkdir()
    for name in ("users", "order_items", "orders"):
        raw = yaml.safe_load((PROJECT_ROOT / "table_specs" / f"{name}.yaml").read_text())
        if name in topics:
            raw["history"] = {"mode": "scd2"}
            raw["consistency"] = {**GROUP, "transaction_topic": topics[name]}
        (out / f"{name}.yaml").write_text(yaml.safe_dump(raw))
    return out


def defs_for(tmp: Path, topics: dict[str, str]) -> dg.Definitions:
    settings = load_settings(
        {"CDC_ASSETS_HOME": str(tmp / "home"), "CDC_ASSETS_SPECS": str(specs_dir(tmp, topics))}
    )
    return build_defs(settings=settings)


def test_the_group_asset_follows_the_histories_and_has_its_check(tmp_path: Path) -> None:
    topic = "mariadb.transaction"
    defs = defs_for(tmp_path, {"users": topic, "order_items": topic})
    graph = defs.resolve_asset_graph()
    group = dg.AssetKey(["consistent", "shop"])
    assert graph.get(group).parent_keys == {
        asset_key("history", "users"),
        asset_key("history", "order_items"),
    }
    checks = {k.to_user_string() for k in defs.resolve_asset_graph().asset_check_keys}
    assert "consistent/shop:cut_moves_forward_within_lag" in checks
    upsert = defs.resolve_job_def("upsert_bases")
    sync = defs.resolve_job_def("sync_tables")
    for job in (upsert, sync):
        assert group in job.asset_layer.asset_graph.get_all_asset_keys()


def test_tables_of_one_group_on_two_transaction_topics_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="different transaction topics"):
        defs_for(tmp_path, {"users": "a.transaction", "order_items": "b.transaction"})


def test_a_run_worker_of_one_table_builds_its_group_mates_too(tmp_path: Path) -> None:
    """A run worker builds only its run's tables; the group asset in a run of one table must
    still know every table of the group, or its cut would ignore the others."""
    topic = "mariadb.transaction"
    specs = specs_dir(tmp_path, {"users": topic, "order_items": topic})
    settings = load_settings(
        {"CDC_ASSETS_HOME": str(tmp_path / "home"), "CDC_ASSETS_SPECS": str(specs)}
    )
    graph = build_defs(settings=settings, only_tables={"users"}).resolve_asset_graph()
    assert graph.get(dg.AssetKey(["consistent", "shop"])).parent_keys == {
        asset_key("history", "users"),
        asset_key("history", "order_items"),
    }
    assert not graph.has(asset_key("base", "orders"))
