"""Schema evolution on the live tables: phase 1 (Iceberg schemas), phase 3 (backfill from the
ledger) and the audit trail. No Dagster here.

Phase 1 (`evolve_iceberg`) brings every table of a spec to what the proposed version renders,
with pyiceberg, one atomic commit per table; it plans from the live tables, so a rerun after a
crash finishes the tables left behind and changes nothing twice. Jobs select columns by name, so
the ingest and the upsert of the old version keep running meanwhile and write null for the new
column (phase 2 moves them to the new spec). Phase 3 (`backfill_from_ledger`) decodes the new
column from the row images the ledger kept, writes it into the ledger rows, and carries it to the
base rows that hold those same changes, so values that arrived before the switch are not lost.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from cdc_assets.errors import EvolutionError
from cdc_assets.pipeline.health.health import iceberg_differences
from cdc_assets.pipeline.ingest.redrive import redrive
from cdc_assets.pipeline.shared.failpoint import failpoint
from cdc_assets.pipeline.shared.iceberg_types import iceberg_type, sink_text
from cdc_assets.pipeline.shared.meta_tables import is_conflict
from cdc_assets.pipeline.shared.offsets import KIND_PROPERTY, table_offsets
from cdc_assets.pipeline.shared.watermark import (
    FROM_STATE,
    WATERMARK,
    UpsertState,
    base_state,
    commit_properties_only,
    current_properties,
    is_commit_conflict,
    readable_snapshot,
    shard_of,
    snapshot_properties,
    state_key,
)
from cdc_assets.pipeline.upsert.upsert import _redriven_files, load_table, spark_identifier
from cdc_assets.schema.alter import (
    AlterationError,
    LiveField,
    LiveTable,
    TableAlteration,
    plan_alteration,
)
from cdc_assets.schema.changes import EvolutionPlan
from cdc_assets.schema.drift import normalise_type
from cdc_assets.schema.layers import (
    TableLayout,
    all_layouts,
    base_layout,
    bucketed_layout,
    dead_letter_layout,
    ledger_layout,
)
from cdc_assets.schema.recover import (
    REENCODED_PROPERTY_PREFIX,
    changed_columns,
    dead_letter_reasons,
    reencoded_columns,
    reencoded_positions,
)
from cdc_assets.schema.retype import Converted, converted_columns, retired_conversions
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.backfill import (
    after_position,
    backfill_min_dt,
    backfill_plans,
    render_ledger_counts,
    render_ledger_rejected,
    render_ledger_update,
    render_ledger_values,
    render_position_count,
    render_position_update,
)
from cdc_assets.sql.ddl import temp_view_name

log = logging.getLogger(__name__)

COMMIT_RETRIES = 5
# How many ledger rows whose value the new spec refuses a backfill lists (all are counted).
REJECTED_EXAMPLES = 20
BACKFILL_KIND = "backfill"
BACKFILL_COLUMNS_PROPERTY = "cdc.backfill-columns"
# A backfill that ran to its end and recovered every column a row decoded under an older
# version may hold wrong leaves an empty ledger commit saying so (pipeline.evolution.catch_up):
# from and
# to which spec version, from which date, and the sequence number of the ledger snapshot it read
# (every ledger commit up to it had its values recovered).
BACKFILL_DONE_KIND = "backfill-done"
BACKFILL_FROM_PROPERTY = "cdc.backfill-from-version"
BACKFILL_VERSION_PROPERTY = "cdc.backfill-spec-version"
BACKFILL_MIN_DT_PROPERTY = "cdc.backfill-min-dt"
BACKFILL_THROUGH_PROPERTY = "cdc.backfill-through"

T = TypeVar("T")

__all__ = [
    "BACKFILL_KIND",
    "BackfillResult",
    "ChangePoint",
    "EvolutionError",
    "backfill_from_ledger",
    "change_point",
    "evolve_iceberg",
    "evolve_layer",
    "live_table",
]


# --- phase 1: Iceberg schemas ------------------------------------------------------------------


def live_table(table: Any) -> LiveTable:
    """A pyiceberg table as the alteration planner sees it."""
    schema = table.schema()
    return LiveTable(
        fields=tuple(
            LiveField(f.name, sink_text(f.field_type), f.required, f.doc) for f in schema.fields
        ),
        identifier_fields=tuple(sorted(schema.identifier_field_names())),
        properties=dict(table.properties),
    )


def _identifier(layout: TableLayout) -> str:
    return f"{layout.namespace}.{layout.name}"


def _load(iceberg_catalog: Any, layout: TableLayout) -> Any:
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return iceberg_catalog.load_table(_identifier(layout))
    except NoSuchTableError:
        raise EvolutionError(
            f"table {_identifier(layout)} does not exist; onboard the table (ensure_tables) "
            "before evolving it"
        ) from None


def _plan(table: Any, target: TableLayout, previous: TableLayout) -> TableAlteration:
    try:
        return plan_alteration(live_table(table), target, previous)
    except AlterationError as err:
        raise EvolutionError(str(err)) from None


def _apply(table: Any, change: TableAlteration) -> None:
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    with table.transaction() as tx:
        if change.changes_schema:
            with tx.update_schema() as update:
                for col in change.adds:
                    update.add_column(col.name, iceberg_type(col.type), doc=col.doc)
                for u in change.updates:
                    nested = u.type is not None and u.type.is_nested
                    if u.type is not None and nested:
                        # Added nested fields and widened nested types, by name: pyiceberg's
                        # union gives new fields fresh ids and keeps the existing ones.
                        update.union_by_name(
                            Schema(NestedField(1, u.name, iceberg_type(u.type), required=False))
                        )
                    if nested and not u.make_optional and u.doc is None:
                        continue
                    update.update_column(
                        u.name,
                        field_type=None if u.type is None or nested else iceberg_type(u.type),
                        required=False if u.make_optional else None,
                        doc=u.doc,
                    )
                for name in change.deletes:
                    update.delete_column(name)
                for name, after in change.moves:
                    if after is None:
                        update.move_first(name)
                    else:
                        update.move_after(name, after)
                if change.identifier_fields is not None:
                    update.set_identifier_fields(*change.identifier_fields)
        if change.set_properties:
            tx.set_properties(dict(change.set_properties))
        if change.remove_properties:
            tx.remove_properties(*change.remove_properties)


def _check_plan(current: TableSpec, proposed: TableSpec, plan: EvolutionPlan) -> None:
    if not plan.supported:
        reasons = "; ".join(str(r) for r in plan.rejections)
        raise EvolutionError(f"{plan.table}: the plan is rejected, no table is changed: {reasons}")
    if not plan.table == current.name == proposed.name:
        raise EvolutionError(
            f"the plan is for {plan.table}, the specs are {current.name} and {proposed.name}"
        )
    if plan.from_version != current.spec_version or proposed.spec_version != plan.to_version:
        raise EvolutionError(
            f"{plan.table}: the plan goes from version {plan.from_version} to "
            f"{plan.to_version}, the specs are versions {current.spec_version} and "
            f"{proposed.spec_version}"
        )


def evolve_layer(
    iceberg_catalog: Any, layer: str, current: TableSpec, proposed: TableSpec
) -> tuple[int, TableAlteration]:
    """Bring one layer's table to the proposed layout (one commit; retried when another writer
    committed first). Returns the table's schema id and what was changed (empty: nothing)."""
    target = all_layouts(proposed)[layer]
    # A layer the current spec lacks (history switched on) evolves from the proposed layout.
    previous = all_layouts(current).get(layer, target)
    applied = TableAlteration(_identifier(target))
    for attempt in range(1, COMMIT_RETRIES + 1):
        table = _load(iceberg_catalog, target)
        change = _plan(table, target, previous)
        if change.empty:
            return int(table.schema().schema_id), applied
        try:
            _apply(table, change)
            applied = change
            break
        except Exception as exc:
            if attempt == COMMIT_RETRIES or not is_conflict(exc):
                raise
            time.sleep(0.2 * attempt)
    return int(_load(iceberg_catalog, target).schema().schema_id), applied


def evolve_iceberg(
    iceberg_catalog: Any, current: TableSpec, proposed: TableSpec, plan: EvolutionPlan
) -> dict[str, int]:
    """Phase 1: every table of the spec (ledger, bucketed, base, dead letters, tombstones) gets
    exactly the columns, types, optionality, docs, order and properties that a fresh onboarding
    of ``proposed`` creates. Idempotent and crash-safe: it plans from the live tables.

    Every table is checked before any is changed, so an unsupported plan, a missing table or a
    live column that neither version knows raises EvolutionError with nothing changed.
    Returns layer -> current Iceberg schema id.
    """
    _check_plan(current, proposed, plan)
    targets, previous = all_layouts(proposed), all_layouts(current)
    # A history table not created yet (history switched on in a spec file) is created by the
    # history step, with the spec it then reads, not evolved.
    targets = {
        layer: layout
        for layer, layout in targets.items()
        if layer != "history" or iceberg_catalog.table_exists(_identifier(layout))
    }
    previous = {layer: previous.get(layer, layout) for layer, layout in targets.items()}
    for layer, layout in targets.items():
        if _identifier(layout) != _identifier(previous[layer]):
            raise EvolutionError(
                f"{plan.table}: the {layer} table moves from {_identifier(previous[layer])} "
                f"to {_identifier(layout)}; that is a new onboarding, not an evolution"
            )
        _plan(_load(iceberg_catalog, layout), layout, previous[layer])
    ids: dict[str, int] = {}
    for layer in targets:
        ids[layer], _ = evolve_layer(iceberg_catalog, layer, current, proposed)
        failpoint(f"evolve_after_{layer}")
    left = {
        k: v for k, v in iceberg_differences(iceberg_catalog, proposed).items() if v and k in ids
    }
    if left:
        raise EvolutionError(f"{plan.table}: the tables still differ from the spec: {left}")
    return ids


@dataclass(frozen=True)
class ChangePoint:
    """Where each table stood at a schema change: for the audit trail and for the backfill."""

    snapshot_ids: dict[str, int]
    schema_ids: dict[str, int]
    kafka_offsets: dict[Any, int]  # partition (<shard>:<partition> when sharded) -> offset


def change_point(iceberg_catalog: Any, spec: TableSpec) -> ChangePoint:
    """Current snapshot and schema ids of every layer, and the ledger's consumed offsets."""
    snapshots: dict[str, int] = {}
    schemas: dict[str, int] = {}
    for layer, layout in all_layouts(spec).items():
        table = _load(iceberg_catalog, layout)
        schemas[layer] = int(table.schema().schema_id)
        current = table.current_snapshot()
        if current is not None:
            snapshots[layer] = int(current.snapshot_id)
    return ChangePoint(snapshots, schemas, table_offsets(iceberg_catalog, spec))


# --- phase 3: backfill from the ledger ----------------------------------------------------------


@dataclass
class BackfillResult:
    """What one backfill changed; a rerun after a complete one changes nothing."""

    table: str
    columns: tuple[str, ...]
    min_dt: str | None = None
    ledger_rows_updated: int = 0
    # Row images holding a value the ingest rejects under the new spec: left out, still null,
    # and the first of them listed as "<partition>:<offset>" of the ledger row.
    ledger_rows_rejected: int = 0
    rejected_examples: list[str] = field(default_factory=list)
    base_rows_updated: int = 0
    # Changes of the pending bucketed run (built, not merged yet) that got the value too.
    bucketed_rows_updated: int = 0
    # Dead letters that decode under the new spec (a widened column), now in the ledger: the
    # next upsert applies them.
    redriven: int = 0
    ledger_snapshot_id: int | None = None
    base_snapshot_id: int | None = None
    # Sequence number of the ledger snapshot the ledger step read (None: an empty ledger), and
    # whether it left redriven files base had not applied yet as they were.
    ledger_sequence_read: int | None = None
    left_redriven_files: bool = False
    snapshot_ids: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def _retry(action: Callable[[], T]) -> T:
    for attempt in range(1, COMMIT_RETRIES + 1):
        try:
            return action()
        except Exception as exc:  # py4j/pyspark wrap Iceberg's commit exceptions
            if attempt == COMMIT_RETRIES or not is_commit_conflict(exc):
                raise
            time.sleep(0.5 * attempt)
    raise AssertionError("unreachable")


def _require_live_columns(iceberg_catalog: Any, spec: TableSpec, columns: Sequence[str]) -> None:
    """Phase 1 must be done: the ledger, bucketed and base tables have the columns as typed."""
    for layer, layout in (
        ("cdc", ledger_layout(spec)),
        ("bucketed", bucketed_layout(spec)),
        ("base", base_layout(spec)),
    ):
        live = {
            f.name: sink_text(f.field_type) for f in _load(iceberg_catalog, layout).schema().fields
        }
        wrong = [
            f"{c.name} ({live.get(c.name, 'missing')}, spec: {c.type})"
            for c in layout.columns
            if c.name in columns and normalise_type(live.get(c.name, "")) != str(c.type)
        ]
        if wrong:
            raise EvolutionError(
                f"{spec.name}: the {layer} table does not have version {spec.spec_version}'s "
                f"column(s) {', '.join(wrong)}; run evolve_iceberg (phase 1) first"
            )


def _snapshot_id(table: Any) -> int | None:
    current = table.current_snapshot()
    return None if current is None else int(current.snapshot_id)


def _backfill_ledger(
    spark: Any,
    catalog: str,
    iceberg_catalog: Any,
    spec: TableSpec,
    columns: Sequence[str],
    min_dt: str | None,
    props: dict[str, str],
    result: BackfillResult,
    reencoded: Sequence[str] = (),
    after: str | None = None,
    converted: Mapping[str, Converted] | None = None,
    after_by_column: Mapping[str, str] | None = None,
) -> None:
    ledger_l = ledger_layout(spec)
    ledger_id = spark_identifier(catalog, ledger_l)

    def attempt() -> None:
        ledger = load_table(iceberg_catalog, ledger_l)
        snapshot = readable_snapshot(ledger)
        if snapshot is None:
            return
        read = ledger.snapshot_by_id(snapshot)
        result.ledger_sequence_read = None if read is None else read.sequence_number or 0
        # Redriven rows base has not applied are found by their file names: leave their files.
        base = load_table(iceberg_catalog, base_layout(spec))
        pending = _redriven_files(ledger, base_state(base, shard_of(spec)).ledger_sequence)
        result.left_redriven_files = bool(pending)
        values = render_ledger_values(
            spec,
            ledger_id,
            snapshot,
            columns,
            min_dt=min_dt,
            exclude_files=pending,
            reencoded=reencoded,
            after=after,
            converted=converted,
            after_by_column=after_by_column,
        )
        # Decoded once, into a checkpoint that the count, the examples and the MERGE read. The
        # MERGE's filter would otherwise be pushed down through the decoding stages, inlining
        # them into one expression that grows with every column (three byte decimals took
        # the driver's whole heap to plan).
        view = temp_view_name("backfill", ledger_l.namespace, ledger_l.name)
        spark.sql(values).localCheckpoint().createOrReplaceTempView(view)
        decoded = f"SELECT * FROM {view}"
        try:
            counts = spark.sql(render_ledger_counts(decoded)).collect()[0]
            result.ledger_rows_updated = int(counts["changed"])
            result.ledger_rows_rejected = int(counts["rejected"])
            if result.ledger_rows_rejected:
                rows = spark.sql(render_ledger_rejected(decoded, REJECTED_EXAMPLES)).collect()
                result.rejected_examples = [
                    f"{r['_kafka_partition']}:{r['_kafka_offset']}" for r in rows
                ]
            if result.ledger_rows_updated:
                with snapshot_properties(spark, props):
                    spark.sql(render_ledger_update(ledger_id, decoded, columns, min_dt=min_dt))
        finally:
            spark.catalog.dropTempView(view)

    _retry(attempt)


def _record_reencoded(
    iceberg_catalog: Any,
    spec: TableSpec,
    columns: Sequence[str],
    position: Mapping[str, Any] | None,
) -> None:
    """Keep on the ledger where each column's current encoding starts (or forget it when that
    is not known), so that a check decoding the images again reads the older ones as they
    were written (`schema.recover.reencoded_positions`)."""
    keys = [f"{REENCODED_PROPERTY_PREFIX}{c}" for c in columns]

    def attempt() -> None:
        table = load_table(iceberg_catalog, ledger_layout(spec))
        with table.transaction() as tx:
            if position is not None:
                text = json.dumps(dict(position), sort_keys=True, default=str)
                tx.set_properties({k: text for k in keys})
            elif stale := [k for k in keys if k in table.properties]:
                tx.remove_properties(*stale)

    _retry(attempt)


def _recorded_positions(iceberg_catalog: Any, spec: TableSpec) -> dict[str, dict[str, Any]]:
    """Column -> the source position its current encoding starts after, as the evolution kept
    it on the ledger (`_record_reencoded`)."""
    return reencoded_positions(load_table(iceberg_catalog, ledger_layout(spec)).properties)


def _pending_bucketed(iceberg_catalog: Any, spec: TableSpec) -> dict[str, str] | None:
    """The project's properties (``cdc.*``) of the bucketed table's summary when it holds a run
    built but not merged into base yet: the backfill's commit carries them on, so the merge
    still recognises the run. Iceberg's and Spark's own summary entries (``added-files-size``,
    ``spark.app.id``) stay out: a commit given one of them as a property fails on the entry
    Iceberg computes itself (found by soak seed 147)."""
    props = current_properties(load_table(iceberg_catalog, bucketed_layout(spec)))
    shard = shard_of(spec)
    if state_key(WATERMARK, shard) not in props:
        return None
    state = base_state(load_table(iceberg_catalog, base_layout(spec)), shard)
    if props.get(FROM_STATE) != state.token():
        return None
    if UpsertState.from_properties(props, shard).token() == state.token():
        return None
    return {k: v for k, v in props.items() if k.startswith("cdc.")}


def _backfill_by_position(
    spark: Any,
    catalog: str,
    iceberg_catalog: Any,
    spec: TableSpec,
    layout: TableLayout,
    columns: Sequence[str],
    min_dt: str | None,
    props: dict[str, str],
    nulls: bool = False,
) -> int:
    ledger_l = ledger_layout(spec)
    ledger_id = spark_identifier(catalog, ledger_l)
    target = spark_identifier(catalog, layout)

    def attempt() -> int:
        snapshot = readable_snapshot(load_table(iceberg_catalog, ledger_l))
        if snapshot is None:
            return 0
        count = render_position_count(
            spec, target, ledger_id, snapshot, columns, min_dt=min_dt, nulls=nulls
        )
        rows = int(spark.sql(count).collect()[0]["n"])
        if rows:
            merge = render_position_update(
                spec, target, ledger_id, snapshot, columns, min_dt=min_dt, nulls=nulls
            )
            with snapshot_properties(spark, props):
                spark.sql(merge)
        return rows

    return _retry(attempt)


def _may_hold_rows(table: Any) -> bool:
    """False when the table certainly holds no row: no snapshot, or one of 0 records (rows
    removed by delete files still count: then True)."""
    current = table.current_snapshot()
    if current is None:
        return False
    props = current.summary.additional_properties if current.summary else {}
    return props.get("total-records") != "0"


def _mark_done(
    iceberg_catalog: Any, spec: TableSpec, from_version: int, result: BackfillResult
) -> None:
    """The empty ledger commit of a backfill that ran to its end (``BACKFILL_DONE_KIND``)."""
    props = {
        KIND_PROPERTY: BACKFILL_DONE_KIND,
        BACKFILL_COLUMNS_PROPERTY: ",".join(result.columns),
        BACKFILL_FROM_PROPERTY: str(from_version),
        BACKFILL_VERSION_PROPERTY: str(spec.spec_version),
        BACKFILL_MIN_DT_PROPERTY: result.min_dt or "",
        BACKFILL_THROUGH_PROPERTY: str(result.ledger_sequence_read),
    }
    _retry(lambda: commit_properties_only(load_table(iceberg_catalog, ledger_layout(spec)), props))


def redrive_refused(
    spark: Any, catalog: str, iceberg_catalog: Any, spec: TableSpec, reasons: Sequence[str]
) -> int:
    """Replay under ``spec`` the dead letters whose reason contains one of ``reasons``; the
    records that reach the ledger. A redrive plans the whole decode before it reads a letter:
    with none to read, none is planned."""
    if not reasons or not _may_hold_rows(load_table(iceberg_catalog, dead_letter_layout(spec))):
        return 0
    return sum(redrive(spark, catalog, spec, reason_contains=r).to_ledger for r in reasons)


def backfill_from_ledger(
    spark: Any,
    catalog: str,
    iceberg_catalog: Any,
    spec: TableSpec,
    columns: Sequence[str],
    since: datetime | None = None,
    from_spec: TableSpec | None = None,
    base_nulls: bool = False,
    change_position: Mapping[str, Any] | None = None,
    *,
    new_change: bool = False,
) -> BackfillResult:
    """Phase 3: recover ``columns`` (sink names of added or widened columns of ``spec``, the new
    version) for rows written before the jobs knew them.

    1. Ledger rows (from ``since``'s date less the upsert lookback; all with None) whose row
       image holds a value the stored column lacks get the value, decoded as the ingest decodes
       it under ``spec``.
    2. Base rows that hold one of those changes (same key, same source position) get it too; so
       does a bucketed run that is built but not merged yet (its summary is kept, so the merge
       still recognises it). A row whose newest change predates the column stays null; one
       whose newest change did not carry the column (a TOAST placeholder) gets the value of the
       key's newest earlier change that did, as the upsert carries it.
    3. Dead letters rejected for one of the columns (a value too wide for the old type) are
       replayed under ``spec``; those that decode now reach base with the next upsert.

    Run it once the jobs use ``spec`` (phase 2): a job still on the old version would write
    rows without the value again. Every step is idempotent, so a rerun (after a crash, or to
    be sure) changes only what is still missing.

    With ``from_spec``, the version rows were decoded with: when ``columns`` hold every column
    such a row may hold wrong (``schema.recover.changed_columns``), a backfill that ran to its
    end says so in an empty ledger commit (``BACKFILL_DONE_KIND``), and an upsert that read the
    ledger after it needs no catch-up of its own (``pipeline.evolution.catch_up``).

    With ``base_nulls`` base rows also get the nulls their changes carried: for the catch-up
    of a MERGE on an older spec, which left the newer columns of the rows it updated as they
    were (``sql.backfill.render_position_update``).

    A sharded table is backfilled shard by shard, each from its own ledger.

    A column whose values the source sends in another encoding under ``spec`` than under
    ``from_spec`` (`schema.recover.reencoded_columns`: ``datetime(3)`` -> ``datetime(6)``) is
    re-decoded only in the images after ``change_position``, the source position of the change
    (a Debezium ``source`` block); without one, in none: an older image would decode to other
    values. With ``new_change`` (the evolution that applies the change) that position is kept
    on the ledger, or forgotten when there is none; a later backfill (a catch-up, `cdc-assets
    backfill`) that is given none reads it from there.
    """
    if spec.source.shards:
        results = [
            backfill_from_ledger(
                spark,
                catalog,
                iceberg_catalog,
                view,
                columns,
                since,
                from_spec,
                base_nulls,
                change_position,
                new_change=new_change,
            )
            for view in spec.shard_specs()
        ]
        total = results[-1]
        for r in results[:-1]:
            total.ledger_rows_updated += r.ledger_rows_updated
            total.ledger_rows_rejected += r.ledger_rows_rejected
            total.rejected_examples += r.rejected_examples
            total.base_rows_updated += r.base_rows_updated
            total.bucketed_rows_updated += r.bucketed_rows_updated
            total.redriven += r.redriven
            total.seconds += r.seconds
        return total
    started = time.monotonic()
    names = tuple(dict.fromkeys(columns))
    try:
        backfill_plans(spec, names)
    except ValueError as err:
        raise EvolutionError(str(err)) from None
    _require_live_columns(iceberg_catalog, spec, names)
    min_dt = backfill_min_dt(since, spec.base.lookback_hours)
    result = BackfillResult(spec.name, names, min_dt)
    props = {KIND_PROPERTY: BACKFILL_KIND, BACKFILL_COLUMNS_PROPERTY: ",".join(names)}

    reencoded = reencoded_columns(from_spec, spec) if from_spec is not None else []
    # Without the older version (a catch-up over rows of several), a retyped column's rows that
    # hold a retired value take it converted, as the evolution did.
    converted = (
        converted_columns(from_spec, spec) if from_spec is not None else retired_conversions(spec)
    )
    misread = [c for c, conversion in converted.items() if conversion.misread]
    after = after_position(spec, change_position) if change_position else None
    after_by_column: dict[str, str] = {}
    if not new_change:
        # Where each column's current encoding starts, as the evolution that changed it kept
        # it: images before it are in another encoding whichever version this backfill is
        # given (or none), so those rows keep their values, or take the retired one's.
        recorded = _recorded_positions(iceberg_catalog, spec)
        after_by_column = {
            c: condition
            for c, position in recorded.items()
            if c in names and (condition := after_position(spec, position)) is not None
        }
        reencoded = sorted((set(reencoded) | set(after_by_column)) - set(converted))
    unplaced = [c for c in reencoded if after is None and c not in after_by_column]
    if unplaced:
        log.warning(
            f"{spec.name}: {', '.join(unplaced)} now arrive in another encoding; without the "
            "source position of the change, ledger rows keep the values they were decoded "
            "with (an older image read in the new encoding would be another value)"
        )
    unplaced = [c for c in misread if after is None and c not in after_by_column]
    if unplaced:
        log.warning(
            f"{spec.name}: {', '.join(unplaced)} take their older values from a column whose "
            "encoding changed with the type; without the source position of the change, no "
            "older value is converted (a row without a value in the new column is counted as "
            "rejected)"
        )
    _backfill_ledger(
        spark,
        catalog,
        iceberg_catalog,
        spec,
        names,
        min_dt,
        props,
        result,
        reencoded,
        after,
        converted,
        after_by_column,
    )
    if new_change and (reencoded or misread):
        position = change_position if after else None
        _record_reencoded(iceberg_catalog, spec, [*reencoded, *misread], position)
    failpoint("backfill_after_ledger")
    result.base_rows_updated = _backfill_by_position(
        spark, catalog, iceberg_catalog, spec, base_layout(spec), names, min_dt, props, base_nulls
    )
    failpoint("backfill_after_base")
    pending = _pending_bucketed(iceberg_catalog, spec)
    if pending is not None:
        result.bucketed_rows_updated = _backfill_by_position(
            spark,
            catalog,
            iceberg_catalog,
            spec,
            bucketed_layout(spec),
            names,
            min_dt,
            {**pending, **props},
        )
    # A redrive plans the whole decode before it reads a letter: none to read, none to plan.
    result.redriven += redrive_refused(
        spark, catalog, iceberg_catalog, spec, dead_letter_reasons(from_spec, spec, list(names))
    )
    complete = (
        from_spec is not None
        and set(changed_columns(from_spec, spec)) <= set(names)
        and not result.left_redriven_files
    )
    if from_spec is not None and complete and result.ledger_sequence_read is not None:
        _mark_done(iceberg_catalog, spec, from_spec.spec_version, result)

    for layer, layout in (
        ("cdc", ledger_layout(spec)),
        ("bucketed", bucketed_layout(spec)),
        ("base", base_layout(spec)),
    ):
        snapshot = _snapshot_id(load_table(iceberg_catalog, layout))
        if snapshot is not None:
            result.snapshot_ids[layer] = snapshot
    result.ledger_snapshot_id = result.snapshot_ids.get("cdc")
    result.base_snapshot_id = result.snapshot_ids.get("base")
    result.seconds = time.monotonic() - started
    return result
