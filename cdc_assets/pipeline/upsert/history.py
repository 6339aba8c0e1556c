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
from datetime import UTC, datetime
from typing import Any

from cdc_assets.pipeline.shared.offsets import KIND_PROPERTY
from cdc_assets.pipeline.shared.tables import ensure_tables, ensure_txn_columns
from cdc_assets.pipeline.shared.watermark import (
    commit_properties_only,
    is_commit_conflict,
    snapshot_properties,
)
from cdc_assets.pipeline.upsert.upsert import (
    COMMIT_RETRIES,
    PLACEHOLDER_CONNECTORS,
    load_table,
    spark_identifier,
)
from cdc_assets.quality.history_replay import order_key, replay_history
from cdc_assets.quality.rules import HistoryComparison
from cdc_assets.schema.layers import history_layout, ledger_layout
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.ddl import literal, quote, spark_type, temp_view_name
from cdc_assets.sql.history import (
    render_changes,
    render_history_merge,
    render_prior,
    render_touched_keys,
    render_truncates,
    render_versions,
)
from cdc_assets.sql.upsert import (
    data_names,
    key_names,
    movable_keys,
    old_key_values,
    render_pinned_changes,
)

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


def pinned_ledger_view(
    spark: Any, catalog: str, ledger: Any, spec: TableSpec, snapshot_id: int | None = None
) -> str:
    """A temp view of the whole ledger at a snapshot (default: the current one), in the current
    column names."""
    layout = ledger_layout(spec)
    snapshot = (
        ledger.current_snapshot() if snapshot_id is None else ledger.snapshot_by_id(snapshot_id)
    )
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
    spark: Any, catalog: str, iceberg_catalog: Any, spec: TableSpec, *, full: bool = False
) -> HistoryResult:
    """Bring the history table of ``spec`` (one shard's view of a sharded table) up to its
    ledger; with ``full``, every key's versions from the whole ledger. Retried when another
    writer commits to the history first."""
    started = time.monotonic()
    result = HistoryResult(spec.name)
    history_l = history_layout(spec)
    if not iceberg_catalog.table_exists(f"{history_l.namespace}.{history_l.name}"):
        ensure_tables(spark, catalog, spec)
    for attempt in range(1, COMMIT_RETRIES + 1):
        result.attempts = attempt
        try:
            _run(spark, catalog, iceberg_catalog, spec, result, full)
            break
        except Exception as exc:  # py4j/pyspark wrap Iceberg's commit exceptions
            lost = isinstance(exc, _OvertakenError) or is_commit_conflict(exc)
            if attempt == COMMIT_RETRIES or not lost:
                raise
            time.sleep(0.5 * attempt)
    result.seconds = time.monotonic() - started
    return result


def _run(
    spark: Any,
    catalog: str,
    iceberg_catalog: Any,
    spec: TableSpec,
    result: HistoryResult,
    full: bool,
) -> None:
    history_l = history_layout(spec)
    history_t = ensure_txn_columns(load_table(iceberg_catalog, history_l), history_l)
    ledger = ensure_txn_columns(
        load_table(iceberg_catalog, ledger_layout(spec)), ledger_layout(spec)
    )
    current = ledger.current_snapshot()
    if current is None:
        result.mode, result.reason = "up-to-date", "the ledger is empty"
        return
    shard = shard_name(spec)
    states = history_state(history_t)
    start = states.get(shard)
    result.ledger_snapshot = int(current.snapshot_id)
    if start == current.snapshot_id and not full:
        result.mode, result.reason = "up-to-date", f"history reflects ledger snapshot {start}"
        return
    reason = "a full recomputation was asked for" if full else _since(ledger, start)
    views: list[str] = []
    history = spark_identifier(catalog, history_l)
    names = (history_l.namespace, history_l.name)
    pinned = pinned_ledger_view(spark, catalog, ledger, spec)
    views.append(pinned)
    try:
        if reason is None:
            new = _appended_view(spark, catalog, ledger, spec, start)  # type: ignore[arg-type]
            views += [new + "_raw", new]
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
        spark.sql(f"CREATE OR REPLACE TEMP VIEW {truncates} AS {render_truncates(spec, pinned)}")
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
        # Newest first: a view still defined over a dropped one fails Spark's uncaching, which
        # logs that failure as an ERROR with a stack trace.
        for view in reversed(views):
            spark.catalog.dropTempView(view)


def compare_history(
    spark: Any, catalog: str, iceberg_catalog: Any, spec: TableSpec, sample: int = 200
) -> HistoryComparison:
    """Up to ``sample`` keys' versions in the history (one shard's view of a sharded table)
    against the plain-Python replay of their ledger changes at the ledger snapshot the history
    reflects, and the keys without exactly one current version."""
    history_l = history_layout(spec)
    history_t = load_table(iceberg_catalog, history_l)
    current = history_t.current_snapshot()
    start = history_state(history_t).get(shard_name(spec))
    if current is None or start is None:
        ledger_now = load_table(iceberg_catalog, ledger_layout(spec)).current_snapshot()
        return HistoryComparison(0, 0, 0, built=ledger_now is None)
    keys = key_names(spec)
    history = f"{spark_identifier(catalog, history_l)} VERSION AS OF {int(current.snapshot_id)}"
    shard = ""
    if spec.shard_column and spec.shard is not None:
        shard = f"WHERE {quote(spec.shard_column)} = {literal(spec.shard.shard_name)}"
    key_list = ", ".join(quote(k) for k in keys)
    open_keys = spark.sql(
        f"SELECT count(1) AS n FROM (SELECT {key_list}, count_if(_is_current) AS c "
        f"FROM {history} {shard} GROUP BY {key_list}) WHERE c <> 1"
    ).collect()[0]["n"]
    names = (history_l.namespace, history_l.name)
    picked = temp_view_name("history_sample", *names)
    ledger = load_table(iceberg_catalog, ledger_layout(spec))
    pinned = pinned_ledger_view(spark, catalog, ledger, spec, start)
    # Keys the history holds and keys the ledger holds (one the history lacks is a difference).
    order = f"ORDER BY xxhash64({key_list}), {key_list} LIMIT {int(sample) // 2 + 1}"
    spark.sql(
        f"CREATE OR REPLACE TEMP VIEW {picked} AS SELECT DISTINCT * FROM ("
        f"(SELECT DISTINCT {key_list} FROM {history} {shard} {order}) UNION ALL "
        f"(SELECT DISTINCT {key_list} FROM {pinned} WHERE _op IN ('c', 'u', 'r', 'd') {order}))"
    )
    try:
        chosen = {tuple(r[k] for k in keys) for r in spark.sql(f"SELECT * FROM {picked}").collect()}
        on = " AND ".join(f"l.{quote(k)} = k.{quote(k)}" for k in keys)
        wanted = f"EXISTS (SELECT 1 FROM {picked} k WHERE {on})"
        old = old_key_values(spec, "l") if movable_keys(spec) else None
        if old is not None:
            moved = " AND ".join(
                f"{old[k]} = k.{quote(k)}" if k in old else f"l.{quote(k)} = k.{quote(k)}"
                for k in keys
            )
            wanted += (
                f" OR (l._op = 'u' AND l._before_json IS NOT NULL AND "
                f"EXISTS (SELECT 1 FROM {picked} k WHERE {moved}))"
            )
        ledger_rows = [
            r.asDict(recursive=True)
            for r in spark.sql(f"SELECT * FROM {pinned} l WHERE l._op = 't' OR {wanted}").collect()
        ]
        on_h = " AND ".join(f"h.{quote(k)} = k.{quote(k)}" for k in keys)
        stored = [
            r.asDict(recursive=True)
            for r in spark.sql(
                f"SELECT h.* FROM {history} h LEFT SEMI JOIN {picked} k ON {on_h}"
            ).collect()
        ]
    finally:
        spark.catalog.dropTempView(picked)  # defined over pinned: dropped first
        spark.catalog.dropTempView(pinned)
    expected = replay_history(
        ledger_rows,
        data_columns=data_names(spec),
        key_fields=[(c.name, c.sink_name) for c in spec.key_columns],
        shard_column=spec.shard_column,
        carry_unavailable=spec.source.connector in PLACEHOLDER_CONNECTORS,
        old_keys=old is not None,
    )
    actual: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in stored:
        actual.setdefault(tuple(row[k] for k in keys), []).append(row)
    columns = history_l.column_names
    examples: list[str] = []
    differing = versions = 0
    for key in sorted(chosen, key=repr):
        got, want = actual.get(key, []), expected.get(key, [])
        versions += len(want)
        got.sort(key=order_key)
        problem = _difference(want, got, columns)
        if problem is not None:
            differing += 1
            if len(examples) < 5:
                examples.append(f"key {key}: {problem}")
    return HistoryComparison(len(chosen), versions, differing, examples, int(open_keys))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    return bool(a == b)


def _difference(
    want: list[dict[str, Any]], got: list[dict[str, Any]], columns: list[str]
) -> str | None:
    """How stored versions differ from the replayed ones (column names, never values)."""
    at_want, at_got = [order_key(v) for v in want], [order_key(v) for v in got]
    if at_want != at_got:
        return f"versions at {at_got}, the replay has {at_want}"
    for w, g in zip(want, got, strict=True):
        wrong = [c for c in columns if not _same(w.get(c), g.get(c))]
        if wrong:
            return f"version at {order_key(w)} differs in {', '.join(wrong)}"
    return None


def read_as_of(iceberg_catalog: Any, spec: TableSpec, at: datetime) -> Any:
    """The table as the source held it at source time ``at`` (an aware datetime), read from
    its history with pyiceberg: each key's version valid then, without deleted ones, in base's
    data columns (a pyarrow Table)."""
    from pyiceberg import expressions as ex

    # pydantic's mypy plugin misreads pyiceberg's predicates' constructors
    eq: Any = ex.EqualTo
    le: Any = ex.LessThanOrEqual
    gt: Any = ex.GreaterThan
    null: Any = ex.IsNull
    table = load_table(iceberg_catalog, history_layout(spec))
    when = at.astimezone(UTC).isoformat()
    row_filter = ex.And(
        eq("_is_deleted", False),
        le("_valid_from", when),
        ex.Or(null("_valid_to"), gt("_valid_to", when)),
    )
    return table.scan(row_filter=row_filter, selected_fields=tuple(data_names(spec))).to_arrow()
