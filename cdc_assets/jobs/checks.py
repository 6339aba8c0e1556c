"""The shared `check_tables` job: every asset check of the selected tables, no materialization,
and the `table_checks` schedule(s) that run it on each spec's ``schedule.cron``.

The sensors' micro-batch runs carry only the ingest's accounting check: the others read whole
tables (null counts, key uniqueness, source row counts), which after every batch of a few events
would cost more than the batch and hold back the next one. They run on the schedule's cadence
instead, after each materialization started from the UI (Dagster's default), and from
`cdc-assets checks` and CI.
"""

import re
from collections.abc import Mapping, Sequence

import dagster as dg

from cdc_assets.jobs.asset_job import AssetJob

CHECK_JOB = "check_tables"
CHECK_SCHEDULE = "table_checks"
DEFAULT_CRON = "*/15 * * * *"


def build_check_job() -> AssetJob:
    return dg.define_asset_job(
        CHECK_JOB,
        selection=dg.AssetSelection.all_asset_checks(),
        description="Run the asset checks of the selected tables against the live tables.",
    )


def build_check_schedules(
    job: AssetJob,
    crons: Mapping[str, str],
    checks: Mapping[str, Sequence[dg.AssetCheckKey]],
    override: str | None = None,
) -> list[dg.ScheduleDefinition]:
    """The schedules that run the checks: each table's on its spec's ``schedule.cron``
    (``crons``: table -> cron; ``checks``: table -> its check keys), or every table's on
    ``override`` (CDC_ASSETS_CHECKS_CRON). Tables sharing a cron share a schedule; when all do
    (the usual case), it is the one ``table_checks`` schedule over the whole job."""
    groups: dict[str, list[str]] = {}
    for table, cron in sorted(crons.items()):
        groups.setdefault(override or cron, []).append(table)
    if len(groups) <= 1:
        cron = override or next(iter(groups), DEFAULT_CRON)
        return [
            dg.ScheduleDefinition(
                name=CHECK_SCHEDULE,
                cron_schedule=cron,
                execution_timezone="UTC",
                job=job,
                default_status=dg.DefaultScheduleStatus.RUNNING,
                description=f"Every asset check of every table ({cron}, UTC; the specs' "
                "schedule.cron, or CDC_ASSETS_CHECKS_CRON for all).",
            )
        ]
    return [_group_schedule(job, cron, tables, checks) for cron, tables in sorted(groups.items())]


def _group_schedule(
    job: AssetJob,
    cron: str,
    tables: list[str],
    checks: Mapping[str, Sequence[dg.AssetCheckKey]],
) -> dg.ScheduleDefinition:
    keys = [k for t in tables for k in checks.get(t, [])]
    slug = re.sub(r"[^0-9A-Za-z]+", "_", cron.replace("*", "x")).strip("_")

    @dg.schedule(
        name=f"{CHECK_SCHEDULE}__{slug}",
        cron_schedule=cron,
        execution_timezone="UTC",
        job=job,
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description=f"The asset checks of {', '.join(tables)} ({cron}, UTC: their specs' "
        "schedule.cron).",
    )
    def table_checks(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
        return dg.RunRequest(
            asset_selection=[],
            asset_check_keys=keys,
            tags={"cdc/tables": ",".join(tables), "cdc/trigger": "table_checks"},
        )

    return table_checks
