"""Consumer views as assets, on real Spark and the Iceberg catalog (issue 23, parts 2 to 4).

Two base tables (users, orders) and three views: a join of both, a `SELECT *` view of users
and a `SELECT *` view of that view. `refresh_views` creates them as Iceberg views with derived
schemas; an evolution of users (a new column, through the `evolve_schemas` job) leaves the star
views stale, which their check reports, until the `views_follow_tables` sensor's run re-creates
both, in order. A view that a change breaks fails its run and its check with the reason, and
the published view stays as it was.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from cdc_assets.assets.keys import asset_key
from cdc_assets.assets.schema import evolve_run_config
from cdc_assets.definitions import build_defs
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.settings import Settings
from cdc_assets.spec import load_specs
from cdc_assets_tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.integration

VIEWS = {
    "app/vw_user_orders.sql": (
        "SELECT u.id AS user_id, u.display_name, o.order_id, o.amount "
        "FROM app.users u LEFT JOIN shop.orders o ON o.user_id = u.id"
    ),
    "app/vw_all_users.sql": "SELECT * FROM app.users",
    "app/vw_all_again.sql": "SELECT * FROM app.vw_all_users",
}


@pytest.fixture
def home(it_settings: Settings, spark: Any, tmp_path: Path) -> Settings:
    specs_dir = tmp_path / "specs"
    specs_dir.mkdir()
    for name in ("users", "orders"):
        data = yaml.safe_load((PROJECT_ROOT / "table_specs" / f"{name}.yaml").read_text())
        # Tables of this test alone.
        data["sink"] = {**data["sink"], "table": f"{name}_vw"}
        (specs_dir / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    views_dir = specs_dir / "views"
    for path, sql in VIEWS.items():
        target = views_dir / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(
            sql.replace("app.users", "app.users_vw").replace("shop.orders", "shop.orders_vw") + "\n"
        )
    settings = replace(it_settings, specs_dir=specs_dir)
    for spec in load_specs(specs_dir):
        ensure_tables(spark, "lake", spec)
    return settings


def defs_of(settings: Settings, resources: dict[str, Any]) -> dg.Definitions:
    return build_defs(settings=settings, resource_overrides=resources)


def refresh(defs: dg.Definitions, instance: Any, names: list[str] | None = None) -> Any:
    keys = [k for k in defs.resolve_asset_graph().get_all_asset_keys() if k.path[0] == "view"]
    if names is not None:
        keys = [k for k in keys if k.path[-1] in names]
    return defs.resolve_job_def("refresh_views").execute_in_process(
        instance=instance, asset_selection=keys, raise_on_error=False
    )


def check(defs: dg.Definitions, instance: Any) -> dict[str, dg.AssetCheckEvaluation]:
    job = defs.resolve_job_def("check_tables")
    keys = {k for k in defs.resolve_asset_graph().asset_check_keys if k.asset_key.path[0] == "view"}
    result = job.get_subset(asset_selection=set(), asset_check_selection=keys).execute_in_process(
        instance=instance, raise_on_error=False
    )
    return {e.asset_check_key.asset_key.path[-1]: e for e in result.get_asset_check_evaluations()}


def columns(spark: Any, view: str) -> list[str]:
    return [f.name for f in spark.table(f"lake.app.{view}").schema.fields]


def test_views_are_created_follow_an_evolution_and_survive_a_break(
    home: Settings, spark: Any, resources: dict[str, Any]
) -> None:
    instance = dg.DagsterInstance.ephemeral()
    defs = defs_of(home, resources)
    assert refresh(defs, instance).success
    meta = {
        k.path[-1]: m
        for k in defs.resolve_asset_graph().get_all_asset_keys()
        if k.path[0] == "view"
        for m in [instance.get_latest_materialization_event(k).asset_materialization.metadata]  # type: ignore[union-attr]
    }
    schema = meta["vw_user_orders"]["dagster/column_schema"].value
    nullable = {c.name: c.constraints.nullable for c in schema.columns}  # type: ignore[union-attr]
    assert nullable == {"user_id": False, "display_name": True, "order_id": True, "amount": True}
    assert spark.sql("SELECT user_id, order_id FROM lake.app.vw_user_orders").collect() == []
    before = columns(spark, "vw_all_again")
    assert all(e.passed for e in check(defs, instance).values())

    # users gains a column through the evolution job; the star views are stale until refreshed
    users = next(s for s in load_specs(home.specs_dir) if s.name == "users")
    data = users.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    data["spec_version"] = users.spec_version + 1
    data["columns"].append({"id": 99, "name": "tier", "type": "varchar(16)"})
    run = defs.resolve_job_def("evolve_schemas").execute_in_process(
        instance=instance,
        run_config=evolve_run_config("users", proposed_spec=yaml.safe_dump(data)),
        asset_selection=[asset_key("schema", "users")],
    )
    assert run.success
    defs = defs_of(home, resources)  # the code location reloads with the new spec
    stale = check(defs, instance)
    # The new column sits before base's change columns, so the star views created before it
    # no longer read at all (Spark maps them by position): stale views are broken views.
    assert not stale["vw_all_users"].passed
    assert "cannot be read any more" in str(stale["vw_all_users"].metadata["reason"].value)
    assert stale["vw_user_orders"].passed  # explicit columns: nothing to follow

    sensor = defs.get_sensor_def("views_follow_tables")
    context = dg.build_run_status_sensor_context(
        sensor_name="views_follow_tables",
        dagster_event=dg.DagsterEvent(
            event_type_value=dg.DagsterEventType.RUN_SUCCESS.value, job_name="evolve_schemas"
        ),
        dagster_instance=instance,
        dagster_run=instance.get_run_by_id(run.run_id),
    )
    request = sensor(context)  # type: ignore[call-arg]
    assert isinstance(request, dg.RunRequest)
    assert sorted(k.path[-1] for k in request.asset_selection or []) == [
        "vw_all_again",
        "vw_all_users",
        "vw_user_orders",
    ]
    assert refresh(defs, instance, [k.path[-1] for k in request.asset_selection or []]).success
    after = columns(spark, "vw_all_again")
    # the new column sits with the data columns, before base's change columns
    assert after == [*before[: before.index("_op")], "tier", *before[before.index("_op") :]]
    assert all(e.passed for e in check(defs, instance).values())

    # a view that reads a column that does not exist: its run fails, the published view stays
    bad = home.specs_dir / "views" / "app" / "vw_all_users.sql"
    bad.write_text("SELECT nope FROM app.users_vw\n")
    failed = refresh(defs, instance, ["vw_all_users"])
    assert not failed.success
    assert columns(spark, "vw_all_users") == after
    broken = check(defs, instance)["vw_all_users"]
    assert not broken.passed
    assert "nope" in str(broken.metadata["reason"].value)
    shutil.rmtree(home.specs_dir / "views")
