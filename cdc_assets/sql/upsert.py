"""Spark SQL for the upsert: ledger -> newest change per key -> bucketed temp -> MERGE into base.

Ordering rule (DESIGN.md): a change is newer when its source position (major, minor, row) is
greater, with the Kafka partition and offset as the last tie-breakers; a missing position part
counts as -1. A change is applied only when it is newer than what base holds, so duplicates,
replays and late, out-of-order events cannot move a row backwards.

The "floor" is a source position at or before which every change is ignored: the position of a
bootstrap dump, or of the newest truncate.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cdc_assets.schema.layers import base_layout, tombstones_layout
from cdc_assets.schema.position import Position
from cdc_assets.schema.types import SinkType
from cdc_assets.schema.wire import Wire, plan_fields
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.ddl import literal, quote, spark_type
from cdc_assets.sql.key_ranges import KeyRanges

APPLIED_OPS = ("c", "u", "d", "r")
SEQ_PARTS = ("_seq_major", "_seq_minor", "_seq_row")
ORDER_PARTS = (*SEQ_PARTS, "_kafka_partition", "_kafka_offset")
# Columns base keeps about the change that wrote a row (SEQUENCE_COLUMNS of the layout).
CHANGE_COLUMNS = ("_op", "_source_ts", *ORDER_PARTS)
# A ledger row (alias ``a``) that moved a row in from another key without all its columns.
MOVED_CREATE = "{a}._op = 'c' AND {a}._before_json IS NOT NULL AND {a}._unavailable IS NOT NULL"


@dataclass(frozen=True)
class ChangeWindow:
    """The ledger rows one upsert run reads: a pinned ledger snapshot and Kafka offset ranges."""

    ledger: str  # quoted identifier
    snapshot_id: int
    start: Mapping[int, int]  # first offset not yet applied, per Kafka partition
    end: Mapping[int, int]  # first offset not in the ledger snapshot, per Kafka partition
    min_dt: str | None = None  # lookback: oldest ledger dt partition to read
    floor: Position | None = None
    # Data files appended outside the offset order (redriven dead letters), read whatever their
    # offsets and dt.
    extra_files: tuple[str, ...] = ()


def data_names(spec: TableSpec) -> list[str]:
    """The data columns of every layer: a sharded table's shard column, then the spec's."""
    names = [c.sink_name for c in spec.columns]
    return [spec.shard_column, *names] if spec.shard_column else names


def key_names(spec: TableSpec) -> list[str]:
    return spec.key_sink_names


def order_struct(alias: str) -> str:
    """The total order of changes as a struct that compares field by field."""
    fields = []
    for i, part in enumerate(ORDER_PARTS):
        value = f"{alias}.{part}"
        if part in SEQ_PARTS:
            value = f"coalesce({value}, CAST(-1 AS BIGINT))"
        fields.append(f"'o{i}', CAST({value} AS BIGINT)")
    return f"named_struct({', '.join(fields)})"


def position_struct(alias: str) -> str:
    fields = [f"'p{i}', coalesce({alias}.{p}, CAST(-1 AS BIGINT))" for i, p in enumerate(SEQ_PARTS)]
    return f"named_struct({', '.join(fields)})"


def position_literal(pos: Position) -> str:
    values = (pos.major, pos.minor, pos.row)
    fields = [f"'p{i}', CAST({v} AS BIGINT)" for i, v in enumerate(values)]
    return f"named_struct({', '.join(fields)})"


def _offset_ranges(window: ChangeWindow, alias: str = "l") -> str:
    ranges = []
    for partition, end in sorted(window.end.items()):
        start = window.start.get(partition, 0)
        if end > start:
            ranges.append(
                f"({alias}._kafka_partition = {partition} AND {alias}._kafka_offset >= {start} "
                f"AND {alias}._kafka_offset < {end})"
            )
    return " OR ".join(ranges) if ranges else "false"


def _window_filter(window: ChangeWindow, alias: str = "l") -> str:
    condition = f"({_offset_ranges(window, alias)})"
    if window.min_dt is not None:
        condition += f" AND {alias}.dt >= {literal(window.min_dt)}"
    if window.extra_files:
        files = ", ".join(literal(f) for f in window.extra_files)
        condition = f"({condition}) OR {alias}._file IN ({files})"
    return f"({condition})"


def _ledger_from(window: ChangeWindow, alias: str = "l") -> str:
    return f"{window.ledger} VERSION AS OF {window.snapshot_id} AS {alias}"


def render_window_probe(
    window: ChangeWindow, *, count_moves: bool = True, may_delete: str = "l._op = 'd'"
) -> str:
    """One row: the newest truncate's position in the window (``truncate``, a struct p0..p2 or
    NULL), the oldest and newest position of a change (``min_position``, ``max_position``), the
    newest Kafka timestamp in microseconds (``max_kafka_micros``), the number of
    creates that moved a row from another key without all its columns (``moved_creates``) and
    of changes that may become a delete in bucketed (``delete_candidates``: rows for which
    ``may_delete``, see `may_delete`, holds).

    Without ``count_moves`` (sources that send no placeholders) ``moved_creates`` is 0 and the
    probe does not read the before images, the widest column of an update-heavy ledger.
    """
    moves = f"count_if({MOVED_CREATE.format(a='l')})" if count_moves else "CAST(0 AS BIGINT)"
    applied = f"l._op IN ({', '.join(literal(o) for o in APPLIED_OPS)})"
    return (
        f"SELECT max(CASE WHEN l._op = 't' THEN {position_struct('l')} END) AS truncate, "
        f"min(CASE WHEN {applied} THEN {position_struct('l')} END) AS min_position, "
        f"max(CASE WHEN {applied} THEN {position_struct('l')} END) AS max_position, "
        f"unix_micros(max(l._kafka_ts)) AS max_kafka_micros, {moves} AS moved_creates, "
        f"count_if({may_delete}) AS delete_candidates "
        f"FROM {_ledger_from(window)} WHERE {_window_filter(window)}"
    )


def may_delete(spec: TableSpec, alias: str) -> str:
    """SQL true for a ledger row of ``alias`` that may become a delete in bucketed: a delete, or
    an update whose before image may hold another key (`old_key_deletes`, which decides it for
    sure). An upper bound, cheap to count in the window probe: a window with none spares base
    its probe of the deletes."""
    deletes = f"{alias}._op = 'd'"
    if old_key_values(spec, alias) is None:
        return deletes
    update = f"{alias}._op = 'u' AND {alias}._before_json IS NOT NULL"
    prefix = same_key_prefix(spec, alias)
    if prefix is not None:
        update += f" AND NOT coalesce(startswith({alias}._before_json, {prefix}), false)"
    return f"({deletes} OR ({update}))"


def render_late_keys(spec: TableSpec, window: ChangeWindow, base: str) -> str:
    """Keys with a change in the window older than base's row of the key: a change delivered
    late. Base's values of the columns a change may lack (TOAST placeholders) were carried
    without it, so for these keys they are recomputed from the key's whole ledger history."""
    keys = key_names(spec)
    on = " AND ".join(f"l.{quote(k)} = b.{quote(k)}" for k in keys)
    ops = ", ".join(literal(o) for o in APPLIED_OPS)
    return (
        f"SELECT DISTINCT {', '.join(f'l.{quote(k)}' for k in keys)} "
        f"FROM {_ledger_from(window)} JOIN {base} b ON {on} "
        f"WHERE {_window_filter(window)} AND l._op IN ({ops}) "
        f"AND {order_struct('l')} < {order_struct('b')}"
    )


def _unavailable(alias: str, column: str) -> str:
    return f"array_contains(split(coalesce({alias}._unavailable, ''), ','), {literal(column)})"


# Key encodings whose JSON text casts straight to the key's type (see old_key_deletes).
_PLAIN_KEY_WIRES = (Wire.INT, Wire.LONG, Wire.STRING)


def old_key_values(spec: TableSpec, alias: str) -> dict[str, str] | None:
    """SQL of each key column's value in row ``alias``'s before image (JSON text), by sink
    name; None when a key's encoding cannot be read back from its text (see old_key_deletes)."""
    plans = [p for p in plan_fields(spec) if p.key]
    if any(p.wire not in _PLAIN_KEY_WIRES or p.transform for p in plans):
        return None
    return {
        # try_cast: a key text that is no integer (hand-made producers) reads as no key, not as
        # a failed run (ANSI casts raise)
        p.sink_name: f"try_cast(get_json_object({alias}._before_json, {literal('$.' + p.name)}) "
        f"AS {spark_type(p.sink)})"
        for p in plans
    }


def same_key_prefix(spec: TableSpec, alias: str) -> str | None:
    """SQL of the text a before image starts with when its key equals row ``alias``'s key.

    Debezium writes the image's fields in table order without spaces, so an update that kept
    its key (nearly all) has an image starting ``{"id":42,``. A match proves the key is the
    same: the fields are whole JSON tokens, and an integer or string key renders one way. No
    match proves nothing (key columns not first, other spacing, other escaping): the caller
    parses those images. None when a key's sink type differs from what its JSON text holds.
    """
    parts = ["'{'"]
    for i, p in enumerate(p for p in plan_fields(spec) if p.key):
        if p.transform or p.sink != p.natural:
            return None
        name = ("," if i else "") + json.dumps(p.name, ensure_ascii=False) + ":"
        ref = f"{alias}.{quote(p.sink_name)}"
        if p.wire in (Wire.INT, Wire.LONG):
            value = f"CAST({ref} AS STRING)"
        elif p.wire is Wire.STRING:
            # to_json writes the string as one JSON token: {"v":"..."} minus 5 + 1 characters
            rendered = f"to_json(named_struct('v', {ref}))"
            value = f"substr({rendered}, 6, length({rendered}) - 6)"
        else:
            return None
        parts += [literal(name), value]
    return f"concat({', '.join(parts)}, ',')"


def old_key_rows(spec: TableSpec, columns: list[str]) -> tuple[list[str], list[str]] | None:
    """The select list and WHERE conditions, over ledger rows ``l``, of a delete of the old key
    for every update whose before image holds another key: ``columns`` with the old key's
    values, ``_op`` 'd', the row's own change columns and shard (the old key is on the same
    shard), null for the rest. None when the spec's key has an encoding that cannot be read
    back from the image's text."""
    old = old_key_values(spec, "l")
    if old is None:
        return None
    values = []
    for c in columns:
        if c in old:
            values.append(f"{old[c]} AS {quote(c)}")
        elif c == "_op":
            values.append("'d' AS _op")
        elif c in CHANGE_COLUMNS or c in ("_txn_id", "_txn_order"):
            values.append(f"l.{c}")
        elif c == spec.shard_column:
            values.append(f"l.{quote(c)}")
        else:
            values.append(f"NULL AS {quote(c)}")
    moved = "(" + " OR ".join(f"NOT ({old[k]} <=> l.{quote(k)})" for k in old) + ")"
    present = " AND ".join(f"{v} IS NOT NULL" for v in old.values())
    where = ["l._op = 'u'", "l._before_json IS NOT NULL"]
    # Most updates keep their key and their before image starts with it: a prefix test spares
    # them the JSON parse (AND evaluates left to right and stops at the first false).
    prefix = same_key_prefix(spec, "l")
    if prefix is not None:
        where.append(f"NOT coalesce(startswith(l._before_json, {prefix}), false)")
    return values, [*where, present, moved]


def old_key_deletes(spec: TableSpec, window: ChangeWindow, columns: list[str]) -> str | None:
    """SELECT of a delete of the old key for every update whose before image has another key.

    Debezium itself sends a primary-key change as a delete plus a create; an update carrying
    both keys (other producers) must still remove the old row. The old key is read from the
    before image's JSON text, which works for integer and string keys; None when the spec's
    key has another encoding.
    """
    rows = old_key_rows(spec, columns)
    if rows is None:
        return None
    values, conditions = rows
    where = [_window_filter(window), *conditions]
    if window.floor is not None:
        where.append(f"{position_struct('l')} > {position_literal(window.floor)}")
    return f"SELECT {', '.join(values)} FROM {_ledger_from(window)} WHERE {' AND '.join(where)}"


def render_newest_changes(
    spec: TableSpec,
    window: ChangeWindow,
    tombstones: str,
    *,
    carry_unavailable: bool,
    moved: str | None = None,
    late: str | None = None,
) -> str:
    """SELECT of the newest applicable change per key in the window, in the bucketed layout.

    Changes at or before the floor are dropped; a key whose newest change is older than its
    remembered delete (tombstone) is dropped. With ``carry_unavailable`` (sources that send TOAST
    placeholders) a column the newest change lacks takes the newest value another change of
    the same run sent; it stays listed in ``_unavailable`` only when no change sent it.

    ``late`` names a view of keys with a change delivered late (``render_late_keys``): their
    changes are all the ledger holds of them, so that a carried value is the newest in source
    order, not the newest of this run.

    ``moved`` names a view of the keys whose row was moved in from another key in this run by a
    create that lacked columns (``render_moved_creates``), with the values the row had under its
    old key (``moved_view_columns``): those take the place of values sent before the move (an
    earlier life of the key) or of none at all, and are no longer unavailable.
    """
    data = data_names(spec)
    keys = key_names(spec)
    carried = [c for c in data if c not in keys] if carry_unavailable else []
    columns = [*data, *CHANGE_COLUMNS, "_unavailable"]
    where = [_window_filter(window), f"l._op IN ({', '.join(literal(o) for o in APPLIED_OPS)})"]
    if window.floor is not None:
        where.append(f"{position_struct('l')} > {position_literal(window.floor)}")
    select_changes = ", ".join(f"l.{quote(c)}" for c in columns)
    changes = f"SELECT {select_changes} FROM {_ledger_from(window)} WHERE {' AND '.join(where)}"
    if late is not None and carried:
        # Keys with a late change: every change of the key the ledger holds, not the window's.
        on = " AND ".join(f"l.{quote(k)} = k.{quote(k)}" for k in keys)
        history = [where[1]]
        if window.floor is not None:
            history.append(f"{position_struct('l')} > {position_literal(window.floor)}")
        changes = (
            f"SELECT * FROM ({changes}) l LEFT ANTI JOIN {late} k ON {on} UNION ALL "
            f"SELECT {select_changes} FROM {_ledger_from(window)} LEFT SEMI JOIN {late} k "
            f"ON {on} WHERE {' AND '.join(history)}"
        )
    deletes = old_key_deletes(spec, window, columns)
    if deletes is not None:
        changes += f" UNION ALL {deletes}"
    if not carried:
        return _newest_by_rank(keys, columns, changes, tombstones)
    newest_struct = ", ".join(f"{literal(c)}, c.{quote(c)}" for c in columns)
    aggregates = [f"max_by(named_struct({newest_struct}), {order_struct('c')}) AS r"]
    for i, col in enumerate(carried):
        aggregates.append(
            f"max_by(named_struct('v', c.{quote(col)}, 'o', {order_struct('c')}), CASE WHEN NOT "
            f"{_unavailable('c', col)} THEN {order_struct('c')} END) AS a{i}"
        )
    sink_types = {p.sink_name: p.sink for p in plan_fields(spec)}
    outputs = []
    missing = []
    carried_index = {c: i for i, c in enumerate(carried)}
    for col in data:
        if col not in carried_index:
            outputs.append(f"n.r.{quote(col)} AS {quote(col)}")
            continue
        i = carried_index[col]
        value, absent = f"n.a{i}.v", f"n.a{i} IS NULL"
        if moved is not None:
            # The move starts the key's current life: values sent before it are of another row.
            use_moved = f"m._mo4 IS NOT NULL AND (n.a{i} IS NULL OR n.a{i}.o < {_moved_order()})"
            resolved = f"array_contains(split(m._resolved, ','), {literal(col)})"
            back = _from_text(sink_types[col], f"m.v{i}")
            value = (
                f"CASE WHEN {use_moved} THEN CASE WHEN {resolved} THEN {back} END ELSE {value} END"
            )
            absent = f"CASE WHEN {use_moved} THEN NOT {resolved} ELSE {absent} END"
        outputs.append(
            f"CASE WHEN n.r._op = 'd' THEN n.r.{quote(col)} ELSE {value} END AS {quote(col)}"
        )
        missing.append(f"CASE WHEN {absent} THEN {literal(col)} END")
    outputs += [f"n.r.{c} AS {c}" for c in CHANGE_COLUMNS]
    outputs.append(
        f"CASE WHEN n.r._op = 'd' THEN NULL ELSE nullif(concat_ws(',', {', '.join(missing)}), '') "
        "END AS _unavailable"
    )
    key_match = " AND ".join(f"t.{quote(k)} = n.r.{quote(k)}" for k in keys)
    group = ", ".join(f"c.{quote(k)}" for k in keys)
    joined = ""
    if moved is not None:
        on = " AND ".join(f"m.{quote(k)} = n.r.{quote(k)}" for k in keys)
        joined = f" LEFT JOIN {moved} m ON {on}"
    return (
        f"WITH changes AS ({changes}), "
        f"newest AS (SELECT {', '.join(aggregates)} FROM changes c GROUP BY {group}) "
        f"SELECT {', '.join(outputs)} FROM newest n{joined} "
        f"WHERE NOT EXISTS (SELECT 1 FROM {tombstones} t WHERE {key_match} "
        f"AND {order_struct('t')} > {order_struct('n.r')})"
    )


# --- rows moved to another key ------------------------------------------------------------------
#
# PostgreSQL sends a primary-key update as a delete of the old key and a create of the new one
# (with the header the ingest keeps in ``_before_json``); the create lacks the columns stored out
# of line (TOAST) that the update did not touch. Their values are those the row had under its old
# key, found in the ledger's history of that key (or base's row of it), possibly moved again.

MOVED_ORDER = tuple(f"_mo{i}" for i in range(len(ORDER_PARTS)))


def _moved_order() -> str:
    return "named_struct(" + ", ".join(f"'o{i}', m.{c}" for i, c in enumerate(MOVED_ORDER)) + ")"


def _order_columns(alias: str) -> list[str]:
    """The parts of ``order_struct`` as columns ``o0``..``o4``."""
    out = []
    for i, part in enumerate(ORDER_PARTS):
        value = f"{alias}.{part}"
        if part in SEQ_PARTS:
            value = f"coalesce({value}, CAST(-1 AS BIGINT))"
        out.append(f"CAST({value} AS BIGINT) AS o{i}")
    return out


def as_text(sink: SinkType, ref: str) -> str:
    """A value as text that ``_from_text`` turns back into the same value (same session)."""
    if sink.is_nested:
        return f"to_json({ref})"
    return f"base64({ref})" if sink.name == "binary" else f"CAST({ref} AS STRING)"


def _from_text(sink: SinkType, ref: str) -> str:
    if sink.is_nested:
        return f"from_json({ref}, {literal(spark_type(sink))})"
    return f"unbase64({ref})" if sink.name == "binary" else f"CAST({ref} AS {spark_type(sink)})"


def movable_keys(spec: TableSpec) -> bool:
    """Whether an old key can be read from its JSON text (integer and string keys)."""
    return all(p.wire in _PLAIN_KEY_WIRES and not p.transform for p in plan_fields(spec) if p.key)


def carried_columns(spec: TableSpec) -> list[str]:
    """Data columns that can arrive as a placeholder: every column but the key."""
    keys = key_names(spec)
    return [c for c in data_names(spec) if c not in keys]


def render_moved_creates(spec: TableSpec, window: ChangeWindow) -> str:
    """Every create (and snapshot read) in the window of the keys that some create in the window
    moved in from another key without all columns: key, order ``o0``..``o4``, ``_op``,
    ``_before_json`` (the old key of a move), ``_unavailable``. The newest create of a key
    decides whether its current row came from a move."""
    keys = key_names(spec)
    where = [_window_filter(window), "l._op IN ('c', 'r')"]
    if window.floor is not None:
        where.append(f"{position_struct('l')} > {position_literal(window.floor)}")
    columns = [*(f"l.{quote(k)}" for k in keys), *_order_columns("l")]
    select = ", ".join([*columns, "l._op", "l._before_json", "l._unavailable"])
    on = " AND ".join(f"c.{quote(k)} = m.{quote(k)}" for k in keys)
    moved = (
        f"SELECT DISTINCT {', '.join(quote(k) for k in keys)} FROM creates c "
        f"WHERE {MOVED_CREATE.format(a='c')}"
    )
    return (
        f"WITH creates AS (SELECT {select} FROM {_ledger_from(window)} "
        f"WHERE {' AND '.join(where)}) "
        f"SELECT c.* FROM creates c LEFT SEMI JOIN ({moved}) m ON {on}"
    )


def render_key_history(spec: TableSpec, window: ChangeWindow, keys_view: str) -> str:
    """Every row image (c/u/r) the pinned ledger holds of the keys in ``keys_view``: key, order
    ``o0``..``o4``, ``_op``, ``_before_json``, ``_unavailable`` and the carried columns as text
    ``v0``..``vn``."""
    keys = key_names(spec)
    sinks = {p.sink_name: p.sink for p in plan_fields(spec)}
    values = [
        f"{as_text(sinks[c], 'l.' + quote(c))} AS v{i}" for i, c in enumerate(carried_columns(spec))
    ]
    select = [*(f"l.{quote(k)}" for k in keys), *_order_columns("l"), "l._op", "l._before_json"]
    select += ["l._unavailable", *values]
    on = " AND ".join(f"l.{quote(k)} = k.{quote(k)}" for k in keys)
    return (
        f"SELECT {', '.join(select)} FROM {_ledger_from(window)} LEFT SEMI JOIN {keys_view} k "
        f"ON {on} WHERE l._op IN ('c', 'u', 'r')"
    )


def render_stored_rows(spec: TableSpec, base: str, keys_view: str) -> str:
    """Base's rows of the keys in ``keys_view``: key, order ``o0``..``o4``, carried columns as
    text ``v0``..``vn`` (rows loaded from a dump have no ledger history)."""
    keys = key_names(spec)
    sinks = {p.sink_name: p.sink for p in plan_fields(spec)}
    values = [
        f"{as_text(sinks[c], 'b.' + quote(c))} AS v{i}" for i, c in enumerate(carried_columns(spec))
    ]
    select = [*(f"b.{quote(k)}" for k in keys), *_order_columns("b"), *values]
    on = " AND ".join(f"b.{quote(k)} = k.{quote(k)}" for k in keys)
    return f"SELECT {', '.join(select)} FROM {base} b LEFT SEMI JOIN {keys_view} k ON {on}"


def key_view_schema(spec: TableSpec) -> str:
    """DDL schema of a view of keys (for the moved-row lookups)."""
    sinks = {p.sink_name: p.sink for p in plan_fields(spec)}
    return ", ".join(f"{quote(k)} {spark_type(sinks[k])}" for k in key_names(spec))


def moved_view_schema(spec: TableSpec) -> str:
    """DDL schema of the ``moved`` view of ``render_newest_changes``: key, the move's order,
    the carried columns' old values as text ``v0``..``vn`` and the resolved column names."""
    parts = [key_view_schema(spec), *(f"{c} BIGINT" for c in MOVED_ORDER)]
    parts += [f"v{i} STRING" for i in range(len(carried_columns(spec)))]
    parts.append("_resolved STRING")
    return ", ".join(parts)


def _newest_by_rank(keys: list[str], columns: list[str], changes: str, tombstones: str) -> str:
    """Newest change per key by ROW_NUMBER: one sort per key group, no wide aggregate buffers."""
    partition = ", ".join(f"c.{quote(k)}" for k in keys)
    key_match = " AND ".join(f"t.{quote(k)} = n.{quote(k)}" for k in keys)
    return (
        f"WITH changes AS ({changes}), "
        f"ranked AS (SELECT c.*, row_number() OVER (PARTITION BY {partition} "
        f"ORDER BY {order_struct('c')} DESC) AS _rank FROM changes c) "
        f"SELECT {', '.join(f'n.{quote(c)}' for c in columns)} FROM ranked n "
        f"WHERE n._rank = 1 AND NOT EXISTS (SELECT 1 FROM {tombstones} t WHERE {key_match} "
        f"AND {order_struct('t')} > {order_struct('n')})"
    )


def render_pinned_changes(
    bucketed: str,
    snapshot_id: int,
    columns: Sequence[tuple[str, SinkType]],
    written_as: Mapping[str, str | None],
) -> str:
    """SELECT of the bucketed table as of ``snapshot_id`` (the snapshot whose state the MERGE
    commits) in the layout's ``columns``. Spark reads a snapshot with the schema it was written
    with: ``written_as`` maps a column to its name there (renamed since: the old name), or to
    None when the snapshot lacks it (added since: it reads as NULL, as in the current schema). A
    column it does not map is read by its own name."""

    def read(name: str, kind: SinkType) -> str:
        then = written_as.get(name, name)
        if then is None:
            return f"CAST(NULL AS {spark_type(kind)}) AS {quote(name)}"
        return quote(name) if then == name else f"{quote(then)} AS {quote(name)}"

    select = ", ".join(read(name, kind) for name, kind in columns)
    return f"SELECT {select} FROM {bucketed} VERSION AS OF {int(snapshot_id)}"


def render_insert_overwrite(target: str, select: str, columns: Sequence[str] = ()) -> str:
    """Replace the whole table (static overwrite: no PARTITION clause, every partition goes).

    With ``columns`` the SELECT's columns fill those target columns, in that order, and any
    other column is null: a table evolved ahead of the spec (schema evolution phase 1) still
    takes the rows.
    """
    names = f" ({', '.join(quote(c) for c in columns)})" if columns else ""
    return f"INSERT OVERWRITE {target}{names} {select}"


def _on(spec: TableSpec, ranges: KeyRanges | None = None) -> str:
    on = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in key_names(spec))
    # Matches the same pairs (every change's key is in a range); lets Iceberg skip the target's
    # files whose key bounds miss every range.
    return on if ranges is None else f"{on} AND {ranges.condition('t')}"


def render_tombstone_merge(
    spec: TableSpec, tombstones: str, bucketed: str, ranges: KeyRanges | None = None
) -> str:
    """Remember this run's deletes (idempotent: a rerun finds them and changes nothing);
    ``ranges`` (of the bucketed keys) prune the tombstones read."""
    layout = tombstones_layout(spec)
    keys = key_names(spec)
    newer = f"{order_struct('s')} > {order_struct('t')}"
    sets = [f"t.{p} = s.{p}" for p in ORDER_PARTS]
    sets += ["t._deleted_at = s._source_ts", "t._recorded_at = current_timestamp()"]
    values = {k: f"s.{quote(k)}" for k in keys}
    values.update({p: f"s.{p}" for p in ORDER_PARTS})
    values.update({"_deleted_at": "s._source_ts", "_recorded_at": "current_timestamp()"})
    names = [c.name for c in layout.columns]
    return (
        f"MERGE INTO {tombstones} t "
        f"USING (SELECT * FROM {bucketed} WHERE _op = 'd') s ON {_on(spec, ranges)} "
        f"WHEN MATCHED AND {newer} THEN UPDATE SET {', '.join(sets)} "
        f"WHEN NOT MATCHED THEN INSERT ({', '.join(quote(n) for n in names)}) "
        f"VALUES ({', '.join(values[n] for n in names)})"
    )


def render_base_merge(
    spec: TableSpec,
    base: str,
    bucketed: str,
    truncate_floor: Position | None = None,
    *,
    keep_unavailable: bool = True,
    ranges: KeyRanges | None = None,
) -> str:
    """MERGE the bucketed changes into base, each only when newer than the stored row.

    With ``keep_unavailable`` a column the change did not carry (TOAST placeholder) keeps the
    stored value; only sources that send placeholders need it, and without it the MERGE reads
    just the key columns of base. With ``truncate_floor`` the rows no change of this run touched
    and whose position is at or before the truncate are deleted too (which reads all of base, so
    ``ranges``, the bucketed keys' ranges that prune the files read, cannot go with it).
    """
    if truncate_floor is not None and ranges is not None:
        raise ValueError("a MERGE that applies a truncate reads all of base: no key ranges")
    layout = base_layout(spec)
    keys = set(key_names(spec))
    # With placeholders a change equal to the stored row's is applied too: the bucketed row of a
    # key with a late change is its newest change again, with carried values now in source order.
    newer = f"{order_struct('s')} {'>=' if keep_unavailable else '>'} {order_struct('t')}"
    sets = []
    for name in layout.column_names:
        if name in keys:
            continue
        if name in CHANGE_COLUMNS:
            sets.append(f"t.{name} = s.{name}")
        elif not keep_unavailable:
            sets.append(f"t.{quote(name)} = s.{quote(name)}")
        else:
            q = quote(name)
            sets.append(f"t.{q} = CASE WHEN {_unavailable('s', name)} THEN t.{q} ELSE s.{q} END")
    names = layout.column_names
    sql = (
        f"MERGE INTO {base} t USING {bucketed} s ON {_on(spec, ranges)} "
        f"WHEN MATCHED AND s._op = 'd' AND {newer} THEN DELETE "
        f"WHEN MATCHED AND s._op <> 'd' AND {newer} THEN UPDATE SET {', '.join(sets)} "
        f"WHEN NOT MATCHED AND s._op <> 'd' THEN INSERT ({', '.join(quote(n) for n in names)}) "
        f"VALUES ({', '.join('s.' + quote(n) for n in names)})"
    )
    if truncate_floor is not None:
        # A truncate on one shard empties that shard's rows only: positions of two servers
        # never compare.
        shard = (
            f"t.{quote(spec.shard_column)} = {literal(spec.shard.shard_name)} AND "
            if spec.shard_column and spec.shard is not None
            else ""
        )
        sql += (
            f" WHEN NOT MATCHED BY SOURCE AND {shard}{position_struct('t')} <= "
            f"{position_literal(truncate_floor)} THEN DELETE"
        )
    return sql
