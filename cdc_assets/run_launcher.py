"""The project's run launcher: each run in a process of its own that builds the definitions of
the run's own tables only.

Dagster's default launcher starts a run worker that loads the whole code location: at a thousand
specs that is some 9.5 s of CPU per run (building the assets, a schema op per table, and
resolving the shared jobs over them) before the first step, for a sensor's micro-batch of a few
tables; with this launcher 1.5 s (``benchmarks/run_worker_load.py``). This launcher starts the
same worker (``dagster api execute_run``, as Dagster's container launchers do) with
``CDC_ASSETS_RUN_TABLES`` naming the tables whose assets and checks the run selected; the
definitions module then builds only those tables' definitions, which hold every step of the run
and the shared jobs by the same names. A run that selects anything else (a view, a whole job, an
op job such as maintenance or evolution) gets no variable and loads everything, as before.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Mapping
from typing import Any

import dagster as dg
from dagster._core.launcher import LaunchRunContext, RunLauncher
from dagster._serdes import ConfigurableClass, ConfigurableClassData

from cdc_assets.run_tables import RUN_TABLES_ENV, run_tables

PID_TAG = "cdc/run_worker_pid"


class TableRunLauncher(RunLauncher, ConfigurableClass):
    """Launches each run as ``dagster api execute_run`` in a child process of this one."""

    def __init__(self, inst_data: ConfigurableClassData | None = None) -> None:
        self._inst_data = inst_data
        self._workers: dict[str, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()
        super().__init__()  # type: ignore[no-untyped-call]

    @property
    def inst_data(self) -> ConfigurableClassData | None:
        return self._inst_data

    @classmethod
    def config_type(cls) -> dict[str, Any]:
        return {}

    @classmethod
    def from_config_value(
        cls, inst_data: ConfigurableClassData, config_value: Mapping[str, Any]
    ) -> TableRunLauncher:
        return cls(inst_data=inst_data)

    def launch_run(self, context: LaunchRunContext) -> None:
        from dagster._grpc.types import ExecuteRunArgs

        run = context.dagster_run
        origin = run.job_code_origin
        if origin is None:
            raise dg.DagsterInvariantViolationError(f"run {run.run_id} carries no code origin")
        api_call = ExecuteRunArgs(
            job_origin=origin, run_id=run.run_id, instance_ref=self._instance.get_ref()
        ).get_command_args()[-3:]  # api execute_run <arguments>
        # The code location's own interpreter, not whichever `dagster` is first on the PATH.
        command = [origin.executable_path, "-m", "dagster", *api_call]
        env = dict(os.environ)
        env.pop(RUN_TABLES_ENV, None)
        tables = run_tables(run.asset_selection, run.asset_check_selection)
        if tables is not None:
            env[RUN_TABLES_ENV] = ",".join(tables)
        # A module or file pointer names the directory the code location was loaded from.
        cwd = getattr(origin.repository_origin.code_pointer, "working_directory", None)
        # The worker's output goes where this process's goes (the daemon's or webserver's log),
        # as a code server's run workers' does.
        worker = subprocess.Popen(command, env=env, cwd=cwd or None)
        with self._lock:
            self._reap()
            self._workers[run.run_id] = worker
        self._instance.add_run_tags(run.run_id, {PID_TAG: str(worker.pid)})
        built = f"the definitions of {len(tables)} table(s)" if tables else "every definition"
        self._instance.report_engine_event(
            f"Started a run worker (pid {worker.pid}) that builds {built}.", run, cls=type(self)
        )

    def _reap(self) -> None:
        for run_id, worker in list(self._workers.items()):
            if worker.poll() is not None:
                del self._workers[run_id]

    def terminate(self, run_id: str) -> bool:
        run = self._instance.get_run_by_id(run_id)
        if run is None or run.is_finished or PID_TAG not in run.tags:
            return False
        self._instance.report_run_canceling(run)
        # An interrupt is how Dagster's own launcher stops a run worker: the worker ends its
        # steps, marks the run canceled and exits.
        try:
            os.kill(int(run.tags[PID_TAG]), signal.SIGINT)
        except ProcessLookupError:
            return False
        return True

    def join(self, timeout: float = 30) -> None:
        with self._lock:
            workers = list(self._workers.values())
        for worker in workers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.wait(timeout)

    def dispose(self) -> None:
        with self._lock:
            self._reap()
