"""The continuous workers' Dagster wiring: the job, its run config, and the sensor that keeps one
live run per ``pipeline.worker`` (starts a missing one, fails one whose heartbeat stopped)."""

import time
from datetime import UTC, datetime
from typing import Any

import dagster as dg
import pytest

from cdc_assets.definitions import build_defs
from cdc_assets.errors import ConfigError
from cdc_assets.jobs.continuous import (
    CONTINUOUS_JOB,
    HEARTBEAT_TAG,
    RESTART_DELAY_S,
    START_GRACE_S,
    WORKER_TAG,
    is_stale,
    live_worker_tables,
    worker_run_config,
    workers_of,
)
from cdc_assets.settings import load_settings
from cdc_assets.spec import load_specs
from cdc_assets.spec.models import TableSpec
from cdc_assets_tests.conftest import PROJECT_ROOT


def _with_worker(spec: TableSpec, worker: str | None) -> TableSpec:
    return spec.model_copy(update={"pipeline": spec.pipeline.model_copy(update={"worker": worker})})


@pytest.fixture(scope="module")
def defs(tmp_path_factory: pytest.TempPathFactory) -> dg.Definitions:
    settings = load_settings(
        {
            "CDC_ASSETS_HOME": str(tmp_path_factory.mktemp("home")),
            "CDC_ASSETS_SPECS": str(PROJECT_ROOT / "table_specs"),
        }
    )
    specs = [
        _with_worker(s, "hot" if s.name in ("orders", "users") else None)
        for s in load_specs(settings.specs_dir)
        if s.consistency is None
    ]
    return build_defs(specs=specs, settings=settings)


def _tick(defs: dg.Definitions, instance: dg.DagsterInstance) -> dg.SensorResult:
    sensor = defs.get_sensor_def("continuous_workers")
    result = sensor(dg.build_sensor_context(instance=instance))
    assert isinstance(result, dg.SensorResult)
    return result


def _run(
    defs: dg.Definitions, instance: dg.DagsterInstance, status: dg.DagsterRunStatus, **tags: str
) -> dg.DagsterRun:
    return instance.create_run_for_job(
        defs.resolve_job_def(CONTINUOUS_JOB),
        run_config=worker_run_config("hot", ["orders", "users"], heartbeat_seconds=5),
        status=status,
        tags={WORKER_TAG: "hot", "cdc/tables": "orders,users", **tags},
    )


def test_workers_group_tables_by_name() -> None:
    specs = load_specs(PROJECT_ROOT / "table_specs")
    named = [_with_worker(s, "b" if s.name == "users" else "a") for s in specs]
    assert workers_of(named) == {
        "a": sorted(s.name for s in specs if s.name != "users"),
        "b": ["users"],
    }
    assert workers_of(specs) == {}


def test_the_sensor_starts_a_missing_worker_with_a_valid_run_config(defs: dg.Definitions) -> None:
    with dg.instance_for_test() as instance:
        [request] = _tick(defs, instance).run_requests or []
        assert request.tags == {WORKER_TAG: "hot", "cdc/tables": "orders,users"}
        job = defs.resolve_job_def(CONTINUOUS_JOB)
        assert dg.validate_run_config(job, request.run_config)
        assert dg.validate_run_config(
            job, worker_run_config("hot", ["orders"], commit_interval_seconds=5, idle_seconds=0)
        )
        # A run not started yet is alive: no second one; new_offsets leaves its tables to it.
        _run(defs, instance, dg.DagsterRunStatus.NOT_STARTED)
        result = _tick(defs, instance)
        assert not result.run_requests
        assert live_worker_tables(instance) == {"orders", "users"}


def test_a_worker_whose_heartbeat_stopped_is_failed_and_replaced(defs: dg.Definitions) -> None:
    with dg.instance_for_test() as instance:
        old = f"{time.time() - 600:.0f}"
        dead = _run(defs, instance, dg.DagsterRunStatus.STARTED, **{HEARTBEAT_TAG: old})
        assert live_worker_tables(instance) == set()  # its tables go back to the runs
        [request] = _tick(defs, instance).run_requests or []
        assert request.tags[WORKER_TAG] == "hot"
        failed = instance.get_run_by_id(dead.run_id)
        assert failed is not None
        assert failed.status == dg.DagsterRunStatus.FAILURE
        # Just failed: the next tick waits before starting another (a worker failing at start
        # must not restart in a loop).
        result = _tick(defs, instance)
        assert not result.run_requests
        assert result.skip_reason is not None
        assert "failed less than" in (result.skip_reason.skip_message or "")


def test_a_worker_that_ran_a_while_before_it_failed_is_replaced_at_once(
    defs: dg.Definitions,
) -> None:
    """A worker run that failed long after it started (its process was killed: Dagster's run
    monitoring marks it failed) is started again in the next tick; the delay only holds back a
    worker that fails soon after its start."""
    with dg.instance_for_test() as instance:
        run = _run(defs, instance, dg.DagsterRunStatus.NOT_STARTED)
        long_ago = datetime.fromtimestamp(time.time() - 2 * RESTART_DELAY_S, UTC)
        instance.handle_run_event(
            run.run_id,
            dg.DagsterEvent(
                event_type_value=dg.DagsterEventType.RUN_START.value, job_name=CONTINUOUS_JOB
            ),
            long_ago,
        )
        instance.report_run_failed(run, "the worker's process was killed")
        [request] = _tick(defs, instance).run_requests or []
        assert request.tags[WORKER_TAG] == "hot"


def test_staleness_counts_heartbeats_and_gives_a_new_worker_time_to_start() -> None:
    now = time.time()
    config: dict[str, Any] = worker_run_config("w", ["t"], heartbeat_seconds=5)

    def run(status: dg.DagsterRunStatus, **tags: str) -> dg.DagsterRun:
        return dg.DagsterRun(job_name=CONTINUOUS_JOB, run_config=config, status=status, tags=tags)

    started = dg.DagsterRunStatus.STARTED
    assert not is_stale(run(started, **{HEARTBEAT_TAG: f"{now - 20:.0f}"}), now - 100, now)
    assert is_stale(run(started, **{HEARTBEAT_TAG: f"{now - 40:.0f}"}), now - 100, now)
    assert not is_stale(run(started), now - START_GRACE_S + 10, now)
    assert is_stale(run(started), now - START_GRACE_S - 10, now)
    assert not is_stale(run(dg.DagsterRunStatus.NOT_STARTED), now - 10_000, now)


def test_a_worker_and_a_consistency_group_are_refused_together() -> None:
    [users] = [s for s in load_specs(PROJECT_ROOT / "table_specs") if s.name == "users"]
    data = users.model_dump(mode="json", by_alias=True)
    data["history"] = {"mode": "scd2"}
    data["consistency"] = {"group": "shop", "transaction_topic": "shop.transaction"}
    TableSpec.model_validate(data)  # a group alone is a valid spec
    data["pipeline"]["worker"] = "hot"
    with pytest.raises(ValueError, match="continuous worker"):
        TableSpec.model_validate(data)


def test_the_heartbeat_setting_reaches_the_workers_the_sensor_starts(tmp_path: Any) -> None:
    env = {"CDC_ASSETS_HOME": str(tmp_path), "CDC_ASSETS_SPECS": str(PROJECT_ROOT / "table_specs")}
    assert load_settings(env).worker_heartbeat_s == 10.0
    settings = load_settings({**env, "CDC_ASSETS_WORKER_HEARTBEAT_S": "2.5"})
    specs = [_with_worker(s, "w") for s in load_specs(settings.specs_dir) if s.consistency is None]
    defs = build_defs(specs=specs, settings=settings)
    with dg.instance_for_test() as instance:
        [request] = _tick(defs, instance).run_requests or []
    config: Any = request.run_config
    assert config["ops"]["run_worker"]["config"]["heartbeat_seconds"] == 2.5
    for bad in ("0", "-1", "soon"):
        with pytest.raises(ConfigError, match="CDC_ASSETS_WORKER_HEARTBEAT_S"):
            load_settings({**env, "CDC_ASSETS_WORKER_HEARTBEAT_S": bad})


def test_a_worker_the_specs_no_longer_name_or_name_with_other_tables_is_stopped(
    defs: dg.Definitions,
) -> None:
    with dg.instance_for_test() as instance:
        job = defs.resolve_job_def(CONTINUOUS_JOB)
        changed = instance.create_run_for_job(
            job,
            run_config=worker_run_config("hot", ["orders"]),
            status=dg.DagsterRunStatus.NOT_STARTED,
            tags={WORKER_TAG: "hot", "cdc/tables": "orders"},  # users was added since
        )
        gone = instance.create_run_for_job(
            job,
            run_config=worker_run_config("cold", ["users"]),
            status=dg.DagsterRunStatus.NOT_STARTED,
            tags={WORKER_TAG: "cold", "cdc/tables": "users"},  # no spec names it now
        )
        [request] = _tick(defs, instance).run_requests or []
        assert request.tags["cdc/tables"] == "orders,users"
        for run in (changed, gone):
            ended = instance.get_run_by_id(run.run_id)
            assert ended is not None
            assert ended.status == dg.DagsterRunStatus.CANCELED


def test_the_worker_gate_serves_its_tables_in_turn() -> None:
    """A table whose cycle read something loops straight back to the gate: it must queue behind
    the tables already waiting, not take the slot again before they wake."""
    import threading

    from cdc_assets.jobs.continuous import _FairGate

    gate = _FairGate(1)
    turns: list[str] = []
    start = threading.Barrier(3)

    def table(name: str) -> None:
        start.wait()
        for _ in range(30):
            with gate:
                turns.append(name)
                time.sleep(0.001)

    threads = [threading.Thread(target=table, args=(n,)) for n in "abc"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # while all three loop, each comes back after the other two: even shares of the first half
    first = turns[:45]
    assert all(14 <= first.count(name) <= 16 for name in "abc"), turns
