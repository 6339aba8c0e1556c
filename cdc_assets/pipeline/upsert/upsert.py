"""Ledger -> bucketed temp -> base: the two steps of an upsert run.

``build_bucketed`` reads the ledger rows base has not applied yet (a pinned ledger snapshot,
Kafka offset ranges from base's watermark, a lookback on dt), keeps the newest change per key and
replaces the bucketed table with them. Its snapshot summary records the state base starts from
and the state base reaches when they are merged.

``merge_base`` remembers the deletes (tombstones), then MERGEs the bucketed rows into base with
a storage-partitioned join, committing the new state in the same Iceberg commit as the data.

Crash safety: nothing moves base's state but the base commit. A crash before it leaves base
where it was; the rerun rebuilds the same bucketed rows (or merges the existing ones) and every
change is applied only when newer than the stored row, so a second application is a no-op.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from cdc_assets.errors import CdcAssetsError
from cdc_assets.pipeline.shared.batch_cache import session_conf
from cdc_assets.pipeline.shared.failpoint import fail_once, failpoint, hold_at, hold_directory
from cdc_assets.pipeline.shared.observed import ObservedView
from cdc_assets.pipeline.shared.offsets import (
    KIND_PROPERTY,
    OFFSETS_PROPERTY,
    REDRIVE_KIND,
    SPEC_VERSION_PROPERTY,
    committed_snapshot,
    decode_offsets,
)
from cdc_assets.pipeline.shared.session_kind import is_connect
from cdc_assets.pipeline.shared.small_work import (
    interpreted_conf,
    offsets_span,
    small_work_conf,
    snapshot_records,
)
from cdc_assets.pipeline.shared.watermark import (
    DELETE_CANDIDATES,
    FROM_STATE,
    TRUNCATE,
    UPSERT_KIND,
    WATERMARK,
    UpsertState,
    base_state,
    commit_properties_only,
    current_properties,
    is_commit_conflict,
    shard_of,
    shard_states,
    snapshot_properties,
    state_key,
)
from cdc_assets.pipeline.upsert.moved_rows import moved_values_view
from cdc_assets.schema.layers import (
    TableLayout,
    base_layout,
    bucketed_layout,
    ledger_layout,
    tombstones_layout,
)
from cdc_assets.schema.position import Position
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.ddl import quote, temp_view_name
from cdc_assets.sql.key_ranges import KeyRanges, key_ranges, render_key_ranges
from cdc_assets.sql.plan import shuffles_between_scan_and_join
from cdc_assets.sql.upsert import (
    ChangeWindow,
    may_delete,
    render_base_merge,
    render_insert_overwrite,
    render_late_keys,
    render_newest_changes,
    render_pinned_changes,
    render_tombstone_merge,
    render_window_probe,
)

log = logging.getLogger(__name__)

COMMIT_RETRIES = 5
# Iceberg's session override of the tables' write.*.distribution-mode.
DISTRIBUTION_MODE_CONF = "spark.sql.iceberg.distribution-mode"
# Connectors whose events can carry an "unavailable value" placeholder (PostgreSQL TOAST).
PLACEHOLDER_CONNECTORS = ("postgresql",)
# Below this much data base is read whole: the key-range query is a Spark job of its own (about
# 0.2 s on local[2], a fifth of a small table's MERGE), and a MERGE reads 16 MiB of base in about
# as long (2M `users` rows, 71 MB in 16 files, took 3.5 s to MERGE whole). A fleet of small
# tables pays the query on every upsert and gets nothing back.
PRUNE_MIN_BYTES = 16 * 1024 * 1024


class StaleChangesError(CdcAssetsError):
    """The bucketed table was built from another base state; rebuild it before merging."""


def spark_identifier(catalog: str, layout: TableLayout) -> str:
    return ".".join(quote(p) for p in (catalog, layout.namespace, layout.name))


def plain_identifier(catalog: str, layout: TableLayout) -> str:
    return f"{catalog}.{layout.namespace}.{layout.name}"


def load_table(iceberg_catalog: Any, layout: TableLayout) -> Any:
    return iceberg_catalog.load_table(f"{layout.namespace}.{layout.name}")


@dataclass
class BucketedResult:
    """What one bucketed build read and wrote."""

    table: str
    from_state: UpsertState
    to_state: UpsertState
    rows: int = 0
    deletes: int = 0
    truncate: Position | None = None
    redriven_files: int = 0
    up_to_date: bool = False
    seconds: float = 0.0


@dataclass
class MergeResult:
    """What one MERGE into base did."""

    table: str
    from_state: UpsertState
    to_state: UpsertState
    applied: bool = False
    up_to_date: bool = False
    storage_partitioned: bool | None = None
    snapshot_id: int | None = None
    summary: dict[str, str] = field(default_factory=dict)
    attempts: int = 0
    seconds: float = 0.0
    key_ranges: int | None = None  # ranges the MERGEs pruned base and tombstones by, if any
    # The spec version the bucketed rows were built with (None: built before it was recorded).
    built_with: int | None = None
    # How often the changes were built again because another upsert had moved base
    # (``merge_base_again``).
    rebuilt: int = 0


def _redriven_files(ledger: Any, after_sequence: int) -> list[str]:
    """Data files appended by redrives committed after the ledger sequence number base read."""
    from pyiceberg.manifest import ManifestEntryStatus
    from pyiceberg.table.snapshots import ancestors_of

    current = ledger.current_snapshot()
    files: list[str] = []
    if current is None:
        return files
    for snapshot in ancestors_of(current, ledger.metadata):
        if (snapshot.sequence_number or 0) <= after_sequence:
            break
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        if props.get(KIND_PROPERTY) != REDRIVE_KIND:
            continue
        for manifest in snapshot.manifests(ledger.io):
            if manifest.added_snapshot_id != snapshot.snapshot_id:
                continue
            for entry in manifest.fetch_manifest_entry(ledger.io, discard_deleted=True):
                if entry.status == ManifestEntryStatus.ADDED:
                    files.append(entry.data_file.file_path)
    return files


def _ledger_end(ledger: Any, start: dict[int, int]) -> dict[int, int]:
    snapshot = committed_snapshot(ledger)
    if snapshot is None:
        return dict(start)
    end = decode_offsets(snapshot.summary.additional_properties[OFFSETS_PROPERTY])
    return {**start, **end}


def build_bucketed(
    spark: Any, catalog: str, iceberg_catalog: Any, spec: TableSpec
) -> BucketedResult:
    """Replace the bucketed table with the newest change per key that base has not applied."""
    started = time.monotonic()
    ledger_l, bucketed_l = ledger_layout(spec), bucketed_layout(spec)
    tomb_l = tombstones_layout(spec)
    shard = shard_of(spec)
    base_table = load_table(iceberg_catalog, base_layout(spec))
    state = base_state(base_table, shard)
    ledger = load_table(iceberg_catalog, ledger_l)
    current = ledger.current_snapshot()
    result = BucketedResult(spec.name, state, state)
    if current is None:
        result.up_to_date = True
        result.seconds = time.monotonic() - started
        return result
    end = _ledger_end(ledger, dict(state.watermark))
    extra = _redriven_files(ledger, state.ledger_sequence)
    min_dt = None
    if state.watermark_ts is not None:
        lookback = state.watermark_ts - timedelta(hours=spec.base.lookback_hours)
        min_dt = lookback.strftime("%Y-%m-%d")
    window = ChangeWindow(
        ledger=spark_identifier(catalog, ledger_l),
        snapshot_id=current.snapshot_id,
        start=dict(state.watermark),
        end=end,
        min_dt=min_dt,
        floor=state.floor,
        extra_files=tuple(extra),
    )
    if end == dict(state.watermark) and not extra:
        result.up_to_date = True
        result.seconds = time.monotonic() - started
        return result
    # A window of a few thousand changes plans statically (pipeline.shared.small_work); redriven
    # files are of unknown size.
    size = None if extra else offsets_span(state.watermark, end)
    placeholders = spec.source.connector in PLACEHOLDER_CONNECTORS
    conf = small_work_conf(size)
    if size is not None:
        # The window's queries also read the tombstones and, for placeholder values, base.
        reads = table_records(load_table(iceberg_catalog, tomb_l))
        conf.update(
            interpreted_conf(size + reads + (table_records(base_table) if placeholders else 0))
        )
    with session_conf(spark, conf):
        probe_sql = render_window_probe(
            window, count_moves=placeholders, may_delete=may_delete(spec, "l")
        )
        probe = spark.sql(probe_sql).collect()[0]
        floor = state.floor
        truncate = None
        if probe["truncate"] is not None:
            t = probe["truncate"]
            truncate = Position(t["p0"], t["p1"], t["p2"])
            floor = max(floor, truncate) if floor is not None else truncate
        micros = probe["max_kafka_micros"]
        newest_ts = None if micros is None else datetime.fromtimestamp(micros / 1e6, UTC)
        if state.watermark_ts is not None and (newest_ts is None or newest_ts < state.watermark_ts):
            newest_ts = state.watermark_ts
        oldest, newest = _position(probe["min_position"]), _position(probe["max_position"])
        to_state = UpsertState(
            watermark=end,
            watermark_ts=newest_ts,
            ledger_sequence=current.sequence_number or 0,
            ledger_snapshot=current.snapshot_id,
            floor=floor,
            max_position=max(p for p in (state.max_position, newest) if p is not None)
            if state.max_position is not None or newest is not None
            else None,
            shard=shard,
        )
        window = ChangeWindow(**{**window.__dict__, "floor": floor})
        moved = None
        if placeholders and probe["moved_creates"]:
            moved = moved_values_view(
                spark,
                spec,
                window,
                spark_identifier(catalog, base_layout(spec)),
                view=temp_view_name("moved", spec.sink.namespace, spec.name),
            )
        late = None
        # A change older than what base applied (delivered late): with placeholders the carried
        # values of its key are recomputed from the key's ledger history. Changes all newer than
        # base's newest position cannot be late, which spares the join with base.
        maybe_late = oldest is not None and (
            state.max_position is None or oldest <= state.max_position
        )
        if placeholders and maybe_late:
            late = late_keys_view(spark, spec, window, spark_identifier(catalog, base_layout(spec)))
        select = render_newest_changes(
            spec,
            window,
            spark_identifier(catalog, tomb_l),
            carry_unavailable=placeholders,
            moved=moved,
            late=late,
        )
        props = {
            **to_state.properties(),
            FROM_STATE: state.token(),
            UPSERT_KIND: "bucketed",
            DELETE_CANDIDATES: str(probe["delete_candidates"]),
            # Rows built with an older spec than the MERGE's lack the newer columns' values.
            SPEC_VERSION_PROPERTY: str(spec.spec_version),
        }
        if truncate is not None:
            props[TRUNCATE] = truncate.text()
        target = spark_identifier(catalog, bucketed_l)
        # The write counts its rows and deletes itself (pipeline.shared.observed): no second job.
        changes = ObservedView(
            spark,
            select,
            temp_view_name("changes", spec.sink.namespace, spec.name),
            {"rows": "count(1)", "deletes": "count_if(_op = 'd')"},
        )
        try:
            with snapshot_properties(spark, props):
                spark.sql(
                    render_insert_overwrite(
                        target, f"SELECT * FROM {changes.name}", bucketed_l.column_names
                    )
                )
            counted = changes.metrics()
        finally:
            # The changes view reads the moved and late ones: dropped first (history.py says why).
            changes.drop()
            for view in (moved, late):
                if view is not None:
                    spark.catalog.dropTempView(view)
        written = current_properties(load_table(iceberg_catalog, bucketed_l))
        if (
            written.get(FROM_STATE) != state.token()
            or UpsertState.from_properties(written, shard).token() != to_state.token()
        ):
            # Nothing to write: Spark made no commit. Empty the table and record the states.
            spark.sql(f"DELETE FROM {target}")
            commit_properties_only(load_table(iceberg_catalog, bucketed_l), props)
            counted = None
        if counted is not None:
            result.rows, result.deletes = int(counted["rows"]), int(counted["deletes"])
        else:
            query = f"SELECT _op, count(*) AS n FROM {target} GROUP BY _op"
            for row in spark.sql(query).collect():
                result.rows += row["n"]
                if row["_op"] == "d":
                    result.deletes += row["n"]
    result.to_state = to_state
    result.truncate = truncate
    result.redriven_files = len(extra)
    result.seconds = time.monotonic() - started
    return result


def table_records(table: Any) -> int:
    """Rows of a pyiceberg table's current snapshot, by its summary (an upper bound)."""
    snapshot = table.current_snapshot()
    return snapshot_records(snapshot.summary if snapshot is not None else None)


def _position(value: Any) -> Position | None:
    return None if value is None else Position(value["p0"], value["p1"], value["p2"])


def late_keys_view(spark: Any, spec: TableSpec, window: ChangeWindow, base: str) -> str | None:
    """A temp view of the keys with a change delivered late (``render_late_keys``), None when
    there is none."""
    view = temp_view_name("late", spec.sink.namespace, spec.name)
    spark.sql(f"CREATE OR REPLACE TEMP VIEW {view} AS {render_late_keys(spec, window, base)}")
    if spark.sql(f"SELECT 1 FROM {view} LIMIT 1").collect():
        return view
    spark.catalog.dropTempView(view)
    return None


def merge_plan(spark: Any, merge_sql: str) -> str:
    rows = spark.sql(f"EXPLAIN {merge_sql}").collect()
    return str(rows[0][0])


def executed_plan(frame: Any) -> str:
    """The physical plan a statement ran with (commands run eagerly in ``spark.sql``)."""
    return str(frame._jdf.queryExecution().executedPlan().toString())


def _run_with_retry(
    spark: Any,
    sql: str,
    props: dict[str, str],
    result: MergeResult,
    before_retry: Callable[[], None] | None = None,
) -> Any:
    for attempt in range(1, COMMIT_RETRIES + 1):
        result.attempts = attempt
        if attempt > 1 and before_retry is not None:
            before_retry()
        try:
            with snapshot_properties(spark, props):
                return spark.sql(sql)
        except Exception as exc:  # py4j/pyspark wrap Iceberg's commit exceptions
            if attempt == COMMIT_RETRIES or not is_commit_conflict(exc):
                raise
            time.sleep(0.5 * attempt)
    raise AssertionError("unreachable")


def _lines_up(base: Any) -> bool:
    """Whether the MERGE will be storage-partitioned: base has data files, all in one partition
    spec (bucketed like the bucketed table). Then each task of the join holds one bucket and
    its output needs no shuffle before the write: Iceberg's writers take it as it comes (they
    fan out when the table asks for no ordering)."""
    current = base.current_snapshot()
    if current is None or len(base.specs()) != 1:
        return False
    summary = current.summary.additional_properties if current.summary else {}
    return int(summary.get("total-data-files", 0)) > 0


# Hold point inside the base MERGE (tests): its first task waits after the MERGE was planned
# against a base snapshot, so another commit can land before the MERGE's own.
MERGE_HOLD = "merge_base_scan"


def _held_source(spark: Any, bucketed: str, directory: str) -> str:
    """Tests: the MERGE's source read through a filter that holds at ``MERGE_HOLD``."""
    from pyspark.sql.types import BooleanType

    def passes(directory: str) -> bool:
        hold_at(MERGE_HOLD, directory)
        return True

    spark.udf.register("cdc_hold_point", passes, BooleanType())
    view = "cdc_held_bucketed"
    spark.sql(
        f"CREATE OR REPLACE TEMP VIEW {view} AS SELECT * FROM {bucketed} "
        f"WHERE cdc_hold_point('{directory}')"
    )
    return view


def worth_pruning(summary: Mapping[str, str], buckets: int) -> bool:
    """Whether base (its current snapshot's ``summary``) has more data files than ``buckets``
    (only then can a bucket's files bound different key ranges) and at least
    ``PRUNE_MIN_BYTES`` of them: only then can the range query (one small Spark job) pay for
    itself."""
    files = int(summary.get("total-data-files", "0"))
    size = int(summary.get("total-files-size", "0"))
    return files > buckets and size >= PRUNE_MIN_BYTES


def change_key_ranges(spark: Any, spec: TableSpec, bucketed: str) -> KeyRanges | None:
    """The key ranges of the bucketed changes (``sql.key_ranges``), or None."""
    query = render_key_ranges(spec, bucketed)
    if query is None:
        return None
    rows = [(r["kind"], r["low"], r["high"]) for r in spark.sql(query).collect()]
    return key_ranges(spec, rows)


def merge_base(
    spark: Any, catalog: str, iceberg_catalog: Any, spec: TableSpec, *, prune: bool = True
) -> MergeResult:
    """MERGE the bucketed changes into base and commit base's new state with them. With
    ``prune`` (and a base of more files than buckets and ``PRUNE_MIN_BYTES`` or more) the
    MERGEs read only the files whose key bounds reach the changes' key ranges
    (``sql.key_ranges``)."""
    started = time.monotonic()
    base_l, bucketed_l = base_layout(spec), bucketed_layout(spec)
    base_table = load_table(iceberg_catalog, base_l)
    shard = shard_of(spec)
    state = base_state(base_table, shard)
    bucketed_table = load_table(iceberg_catalog, bucketed_l)
    props = current_properties(bucketed_table)
    result = MergeResult(spec.name, state, state)
    if state_key(WATERMARK, shard) not in props:
        result.up_to_date = True
        result.seconds = time.monotonic() - started
        return result
    to_state = UpsertState.from_properties(props, shard)
    result.to_state = to_state
    if SPEC_VERSION_PROPERTY in props:
        result.built_with = int(props[SPEC_VERSION_PROPERTY])
    if to_state.token() == state.token():
        result.up_to_date = True
        result.seconds = time.monotonic() - started
        return result
    if props.get(FROM_STATE) != state.token():
        raise StaleChangesError(
            f"{spec.name}: the bucketed table was built from another base state "
            f"({props.get(FROM_STATE)}) than base has ({state.token()}); "
            "materialize the bucketed asset again, then base"
        )
    # Every read of bucketed below is of the snapshot whose state this MERGE commits: another
    # upsert of the table (a second process, a deployment without the pool limit) may rebuild
    # bucketed meanwhile, and the key ranges must hold every key the MERGE then reads.
    fail_once("merge_before_commit")  # tests: a transient failure, the run retried
    bucketed = _pinned_changes(spark, catalog, bucketed_table, bucketed_l)
    # The MERGEs read the changes, base and the tombstones: small ones all run interpreted.
    reads = sum(
        table_records(t)
        for t in (bucketed_table, base_table, load_table(iceberg_catalog, tombstones_layout(spec)))
    )
    result.seconds = time.monotonic() - started
    try:
        with session_conf(spark, interpreted_conf(reads)):
            return _merge_pinned(
                spark, catalog, iceberg_catalog, spec, base_table, props, bucketed, result, prune
            )
    finally:
        spark.catalog.dropTempView(bucketed)


STALE_REBUILDS = 3  # times merge_base_again builds the changes again before it gives up


def merge_base_again(
    spark: Any, catalog: str, iceberg_catalog: Any, spec: TableSpec, *, prune: bool = True
) -> MergeResult:
    """``merge_base``, building the bucketed changes again from base's state when another upsert
    of the table moved base since they were built (or while this one merged): what is applied is
    always derived from the ledger and base as they are, so losing that race is no failure. Up
    to ``STALE_REBUILDS`` times, then the ``StaleChangesError`` stands."""
    for rebuilt in range(STALE_REBUILDS + 1):
        try:
            result = merge_base(spark, catalog, iceberg_catalog, spec, prune=prune)
        except StaleChangesError as exc:
            if rebuilt == STALE_REBUILDS:
                raise
            log.info("%s; building the changes again from base's state", exc)
            build_bucketed(spark, catalog, iceberg_catalog, spec)
            continue
        result.rebuilt = rebuilt
        return result
    raise AssertionError("unreachable")


def _pinned_changes(spark: Any, catalog: str, table: Any, layout: TableLayout) -> str:
    """A temp view of ``table``'s current snapshot (``render_pinned_changes``)."""
    snapshot = table.current_snapshot()
    current = table.schema()
    written = next(
        (s for s in table.metadata.schemas if s.schema_id == snapshot.schema_id), current
    )
    # Columns are matched by field id: a rename keeps the id, an added column has none there.
    name_then = {f.field_id: f.name for f in written.fields}
    written_as = {f.name: name_then.get(f.field_id) for f in current.fields}
    view = temp_view_name("pinned", layout.namespace, layout.name)
    select = render_pinned_changes(
        spark_identifier(catalog, layout),
        snapshot.snapshot_id,
        [(c.name, c.type) for c in layout.columns],
        written_as,
    )
    spark.sql(f"CREATE OR REPLACE TEMP VIEW {view} AS {select}")
    return view


def _merge_pinned(
    spark: Any,
    catalog: str,
    iceberg_catalog: Any,
    spec: TableSpec,
    base_table: Any,
    props: dict[str, str],
    bucketed: str,
    result: MergeResult,
    prune: bool,
) -> MergeResult:
    """The rest of ``merge_base``, reading the changes from the pinned view ``bucketed``."""
    started = time.monotonic() - result.seconds
    base_l, tomb_l = base_layout(spec), tombstones_layout(spec)
    shard = shard_of(spec)
    state, to_state = result.from_state, result.to_state
    base = spark_identifier(catalog, base_l)
    truncate = Position.parse(props[TRUNCATE]) if props.get(TRUNCATE) else None
    ranges = None
    snapshot = base_table.current_snapshot()
    summary = snapshot.summary if snapshot is not None and snapshot.summary else {}
    if prune and truncate is None and worth_pruning(summary, spec.base.buckets):
        ranges = change_key_ranges(spark, spec, bucketed)
        result.key_ranges = len(ranges.ranges) if ranges is not None else None
    # Most runs of most tables delete nothing: the window probe saw no change that could become
    # a delete, or else a probe of the bucketed deletes (one column, LIMIT 1) is cheaper than a
    # MERGE that joins none of them with the tombstones.
    if props.get(DELETE_CANDIDATES) != "0" and (
        spark.sql(f"SELECT 1 FROM {bucketed} WHERE _op = 'd' LIMIT 1").collect()
    ):
        _run_with_retry(
            spark,
            render_tombstone_merge(spec, spark_identifier(catalog, tomb_l), bucketed, ranges),
            {UPSERT_KIND: "tombstones"},
            result,
        )
    failpoint("after_tombstones")
    if (held := hold_directory(MERGE_HOLD)) is not None:
        bucketed = _held_source(spark, bucketed, held)
    merge_sql = render_base_merge(
        spec,
        base,
        bucketed,
        truncate_floor=truncate,
        keep_unavailable=spec.source.connector in PLACEHOLDER_CONNECTORS,
        ranges=ranges,
    )
    commit_props = {**to_state.properties(), UPSERT_KIND: "upsert"}
    if shard is not None:
        # The other shards' states ride along, so that no snapshot expiry loses one.
        others = [n for n in spec.source.shard_names if n != shard]
        commit_props = {**shard_states(base_table, others), **commit_props}
    # A Connect client cannot see the plan a statement ran with: it plans the MERGE once more.
    planned = merge_plan(spark, merge_sql) if is_connect(spark) else None
    conf = {DISTRIBUTION_MODE_CONF: "none"} if _lines_up(base_table) else {}

    def still_from_state() -> None:
        # A conflict may mean another upsert committed: re-running this MERGE would then commit
        # this run's (older) state over its newer one. Only maintenance may have moved base.
        now = base_state(load_table(iceberg_catalog, base_l), shard)
        if now.token() != state.token():
            raise StaleChangesError(
                f"{spec.name}: another upsert moved base to {now.token()} while this one "
                f"merged from {state.token()}; materialize the bucketed asset again, then base"
            )

    with session_conf(spark, conf):
        merged = _run_with_retry(spark, merge_sql, commit_props, result, still_from_state)
    # The plan the MERGE ran with, not a second planning: did base reach the join unshuffled?
    shuffles = shuffles_between_scan_and_join(
        planned or executed_plan(merged), plain_identifier(catalog, base_l)
    )
    result.storage_partitioned = None if shuffles is None else not any(shuffles)
    failpoint("after_base_merge")
    table = load_table(iceberg_catalog, base_l)
    if base_state(table, shard).token() != to_state.token():
        # No row changed, so Spark made no commit: record the new state on its own.
        commit_properties_only(table, commit_props)
        table = load_table(iceberg_catalog, base_l)
    current = table.current_snapshot()
    result.applied = True
    result.snapshot_id = current.snapshot_id if current else None
    result.summary = current_properties(table)
    result.seconds = time.monotonic() - started
    return result
