"""Runs recorded on an instance without launching them (a sensor's or schedule's view of runs in
flight), through Dagster's public API: ``DagsterRun`` and ``DagsterInstance.add_run``."""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Mapping
from typing import Any

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
        # Dagster refuses a queued run without the origin its daemon would launch it from.
        remote_job_origin=job_origin(job_name) if status == dg.DagsterRunStatus.QUEUED else None,
    )
    return instance.add_run(run)


def job_origin(job_name: str) -> Any:
    """The origin of ``job_name`` in the project's definitions module, loaded in process.

    Built from its stored form: the origin's classes are not part of Dagster's public API, and
    the stored form is what Dagster keeps readable across releases (old runs' records)."""
    return dg.deserialize_value(
        json.dumps(
            {
                "__class__": "ExternalPipelineOrigin",
                "external_repository_origin": {
                    "__class__": "ExternalRepositoryOrigin",
                    "repository_location_origin": {
                        "__class__": "InProcessRepositoryLocationOrigin",
                        "container_context": None,
                        "container_image": None,
                        "entry_point": ["dagster"],
                        "loadable_target_origin": {
                            "__class__": "LoadableTargetOrigin",
                            "attribute": None,
                            "executable_path": None,
                            "module_name": "cdc_assets.definitions",
                            "package_name": None,
                            "python_file": None,
                            "working_directory": None,
                        },
                        "location_name": "<<in_process>>",
                    },
                    "repository_name": "__repository__",
                },
                "pipeline_name": job_name,
            }
        )
    )
