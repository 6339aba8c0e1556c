"""The shared `check_tables` job: every asset check of the selected tables, no materialization.

What `cdc-assets checks` and CI run against live tables; the same checks also run after each
materialization of their asset in the ingest and upsert jobs.
"""

import dagster as dg
from dagster._core.definitions.unresolved_asset_job_definition import (
    UnresolvedAssetJobDefinition,
)

CHECK_JOB = "check_tables"


def build_check_job() -> UnresolvedAssetJobDefinition:
    return dg.define_asset_job(
        CHECK_JOB,
        selection=dg.AssetSelection.all_asset_checks(),
        description="Run the asset checks of the selected tables against the live tables.",
    )
