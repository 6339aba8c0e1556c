"""What the benchmark scripts share: a fresh CDC home on the project's jar cache, a local stack
with one ``local[2]`` driver, the commit measured, CPU accounting of this process tree, the
Spark driver JVM and the machine, and the results' JSON file and plot."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def code_version() -> str:
    """The commit measured, marked when cdc_assets has uncommitted changes (it moves fast)."""
    import subprocess

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + (
        " + uncommitted cdc_assets changes" if git("status", "--porcelain", "cdc_assets") else ""
    )


def save_results(name: str, payload: dict[str, Any]) -> None:
    """``benchmarks/results/<name>.json``: ``payload`` after the commit measured and the time."""
    import json
    import time

    RESULTS.mkdir(parents=True, exist_ok=True)
    stamped = {
        "code": code_version(),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **payload,
    }
    (RESULTS / f"{name}.json").write_text(json.dumps(stamped, indent=2))


@contextmanager
def results_plot(name: str, figsize: tuple[float, float] = (6.5, 3.8)) -> Iterator[Any]:
    """One matplotlib axis, drawn without a display, saved as ``benchmarks/results/<name>.png``
    when the block ends."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=figsize)
    yield ax
    fig.tight_layout()
    RESULTS.mkdir(parents=True, exist_ok=True)
    fig.savefig(RESULTS / f"{name}.png", dpi=110)
    plt.close(fig)


def make_home(tmp: Path) -> Any:
    """Settings for a fresh CDC home in ``tmp`` whose jar cache links to the project's."""
    from cdc_assets.jars.maven import ensure_jars
    from cdc_assets.settings import load_settings

    # The project's cache lives in its default home unless the caller chose another one.
    project = load_settings({"CDC_ASSETS_HOME": str(ROOT / ".cdc-assets"), **os.environ})
    for kind in ("spark", "kafka"):
        ensure_jars(kind, project, quiet=True)
    (tmp / "jars").symlink_to(project.jars_dir, target_is_directory=True)
    settings = load_settings({**os.environ, "CDC_ASSETS_HOME": str(tmp)})
    # Our own stack, whatever Kafka or catalog the environment points at.
    return replace(
        settings,
        kafka_bootstrap=None,
        kafka_port=0,
        catalog_type="jdbc",
        catalog_uri=None,
        warehouse=None,
    )


@contextmanager
def local_driver(tmp: Path) -> Iterator[tuple[Any, Any, dict[str, Any]]]:
    """A fresh home in ``tmp`` with its stack up: (settings, stack state, resources), the Spark
    resource on ``local[2]``, one driver for every run of the process. The stack is purged after."""
    from cdc_assets.resources import build_resources
    from cdc_assets_dev.stack.local_stack import stack_down, stack_up

    home = make_home(tmp)
    state = stack_up(home)
    try:
        resources = build_resources(home)
        resources["spark"] = resources["spark"].model_copy(update={"master": "local[2]"})
        yield home, state, resources
    finally:
        stack_down(home, purge=True)


def tree_cpu_s() -> float:
    """CPU seconds used so far by this process and its children (driver JVM, Kafka broker)."""
    import psutil

    total = 0.0
    me = psutil.Process()
    for proc in [me, *me.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue  # ended between listing and reading
        total += times.user + times.system
    return total


def busy_cpu_s() -> float:
    """CPU seconds the whole machine has spent busy (all processes, all cores)."""
    import psutil

    times = psutil.cpu_times()
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


def driver_jvm_pid() -> int | None:
    """The Spark driver JVM: a child of this process running SparkSubmit (not the broker)."""
    import psutil

    for child in psutil.Process().children(recursive=True):
        try:
            if "org.apache.spark.deploy.SparkSubmit" in child.cmdline():
                return int(child.pid)
        except psutil.Error:
            continue
    return None


def start_daemon(env: dict[str, str], log: Any, *, own_group: bool = False) -> Any:
    """``dagster-daemon run`` on the project's workspace, its output into ``log`` (a binary
    file); ``own_group``: in a process group of its own, with its code server and run workers,
    so that the caller can stop them all (``os.killpg``)."""
    import subprocess
    import sys

    daemon = str(Path(sys.executable).parent / "dagster-daemon")
    return subprocess.Popen(
        [daemon, "run", "-w", str(ROOT / "workspace.yaml")],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=own_group,
    )
