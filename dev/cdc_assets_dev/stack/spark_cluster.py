"""A Spark standalone cluster on loopback for the local stack's cluster profile
(`cdc-assets stack up --cluster`): one master and two workers, started with the ``spark-class``
of the installed pyspark distribution, each worker with one core and its own memory (sized for a
2-core machine), and the stack's Spark Connect server as the cluster's driver, so that Dagster
runs are thin clients and the work happens on the workers' executors.

Everything binds 127.0.0.1. Each process carries ``-Dcdc_assets.stack=<stack dir>`` (Spark's
``SPARK_DAEMON_JAVA_OPTS``) so that `stack down` finds it again by command line, and the master
and workers are recorded in the ``spark_cluster`` section of the stack's state file.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdc_assets.errors import StackError
from cdc_assets.jars.maven import require_tool
from cdc_assets.local_servers import state as stack_state
from cdc_assets.settings import Settings
from cdc_assets_dev.stack import local_process
from cdc_assets_dev.stack.kafka_broker import HOST, pick_free_port

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
WORKERS = 2
WORKER_CORES = 1
WORKER_MEMORY = "1536m"  # room for one executor of EXECUTOR_MEMORY and its overhead
EXECUTOR_MEMORY = "1g"
DAEMON_MEMORY = "256m"
READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
SECTION = "spark_cluster"


@dataclass(frozen=True)
class Cluster:
    master_url: str  # spark://127.0.0.1:<port>
    master_ui: int  # the master's web UI port (JSON at /json/)
    worker_uis: tuple[int, ...]


def spark_class() -> str:
    """pyspark's spark-class (the pip package is a Spark distribution with its jars)."""
    import pyspark

    path = Path(pyspark.__file__).parent / "bin" / "spark-class"
    return str(path) if path.exists() else require_tool("spark-class")


def _marker(settings: Settings) -> str:
    return f"-Dcdc_assets.stack={settings.stack_dir}"


def _env(settings: Settings) -> dict[str, str]:
    return {
        **os.environ,
        "SPARK_LOCAL_IP": HOST,
        "SPARK_DAEMON_JAVA_OPTS": _marker(settings),
        "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
        # Logs and pids of Spark's own scripts stay in the stack directory.
        "SPARK_LOG_DIR": str(settings.stack_dir / "logs"),
        "SPARK_PID_DIR": str(settings.stack_dir / "spark-cluster"),
    }


def running(settings: Settings) -> Cluster | None:
    """The stack's cluster when its master and every worker run, else None."""
    entry = stack_state.section(settings, SECTION)
    try:
        pids = [int(entry["master"]["pid"]), *(int(w["pid"]) for w in entry["workers"])]
        cluster = Cluster(
            entry["master"]["url"],
            int(entry["master"]["ui"]),
            tuple(int(w["ui"]) for w in entry["workers"]),
        )
    except (KeyError, TypeError, ValueError):
        return None
    marker = _marker(settings)
    return cluster if all(local_process.runs(p, marker) for p in pids) else None


def start_cluster(settings: Settings, workers: int = WORKERS) -> Cluster:
    """Start (or keep) the master and ``workers`` workers; wait until every worker is ALIVE.

    With the master alive, a worker that died (killed, out of memory) is started again on its
    old ports and directory, and the master, its driver and the other workers keep running."""
    found = running(settings)
    if found is not None and len(found.worker_uis) == workers:
        return found
    revived = _revive_workers(settings, workers)
    if revived is not None:
        return revived
    stop_cluster(settings)
    base = settings.stack_dir / "spark-cluster"
    logs = settings.stack_dir / "logs"
    base.mkdir(parents=True, exist_ok=True)
    env = _env(settings)
    port = pick_free_port()
    ui = pick_free_port({port})
    master_url = f"spark://{HOST}:{port}"
    taken = {port, ui}
    master_pid = local_process.start_detached(
        [spark_class(), MASTER_CLASS, "--host", HOST, "--port", str(port), "--webui-port", str(ui)],
        logs / "spark-master.log",
        cwd=base,
        env=env,
    )
    entry: dict[str, Any] = {
        "master": {"pid": master_pid, "url": master_url, "ui": ui, "port": port},
        "workers": [],
    }
    stack_state.put(settings, **{SECTION: entry})
    try:
        _wait_master(master_pid, ui, logs / "spark-master.log")
        for n in range(workers):
            worker_ui = pick_free_port(taken)
            taken.add(worker_ui)
            pid = _start_worker(settings, n, worker_ui, master_url)
            entry["workers"].append({"pid": pid, "ui": worker_ui})
            stack_state.put(settings, **{SECTION: entry})
        _wait_workers(ui, workers, logs)
    except BaseException:
        stop_cluster(settings)
        raise
    return Cluster(master_url, ui, tuple(w["ui"] for w in entry["workers"]))


def _start_worker(settings: Settings, n: int, ui: int, master_url: str) -> int:
    base = settings.stack_dir / "spark-cluster"
    work_dir = base / f"worker-{n}"
    work_dir.mkdir(parents=True, exist_ok=True)
    command = [spark_class(), WORKER_CLASS, "--host", HOST, "--webui-port", str(ui)]
    command += ["--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY]
    command += ["--work-dir", str(work_dir), master_url]
    log = settings.stack_dir / "logs" / f"spark-worker-{n}.log"
    return local_process.start_detached(command, log, cwd=work_dir, env=_env(settings))


def _revive_workers(settings: Settings, workers: int) -> Cluster | None:
    """Restart the dead workers of a cluster whose master runs; None when the master is gone
    or the recorded workers are not ``workers``."""
    entry = stack_state.section(settings, SECTION)
    marker = _marker(settings)
    try:
        master = entry["master"]
        recorded = list(entry["workers"])
        master_alive = local_process.runs(int(master["pid"]), marker)
    except (KeyError, TypeError, ValueError):
        return None
    if not master_alive or len(recorded) != workers:
        return None
    for n, worker in enumerate(recorded):
        if not local_process.runs(int(worker["pid"]), marker):
            worker["pid"] = _start_worker(settings, n, int(worker["ui"]), master["url"])
            stack_state.put(settings, **{SECTION: entry})
    _wait_workers(int(master["ui"]), workers, settings.stack_dir / "logs")
    return Cluster(master["url"], int(master["ui"]), tuple(int(w["ui"]) for w in recorded))


def stop_cluster(settings: Settings) -> None:
    """Stop the workers, then the master (recorded or stray)."""
    marker = _marker(settings)
    for cls in (WORKER_CLASS, MASTER_CLASS):
        for pid in local_process.find_pids("java", marker):
            if cls in local_process.cmdline(pid):
                local_process.stop(pid, "Spark " + cls.rsplit(".", 1)[-1], timeout=STOP_TIMEOUT_S)
    if settings.stack_dir.exists():
        stack_state.put(settings, **{SECTION: None})


def driver_conf(cluster: Cluster, ui_port: int) -> dict[str, str]:
    """What the Connect server needs to be the cluster's driver: the master, one executor per
    worker, and its UI on loopback (the REST API shows where tasks ran)."""
    return {
        "spark.master": cluster.master_url,
        "spark.executor.cores": str(WORKER_CORES),
        "spark.executor.memory": EXECUTOR_MEMORY,
        "spark.cores.max": str(WORKER_CORES * len(cluster.worker_uis)),
        "spark.driver.host": HOST,
        "spark.driver.bindAddress": HOST,
        "spark.ui.enabled": "true",
        "spark.ui.port": str(ui_port),
    }


def master_state(ui: int) -> dict[str, Any]:
    """The master's JSON status (workers, applications)."""
    with urllib.request.urlopen(f"http://{HOST}:{ui}/json/", timeout=10) as response:
        data: dict[str, Any] = json.loads(response.read())
    return data


def _wait_master(pid: int, ui: int, log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        if not local_process.pid_alive(pid):
            raise StackError(local_process.died_message("Spark master", pid, log))
        try:
            if master_state(ui).get("status") == "ALIVE":
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
            pass
        if time.monotonic() > deadline:
            raise StackError(f"the Spark master did not come up in {READY_TIMEOUT_S:.0f} s: {log}")
        time.sleep(0.5)


def _wait_workers(ui: int, wanted: int, logs: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    alive = 0
    while time.monotonic() < deadline:
        try:
            workers = master_state(ui).get("workers", [])
            alive = sum(1 for w in workers if w.get("state") == "ALIVE")
            if alive >= wanted:
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
            pass
        time.sleep(0.5)
    raise StackError(
        f"{alive} of {wanted} Spark workers registered with the master in "
        f"{READY_TIMEOUT_S:.0f} s; see {logs}/spark-worker-*.log"
    )
