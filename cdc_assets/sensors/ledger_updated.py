"""One sensor for all tables: after a successful ingest or evolution run, upsert the tables it
touched (an evolution's backfill and redrive leave ledger rows that only an upsert brings to base).
"""

import dagster as dg

from cdc_assets.assets.keys import asset_key, table_of
from cdc_assets.jobs.asset_job import AssetJob
from cdc_assets.sensors.runs import MICRO_BATCH_RETRIES, WAITING, table_tags, tables_in_runs

# The run queue starts an upsert before the ingests queued with it: the upsert finishes what an
# ingest began (its changes reach base), an ingest only starts more. Dagster's queue orders by
# this tag, higher first (default 0).
UPSERT_PRIORITY = {"dagster/priority": "1"}


def upsert_selection(asset_keys: list[dg.AssetKey]) -> list[dg.AssetKey]:
    """The bucketed and base assets of every table whose cdc or schema asset is in
    ``asset_keys``."""
    tables = sorted({t for k in asset_keys if (t := table_of(k, ("cdc", "schema")))})
    return [asset_key(layer, t) for t in tables for layer in ("bucketed", "base")]


def build_ledger_updated_sensor(
    ingest_job: AssetJob,
    upsert_job: AssetJob,
    evolve_job: AssetJob | None = None,
) -> dg.RunStatusSensorDefinition:
    @dg.run_status_sensor(
        name="ledger_updated",
        run_status=dg.DagsterRunStatus.SUCCESS,
        monitored_jobs=[ingest_job] if evolve_job is None else [ingest_job, evolve_job],
        request_job=upsert_job,
        # It reads run events of this instance only: checking often costs little and keeps the
        # upsert right behind the ingest.
        minimum_interval_seconds=5,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Starts an upsert of the tables a successful ingest or evolution run wrote to.",
    )
    def ledger_updated(context: dg.RunStatusSensorContext) -> dg.RunRequest | dg.SkipReason:
        run = context.dagster_run
        selection = upsert_selection(list(run.asset_selection or []))
        if not selection:
            return dg.SkipReason(f"run {run.run_id} selected no ledger")
        # A queued upsert reads the ledger when it starts: it covers this ingest too.
        waiting = tables_in_runs(context.instance, upsert_job.name, "base", WAITING)
        tables = sorted({t for k in selection if (t := table_of(k))} - waiting)
        if not tables:
            return dg.SkipReason(f"an upsert of each table of run {run.run_id} is already queued")
        return dg.RunRequest(
            run_key=run.run_id,
            asset_selection=[k for k in selection if table_of(k) in tables],
            # No checks in the micro-batch: they read whole tables and would hold back the next
            # upsert; the `table_checks` schedule runs them.
            asset_check_keys=[],
            tags={
                **table_tags(tables),
                "cdc/trigger": "ledger_updated",
                "cdc/ingest_run": run.run_id,
                **MICRO_BATCH_RETRIES,
                **UPSERT_PRIORITY,
            },
        )

    return ledger_updated
