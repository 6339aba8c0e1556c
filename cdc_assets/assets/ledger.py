"""The cdc asset of a table: the Iceberg ledger, one hourly Dagster partition per dt/hr (its body:
the ``tables`` op of ``assets/tables.py``).

A run for the current hour (or later) is incremental: it consumes everything new on the topic,
wherever the records' hours fall, and reports each hour it wrote. A run for an earlier hour is a
backfill: it rebuilds exactly that hour from Kafka. ``mode`` in the run config overrides this.

An hour is a partition of Kafka record timestamps, so an hour in which no record arrived has no
run that would materialize it. The first incremental run of each hour records such hours of the
last eight days as materialized with no rows (everything Kafka held before the run was read), so the
partition view shows what is in the ledger instead of gaps that read as failures. A record that
arrives late for an hour already recorded empty is reported with that hour by the run that reads
it, as any other.
"""

from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg

from cdc_assets.assets.metadata import commit_metadata, markdown_summary
from cdc_assets.pipeline.evolution import catch_up
from cdc_assets.pipeline.ingest.ingest import (
    IngestResult,
    hour_bounds,
    ingest_incremental,
    rebuild_hour,
)
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.resources.kafka import KafkaResource
from cdc_assets.schema.layers import ledger_layout
from cdc_assets.spec.models import TableSpec

# Hours this far back are recorded empty at most: a week (Kafka's default retention: older hours
# cannot be rebuilt anyway), and a day more, so that the first ingest within a day of the home's
# first load also covers the first partitions (they start a week before that load). An hour is
# only recorded once it ended LATE_GRACE before the run read Kafka.
EMPTY_HOURS_WINDOW = timedelta(days=8)
LATE_GRACE = timedelta(minutes=5)


def choose_mode(config_mode: str, partition_key: str, now: datetime) -> str:
    if config_mode != "auto":
        return config_mode
    start, _ = hour_bounds(partition_key)
    current = now.replace(minute=0, second=0, microsecond=0)
    return "incremental" if start >= current - timedelta(hours=1) else "rebuild"


def empty_hours(
    keys: Sequence[str], materialized: set[str], written: Sequence[str], read_at: datetime
) -> list[str]:
    """Hours among ``keys`` that ended before the run read the topic, are within the week Kafka
    keeps and no run has materialized: an incremental run that read everything up to
    ``read_at`` found no record in them."""
    since = read_at - EMPTY_HOURS_WINDOW
    return [
        k
        for k in keys
        if k not in materialized
        and k not in written
        and since < hour_bounds(k)[1]
        and hour_bounds(k)[1] <= read_at - LATE_GRACE
    ]


def result_metadata(result: IngestResult) -> dict[str, Any]:
    return {
        "mode": result.mode,
        "records_read": result.read,
        "ledger_rows": result.ledger,
        "dead_letters": result.dead,
        "skipped": result.skipped,
        "accounted": result.balanced,
        "skip_reasons": result.skip_reasons,
        "dead_letter_reasons": result.dead_reasons,
        "unknown_fields": result.unknown_fields,
        "start_offsets": {str(p): o for p, o in result.start_offsets.items()},
        "end_offsets": {str(p): o for p, o in result.end_offsets.items()},
        "hours_written": result.hours,
        "snapshot_id": str(result.snapshot_id) if result.snapshot_id else "",
        "seconds": round(result.seconds, 2),
    }


def ingest_table(
    spec: TableSpec,
    specs_dir: Path,
    session: Any,
    catalog_name: str,
    catalog: Any,
    kafka: KafkaResource,
    *,
    mode: str,
    partition_key: str,
    started_at: datetime,
    log: Any,
    files_per_commit: int = 0,
) -> tuple[IngestResult, dict[str, Any]]:
    """One ingest of ``spec``'s ledger (each shard's in turn) and its materialization metadata:
    the cdc asset's body, shared with the continuous worker (``jobs/continuous.py``). ``log``
    has ``info`` and ``warning`` (a Dagster log manager or a ``logging.Logger``);
    ``files_per_commit``: the incremental ingest's ledger files per hour (0: as read)."""
    runs = []
    # A sharded table has a ledger per shard: each is read from its own topic and offsets.
    for view in spec.shard_specs():
        layout = ledger_layout(view)
        if not catalog.table_exists(f"{layout.namespace}.{layout.name}"):
            # A spec (or shard) added to a running deployment: its first ingest onboards it
            # (the same code as onboard_tables: evolution from an empty schema).
            created = ensure_tables(session, catalog_name, spec)
            made = [o.identifier for o in created if o.created]
            log.info(f"{spec.name}: onboarded on its first ingest: created {made}")
        if mode == "rebuild":
            result = rebuild_hour(session, catalog_name, catalog, kafka, view, partition_key)
        else:
            result = ingest_incremental(
                session, catalog_name, catalog, kafka, view, files=files_per_commit
            )
        meta = _view_metadata(
            log, view, result, specs_dir, started_at, session, catalog_name, catalog
        )
        runs.append((view, result, meta))
    if len(runs) == 1:
        _, result, metadata = runs[0]
        return result, metadata
    return _sharded_metadata(spec, runs)


def _view_metadata(
    log: Any,
    spec: TableSpec,
    result: IngestResult,
    specs_dir: Path,
    started_at: datetime,
    session: Any,
    catalog_name: str,
    catalog: Any,
) -> dict[str, Any]:
    """Metadata of one ledger's ingest (the table's, or one shard's)."""
    metadata = result_metadata(result)
    metadata["spec_version"] = spec.spec_version
    if result.read:
        # An evolution may have made a newer spec while this run decoded with `spec`: its
        # rows and dead letters get the newer version's values (pipeline.evolution.catch_up).
        caught = catch_up.after_ingest(session, catalog_name, catalog, spec, specs_dir, started_at)
        if caught is not None:
            say = log.warning if caught.changed else log.info
            say(f"{spec.name}: {caught.reason}; caught up {caught.metadata()}")
            metadata.update(caught.metadata())
    ledger = catalog.load_table(f"{spec.sink.namespace}.{ledger_layout(spec).name}")
    metadata.update(commit_metadata(ledger, result.snapshot_id))
    metadata["summary"] = markdown_summary(
        f"{result.mode} ingest of {spec.source.topic}",
        {
            "records read": result.read,
            "ledger rows / dead letters / skipped": f"{result.ledger} / {result.dead} / "
            f"{result.skipped}",
            "offsets": ", ".join(
                f"p{p}: {result.start_offsets.get(p, 0)}..{o}"
                for p, o in sorted(result.end_offsets.items())
            )
            or "-",
            "hours written": ", ".join(result.hours) or "-",
            "snapshot": result.snapshot_id or "-",
            "seconds": round(result.seconds, 2),
        },
    )
    if result.unknown_fields:
        log.warning(
            f"{spec.name}: fields not in spec v{spec.spec_version} kept in _row_json: "
            f"{result.unknown_fields}"
        )
    return metadata


def _sharded_metadata(
    spec: TableSpec, runs: list[tuple[TableSpec, IngestResult, dict[str, Any]]]
) -> tuple[IngestResult, dict[str, Any]]:
    """One run's totals over every shard, with each shard's own metadata under its name."""
    total = IngestResult(spec.name, runs[0][1].mode, {}, {})
    hours: set[str] = set()
    for _, result, _ in runs:
        total.read += result.read
        total.ledger += result.ledger
        total.dead += result.dead
        total.skipped += result.skipped
        total.seconds += result.seconds
        hours.update(result.hours)
    total.hours = sorted(hours)
    shards = {
        view.shard.shard_name if view.shard else view.name: {
            k: v for k, v in meta.items() if k != "summary" and not k.startswith("dagster/")
        }
        for view, _, meta in runs
    }
    metadata: dict[str, Any] = {
        "mode": total.mode,
        "records_read": total.read,
        "ledger_rows": total.ledger,
        "dead_letters": total.dead,
        "skipped": total.skipped,
        "accounted": all(r.balanced for _, r, _ in runs),
        "hours_written": total.hours,
        "spec_version": spec.spec_version,
        "shards": dg.MetadataValue.json(shards),
        "seconds": round(total.seconds, 2),
        "summary": markdown_summary(
            f"{total.mode} ingest of {len(runs)} shards",
            {
                view.shard.shard_name if view.shard else view.name: (
                    f"{r.read} read, {r.ledger} / {r.dead} / {r.skipped} ledger / dead / skipped"
                )
                for view, r, _ in runs
            },
        ),
    }
    return total, metadata


def empty_hour_events(
    instance: dg.DagsterInstance,
    key: dg.AssetKey,
    partitions: dg.PartitionsDefinition,
    run_partition: str,
    written: Sequence[str],
    read_at: datetime,
    log: Any,
) -> list[dg.AssetMaterialization]:
    """Materializations of the hours of the last eight days in which no record of ledger
    ``key`` arrived (see the module docstring), once per hour: a later run of the same hour
    finds its own partition latest."""
    latest = instance.get_latest_materialization_event(key)
    done = latest.asset_materialization if latest is not None else None
    if done is not None and done.partition == run_partition:
        return []
    keys = partitions.get_partition_keys(current_time=read_at)
    hours = empty_hours(keys, instance.get_materialized_partitions(key), written, read_at)
    if hours:
        log.info(f"recorded {len(hours)} hours without records: {hours[0]}..{hours[-1]}")
    return [
        dg.AssetMaterialization(
            asset_key=key,
            partition=hour,
            description="no Kafka record of this table has a timestamp in this hour",
            metadata={
                "ledger_rows": 0,
                "records_read": 0,
                "empty": True,
                "recorded_by": run_partition,
            },
        )
        for hour in hours
    ]
