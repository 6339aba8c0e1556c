"""The shared `check_tables` job: every asset check of the selected tables, no materialization,
and the `table_checks` schedule that runs it for every table.

The sensors' micro-batch runs carry only the ingest's accounting check: the others read whole
tables (null counts, key uniqueness, source row counts), which after every batch of a few events
would cost more than the batch and hold back the next one. They run on the schedule's cadence
instead, after each materialization started from the UI (Dagster's default), and from
`cdc-assets checks` and CI.
"""

import dagster as dg
from dagster._core.definitions.unresolved_asset_job_definition import (
    UnresolvedAssetJobDefinition,
)

CHECK_JOB = "check_tables"
CHECK_SCHEDULE = "table_checks"


def build_check_job() -> UnresolvedAssetJobDefinition:
    return dg.define_asset_job(
        CHECK_JOB,
        selection=dg.AssetSelection.all_asset_checks(),
        description="Run the asset checks of the selected tables against the live tables.",
    )


def build_check_schedule(job: UnresolvedAssetJobDefinition, cron: str) -> dg.ScheduleDefinition:
    return dg.ScheduleDefinition(
        name=CHECK_SCHEDULE,
        cron_schedule=cron,
        execution_timezone="UTC",
        job=job,
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description=f"Every asset check of every table ({cron}, UTC; CDC_ASSETS_CHECKS_CRON).",
    )
