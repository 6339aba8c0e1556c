"""Keep a table's history (SCD type 2) in step with its ledger: one MERGE per run.

Level-triggered: the history table's snapshot summary records the ledger snapshot it reflects
(``cdc.history.ledger``, per shard). A run compares that with the ledger as it is now:

- the same snapshot: nothing to do;
- only appends since (ingests, redrives): *incremental*. The keys of the appended changes are
  the touched keys; their timelines are recomputed from their stored versions plus the new
  changes, and MERGEd. The cost follows the changed keys, not the table;
- anything else (no history yet, the recorded snapshot expired, ledger rows rewritten by a
  backfill or an hour rebuild, a truncate among the new changes): *full*: every key's timeline
  from the whole ledger, MERGEd the same way (unchanged versions are left alone).

The data and the new state are one Iceberg commit, so a crash leaves the history where it was,
and a rerun recomputes the same versions (a MERGE that finds them changes nothing).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from cdc_assets.pipeline.offsets import KIND_PROPERTY
from cdc_assets.pipeline.tables import ensure_tables
from cdc_assets.pipeline.upsert import (
    COMMIT_RETRIES,
    PLACEHOLDER_CONNECTORS,
    load_table,
    spark_identifier,
)
from cdc_assets.pipeline.watermark import (
    commit_properties_only,
    is_commit_conflict,
    snapshot_properties,
)
from cdc_assets.schema.layers import history_layout, ledger_layout
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.ddl import quote, spark_type, temp_view_name
from cdc_assets.sql.history import (
    render_changes,
    render_history_merge,
    render_prior,
    render_touched_keys,
    render_truncates,
    render_versions,
)
from cdc_assets.sql.upsert import render_pinned_changes

STATE_PROPERTY = "cdc.history.ledger"
HISTORY_KIND = "history"
# Ledger operations that only add rows (an incremental run reads them) or only rearrange them
# (compaction: nothing to read). Any other (overwrite, delete) rewrote rows: a full run.
APPEND_OPERATIONS = ("append",)
REARRANGE_OPERATIONS = ("replace",)


class _OvertakenError(Exception):
    """Another writer committed to the history between this run's read and its commit."""


@dataclass
class HistoryResult:
    """What one history run did."""

    table: str
    mode: str = "up-to-date"  # up-to-date, incremental or full
    reason: str = ""
    touched_keys: int | None = None  # keys whose timelines were recomputed (incremental)
    ledger_snapshot: int | None = None
    snapshot_id: int | None = None
    summary: dict[str, str] = field(default_factory=dict)
    attempts: int = 0
    seconds: float = 0.0


def shard_name(spec: TableSpec) -> str:
    return spec.shard.shard_name if spec.shard is not None else ""


def history_state(table: Any) -> dict[str, int]:
    """Per shard ("" unsharded), the ledger snapshot the history reflects: from the newest
    snapshot of the history's lineage that recorded one ({} when none did)."""
    from pyiceberg.table.snapshots import ancestors_of

    current = table.current_snapshot()
    if current is None:
        return {}
    for snapshot in ancestors_of(current, table.metadata):
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        if STATE_PROPERTY in props:
            return {k: int(v) for k, v in json.loads(props[STATE_PROPERTY]).items()}
    return {}


def _since(ledger: Any, start: int | None) -> str | None:
    """None when the ledger only had rows appended (or compacted) after snapshot ``start``;
    else why the whole ledger must be read."""
    from pyiceberg.table.snapshots import ancestors_of

    if start is None:
        return "no history yet"
    for snapshot in ancestors_of(ledger.current_snapshot(), ledger.metadata):
        if snapshot.snapshot_id == start:
            return None
        operation = str(snapshot.summary.operation.value) if snapshot.summary else "append"
        if operation not in APPEND_OPERATIONS + REARRANGE_OPERATIONS:
            return f"ledger rows were rewritten ({operation} in snapshot {snapshot.snapshot_id})"
    return f"ledger snapshot {start} is no longer in the ledger's history (expired or rolled back)"


def _appended_view(spark: Any, catalog: str, ledger: Any, spec: TableSpec, start: int) -> str:
    """A temp view of the ledger rows appended after snapshot ``start`` up to the current one,
    with every column the history reads (null when the ledger lacks it)."""
    layout = ledger_layout(spec)
    identifier = f"{catalog}.{layout.namespace}.{layout.name}"
    frame = (
        spark.read.format("iceberg")
        .option("start-snapshot-id", str(start))
        .option("end-snapshot-id", str(ledger.current_snapshot().snapshot_id))
        .load(identifier)
    )
    present = set(frame.columns)
    select = ", ".join(
        quote(c.name)
        if c.name in present
        else f"CAST(NULL AS {spark_type(c.type)}) AS {quote(c.name)}"
        for c in layout.columns
    )
    view = temp_view_name("history_new", layout.namespace, layout.name)
    frame.createOrReplaceTempView(view + "_raw")
    spark.sql(f"CREATE OR REPLACE TEMP VIEW {view} AS SELECT {select} FROM {view}_raw")
    return view


def _pinned_ledger(spark: Any, catalog: str, ledger: Any, spec: TableSpec) -> str:
    """A temp view of the whole ledger at its current snapshot, in the current column names."""
    layout = ledger_layout(spec)
    snapshot = ledger.current_snapshot()
    current = ledger.schema()
    written = next(
        (s for s in ledger.metadata.schemas if s.schema_id == snapshot.schema_id), current
    )
    name_then = {f.field_id: f.name for f in written.fields}
    written_as = {f.name: name_then.get(f.field_id) for f in current.fields}
    select = render_pinned_changes(
        spark_identifier(catalog, layout),
        snapshot.snapshot_id,
        [(c.name, c.type) for c in layout.columns],
        written_as,
    )
    view = temp_view_name("history_ledger", layout.namespace, layout.name)
    spark.sql(f"CREATE OR REPLACE TEMP VIEW {view} AS {select}")
    return view


def update_history(
    spark: Any, catalog: str, iceberg_catalog: Any, spec: TableSpec
) -> HistoryResult:
    """Bring the history table of ``spec`` (one shard's view of a sharded table) up to its
    ledger. Retried when another writer commits to the history first."""
    started = time.monotonic()
    result = HistoryResult(spec.name)
    history_l = history_layout(spec)
    if not iceberg_catalog.table_exists(f"{history_l.namespace}.{history_l.name}"):
        ensure_tables(spark, catalog, spec)
    for attempt in range(1, COMMIT_RETRIES + 1):
        result.attempts = attempt
        try:
            _run(spark, catalog, iceberg_catalog, spec, result)
            break
        except Exception as exc:  # py4j/pyspark wrap Iceberg's commit exceptions
            lost = isinstance(exc, _OvertakenError) or is_commit_conflict(exc)
            if attempt == COMMIT_RETRIES or not lost:
                raise
            time.sleep(0.5 * attempt)
    result.seconds = time.monotonic() - started
    return result


def _run(
    spark: Any, catalog: str, iceberg_catalog: Any, spec: TableSpec, result: HistoryResult
) -> None:
    history_l = history_layout(spec)
    history_t = load_table(iceberg_catalog, history_l)
    ledger = load_table(iceberg_catalog, ledger_layout(spec))
    current = ledger.current_snapshot()
    if current is None:
        result.mode, result.reason = "up-to-date", "the ledger is empty"
        return
    shard = shard_name(spec)
    states = history_state(history_t)
    start = states.get(shard)
    result.ledger_snapshot = int(current.snapshot_id)
    if start == current.snapshot_id:
        result.mode, result.reason = "up-to-date", f"history reflects ledger snapshot {start}"
        return
    reason = _since(ledger, start)
    views: list[str] = []
    history = spark_identifier(catalog, history_l)
    names = (history_l.namespace, history_l.name)
    pinned = _pinned_ledger(spark, catalog, ledger, spec)
    views.append(pinned)
    try:
        if reason is None:
            new = _appended_view(spark, catalog, ledger, spec, start)  # type: ignore[arg-type]
            views += [new, new + "_raw"]
            if spark.sql(f"SELECT 1 FROM {new} WHERE _op = 't' LIMIT 1").collect():
                reason = "a truncate among the new changes ends every key's version"
        source = pinned if reason is not None else new
        changes = temp_view_name("history_changes", *names)
        spark.sql(f"CREATE OR REPLACE TEMP VIEW {changes} AS {render_changes(spec, source)}")
        views.append(changes)
        parts = [changes]
        if reason is None:
            result.mode, result.reason = "incremental", f"appends since ledger snapshot {start}"
            touched = temp_view_name("history_touched", *names)
            keys = spark.sql(render_touched_keys(spec, changes)).localCheckpoint()
            keys.createOrReplaceTempView(touched)
            views.append(touched)
            result.touched_keys = int(keys.count())
            prior = temp_view_name("history_prior", *names)
            spark.sql(
                f"CREATE OR REPLACE TEMP VIEW {prior} AS {render_prior(spec, history, touched)}"
            )
            views.append(prior)
            parts.append(prior)
        else:
            result.mode, result.reason = "full", reason
        truncates = temp_view_name("history_truncates", *names)
        spark.sql(f"CREATE OR REPLACE TEMP VIEW {truncates} AS {render_truncates(pinned)}")
        views.append(truncates)
        versions = temp_view_name("history_versions", *names)
        select = render_versions(
            spec,
            parts,
            truncates,
            carry_unavailable=spec.source.connector in PLACEHOLDER_CONNECTORS,
        )
        # Computed once, before the MERGE reads the history table it also reads from.
        spark.sql(select).localCheckpoint().createOrReplaceTempView(versions)
        views.append(versions)
        props = {
            STATE_PROPERTY: json.dumps(
                {**{k: str(v) for k, v in states.items()}, shard: str(current.snapshot_id)},
                sort_keys=True,
            ),
            KIND_PROPERTY: HISTORY_KIND,
        }
        before = history_t.current_snapshot()
        with snapshot_properties(spark, props):
            spark.sql(render_history_merge(spec, history, versions))
        table = load_table(iceberg_catalog, history_l)
        if history_state(table).get(shard) != current.snapshot_id:
            # No version changed, so Spark made no commit: record the new state on its own.
            if (table.current_snapshot() and table.current_snapshot().snapshot_id) != (
                before and before.snapshot_id
            ):
                raise _OvertakenError(f"{spec.name}: another writer committed to the history")
            commit_properties_only(table, props)
            table = load_table(iceberg_catalog, history_l)
        snapshot = table.current_snapshot()
        result.snapshot_id = int(snapshot.snapshot_id) if snapshot else None
        result.summary = dict(snapshot.summary.additional_properties) if snapshot else {}
    finally:
        for view in views:
            spark.catalog.dropTempView(view)
