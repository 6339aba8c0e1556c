"""One sensor for all tables: one run per tick that ingests and upserts the tables whose topics
grew (the ``sync_tables`` job: ledger, bucketed and base of each).

Every run starts a Spark driver, which costs more than reading a few batches: one run for all
the tables that changed since the previous tick keeps that cost once per tick, not per table.
And no new run while one is queued: the queued run reads to the end it finds
when it starts, and the next one takes every table that grew meanwhile. Through the daemon a
run's launch (a process loading the definitions of every spec) took about 20 s at 1,000 specs,
and a fleet whose quiet tables change now and then queued a small run every tick: a hot table
then waited behind runs that mostly launched (``benchmarks/fleet_freshness.py --daemon``). For
the same reason the upsert goes into the same run as the ingest (``jobs/sync.py``).
"""

import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import dagster as dg

from cdc_assets.assets.keys import asset_key
from cdc_assets.checks.accounting import ACCOUNTING_CHECK
from cdc_assets.jobs.asset_job import AssetJob
from cdc_assets.jobs.continuous import live_worker_tables
from cdc_assets.jobs.ingest import INGEST_JOB
from cdc_assets.jobs.sync import sync_selection
from cdc_assets.pipeline.evolution.spec_store import current_of, stored_specs
from cdc_assets.resources.kafka import KafkaResource
from cdc_assets.run_tables import k8s_config_tag
from cdc_assets.sensors.runs import (
    IN_FLIGHT,
    MICRO_BATCH_RETRIES,
    table_tags,
    tables_in_runs,
)
from cdc_assets.spec.models import TableSpec


def current_hour_key(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%d-%H:00")


def build_new_offsets_sensor(
    specs: list[TableSpec],
    job: AssetJob,
    load_catalog: Callable[[], Any] | None = None,
    k8s_run_tables: bool = False,
) -> dg.SensorDefinition:
    """``load_catalog``: the catalog of stored spec versions, whose topics are watched too (a
    version that followed a renamed source table reads another topic before a reload).
    ``k8s_run_tables``: the runs carry the ``dagster-k8s/config`` tag naming their tables
    (``run_tables.k8s_config_tag``)."""
    # Every shard's topic feeds its table: a grown shard runs the table's ingest.
    loaded = {view.source.topic: s for s in specs for view in s.shard_specs()}

    def watched(context: dg.SensorEvaluationContext) -> dict[str, TableSpec]:
        if load_catalog is None:
            return loaded
        try:
            catalog = load_catalog()
            stored = stored_specs(catalog) if catalog is not None else {}
        except Exception as exc:  # the loaded topics still run; the next tick tries again
            context.log.warning(f"stored spec versions not read: {exc}")
            return loaded
        out = dict(loaded)
        for spec in specs:
            current = current_of(spec, stored)
            if not current.source.shards and current.source.topic not in out:
                out[current.source.topic] = spec
        return out

    history = frozenset(s.name for s in specs if s.history.enabled)
    groups = {s.name: s.consistency.group for s in specs if s.consistency is not None}

    @dg.sensor(
        name="new_kafka_offsets",
        job=job,
        # One batched offsets request per tick is cheap, and the interval is part of the wait
        # between a commit at the source and its ingest: tick as often as the daemon's sensor
        # loop does (every 5 s).
        minimum_interval_seconds=5,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Starts one run that ingests and upserts the tables whose topics grew.",
    )
    def new_kafka_offsets(
        context: dg.SensorEvaluationContext, kafka: KafkaResource
    ) -> dg.SensorResult:
        queued = [dg.DagsterRunStatus.QUEUED]
        if context.instance.get_runs_count(dg.RunsFilter(job_name=job.name, statuses=queued)):
            # The queued run covers its tables' events up to its start; the cursor stays, so
            # the first tick after it starts asks for everything else at once. Queued only: a
            # run left NOT_STARTED (its launch never came) must not hold every table back.
            return dg.SensorResult(
                run_requests=[], cursor=context.cursor, skip_reason="an ingest run is waiting"
            )
        seen: dict[str, dict[str, int]] = json.loads(context.cursor or "{}")
        by_topic = watched(context)
        latest = kafka.latest_offsets(list(by_topic))
        hour = current_hour_key(datetime.now(UTC))
        # A table being read by a micro-batch, or by an ingest started by hand or a backfill.
        busy = tables_in_runs(context.instance, job.name, "cdc", IN_FLIGHT)
        busy |= tables_in_runs(context.instance, INGEST_JOB, "cdc", IN_FLIGHT)
        # A table whose continuous worker is alive: the worker reads it within seconds. A dead
        # worker's tables fall back to these runs until the continuous_workers sensor replaces it.
        busy |= live_worker_tables(context.instance)
        grown: dict[str, dict[str, int]] = {}
        for topic, offsets in sorted(latest.items()):
            current = {str(p): o for p, o in sorted(offsets.items())}
            if current == seen.get(topic) or not any(current.values()):
                continue
            if by_topic[topic].name in busy:
                # That run reads to the end it finds when it starts; the cursor stays, so the next
                # tick after it asks again for what arrived since. No pile of queued runs.
                continue
            grown[topic] = current
        if not grown:
            return dg.SensorResult(run_requests=[], cursor=context.cursor)
        tables = sorted({by_topic[t].name for t in grown})
        key = hashlib.sha256(json.dumps(grown, sort_keys=True).encode()).hexdigest()[:16]
        selection = sync_selection(tables, history, groups)
        # Only the accounting of this very ingest; the checks that read whole tables run on
        # the `table_checks` schedule, not after every batch (they would hold back the next).
        checks = [dg.AssetCheckKey(asset_key("cdc", t), ACCOUNTING_CHECK) for t in tables]
        request = dg.RunRequest(
            run_key=f"offsets:{key}",
            partition_key=hour,
            asset_selection=selection,
            asset_check_keys=checks,
            tags={
                **table_tags(tables),
                "cdc/trigger": "new_offsets",
                **MICRO_BATCH_RETRIES,
                **(k8s_config_tag(selection, checks) if k8s_run_tables else {}),
            },
        )
        seen.update(grown)
        return dg.SensorResult(run_requests=[request], cursor=json.dumps(seen, sort_keys=True))

    return new_kafka_offsets
