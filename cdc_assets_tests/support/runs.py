"""Runs recorded on an instance without launching them (a sensor's or schedule's view of runs in
flight), through Dagster's public API: ``DagsterRun`` and ``DagsterInstance.add_run``."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping

import dagster as dg


def record_run(
    instance: dg.DagsterInstance,
    job_name: str,
    status: dg.DagsterRunStatus,
    *,
    tags: Mapping[str, str] | None = None,
    asset_selection: Collection[dg.AssetKey] | None = None,
) -> dg.DagsterRun:
    """A run of ``job_name`` in ``status``, stored on ``instance`` (nothing executes it)."""
    run = dg.DagsterRun(
        job_name=job_name,
        run_id=str(uuid.uuid4()),
        status=status,
        tags=dict(tags or {}),
        asset_selection=None if asset_selection is None else frozenset(asset_selection),
    )
    return instance.add_run(run)
