"""The shared `check_tables` job: every asset check of the selected tables, no materialization,
and the `table_checks` schedule(s) that run it on each spec's ``schedule.cron``.

The sensors' micro-batch runs carry only the ingest's accounting check: the others read whole
tables (null counts, key uniqueness, source row counts), which after every batch of a few events
would cost more than the batch and hold back the next one. They run on the schedule's cadence
instead, after each materialization started from the UI (Dagster's default), and from
`cdc-assets checks` and CI. A schedule starts no run while its previous run is still queued or
running: at a thousand tables one run of every check can outlast the cron's period, and Dagster
would otherwise queue a run per tick behind it, each holding a run slot in turn.
"""

import re
from collections.abc import Mapping, Sequence

import dagster as dg

from cdc_assets.jobs.asset_job import AssetJob

CHECK_JOB = "check_tables"
CHECK_SCHEDULE = "table_checks"
DEFAULT_CRON = "*/15 * * * *"
SCHEDULE_TAG = "cdc/schedule"
# A run created but never queued (NOT_STARTED) holds nothing back: it will not start by itself.
IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]


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
        # No selection: the whole job, the views' checks too.
        return [
            _checks_schedule(
                job,
                CHECK_SCHEDULE,
                cron,
                f"Every asset check of every table ({cron}, UTC; the specs' schedule.cron, or "
                "CDC_ASSETS_CHECKS_CRON for all).",
                None,
                {},
            )
        ]
    schedules = []
    for cron, tables in sorted(groups.items()):
        slug = re.sub(r"[^0-9A-Za-z]+", "_", cron.replace("*", "x")).strip("_")
        schedules.append(
            _checks_schedule(
                job,
                f"{CHECK_SCHEDULE}__{slug}",
                cron,
                f"The asset checks of {', '.join(tables)} ({cron}, UTC: their specs' "
                "schedule.cron).",
                [k for t in tables for k in checks.get(t, [])],
                {"cdc/tables": ",".join(tables)},
            )
        )
    return schedules


def _checks_schedule(
    job: AssetJob,
    name: str,
    cron: str,
    description: str,
    keys: list[dg.AssetCheckKey] | None,
    tags: Mapping[str, str],
) -> dg.ScheduleDefinition:
    run_tags = {**tags, "cdc/trigger": CHECK_SCHEDULE, SCHEDULE_TAG: name}

    @dg.schedule(
        name=name,
        cron_schedule=cron,
        execution_timezone="UTC",
        job=job,
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description=f"{description} No run while the previous one is queued or running.",
    )
    def table_checks(context: dg.ScheduleEvaluationContext) -> dg.RunRequest | dg.SkipReason:
        previous = context.instance.get_runs(
            dg.RunsFilter(job_name=job.name, tags={SCHEDULE_TAG: name}, statuses=IN_FLIGHT),
            limit=1,
        )
        if previous:
            return dg.SkipReason(
                f"the previous checks run {previous[0].run_id} is still "
                f"{previous[0].status.value.lower()}; the next tick tries again"
            )
        if keys is None:
            return dg.RunRequest(tags=run_tags)
        return dg.RunRequest(asset_selection=[], asset_check_keys=keys, tags=run_tags)

    return table_checks
