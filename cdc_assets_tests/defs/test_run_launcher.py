"""The project's run launcher: a real run worker per run, building its run's tables only."""

from __future__ import annotations

import time
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.test_utils import in_process_test_workspace, poll_for_finished_run
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

from cdc_assets.assets.keys import asset_key, table_of
from cdc_assets.definitions import build_defs
from cdc_assets.run_launcher import PID_TAG
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


@pytest.fixture
def launcher_instance(tmp_path: Path):  # type: ignore[no-untyped-def]
    overrides = {"run_launcher": {"module": "cdc_assets.run_launcher", "class": "TableRunLauncher"}}
    with dg.instance_for_test(overrides=overrides, temp_dir=str(tmp_path)) as instance:
        yield instance


def _launch(
    instance: dg.DagsterInstance, keys: list[dg.AssetKey], wait: bool = True
) -> dg.DagsterRun:
    origin = LoadableTargetOrigin(
        python_file=None,
        module_name="cdc_assets_tests.support.launcher_location",
        working_directory=str(PROJECT_ROOT),
    )
    with in_process_test_workspace(instance, origin) as workspace:
        location = workspace.get_code_location(workspace.code_location_names[0])
        repo = next(iter(location.get_repositories().values()))
        remote_job = repo.get_full_job("ingest_ledgers")
        from cdc_assets_tests.support import launcher_location

        run = instance.create_run_for_job(
            job_def=launcher_location.defs.resolve_job_def("ingest_ledgers"),
            remote_job_origin=remote_job.get_remote_origin(),
            job_code_origin=remote_job.get_python_origin(),
            asset_selection=frozenset(keys),
        )
        instance.launch_run(run.run_id, workspace)
    return poll_for_finished_run(instance, run.run_id, timeout=120) if wait else run


def _built(instance: dg.DagsterInstance, key: dg.AssetKey) -> dict[str, str]:
    event = instance.get_latest_materialization_event(key)
    assert event is not None
    assert event.asset_materialization is not None
    return {k: str(v.value) for k, v in event.asset_materialization.metadata.items()}


def test_a_run_worker_builds_its_tables_only(launcher_instance: dg.DagsterInstance) -> None:
    run = _launch(launcher_instance, [asset_key("cdc", "beta")])
    assert run.status == dg.DagsterRunStatus.SUCCESS, run.status
    assert int(run.tags[PID_TAG]) > 0
    assert _built(launcher_instance, asset_key("cdc", "beta")) == {"built": "beta", "env": "beta"}


def test_a_run_with_a_view_builds_everything(launcher_instance: dg.DagsterInstance) -> None:
    run = _launch(
        launcher_instance, [asset_key("cdc", "alpha"), dg.AssetKey(["view", "everything"])]
    )
    assert run.status == dg.DagsterRunStatus.SUCCESS, run.status
    built = _built(launcher_instance, asset_key("cdc", "alpha"))
    assert built == {"built": "alpha,beta,gamma,sleepy", "env": "<unset>"}


def test_terminating_a_run_cancels_its_worker(launcher_instance: dg.DagsterInstance) -> None:
    run = _launch(launcher_instance, [asset_key("cdc", "sleepy")], wait=False)
    deadline = time.monotonic() + 60
    while not _step_started(launcher_instance, run.run_id):
        assert time.monotonic() < deadline, launcher_instance.get_run_by_id(run.run_id)
        time.sleep(0.2)
    assert launcher_instance.run_launcher.terminate(run.run_id)
    ended = poll_for_finished_run(launcher_instance, run.run_id, timeout=60)
    assert ended.status == dg.DagsterRunStatus.CANCELED, ended.status
    assert not launcher_instance.run_launcher.terminate(run.run_id)  # finished: nothing to stop


def _step_started(instance: dg.DagsterInstance, run_id: str) -> bool:
    records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.STEP_START).records
    return bool(records)
