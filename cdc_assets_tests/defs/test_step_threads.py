"""The run executor (jobs/executor.py) on plain Dagster assets: steps of different tables run at
once in threads of the run's process, steps of one table in order, a failing step fails its run
and skips what depends on it without stopping the others, and one at a time is Dagster's own
in-process executor."""

import itertools
import threading
import time
from typing import Any

import dagster as dg
import pytest

from cdc_assets.jobs.executor import EXECUTOR_NAME, build_executor
from cdc_assets.jobs.run_here import execute_here
from cdc_assets.resources.spark import own_session_per_thread

pytestmark = pytest.mark.defs

SPANS: dict[str, tuple[str, float, float]] = {}  # step -> (thread, start, end)


def _record(name: str, seconds: float = 0.4) -> None:
    started = time.monotonic()
    time.sleep(seconds)
    SPANS[name] = (threading.current_thread().name, started, time.monotonic())


def _graph(fail: str | None = None) -> list[Any]:
    """Three tables, each a ledger then a base asset; ``fail`` names a ledger that raises."""
    out: list[Any] = []
    for table in ("a", "b", "c"):

        @dg.asset(name=f"ledger_{table}")
        def ledger(context: dg.AssetExecutionContext) -> None:
            name = context.asset_key.to_user_string()
            if name == fail:
                raise RuntimeError(f"{name} broke")
            _record(name)

        @dg.asset(name=f"base_{table}", deps=[ledger])
        def base(context: dg.AssetExecutionContext) -> None:
            _record(context.asset_key.to_user_string(), 0.1)

        out += [ledger, base]
    return out


def _run(
    width: int, fail: str | None = None, run_config: dict[str, Any] | None = None
) -> dg.JobExecutionResult:
    SPANS.clear()
    defs = dg.Definitions(
        assets=_graph(fail),
        executor=build_executor(width),
        jobs=[dg.define_asset_job("all", selection="*")],
    )
    job = defs.resolve_job_def("all")
    keys = frozenset(defs.resolve_asset_graph().get_all_asset_keys())
    with dg.instance_for_test() as instance:
        return execute_here(
            job.get_subset(asset_selection=set(keys)),
            instance=instance,
            run_config=run_config or {},
            raise_on_error=False,
        )


def _overlap(x: str, y: str) -> bool:
    (_, a0, a1), (_, b0, b1) = SPANS[x], SPANS[y]
    return a0 < b1 and b0 < a1


def test_tables_run_at_once_and_each_table_in_order() -> None:
    result = _run(3)
    assert result.success
    assert set(SPANS) == {f"{layer}_{t}" for t in "abc" for layer in ("ledger", "base")}
    assert _overlap("ledger_a", "ledger_b")
    assert _overlap("ledger_b", "ledger_c")
    assert len({SPANS[f"ledger_{t}"][0] for t in "abc"}) == 3  # three step threads
    for t in "abc":
        assert SPANS[f"ledger_{t}"][2] <= SPANS[f"base_{t}"][1]  # base after its own ledger
    started = [e for e in result.all_events if e.event_type_value == "STEP_START"]
    assert len(started) == 6


def _step_events(result: dg.JobExecutionResult) -> set[tuple[str, str | None]]:
    return {(e.event_type_value, e.step_key) for e in result.all_events if e.step_key}


def test_a_failing_step_stops_its_table_and_not_the_others() -> None:
    """As with Dagster's in-process executor: the run fails, the failed table's base does not
    run, the other tables complete."""
    one_by_one = _step_events(_run(1, fail="ledger_b"))
    result = _run(3, fail="ledger_b")
    assert not result.success
    failed = {e.step_key for e in result.all_events if e.event_type_value == "STEP_FAILURE"}
    assert failed == {"ledger_b"}
    assert set(SPANS) == {"ledger_a", "base_a", "ledger_c", "base_c"}
    assert _step_events(result) == one_by_one


def test_one_at_a_time_is_dagster_s_in_process_executor() -> None:
    result = _run(1)
    assert result.success
    assert len({thread for thread, _, _ in SPANS.values()}) == 1
    spans = sorted(SPANS.values(), key=lambda s: s[1])
    assert all(a[2] <= b[1] for a, b in itertools.pairwise(spans))  # one after another
    assert build_executor(1).name == EXECUTOR_NAME


def test_a_run_s_config_sets_the_width() -> None:
    result = _run(1, run_config={"execution": {"config": {"tables_at_once": 3}}})
    assert result.success
    assert len({SPANS[f"ledger_{t}"][0] for t in "abc"}) == 3
    with pytest.raises(Exception, match="tables_at_once must be 1 or more"):
        _run(1, run_config={"execution": {"config": {"tables_at_once": 0}}})


def test_a_step_thread_gets_its_own_spark_session() -> None:
    """The resource's rule without a JVM: threads that asked for their own session get one
    each, every other caller the shared one."""

    class Session:
        def newSession(self) -> "Session":  # noqa: N802 - PySpark's name
            return Session()

    from cdc_assets.resources.spark import SparkResource

    resource = SparkResource.model_construct(remote=None, shuffle_partitions=1)
    object.__setattr__(resource, "__pydantic_private__", {})
    resource._session = Session()
    resource._lock = threading.Lock()
    resource._thread_sessions = []
    got: dict[str, list[Any]] = {}

    def use(name: str, own: bool) -> None:
        if own:
            own_session_per_thread()
        got[name] = [resource.get_session(), resource.get_session()]

    threads = [threading.Thread(target=use, args=(f"t{i}", i > 0)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    shared = resource._session
    assert got["t0"] == [shared, shared]
    assert got["t1"][0] is got["t1"][1] is not shared
    assert got["t2"][0] is got["t2"][1] not in (shared, got["t1"][0])


def test_the_drivers_metadata_of_every_node_in_one_pass_equals_dagsters_per_node() -> None:
    from cdc_assets.jobs.inprocess import metadata_by_node

    def table(i: int) -> Any:
        @dg.asset(name=f"t{i}")
        def _asset() -> dg.MaterializeResult:
            return dg.MaterializeResult(metadata={"rows": i, "name": f"t{i}"})

        return _asset

    defs = dg.Definitions(
        assets=[table(i) for i in range(5)],
        executor=build_executor(3),
        jobs=[dg.define_asset_job("all", selection="*")],
    )
    with dg.instance_for_test() as instance:
        result = execute_here(defs.resolve_job_def("all"), instance=instance, run_config={})
    expected = {
        f"t{i}": {
            k: v.value
            for k, v in result.asset_materializations_for_node(f"t{i}")[-1].metadata.items()
        }
        for i in range(5)
    }
    assert metadata_by_node(result) == expected
    assert expected["t3"] == {"rows": 3, "name": "t3"}
