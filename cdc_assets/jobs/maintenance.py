"""The shared `maintain_tables` job and the `daily_maintenance` schedule that starts it per table.

One job and one schedule for every table: a run names its table in run config, and the schedule
requests a run for each table whose ``base.maintenance.cron`` fired since its previous tick.
"""

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import dagster as dg
from croniter import croniter
from pydantic import Field

from cdc_assets.errors import SpecError
from cdc_assets.pipeline.maintenance.maintenance import (
    MaintenanceConflictError,
    MaintenanceResult,
    maintain_table,
)
from cdc_assets.resources.iceberg import IcebergCatalogResource
from cdc_assets.resources.spark import SparkResource
from cdc_assets.spec.models import TableSpec

MAINTENANCE_JOB = "maintain_tables"
MAINTENANCE_OP = "maintain_table"
MAINTENANCE_SCHEDULE = "daily_maintenance"
# The schedule ticks hourly; a table's cron decides on which ticks it is due, so a table cron
# that fires at minute 30 is served at the next full hour.
SCHEDULE_CRON = "0 * * * *"
CRON_TIMEZONE = "UTC"


class MaintenanceConfig(dg.Config):
    table: str = Field(description="name of the table spec whose Iceberg tables to maintain")


def maintenance_run_config(table: str) -> dict[str, Any]:
    return {"ops": {MAINTENANCE_OP: {"config": {"table": table}}}}


def result_metadata(result: MaintenanceResult) -> dict[str, Any]:
    """Headline numbers plus one row per step, for the run's output metadata."""
    lines = [
        "| step | table | result | attempts | seconds |",
        "| --- | --- | --- | --- | --- |",
    ]
    for s in result.steps:
        shown = ", ".join(f"{k}={v}" for k, v in s.counts.items() if v) or "no change"
        lines.append(
            f"| {s.step} | {s.layer} | {('FAILED: ' + s.error) if s.error else shown} "
            f"| {s.attempts} | {s.seconds:.1f} |"
        )
    return {
        **result.totals(),
        "table": result.table,
        "seconds": round(result.seconds, 2),
        "steps": dg.MetadataValue.md("\n".join(lines)),
    }


def build_maintenance_job(specs: list[TableSpec]) -> dg.JobDefinition:
    """A job whose single op maintains the Iceberg tables of the table named in run config."""
    by_name = {s.name: s for s in specs}

    @dg.op(name=MAINTENANCE_OP, tags={"kind": "iceberg"})
    def maintain_table_op(
        context: dg.OpExecutionContext,
        config: MaintenanceConfig,
        spark: SparkResource,
        iceberg: IcebergCatalogResource,
    ) -> dg.Output[dict[str, int]]:
        spec = by_name.get(config.table)
        if spec is None:
            raise dg.Failure(f"unknown table spec {config.table!r}; known: {sorted(by_name)}")
        try:
            result = maintain_table(
                spark.get_session(),
                spark.catalog.name,
                iceberg.load_catalog(),
                spec,
                log=context.log.info,
            )
        except MaintenanceConflictError as err:
            raise dg.Failure(str(err), metadata=result_metadata(err.result)) from err
        return dg.Output(result.totals(), metadata=result_metadata(result))

    @dg.job(
        name=MAINTENANCE_JOB,
        description=(
            "Compact, purge old tombstones, expire snapshots and remove orphan files of one "
            "table's Iceberg tables (run config names the table). Safe while upserts run."
        ),
        tags={"cdc/job": "maintenance"},
    )
    def maintain_tables() -> None:
        maintain_table_op()

    return maintain_tables


def previous_tick(tick: datetime, cron: str = SCHEDULE_CRON) -> datetime:
    """The schedule's fire time before ``tick``."""
    fire: datetime = croniter(cron, tick.astimezone(UTC)).get_prev(datetime)
    return fire


def cron_fired(cron: str, after: datetime, until: datetime) -> bool:
    """Whether ``cron`` (UTC) has a fire time in (after, until]."""
    fire: datetime = croniter(cron, after.astimezone(UTC)).get_next(datetime)
    return after < fire <= until


def due_tables(specs: Sequence[TableSpec], after: datetime, until: datetime) -> list[TableSpec]:
    """The specs whose maintenance cron fired in (after, until], in name order."""
    return sorted(
        (s for s in specs if cron_fired(s.base.maintenance.cron, after, until)),
        key=lambda s: s.name,
    )


def build_maintenance_schedule(
    specs: list[TableSpec], job: dg.JobDefinition
) -> dg.ScheduleDefinition:
    """One schedule for all tables: a run of ``job`` per table whose maintenance cron is due."""
    for spec in specs:
        if not croniter.is_valid(spec.base.maintenance.cron):
            raise SpecError(
                f"{spec.name}: base.maintenance.cron {spec.base.maintenance.cron!r} is not a "
                "cron expression Dagster can schedule"
            )

    @dg.schedule(
        name=MAINTENANCE_SCHEDULE,
        cron_schedule=SCHEDULE_CRON,
        job=job,
        execution_timezone=CRON_TIMEZONE,
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description=(
            "Ticks hourly and starts maintain_tables for each table whose base.maintenance.cron "
            "(UTC, default daily at 03:00) fired since the previous tick."
        ),
    )
    def daily_maintenance(
        context: dg.ScheduleEvaluationContext,
    ) -> list[dg.RunRequest] | dg.SkipReason:
        tick = context.scheduled_execution_time or datetime.now(UTC)
        tick = tick.astimezone(UTC).replace(second=0, microsecond=0)
        after = previous_tick(tick)
        due = due_tables(specs, after, tick)
        if not due:
            return dg.SkipReason(f"no table's maintenance cron fired in ({after}, {tick}]")
        return [
            dg.RunRequest(
                run_key=f"{spec.name}@{tick.isoformat()}",
                run_config=maintenance_run_config(spec.name),
                tags={"cdc/table": spec.name, "cdc/trigger": MAINTENANCE_SCHEDULE},
            )
            for spec in due
        ]

    return daily_maintenance
