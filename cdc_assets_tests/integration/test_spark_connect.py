"""Runs on the stack's Spark Connect server (`stack up --spark-connect`): the resources pick it up,
Dagster's ingest and upsert jobs run through it in a process of their own (as the daemon's runs
do), base equals the plain-Python replay, and the server's driver stays up between runs (what
makes short runs cheap).

The server runs on the session's stack for this module only: other modules build their resources
from the same home and would otherwise use it too.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from cdc_assets.local_servers import state as stack_state
from cdc_assets.resources import build_resources
from cdc_assets.settings import ENV_HOME, Settings
from cdc_assets.spec.models import TableSpec
from cdc_assets.spec.versions import write_spec
from cdc_assets_dev.demo.events import produce, workload
from cdc_assets_dev.stack import spark_connect
from cdc_assets_dev.stack.local_stack import StackState, stack_status, stack_up
from cdc_assets_tests.conftest import PROJECT_ROOT
from cdc_assets_tests.integration.test_continuous_worker import (
    beating_workers,
    until_base_matches,
    worker_spec,
)
from cdc_assets_tests.integration.test_ingest import isolated
from cdc_assets_tests.integration.test_spark_cluster import assert_ledger_exact
from cdc_assets_tests.integration.test_upsert import (
    assert_base_matches,
    example_spec,
    expected_base,
)
from cdc_assets_tests.support.daemon import dagster_home, running_daemon, wait_until


@pytest.fixture(scope="module")
def connect_port(it_settings: Settings, stack: StackState) -> Iterator[int]:
    stack_up(it_settings, spark_connect=True)
    port = spark_connect.running_port(it_settings)
    assert port is not None
    try:
        yield port
    finally:
        spark_connect.stop_server(it_settings)


def test_stack_up_starts_a_server_that_the_resources_use(
    it_settings: Settings, connect_port: int
) -> None:
    spark = build_resources(it_settings)["spark"]
    assert spark.remote == f"sc://127.0.0.1:{connect_port}"
    assert f"Spark Connect server at sc://127.0.0.1:{connect_port}" in (
        stack_status(it_settings).render()
    )
    # stack up again keeps the running server
    stack_up(it_settings, spark_connect=True)
    assert spark_connect.running_port(it_settings) == connect_port
    # an explicit master means a driver of its own
    from dataclasses import replace

    assert build_resources(replace(it_settings, spark_master="local[1]"))["spark"].remote is None


# A Dagster run's process, as the daemon would launch it: the definitions built from the CDC
# home in the environment, whose resources find the server. pyspark allows a Connect client
# only in a process without a driver of its own, which the test process has (the session's).
RUN_JOBS = """
import json, sys
from datetime import UTC, datetime
import dagster as dg
from cdc_assets.assets.keys import asset_key
from cdc_assets.cli.common import materializations
from cdc_assets.definitions import build_defs
from cdc_assets.pipeline.shared.session_kind import is_connect
from cdc_assets.resources import build_resources
from cdc_assets.settings import load_settings
from cdc_assets.spec.models import TableSpec

spec = TableSpec.model_validate_json(open(sys.argv[1]).read())
settings = load_settings()
resources = build_resources(settings)
defs = build_defs(specs=[spec], settings=settings, resource_overrides=resources)
hour = datetime.now(UTC).strftime("%Y-%m-%d-%H:00")
with dg.instance_for_test() as instance:
    if sys.argv[2] == "onboard":
        assert defs.resolve_job_def("onboard_tables").execute_in_process(instance=instance).success
    ingest = defs.resolve_job_def("ingest_ledgers").execute_in_process(
        instance=instance, partition_key=hour
    )
    upsert = defs.resolve_job_def("upsert_bases").execute_in_process(instance=instance)
    merged = materializations(upsert, asset_key("base", spec.name))[0]
session = resources["spark"].get_session()
print(json.dumps({
    "remote": resources["spark"].remote,
    "connect": is_connect(session),
    "success": ingest.success and upsert.success,
    "storage_partitioned": merged.metadata["storage_partitioned_join"].value,
}))
session.stop()
"""


def run_jobs(settings: Settings, spec: TableSpec, first: bool, tmp_path: Path) -> dict[str, Any]:
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(spec.model_dump_json(by_alias=True), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-c", RUN_JOBS, str(spec_file), "onboard" if first else "-"],
        cwd=PROJECT_ROOT,
        env={**os.environ, ENV_HOME: str(settings.home)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_ingest_and_upsert_jobs_run_through_the_server(
    it_settings: Settings, connect_port: int, kafka: Any, iceberg: Any, tmp_path: Path
) -> None:
    spec = isolated(example_spec(it_settings, "users"), kafka=kafka)
    rng = random.Random(11)
    server_pid_before = _server_pid(it_settings)
    for round_ in range(2):
        produce(
            workload(spec, rng, keys=40, events=300), spec.source.topic, kafka.resolved_bootstrap()
        )
        result = run_jobs(it_settings, spec, round_ == 0, tmp_path)
        assert result["remote"] == f"sc://127.0.0.1:{connect_port}"
        assert result["connect"] is True
        assert result["success"] is True
        # The storage-partitioned check works without the driver's plan objects. The first
        # MERGE meets an empty base: nothing to line up with, as with a local driver.
        assert result["storage_partitioned"] is (round_ > 0)
        assert_base_matches(spec, iceberg, expected_base(spec, kafka))
    # one driver served both rounds
    assert _server_pid(it_settings) == server_pid_before


def _server_pid(settings: Settings) -> int:
    return int(stack_state.section(settings, "spark_connect")["pid"])


# Two runs of one process (the in-process driver, the demo) on the server: a step thread of the
# first keeps a local checkpoint while the second run is torn down.
CHECKPOINT_KEPT = """
import threading
from cdc_assets.resources import build_resources
from cdc_assets.resources.spark import own_session_per_thread
from cdc_assets.settings import load_settings

first = build_resources(load_settings())["spark"]
second = build_resources(load_settings())["spark"]
assert first.remote and second.remote
counted, checkpointed, torn_down = [], threading.Event(), threading.Event()

def step():  # a step thread of the first run, as the run executor starts one
    own_session_per_thread()
    kept = first.get_session().range(7).localCheckpoint()
    checkpointed.set()
    assert torn_down.wait(120)
    counted.append(kept.count())

thread = threading.Thread(target=step)
thread.start()
assert checkpointed.wait(120)
assert second.get_session().range(3).count() == 3
second.teardown_after_execution(None)  # the other run ends first
torn_down.set()
thread.join(120)
first.teardown_after_execution(None)
print("counted", counted)
"""


def test_a_run_torn_down_in_the_same_process_keeps_the_others_checkpoints(
    it_settings: Settings, connect_port: int
) -> None:
    # Issue 53: an evolution's redrive failed with "No DataFrame with id ... is found in the
    # session". PySpark Connect binds a local checkpoint to the thread's active session; the
    # first step thread of a run made the run's root session, which became its active one, so
    # its own session's checkpoints were looked up in the root session. And one run's teardown
    # must not stop sessions another run of the process still uses. In a child: a Connect
    # client needs a process without a driver of its own.
    proc = subprocess.run(
        [sys.executable, "-c", CHECKPOINT_KEPT],
        cwd=PROJECT_ROOT,
        env={**os.environ, ENV_HOME: str(it_settings.home)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert proc.stdout.strip().splitlines()[-1] == "counted [7]"


def test_a_server_killed_under_a_worker_and_started_again_loses_and_doubles_nothing(
    it_settings: Settings, connect_port: int, kafka: Any, iceberg: Any, tmp_path: Path
) -> None:
    """Issue 58: through a real dagster-daemon, the continuous worker of a table runs on the
    Connect server; the server is killed with SIGKILL mid-stream and started again 8 s later.
    It comes back on its port, without the worker's session: the worker's cycles fail, it opens
    a new session and goes on in the same run, and base equals the replay of the topic with the
    ledger holding every record once."""
    spec = worker_spec(it_settings, kafka, "wc")
    specs_dir = tmp_path / "specs"
    specs_dir.mkdir()
    write_spec(spec, specs_dir / f"{spec.name}.yaml")
    bootstrap = kafka.resolved_bootstrap()
    events = workload(spec, random.Random(258), keys=120, events=1500)
    env = {"CDC_ASSETS_HOME": str(it_settings.home), "CDC_ASSETS_SPECS": str(specs_dir)}
    home = dagster_home(tmp_path)
    log = tmp_path / "daemon.log"
    instance = dg.DagsterInstance.from_config(str(home))

    produce(events[:500], spec.source.topic, bootstrap)
    with running_daemon(home, env, log) as daemon:

        def alive() -> None:
            assert daemon.poll() is None, log.read_text()[-4000:]

        [worker] = beating_workers(
            wait_until(
                instance,
                daemon,
                log,
                lambda runs: bool(beating_workers(runs)),
                "a beating worker",
                300,
            )
        )
        until_base_matches(spec, iceberg, expected_base(spec, kafka), alive)
        produce(events[500:1000], spec.source.topic, bootstrap)
        time.sleep(1.5)  # mid-stream: the worker is reading or committing this slice
        os.kill(_server_pid(it_settings), signal.SIGKILL)
        produce(events[1000:], spec.source.topic, bootstrap)
        time.sleep(8)
        stack_up(it_settings, spark_connect=True)
        assert spark_connect.running_port(it_settings) == connect_port  # clients keep the URL
        until_base_matches(spec, iceberg, expected_base(spec, kafka), alive)
        messages = [e.user_message for e in instance.all_logs(worker.run_id)]
        again = instance.get_run_by_id(worker.run_id)
        assert again is not None
        assert again.status == dg.DagsterRunStatus.STARTED, messages[-20:]
        assert any("lost this worker's session" in m for m in messages), messages[-20:]
        # The worker ends while its server is up (the module stops the server after this test).
        instance.report_run_canceling(again)
        wait_until(
            instance,
            daemon,
            log,
            lambda runs: all(r.is_finished for r in runs if r.run_id == worker.run_id),
            "the worker's run to end",
            120,
        )
        states = [(r.job_name, r.status.value) for r in instance.get_runs()]
    assert_ledger_exact(spec, iceberg, kafka)
    print(states)
    print("\n".join(m for m in messages if "cycle failed" in m or "lost" in m))
