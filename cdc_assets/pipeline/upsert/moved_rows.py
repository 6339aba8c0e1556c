"""Values of rows moved to another primary key by a change that did not carry all columns.

PostgreSQL (default replica identity) sends a primary-key update as a delete of the old key and a
create of the new key, and the create carries Debezium's placeholder for every column stored out
of line (TOAST) that the update left alone. The new key has no stored row to keep those values
from, so they must come from the row under its old key: the newest change of the old key before
the move that carried the column, or base's row of it, and, when that row had itself been moved
without the column, the key before that. The ingest keeps the old key (Debezium's
``__debezium.oldkey`` header) in the create's ``_before_json``.

``resolve_moves`` decides which value each moved column takes (pure); ``moved_values_view``
reads what it needs from the ledger and base and registers the answer as a view for the
bucketed step (``render_newest_changes(moved=...)``). Values travel as text and are cast back in
Spark, so no value passes through Python's types.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cdc_assets.schema.wire import Wire, plan_fields
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.upsert import (
    ChangeWindow,
    carried_columns,
    key_names,
    key_view_schema,
    movable_keys,
    moved_view_schema,
    render_key_history,
    render_moved_creates,
    render_stored_rows,
)

Key = tuple[object, ...]
Order = tuple[int, ...]
# How many keys back a chain of moves is followed (each hop is one ledger read).
MAX_HOPS = 20


@dataclass(frozen=True)
class KeyChange:
    """One row image of a key in the ledger (op c, u or r)."""

    order: Order
    op: str
    unavailable: frozenset[str]
    values: Mapping[str, str | None]
    old_key: Key | None = None  # a create that moved the row from this key


@dataclass(frozen=True)
class StoredRow:
    """Base's row of a key: the order of the change that wrote it and its values."""

    order: Order
    values: Mapping[str, str | None]


@dataclass(frozen=True)
class Move:
    """A key whose current row was moved in from ``old_key`` at ``order`` lacking ``missing``."""

    key: Key
    order: Order
    old_key: Key
    missing: tuple[str, ...]


@dataclass
class Resolution:
    """Per moved key, the values found (column -> text or None) and keys still to be read."""

    values: dict[Key, dict[str, str | None]] = field(default_factory=dict)
    wanted: set[Key] = field(default_factory=set)


def parse_old_key(spec: TableSpec, before_json: str | None) -> Key | None:
    """The key named in a move's ``_before_json`` (integer and string keys), else None."""
    if not before_json:
        return None
    try:
        image = json.loads(before_json)
    except json.JSONDecodeError:
        return None
    if not isinstance(image, dict):
        return None
    plans = {p.name: p for p in plan_fields(spec) if p.key}
    # A shard's move stays within its shard: the key leads with the shard's name.
    parts: list[object] = [spec.shard.shard_name] if spec.shard_column and spec.shard else []
    for name in spec.primary_key:
        value, wire = image.get(name), plans[name].wire
        integer = isinstance(value, int) and not isinstance(value, bool)
        if not (
            (wire in (Wire.INT, Wire.LONG) and integer)
            or (wire is Wire.STRING and isinstance(value, str))
        ):
            return None
        parts.append(value)
    return tuple(parts)


def newest_moves(
    spec: TableSpec, creates: Iterable[tuple[Key, Order, str, str | None, str | None]]
) -> list[Move]:
    """From every create ``(key, order, op, _before_json, _unavailable)`` of some keys, the keys
    whose newest create moved the row in without some carried columns."""
    newest: dict[Key, tuple[Order, str, str | None, str | None]] = {}
    for key, order, op, before_json, unavailable in creates:
        if key not in newest or order > newest[key][0]:
            newest[key] = (order, op, before_json, unavailable)
    carried = set(carried_columns(spec))
    moves = []
    for key, (order, op, before_json, unavailable) in sorted(newest.items(), key=repr):
        missing = tuple(c for c in (unavailable or "").split(",") if c in carried)
        old_key = parse_old_key(spec, before_json) if op == "c" else None
        if old_key is not None and missing and old_key != key:
            moves.append(Move(key, order, old_key, missing))
    return moves


_NOT_FOUND = object()


class _WantedError(Exception):
    """The history of a key that has not been read yet is needed."""

    def __init__(self, key: Key) -> None:
        self.key = key


def _value_before(
    key: Key,
    before: Order,
    column: str,
    history: Mapping[Key, Sequence[KeyChange]],
    stored: Mapping[Key, StoredRow],
    hops: int,
) -> object:
    """The value ``column`` had under ``key`` just before ``before``."""
    if key not in history:
        raise _WantedError(key)
    earlier = sorted((c for c in history[key] if c.order < before), key=lambda c: c.order)
    for change in reversed(earlier):
        if column not in change.unavailable:
            return change.values.get(column)
        if change.op in ("c", "r"):  # the start of this row's life under this key
            if change.old_key is None or hops >= MAX_HOPS:
                return _NOT_FOUND
            return _value_before(change.old_key, change.order, column, history, stored, hops + 1)
    row = stored.get(key)  # e.g. loaded from a dump: no history in the ledger
    if row is not None and row.order < before:
        return row.values.get(column)
    return _NOT_FOUND


def resolve_moves(
    moves: Sequence[Move],
    history: Mapping[Key, Sequence[KeyChange]],
    stored: Mapping[Key, StoredRow],
) -> Resolution:
    """The old values of every moved column that the histories read so far can tell, and the
    keys whose history must be read before the others can be told."""
    out = Resolution()
    for move in moves:
        found: dict[str, str | None] = {}
        for column in move.missing:
            try:
                value = _value_before(move.old_key, move.order, column, history, stored, 0)
            except _WantedError as wanted:
                out.wanted.add(wanted.key)
                continue
            if value is not _NOT_FOUND:
                found[column] = value if value is None else str(value)
        out.values[move.key] = found
    return out


# --- Spark ---------------------------------------------------------------------------------------


def _key_of(row: Any, keys: Sequence[str]) -> Key:
    return tuple(row[k] for k in keys)


def _order_of(row: Any) -> Order:
    return tuple(int(row[f"o{i}"]) for i in range(5))


def _texts(row: Any, columns: Sequence[str]) -> dict[str, str | None]:
    return {c: row[f"v{i}"] for i, c in enumerate(columns)}


def moved_values_view(
    spark: Any, spec: TableSpec, window: ChangeWindow, base: str, *, view: str
) -> str | None:
    """Register ``view`` with the old values of the rows the window moved to another key
    without all columns (None, and no view, when there are none)."""
    if not movable_keys(spec):
        return None
    keys, columns = key_names(spec), carried_columns(spec)
    creates = [
        (_key_of(r, keys), _order_of(r), r["_op"], r["_before_json"], r["_unavailable"])
        for r in spark.sql(render_moved_creates(spec, window)).collect()
    ]
    moves = newest_moves(spec, creates)
    if not moves:
        return None
    history: dict[Key, list[KeyChange]] = {}
    stored: dict[Key, StoredRow] = {}
    wanted = {m.old_key for m in moves}
    resolution = Resolution()
    for _ in range(MAX_HOPS + 1):
        if not wanted:
            break
        keys_view = f"{view}_keys"
        spark.createDataFrame(
            sorted(wanted, key=repr), key_view_schema(spec)
        ).createOrReplaceTempView(keys_view)
        try:
            for key in wanted:
                history.setdefault(key, [])
            for r in spark.sql(render_key_history(spec, window, keys_view)).collect():
                history[_key_of(r, keys)].append(
                    KeyChange(
                        order=_order_of(r),
                        op=r["_op"],
                        unavailable=frozenset((r["_unavailable"] or "").split(",")) - {""},
                        values=_texts(r, columns),
                        old_key=parse_old_key(spec, r["_before_json"]) if r["_op"] == "c" else None,
                    )
                )
            for r in spark.sql(render_stored_rows(spec, base, keys_view)).collect():
                stored[_key_of(r, keys)] = StoredRow(_order_of(r), _texts(r, columns))
        finally:
            spark.catalog.dropTempView(keys_view)
        resolution = resolve_moves(moves, history, stored)
        wanted = resolution.wanted - set(history)
    rows = []
    for move in moves:
        found = resolution.values.get(move.key, {})
        rows.append(
            (
                *move.key,
                *move.order,
                *(found.get(c) for c in columns),
                ",".join(c for c in columns if c in found),
            )
        )
    spark.createDataFrame(rows, moved_view_schema(spec)).createOrReplaceTempView(view)
    return view
