"""One sensor for all tables: after a successful ingest or evolution run, upsert the tables it
touched (an evolution's backfill and redrive leave ledger rows that only an upsert brings to base).

The micro-batches of ``new_kafka_offsets`` (``sync_tables`` runs) upsert their own tables and are
not watched; this sensor serves the ingests started by hand or by a backfill, and evolutions.
"""

import time

import dagster as dg

from cdc_assets.assets.keys import asset_key, table_of
from cdc_assets.jobs.asset_job import AssetJob
from cdc_assets.jobs.continuous import live_worker_tables
from cdc_assets.run_tables import k8s_config_tag
from cdc_assets.sensors.runs import MICRO_BATCH_RETRIES, WAITING, table_tags, tables_in_runs

# The run queue starts an upsert before the ingests queued with it: the upsert finishes what an
# ingest began (its changes reach base), an ingest only starts more. Dagster's queue orders by
# this tag, higher first (default 0).
UPSERT_PRIORITY = {"dagster/priority": "1"}
# The first tick (no cursor yet) upserts the tables of the runs that succeeded this long before.
FIRST_TICK_LOOKBACK_S = 3600.0
RUNS_PER_TICK = 500


def upsert_selection(
    asset_keys: list[dg.AssetKey], known: set[dg.AssetKey] | None = None
) -> list[dg.AssetKey]:
    """The bucketed and base assets of every table whose cdc or schema asset is in
    ``asset_keys``, and its history asset where ``known`` (the repository's assets) has one."""
    tables = sorted({t for k in asset_keys if (t := table_of(k, ("cdc", "schema")))})
    keys = [asset_key(layer, t) for t in tables for layer in ("bucketed", "base")]
    keys += [k for t in tables if known is not None and (k := asset_key("history", t)) in known]
    return keys


def build_ledger_updated_sensor(
    ingest_job: AssetJob,
    upsert_job: AssetJob,
    evolve_job: AssetJob | None = None,
    sync_job: AssetJob | None = None,
    k8s_run_tables: bool = False,
) -> dg.SensorDefinition:
    """``k8s_run_tables``: the runs carry the ``dagster-k8s/config`` tag naming their tables
    (``run_tables.k8s_config_tag``)."""
    watched = [ingest_job.name, *([evolve_job.name] if evolve_job is not None else [])]

    @dg.sensor(
        name="ledger_updated",
        job=upsert_job,
        # It reads run events of this instance only: checking often costs little and keeps the
        # upsert right behind the ingest.
        minimum_interval_seconds=5,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Starts an upsert of the tables a successful ingest or evolution run wrote to.",
    )
    def ledger_updated(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        # Not Dagster's run_status_sensor: its first tick only sets its cursor, so an ingest
        # that ended before it (a daemon's first minute: the ingest of a table that already had
        # changes) was never upserted. The first tick here takes the last hour's successes.
        after = int(context.cursor) if context.cursor else None
        records = context.instance.fetch_run_status_changes(
            dg.RunStatusChangeRecordsFilter(
                event_type=dg.DagsterEventType.RUN_SUCCESS,
                job_names=watched,
                after_storage_id=after,
                after_timestamp=None if after is not None else time.time() - FIRST_TICK_LOOKBACK_S,
            ),
            limit=RUNS_PER_TICK,
            ascending=True,
        ).records
        if not records:
            return dg.SensorResult(skip_reason="no ingest or evolution run succeeded since")
        cursor = str(records[-1].storage_id)
        runs = {
            r.run_id: r
            for r in context.instance.get_runs(dg.RunsFilter(run_ids=[r.run_id for r in records]))
        }
        known = _asset_keys(context)
        # A queued upsert reads the ledger when it starts: it covers these runs too, and so
        # does a queued micro-batch, whose upsert follows its ingest.
        covered = tables_in_runs(context.instance, upsert_job.name, "base", WAITING)
        if sync_job is not None:
            covered |= tables_in_runs(context.instance, sync_job.name, "base", WAITING)
        # A live continuous worker looks at its tables' ledgers at every heartbeat.
        covered |= live_worker_tables(context.instance)
        requests = []
        for record in records:
            run = runs.get(record.run_id)
            # Dagster's SQL event storage does not apply the filter's job names: a micro-batch
            # (`sync_tables`) would get a second upsert of its tables.
            if run is None or run.job_name not in watched:
                continue
            selection = [
                k
                for k in upsert_selection(_run_assets(context, run), known)
                if known is None or k in known  # another code location's run of the same job
            ]
            tables = sorted({t for k in selection if (t := table_of(k))} - covered)
            if not tables:
                continue
            covered.update(tables)
            chosen = [k for k in selection if table_of(k) in tables]
            requests.append(
                dg.RunRequest(
                    run_key=run.run_id,
                    asset_selection=chosen,
                    # No checks in the micro-batch: they read whole tables and would hold back
                    # the next upsert; the `table_checks` schedule runs them.
                    asset_check_keys=[],
                    tags={
                        **table_tags(tables),
                        "cdc/trigger": "ledger_updated",
                        "cdc/ingest_run": run.run_id,
                        **MICRO_BATCH_RETRIES,
                        **UPSERT_PRIORITY,
                        **(k8s_config_tag(chosen) if k8s_run_tables else {}),
                    },
                )
            )
        if not requests:
            return dg.SensorResult(
                skip_reason=f"an upsert of each table of {len(records)} run(s) is already queued",
                cursor=cursor,
            )
        return dg.SensorResult(run_requests=requests, cursor=cursor)

    return ledger_updated


def _run_assets(context: dg.SensorEvaluationContext, run: dg.DagsterRun) -> list[dg.AssetKey]:
    """The assets ``run`` selected. A run of the whole job (the UI's "Materialize all" on the
    job's page) selects none by name: then every asset of the job."""
    if run.asset_selection is not None:
        return list(run.asset_selection)
    repository = context.repository_def
    if repository is None or not repository.has_job(run.job_name):
        return []
    return sorted(repository.get_job(run.job_name).asset_layer.selected_asset_keys)


def _asset_keys(context: dg.SensorEvaluationContext) -> set[dg.AssetKey] | None:
    repository = context.repository_def
    if repository is None:
        return None
    return set(repository.asset_graph.get_all_asset_keys())
