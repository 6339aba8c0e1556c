"""Upkeep of one spec's Iceberg tables with Iceberg's Spark procedures (no Dagster here).

In order: forget tombstones past their retention, compact base, tombstones and history (data
files, then position deletes), expire old snapshots of every layer, remove orphan files. Safe
while upserts and ingests run: every step is one or more atomic Iceberg commits, a step that
loses a commit race is retried, and snapshot expiry keeps the snapshots the pipeline resumes
from (base's newest ``cdc.watermark`` snapshot; the ledger's newest ``cdc.offsets`` snapshot and
every ledger snapshot base has not read yet, redrives included; a history's newest
``cdc.history.ledger`` snapshot and the ledger snapshot it names) whatever the retention says.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from cdc_assets.errors import CdcAssetsError
from cdc_assets.pipeline.shared.offsets import KIND_PROPERTY, OFFSETS_PROPERTY, REPROTECT_KIND
from cdc_assets.pipeline.shared.pause import table_paused
from cdc_assets.pipeline.shared.watermark import (
    WATERMARK,
    base_state,
    is_commit_conflict,
    state_key,
)
from cdc_assets.pipeline.upsert.history import STATE_PROPERTY as HISTORY_STATE
from cdc_assets.pipeline.upsert.history import history_state
from cdc_assets.pipeline.upsert.upsert import spark_identifier
from cdc_assets.schema.layers import TableLayout, all_layouts
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.ddl import literal, quote, render_write_order

# Iceberg's remove_orphan_files refuses a cutoff younger than a day: a younger file may belong
# to a commit still being written (an upsert, an ingest, a compaction).
MIN_ORPHAN_AGE = timedelta(hours=24)
COMMIT_ATTEMPTS = 4
RETRY_BASE_SECONDS = 1.0

# Bin-pack compaction: any partition (bucket) holding two or more small files is rewritten into
# target-size files, deletes applied. Partial progress commits file groups one by one, so a group
# that loses a race with an upsert leaves the others committed (Iceberg only logs the lost
# group, and its files are compacted by the next run).
REWRITE_DATA_OPTIONS = {
    "min-input-files": "2",
    "partial-progress.enabled": "true",
    "partial-progress.max-commits": "10",
    "remove-dangling-deletes": "true",
}
REWRITE_DELETES_OPTIONS = {
    "min-input-files": "2",
    "partial-progress.enabled": "true",
    "partial-progress.max-commits": "10",
}

COMPACTED_LAYERS = ("base", "tombstones", "history")
ALL_LAYERS = ("base", "tombstones", "history", "bucketed", "cdc", "dead_letter")
# The maintenance session of each parent session (see isolated_session).
_SESSIONS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


class MaintenanceError(CdcAssetsError):
    """Maintenance cannot run for a table (for example its tables do not exist yet)."""


class MaintenanceConflictError(MaintenanceError):
    """A step kept losing commit races with concurrent writers; ``result`` has the other steps."""

    def __init__(self, message: str, result: MaintenanceResult) -> None:
        super().__init__(message)
        self.result = result


@dataclass
class StepResult:
    """One procedure run on one table: what it did, how many commit attempts it took."""

    step: str
    layer: str
    table: str
    counts: dict[str, int] = field(default_factory=dict)
    attempts: int = 0
    seconds: float = 0.0
    note: str = ""
    error: str = ""


@dataclass
class MaintenanceResult:
    """Every step of one maintenance run of one spec's tables."""

    table: str
    steps: list[StepResult] = field(default_factory=list)
    seconds: float = 0.0

    def total(self, count: str, step: str | None = None) -> int:
        return sum(s.counts.get(count, 0) for s in self.steps if step is None or s.step == step)

    @property
    def failed(self) -> list[StepResult]:
        return [s for s in self.steps if s.error]

    def totals(self) -> dict[str, int]:
        """The headline numbers of the run, summed over its steps."""
        return {
            "tombstones_purged": self.total("tombstones_purged"),
            "data_files_rewritten": self.total("rewritten_data_files_count"),
            "data_files_added": self.total("added_data_files_count"),
            "data_bytes_rewritten": self.total("rewritten_bytes_count", "rewrite_data_files"),
            "data_files_failed": self.total("failed_data_files_count"),
            "delete_files_removed": self.total("removed_delete_files_count")
            + self.total("rewritten_delete_files_count"),
            "delete_files_added": self.total("added_delete_files_count"),
            "snapshots_expired": self.total("snapshots_expired"),
            "files_deleted_by_expiry": sum(
                self.total(c, "expire_snapshots")
                for c in (
                    "deleted_data_files_count",
                    "deleted_position_delete_files_count",
                    "deleted_equality_delete_files_count",
                    "deleted_manifest_files_count",
                    "deleted_manifest_lists_count",
                    "deleted_statistics_files_count",
                )
            ),
            "orphan_files_removed": self.total("orphan_files_removed"),
            "commit_retries": sum(max(s.attempts - 1, 0) for s in self.steps),
        }


@dataclass(frozen=True)
class SnapshotPoint:
    """What expiry needs to know of one snapshot of a table's current lineage."""

    snapshot_id: int
    timestamp_ms: int
    sequence_number: int
    properties: Mapping[str, str]


@dataclass(frozen=True)
class Expiry:
    """Arguments of one expire_snapshots call."""

    older_than_ms: int
    retain_last: int
    protected: int  # newest ancestors the pipeline still needs (0: none)


# -- pure parts: SQL and the expiry bounds ------------------------------------------------------


def timestamp_literal(moment_ms: int) -> str:
    """A Spark SQL TIMESTAMP literal for an epoch-millisecond instant, exact to the millisecond."""
    moment = datetime.fromtimestamp(moment_ms // 1000, UTC)
    return f"TIMESTAMP '{moment:%Y-%m-%d %H:%M:%S}.{moment_ms % 1000:03d}+00:00'"


def epoch_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def procedure_options(options: Mapping[str, str]) -> str:
    """A procedure's ``options`` argument: ``map('k', 'v', ...)``, keys sorted."""
    pairs = ", ".join(f"{literal(k)}, {literal(v)}" for k, v in sorted(options.items()))
    return f"map({pairs})"


def render_procedure(catalog: str, procedure: str, table: str, **args: str) -> str:
    """``CALL <catalog>.system.<procedure>(table => '<table>', name => value, ...)``.

    ``table`` is the full Spark identifier (catalog included, so Iceberg does not first try the
    namespace as a catalog name); ``args`` are already SQL expressions.
    """
    rendered = [f"table => {literal(table)}"] + [f"{k} => {v}" for k, v in args.items()]
    return f"CALL {quote(catalog)}.system.{procedure}({', '.join(rendered)})"


def render_rewrite_data_files(catalog: str, table: str, *, sort: bool = False) -> str:
    """Compaction; with ``sort`` the rewritten files are sorted by the table's sort order (the
    key, for base and tombstones), so their statistics keep bounding key ranges that the
    upsert's MERGEs prune by. Bin-packing would concatenate files of different runs."""
    strategy = {"strategy": literal("sort")} if sort else {}
    return render_procedure(
        catalog,
        "rewrite_data_files",
        table,
        **strategy,
        options=procedure_options(REWRITE_DATA_OPTIONS),
    )


def _ensure_write_order(session: Any, catalog: str, table: Any, layout: TableLayout) -> bool:
    """Give a table created before layouts had a write order (files sorted by key) that order;
    whether the table has one now."""
    if not layout.write_order:
        return False
    if table.sort_order().is_unsorted:
        sql = render_write_order(catalog, layout)
        if sql is not None:
            session.sql(sql)
    return True


def render_rewrite_position_deletes(catalog: str, table: str) -> str:
    return render_procedure(
        catalog,
        "rewrite_position_delete_files",
        table,
        options=procedure_options(REWRITE_DELETES_OPTIONS),
    )


def render_expire_snapshots(catalog: str, table: str, expiry: Expiry) -> str:
    return render_procedure(
        catalog,
        "expire_snapshots",
        table,
        older_than=timestamp_literal(expiry.older_than_ms),
        retain_last=str(expiry.retain_last),
    )


# Locations Spark lists through a Hadoop file system; any other (s3://, gs://, abfs://: object
# stores reached through Iceberg's FileIO, without Hadoop's connectors) is listed by the table's
# FileIO with prefix listing.
HADOOP_LISTED = ("file:", "hdfs:", "/")


def render_remove_orphan_files(
    catalog: str, table: str, older_than_ms: int, location: str = ""
) -> str:
    extra = {} if location.startswith(HADOOP_LISTED) or not location else {"prefix_listing": "true"}
    return render_procedure(
        catalog, "remove_orphan_files", table, older_than=timestamp_literal(older_than_ms), **extra
    )


def render_tombstone_purge(table: str, recorded_before_ms: int) -> str:
    return f"DELETE FROM {table} WHERE _recorded_at < {timestamp_literal(recorded_before_ms)}"


def protected_depth(
    lineage: Sequence[SnapshotPoint], state_property: str | None, unread_after: int | None = None
) -> int:
    """How many of the newest snapshots of ``lineage`` (newest first) the pipeline still needs.

    Those up to and including the newest one carrying ``state_property`` (the state the next
    run resumes from), and, with ``unread_after``, every snapshot whose sequence number is above
    it (ledger snapshots base has not read: the upsert looks through them for redriven files).
    A protection rewrite's own snapshots (`pipeline.maintenance.reprotect`: values rewritten in
    place, an
    empty state stamp) hold nothing to read, so they protect nothing older.
    """
    depth = 0
    if state_property is not None:
        for i, point in enumerate(lineage):
            if point.properties.get(state_property):
                depth = i + 1
                break
    if unread_after is not None:
        unread = 0
        for i, point in enumerate(lineage):
            if point.sequence_number <= unread_after:
                break
            if point.properties.get(KIND_PROPERTY) != REPROTECT_KIND:
                unread = i + 1
        depth = max(depth, unread)
    return depth


def plan_expiry(
    lineage: Sequence[SnapshotPoint], protected: int, older_than_ms: int, retain_last: int
) -> Expiry:
    """Bounds that expire what retention allows and never one of the ``protected`` newest.

    Iceberg keeps a lineage snapshot when it is among the newest ``retain_last`` or not older
    than ``older_than``, walking back from the current one. Both bounds are moved so that each
    protects the needed snapshots on its own: the cutoff down to the oldest timestamp among
    them (timestamps of different writers need not increase along the lineage) and the count
    up to their number (a newer commit landing before expiry only makes them older still).
    """
    needed = lineage[:protected]
    if not needed:
        return Expiry(older_than_ms, retain_last, 0)
    cutoff = min(older_than_ms, *(p.timestamp_ms for p in needed))
    return Expiry(cutoff, max(retain_last, len(needed)), len(needed))


# -- I/O -------------------------------------------------------------------------------------


def _lineage(table: Any) -> list[SnapshotPoint]:
    """The current snapshot and its ancestors, newest first (pyiceberg)."""
    from pyiceberg.table.snapshots import ancestors_of

    current = table.current_snapshot()
    if current is None:
        return []
    return [
        SnapshotPoint(
            snapshot_id=s.snapshot_id,
            timestamp_ms=s.timestamp_ms,
            sequence_number=s.sequence_number or 0,
            properties=dict(s.summary.additional_properties) if s.summary else {},
        )
        for s in ancestors_of(current, table.metadata)
    ]


def _rows(session: Any, sql: str) -> list[dict[str, Any]]:
    return [row.asDict() for row in session.sql(sql).collect()]


def _numbers(row: Mapping[str, Any]) -> dict[str, int]:
    return {k: int(v) for k, v in row.items() if isinstance(v, int)}


class StepRunner:
    """Runs steps with commit-conflict retries, timing and progress logging."""

    def __init__(self, result: MaintenanceResult, log: Callable[[str], None]) -> None:
        self.result = result
        self.log = log

    def step(
        self, step: str, layer: str, table: str, action: Callable[[StepResult], None]
    ) -> StepResult:
        outcome = StepResult(step, layer, table)
        started = time.monotonic()
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            outcome.attempts = attempt
            outcome.counts = {}
            try:
                action(outcome)
                break
            except Exception as exc:  # py4j/pyspark wrap Iceberg's commit exceptions
                if not is_commit_conflict(exc):
                    raise
                first_line = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
                if attempt == COMMIT_ATTEMPTS:
                    outcome.error = (
                        f"still conflicting with concurrent commits after {attempt} attempts: "
                        f"{first_line}"
                    )
                    break
                delay = RETRY_BASE_SECONDS * 2 ** (attempt - 1)
                self.log(
                    f"{self.result.table}: {step} on {layer} lost a commit race "
                    f"(attempt {attempt}, {type(exc).__name__}); retrying in {delay:.0f}s"
                )
                time.sleep(delay)
        outcome.seconds = time.monotonic() - started
        self.result.steps.append(outcome)
        shown = ", ".join(f"{k}={v}" for k, v in outcome.counts.items() if v)
        self.log(
            f"{self.result.table}: {step} on {layer} "
            + (f"FAILED: {outcome.error}" if outcome.error else f"done ({shown or 'no change'})")
            + f" in {outcome.seconds:.1f}s"
            + (f"; {outcome.note}" if outcome.note else "")
        )
        return outcome


def maintain_table(
    spark: Any,
    catalog: str,
    iceberg_catalog: Any,
    spec: TableSpec,
    *,
    now: datetime | None = None,
    log: Callable[[str], None] | None = None,
) -> MaintenanceResult:
    """Compact, purge, expire and clean the spec's tables; safe while upserts and ingests run.

    ``now`` (default: the current time) is where the retention periods count back from. A step
    that still loses commit races after a few attempts does not stop the others; the run then
    raises :class:`MaintenanceConflictError` carrying every step's result. Nothing is lost
    either way: each commit is atomic, and a rerun continues where this one stopped.
    """
    started = time.monotonic()
    now = now or datetime.now(UTC)
    log = log or (lambda _message: None)
    layouts = all_layouts(spec)
    history = layouts.get("history")
    if history is not None and not iceberg_catalog.table_exists(
        f"{history.namespace}.{history.name}"
    ):
        del layouts["history"]  # switched on, not run yet: its first run creates it
    _check_tables_exist(iceberg_catalog, spec, layouts)
    session = isolated_session(spark)
    result = MaintenanceResult(spec.name)
    runner = StepRunner(result, log)
    ident = {layer: spark_identifier(catalog, layout) for layer, layout in layouts.items()}

    maintenance = spec.base.maintenance
    purge_before = epoch_ms(now - timedelta(hours=spec.base.tombstone_retention_hours))
    older_than = epoch_ms(now - timedelta(hours=maintenance.snapshot_retention_hours))
    orphan_age = max(timedelta(hours=maintenance.orphan_file_age_hours), MIN_ORPHAN_AGE)
    # Never younger than a day before the real clock, whatever ``now`` says.
    orphans_before = min(epoch_ms(now - orphan_age), epoch_ms(datetime.now(UTC) - MIN_ORPHAN_AGE))
    plan: list[Step] = [
        (
            "purge_tombstones",
            "tombstones",
            partial(_purge_tombstones, session, ident["tombstones"], purge_before),
        )
    ]
    # The history layer only where the spec keeps one.
    plan += _rewrites(
        session, catalog, iceberg_catalog, layouts, [c for c in COMPACTED_LAYERS if c in layouts]
    )
    # A sharded table's ledger, bucketed and dead-letter tables are one per shard (cdc:<shard>).
    tables = [k for layer in ALL_LAYERS for k in layouts if k.split(":")[0] == layer]
    for layer in tables:
        expire = partial(
            expire_layer,
            session,
            catalog,
            iceberg_catalog,
            layouts,
            layer,
            older_than,
            maintenance.retain_last_snapshots,
        )
        plan.append(("expire_snapshots", layer, expire))
    for layer in tables:
        layout = layouts[layer]
        location = iceberg_catalog.load_table(f"{layout.namespace}.{layout.name}").location()
        orphans = render_remove_orphan_files(catalog, ident[layer], orphans_before, location)
        plan.append(("remove_orphan_files", layer, partial(_remove_orphans, session, orphans)))
    # The rewrites compete with a continuous worker's commits (a commit every few seconds
    # could make a compaction lose its race again and again): the worker leaves the table
    # alone while they run. Expiring snapshots and removing orphans do not compete.
    tidy = ("expire_snapshots", "remove_orphan_files")
    with table_paused(iceberg_catalog, spec, "maintenance"):
        for step, layer, action in (p for p in plan if p[0] not in tidy):
            runner.step(step, layer, ident[layer], action)
    for step, layer, action in (p for p in plan if p[0] in tidy):
        runner.step(step, layer, ident[layer], action)
    result.seconds = time.monotonic() - started
    if result.failed:
        failed = "; ".join(f"{s.step} on {s.layer}: {s.error}" for s in result.failed)
        raise MaintenanceConflictError(
            f"{spec.name}: maintenance steps failed: {failed}. No data was lost (Iceberg commits "
            "are atomic); the other steps completed. Run maintenance again, ideally when fewer "
            "upserts run.",
            result,
        )
    return result


Step = tuple[str, str, Callable[[StepResult], None]]


def _rewrites(
    session: Any,
    catalog: str,
    iceberg_catalog: Any,
    layouts: Mapping[str, TableLayout],
    layers: Sequence[str],
) -> list[Step]:
    """Compaction of each layer: its data files (deletes applied), then its position deletes."""
    steps: list[Step] = []
    for layer in layers:
        layout = layouts[layer]
        ident = spark_identifier(catalog, layout)
        table = iceberg_catalog.load_table(f"{layout.namespace}.{layout.name}")
        sort = _ensure_write_order(session, catalog, table, layout)
        rewrite_data = render_rewrite_data_files(catalog, ident, sort=sort)
        rewrite_deletes = render_rewrite_position_deletes(catalog, ident)
        steps.append(("rewrite_data_files", layer, partial(_procedure, session, rewrite_data)))
        steps.append(
            ("rewrite_position_delete_files", layer, partial(_procedure, session, rewrite_deletes))
        )
    return steps


def needs_compaction(summary: Mapping[str, str], buckets: int, files_per_bucket: int) -> bool:
    """Whether base holds more data and delete files than ``files_per_bucket`` per bucket (its
    snapshot summary says; 0 never). Each MERGE adds a data file and a delete file to every bucket
    it touches, and scans slow down with their number, not with the rows changed."""
    if files_per_bucket <= 0:
        return False
    return sum(summary_count(summary, k) for k in FILE_TOTALS) > files_per_bucket * buckets


FILE_TOTALS = ("total-data-files", "total-delete-files")


def summary_count(summary: Mapping[str, str], key: str) -> int:
    """A count of a snapshot summary; 0 when absent (pyiceberg's summary ignores get's default)."""
    return int(summary.get(key) or 0)


def compact_tables(
    spark: Any,
    catalog: str,
    iceberg_catalog: Any,
    spec: TableSpec,
    *,
    log: Callable[[str], None] | None = None,
) -> MaintenanceResult:
    """Only the compaction of base and its tombstones (maintenance's rewrites, nothing expired
    or removed), for a writer that commits often: a continuous worker when base reaches
    ``base.maintenance.compact_files_per_bucket``. Raises MaintenanceConflictError as
    ``maintain_table`` does when a rewrite kept losing its commit race."""
    started = time.monotonic()
    layouts = all_layouts(spec)
    session = isolated_session(spark)
    result = MaintenanceResult(spec.name)
    runner = StepRunner(result, log or (lambda _message: None))
    for step, layer, action in _rewrites(
        session, catalog, iceberg_catalog, layouts, ("base", "tombstones")
    ):
        runner.step(step, layer, spark_identifier(catalog, layouts[layer]), action)
    result.seconds = time.monotonic() - started
    if result.failed:
        failed = "; ".join(f"{s.step} on {s.layer}: {s.error}" for s in result.failed)
        raise MaintenanceConflictError(f"{spec.name}: compaction failed: {failed}", result)
    return result


def isolated_session(spark: Any) -> Any:
    """A session with its own SQL conf on the same Spark context (one per parent session).

    Other threads' commits set snapshot properties (the upsert's watermark) in their session's
    conf while they run; a maintenance commit in that session would carry them too.
    """
    from cdc_assets.pipeline.shared.session_kind import is_connect

    if is_connect(spark):
        # A Spark Connect client has no newSession(); its SQL conf already lives in a server
        # session of its own, which no other run shares (each Dagster run is its own process).
        return spark
    session = _SESSIONS.get(spark)
    if session is None:
        session = _SESSIONS[spark] = spark.newSession()
    return session


def _check_tables_exist(
    iceberg_catalog: Any, spec: TableSpec, layouts: Mapping[str, TableLayout]
) -> None:
    missing = [
        f"{layout.namespace}.{layout.name}"
        for layout in layouts.values()
        if not iceberg_catalog.table_exists(f"{layout.namespace}.{layout.name}")
    ]
    if missing:
        raise MaintenanceError(
            f"{spec.name}: tables {missing} do not exist; run the onboard_tables job first"
        )


def _procedure(session: Any, sql: str, out: StepResult) -> None:
    rows = _rows(session, sql)
    out.counts = _numbers(rows[0]) if rows else {}


def _purge_tombstones(session: Any, table: str, before_ms: int, out: StepResult) -> None:
    condition = f"_recorded_at < {timestamp_literal(before_ms)}"
    count = int(session.sql(f"SELECT count(*) AS n FROM {table} WHERE {condition}").collect()[0][0])
    out.note = f"recorded before {timestamp_literal(before_ms)}"
    if count:
        session.sql(render_tombstone_purge(table, before_ms))
    out.counts = {"tombstones_purged": count}


def _remove_orphans(session: Any, sql: str, out: StepResult) -> None:
    removed = [str(r["orphan_file_location"]) for r in _rows(session, sql)]
    out.counts = {"orphan_files_removed": len(removed)}
    if removed:
        out.note = "e.g. " + ", ".join(removed[:3])


def expire_layer(
    session: Any,
    catalog: str,
    iceberg_catalog: Any,
    layouts: Mapping[str, TableLayout],
    layer: str,
    older_than_ms: int,
    retain_last: int,
    out: StepResult,
) -> None:
    layout = layouts[layer]
    table = _load(iceberg_catalog, layout)
    lineage = _lineage(table)
    kind, _, shard = layer.partition(":")
    if kind == "base":
        # A sharded base keeps a state per shard (every shard's ledger names them: cdc:<shard>).
        shards: list[str | None] = [k.partition(":")[2] for k in layouts if k.startswith("cdc:")]
        protected = max(protected_depth(lineage, state_key(WATERMARK, s)) for s in shards or [None])
    elif kind == "cdc":
        base = _load(iceberg_catalog, layouts["base"])
        read = base_state(base, shard or None).ledger_sequence
        protected = protected_depth(lineage, OFFSETS_PROPERTY, unread_after=read)
        if "history" in layouts:
            # The ledger snapshot the history reflects: its next run reads the appends since.
            reflected = history_state(_load(iceberg_catalog, layouts["history"])).get(shard)
            ids = [p.snapshot_id for p in lineage]
            if reflected in ids:
                protected = max(protected, ids.index(reflected) + 1)
    elif kind == "history":
        protected = protected_depth(lineage, HISTORY_STATE)
    else:
        protected = 0
    expiry = plan_expiry(lineage, protected, older_than_ms, retain_last)
    out.note = (
        f"older than {timestamp_literal(expiry.older_than_ms)}, retain last {expiry.retain_last}"
        + (f", {expiry.protected} newest kept for the pipeline state" if expiry.protected else "")
    )
    snapshots = table.snapshots()
    if not any(s.timestamp_ms < expiry.older_than_ms for s in snapshots):
        # Nothing is old enough: skip the procedure's Spark jobs.
        out.counts = {"snapshots_expired": 0}
        return
    before = {s.snapshot_id for s in snapshots}
    rows = _rows(
        session, render_expire_snapshots(catalog, spark_identifier(catalog, layout), expiry)
    )
    after = {s.snapshot_id for s in _load(iceberg_catalog, layout).snapshots()}
    out.counts = {"snapshots_expired": len(before - after), **(_numbers(rows[0]) if rows else {})}


def _load(iceberg_catalog: Any, layout: TableLayout) -> Any:
    return iceberg_catalog.load_table(f"{layout.namespace}.{layout.name}")
