"""The cluster profile of the local stack (issue 21, part 1): a Spark standalone master and two
workers from the installed pyspark, the stack's Spark Connect server as their driver, and
Dagster's ingest and upsert jobs run through it in a process of their own: base equals the
plain-Python replay, and Spark's REST API shows tasks on the executors of both workers.

One cluster for the module; it runs on the session's stack (its catalog and warehouse are the
session's), and is stopped afterwards so that other modules build local drivers again.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdc_assets.demo.events import produce, workload
from cdc_assets.settings import Settings
from cdc_assets.stack import spark_cluster, spark_connect
from cdc_assets.stack import state as stack_state
from cdc_assets.stack.local_stack import StackState, stack_status, stack_up
from cdc_assets_tests.integration.test_ingest import isolated
from cdc_assets_tests.integration.test_spark_connect import run_jobs
from cdc_assets_tests.integration.test_upsert import (
    assert_base_matches,
    example_spec,
    expected_base,
)

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def cluster(
    it_settings: Settings, stack: StackState, spark: Any
) -> Iterator[spark_cluster.Cluster]:
    # `spark`: the session's own driver exists before the Connect server does, so that it stays
    # a local driver (resources built while the server runs would use the server).
    stack_up(it_settings, cluster=True)
    found = spark_cluster.running(it_settings)
    assert found is not None
    try:
        yield found
    finally:
        spark_connect.stop_server(it_settings)
        spark_cluster.stop_cluster(it_settings)


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def test_the_profile_runs_a_master_two_workers_and_their_driver(
    it_settings: Settings, cluster: spark_cluster.Cluster
) -> None:
    master = spark_cluster.master_state(cluster.master_ui)
    workers = [w for w in master["workers"] if w["state"] == "ALIVE"]
    assert len(workers) == 2
    assert all(w["cores"] == spark_cluster.WORKER_CORES for w in workers)
    assert all(w["host"] == "127.0.0.1" for w in workers)
    # the Connect server is the cluster's one application
    assert [a["name"] for a in master["activeapps"]] == ["cdc-assets Spark Connect"]
    entry = stack_state.section(it_settings, "spark_connect")
    assert entry["master"] == cluster.master_url
    rendered = stack_status(it_settings).render()
    assert f"Spark master {cluster.master_url}, 2 workers" in rendered
    # `stack up` again keeps what runs
    stack_up(it_settings, cluster=True)
    assert spark_connect.running_port(it_settings) == entry["port"]


def test_jobs_run_on_the_executors_of_both_workers(
    it_settings: Settings, cluster: spark_cluster.Cluster, kafka: Any, iceberg: Any, tmp_path: Path
) -> None:
    spec = isolated(example_spec(it_settings, "orders"), partitions=2, kafka=kafka)
    rng = random.Random(5)
    for round_ in range(2):
        produce(
            workload(spec, rng, keys=40, events=300), spec.source.topic, kafka.resolved_bootstrap()
        )
        result = run_jobs(it_settings, spec, round_ == 0, tmp_path)
        assert result["connect"] is True
        assert result["success"] is True
        assert_base_matches(spec, iceberg, expected_base(spec, kafka))

    ui = stack_state.section(it_settings, "spark_connect")["ui"]
    (app,) = _get(f"http://127.0.0.1:{ui}/api/v1/applications")
    executors = _get(f"http://127.0.0.1:{ui}/api/v1/applications/{app['id']}/allexecutors")
    worked = [e for e in executors if e["id"] != "driver" and e["totalTasks"] > 0]
    assert len(worked) >= 2, [(e["id"], e["hostPort"], e["totalTasks"]) for e in executors]
    assert all(e["hostPort"].startswith("127.0.0.1:") for e in worked)
    driver = next(e for e in executors if e["id"] == "driver")
    assert driver["totalTasks"] == 0  # the work happened on the workers, not in the driver


def _executor_workers(cluster: spark_cluster.Cluster, settings: Settings) -> dict[str, int]:
    """Executor id -> pid of the worker that runs it (from each worker's JSON status)."""
    pids = [w["pid"] for w in stack_state.section(settings, spark_cluster.SECTION)["workers"]]
    out = {}
    for ui, pid in zip(cluster.worker_uis, pids, strict=True):
        for executor in _get(f"http://127.0.0.1:{ui}/json/").get("executors", []):
            out[str(executor["id"])] = pid
    return out


def test_a_worker_killed_mid_run_loses_nothing(
    it_settings: Settings, cluster: spark_cluster.Cluster, kafka: Any, iceberg: Any, tmp_path: Path
) -> None:
    """Issue 21, part 3: SIGKILL one worker (its executor dies with it) while the ingest and
    upsert run. Spark reschedules on the other worker; the run succeeds and base equals the
    replay. Last in the module: the fixture's teardown stops what is left of the cluster."""
    spec = isolated(example_spec(it_settings, "orders"), partitions=2, kafka=kafka)
    produce(
        workload(spec, random.Random(8), keys=400, events=6000),
        spec.source.topic,
        kafka.resolved_bootstrap(),
    )
    ui = stack_state.section(it_settings, "spark_connect")["ui"]
    (app,) = _get(f"http://127.0.0.1:{ui}/api/v1/applications")
    executors_url = f"http://127.0.0.1:{ui}/api/v1/applications/{app['id']}/executors"
    outcome: dict[str, Any] = {}
    runner = threading.Thread(
        target=lambda: outcome.update(run_jobs(it_settings, spec, True, tmp_path)), daemon=True
    )
    runner.start()
    victim = None
    deadline = time.monotonic() + 300
    while victim is None and runner.is_alive() and time.monotonic() < deadline:
        for e in _get(executors_url):
            if e["id"] != "driver" and e["activeTasks"] > 0:
                victim = e["id"]
                break
        time.sleep(0.2)
    assert victim is not None, "no executor ran a task of the run: nothing to kill"
    worker_pid = _executor_workers(cluster, it_settings)[victim]
    os.killpg(worker_pid, signal.SIGKILL)  # the worker and the executor it started
    runner.join(600)
    assert not runner.is_alive()
    assert outcome["success"] is True
    assert_base_matches(spec, iceberg, expected_base(spec, kafka))
    lost = [
        e for e in _get(executors_url.replace("/executors", "/allexecutors")) if not e["isActive"]
    ]
    assert victim in [e["id"] for e in lost]
