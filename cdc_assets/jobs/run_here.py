"""A run of a job in this process with the job's own executor, through Dagster's public
``execute_job``: what the in-process driver (``jobs/inprocess.py``) uses so that its runs take
several tables at once, as a run the daemon launches does.

``JobDefinition.execute_in_process`` always swaps in Dagster's in-process executor (one step
after another). ``execute_job`` keeps the job's executor but takes a *reconstructable* job: a
module-level function that returns it. The driver's jobs are built at run time (its settings,
its resource overrides), so they are handed over in a registry this module keeps for the length
of the run; the run executes in this process, where the registry is. An executor that started
processes of its own could not reconstruct such a job, and none of the project's does.
"""

from __future__ import annotations

import uuid
from typing import Any

import dagster as dg

_JOBS: dict[str, dg.JobDefinition] = {}


def registered_job(key: str) -> dg.JobDefinition:
    """The job registered under ``key`` (the reconstructable's target)."""
    return _JOBS[key]


def execute_here(
    job: dg.JobDefinition,
    *,
    instance: dg.DagsterInstance,
    run_config: dict[str, Any],
    tags: dict[str, str] | None = None,
    partition_key: str | None = None,
    raise_on_error: bool = True,
) -> dg.JobExecutionResult:
    """A run of ``job`` (a subset already: its selection is the run's) in this process."""
    key = uuid.uuid4().hex
    _JOBS[key] = job
    try:
        reconstructable = dg.build_reconstructable_job(
            __name__, registered_job.__name__, reconstructable_args=(key,)
        )
        run_tags = dict(tags or {})
        if partition_key is not None:
            run_tags["dagster/partition"] = partition_key
        return dg.execute_job(
            reconstructable,
            instance=instance,
            run_config=run_config,
            tags=run_tags,
            raise_on_error=raise_on_error,
        )
    finally:
        del _JOBS[key]
