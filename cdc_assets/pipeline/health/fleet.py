"""Measure the fleet metrics of every table (``checks.fleet``) without Spark: Kafka offsets and
record times, Iceberg snapshot summaries and the dead-letter table through pyiceberg, the schema
history, and the Dagster instance's run records. One table that cannot be measured reports its
error and does not stop the others.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from cdc_assets.pipeline.shared.meta_tables import read_history
from cdc_assets.pipeline.shared.offsets import OFFSETS_PROPERTY
from cdc_assets.pipeline.shared.topic import observe_topic
from cdc_assets.pipeline.shared.watermark import base_state, shard_of
from cdc_assets.quality.fleet import TableMetrics
from cdc_assets.resources.kafka_client import KafkaClient
from cdc_assets.schema.layers import base_layout, dead_letter_layout, ledger_layout
from cdc_assets.spec.models import TableSpec

RUN_JOBS = ("sync_tables", "ingest_ledgers", "upsert_bases", "evolve_schemas", "maintain_tables")


def _load(iceberg_catalog: Any, layout: Any) -> Any:
    return iceberg_catalog.load_table(f"{layout.namespace}.{layout.name}")


def unapplied_since(ledger: Any, applied_sequence: int) -> int | None:
    """Commit time (ms) of the oldest ingest commit base has not applied (None: none)."""
    from pyiceberg.table.snapshots import ancestors_of

    current = ledger.current_snapshot()
    if current is None:
        return None
    oldest = None
    for snapshot in ancestors_of(current, ledger.metadata):
        if (snapshot.sequence_number or 0) <= applied_sequence:
            break
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        if OFFSETS_PROPERTY in props:
            oldest = snapshot.timestamp_ms
    return oldest


def dead_letter_reasons(iceberg_catalog: Any, spec: TableSpec) -> dict[str, int]:
    table = _load(iceberg_catalog, dead_letter_layout(spec))
    if table.current_snapshot() is None:
        return {}
    reasons = table.scan(selected_fields=("reason",)).to_arrow().column("reason").to_pylist()
    return dict(Counter(str(r) for r in reasons))


def table_metrics(
    kafka: KafkaClient,
    iceberg_catalog: Any,
    spec: TableSpec,
    *,
    run_seconds: dict[str, float] | None = None,
    now_s: float | None = None,
) -> TableMetrics:
    now_s = time.time() if now_s is None else now_s
    values: dict[str, Any] = {"run_seconds": run_seconds or {}}
    errors = []
    try:
        observed = observe_topic(kafka, iceberg_catalog, spec)
        values["lag_records"] = sum(observed.lag.values())
        oldest = observed.oldest_unread_ms
        values["lag_seconds"] = max(now_s - oldest / 1000, 0.0) if oldest is not None else 0.0
    except Exception as exc:  # a missing topic, an unreachable broker: reported, not raised
        errors.append(f"kafka: {exc}")
    try:
        ledger = _load(iceberg_catalog, ledger_layout(spec))
        state = base_state(_load(iceberg_catalog, base_layout(spec)), shard_of(spec))
        waiting = unapplied_since(ledger, state.ledger_sequence)
        values["watermark_delay_seconds"] = (
            0.0 if waiting is None else max(now_s - waiting / 1000, 0.0)
        )
        values["dead_letters"] = dead_letter_reasons(iceberg_catalog, spec)
        applied = [
            e
            for e in read_history(iceberg_catalog, spec.name)
            if e.decision in ("applied", "partial")
        ]
        values["evolutions"] = len(applied)
        newest = applied[-1] if applied else None
        if newest is not None and newest.detected_at is not None:
            values["last_evolution_seconds"] = max(
                (newest.applied_at - newest.detected_at).total_seconds(), 0.0
            )
    except Exception as exc:  # tables not onboarded yet: reported, not raised
        errors.append(f"iceberg: {exc}")
    return TableMetrics(
        spec.name,
        spec.source.server_name,
        spec.source.topic,
        error="; ".join(errors) or None,
        **values,
    )


def newest_run_seconds(
    instance: Any, tables: Iterable[str], limit: int = 1000
) -> dict[str, dict[str, float]]:
    """Per table, the duration of the newest finished run of each pipeline job that names the
    table in its ``cdc/tables`` (or ``cdc/table``) tag, from the newest ``limit`` runs."""
    wanted = set(tables)
    out: dict[str, dict[str, float]] = {t: {} for t in wanted}
    for record in instance.get_run_records(limit=limit):
        run = record.dagster_run
        if run.job_name not in RUN_JOBS or record.start_time is None or record.end_time is None:
            continue
        named = run.tags.get("cdc/tables") or run.tags.get("cdc/table") or ""
        for table in {t for t in named.split(",") if t} & wanted:
            out[table].setdefault(run.job_name, record.end_time - record.start_time)
    return out


def fleet_metrics(
    kafka: KafkaClient, iceberg_catalog: Any, specs: list[TableSpec], instance: Any = None
) -> list[TableMetrics]:
    runs = newest_run_seconds(instance, [s.name for s in specs]) if instance is not None else {}
    now_s = datetime.now(UTC).timestamp()
    # A sharded table: a row per shard (its own topic, ledger and upsert state).
    return [
        table_metrics(kafka, iceberg_catalog, v, run_seconds=runs.get(s.name), now_s=now_s)
        for s in specs
        for v in s.shard_specs()
    ]
