"""A real `dagster-daemon` for tests: a Dagster home configured like the project's own (queued
runs, a pool per table, at most two runs at once), the daemon started on `workspace.yaml` with the
test's environment, its run workers in its process group so that stopping it stops them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg
import yaml

from cdc_assets.cli import DAGSTER_YAML
from cdc_assets_tests.conftest import PROJECT_ROOT

BIN = Path(sys.executable).parent


def dagster_home(base: Path) -> Path:
    """The project's Dagster home in ``base``."""
    home = base / "dagster"
    home.mkdir(parents=True, exist_ok=True)
    config = yaml.safe_load(DAGSTER_YAML)
    (home / "dagster.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    # Create the home's storages now: the daemon and a CLI started together would both migrate
    # the fresh SQLite databases and leave two alembic heads.
    dg.DagsterInstance.from_config(str(home)).dispose()
    return home


@contextmanager
def running_daemon(home: Path, env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[Any]]:
    """``dagster-daemon run`` with ``env`` (plus DAGSTER_HOME) until the block ends."""
    daemon = subprocess.Popen(
        [str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"],
        cwd=PROJECT_ROOT,
        env={**os.environ, **env, "DAGSTER_HOME": str(home)},
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its run workers stop with it
    )
    try:
        yield daemon
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        try:
            daemon.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait(30)


def wait_until(
    instance: dg.DagsterInstance,
    daemon: subprocess.Popen[Any],
    log: Path,
    done: Callable[[list[Any]], bool],
    what: str,
    timeout: float = 600.0,
) -> list[Any]:
    """Poll the home's runs until ``done(runs)``; fail with the runs and the daemon log's tail
    when the daemon exits or time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        runs = list(instance.get_runs())
        if done(runs):
            return runs
        state = [(r.job_name, r.status.value, r.tags.get("cdc/trigger")) for r in runs]
        if daemon.poll() is not None:
            raise AssertionError(
                f"dagster-daemon exited waiting for {what}: {state}\n" + log.read_text()[-4000:]
            )
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out waiting for {what}: {state}\n" + log.read_text()[-4000:]
            )
        time.sleep(1)
