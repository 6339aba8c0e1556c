"""The versions a history table must hold, replayed from ledger rows in plain Python (pure).

This is the reference the Spark SQL of `cdc_assets.sql.history` is checked against (the
``history_matches_ledger`` asset check and the tests). The rules, per key (docs/history.md):

- Every change of the key (c, u, r, d) is a version, in source order (position, then Kafka
  partition and offset). A change delivered twice (the same source position) counts once: the
  first delivery (lowest partition and offset). Without a position, each record is a change.
- An update whose before image holds another key also deletes the old key (a version ``d`` of
  the old key at the update's position).
- A truncate is a version ``t`` of every key that has a change before it (of the same shard).
- A version is valid until the key's next version; ``_is_deleted`` for ``d`` and ``t``.
- A column the source did not send (``_unavailable``) takes the value of the newest earlier
  c/u/r version of the same life of the key (a life ends at a delete or truncate).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Key = tuple[Any, ...]
ROW_OPS = ("c", "u", "r")


def order_key(row: Mapping[str, Any]) -> tuple[int, ...]:
    """The total order of changes: position parts (missing: -1), Kafka partition, offset."""

    def part(name: str) -> int:
        value = row.get(name)
        return -1 if value is None else int(value)

    return (
        part("_seq_major"),
        part("_seq_minor"),
        part("_seq_row"),
        int(row["_kafka_partition"]),
        int(row["_kafka_offset"]),
    )


def _identity(row: Mapping[str, Any]) -> tuple[Any, ...]:
    seq = (row.get("_seq_major"), row.get("_seq_minor"), row.get("_seq_row"))
    if all(p is None for p in seq):
        return ("record", row["_kafka_partition"], row["_kafka_offset"])
    return ("position", *seq)


def _unavailable(row: Mapping[str, Any]) -> set[str]:
    return set((row.get("_unavailable") or "").split(",")) - {""}


def _old_key(row: Mapping[str, Any], key_fields: Sequence[tuple[str, str]]) -> Key | None:
    """The key in an update's before image (source names -> values), None without one."""
    before = row.get("_before_json")
    if isinstance(before, str):
        try:
            before = json.loads(before)
        except ValueError:
            return None
    if not isinstance(before, dict):
        return None
    values = tuple(before.get(source) for source, _ in key_fields)
    return None if None in values else values


def replay_history(
    ledger_rows: Iterable[Mapping[str, Any]],
    *,
    data_columns: Sequence[str],
    key_fields: Sequence[tuple[str, str]],
    shard_column: str | None = None,
    carry_unavailable: bool = False,
    old_keys: bool = True,
) -> dict[Key, list[dict[str, Any]]]:
    """Per key (values of the key's sink columns, a sharded table's shard column first), its
    versions in order. ``data_columns``: the sink names of the data columns (shard column and
    keys included); ``key_fields``: (source name, sink name) of each key column, as the before
    image names them. ``old_keys``: whether an update's before image is read for a moved key."""
    keys = ([shard_column] if shard_column else []) + [sink for _, sink in key_fields]
    changes: dict[Key, dict[tuple[Any, ...], dict[str, Any]]] = {}
    truncates: dict[tuple[Any, ...], dict[str, Any]] = {}

    def add(key: Key, row: dict[str, Any]) -> None:
        seen = changes.setdefault(key, {})
        ident = _identity(row)
        if ident not in seen or order_key(row)[3:] < order_key(seen[ident])[3:]:
            seen[ident] = row

    for raw in ledger_rows:
        row = dict(raw)
        op = row["_op"]
        if op == "t":
            ident = (row.get(shard_column) if shard_column else None, *_identity(row))
            if ident not in truncates or order_key(row)[3:] < order_key(truncates[ident])[3:]:
                truncates[ident] = row
            continue
        if op not in (*ROW_OPS, "d"):
            continue
        key = tuple(row[k] for k in keys)
        add(key, row)
        if op == "u" and old_keys:
            old = _old_key(row, key_fields)
            if old is not None:
                old_full = ((row[shard_column],) if shard_column else ()) + old
                if old_full != key:
                    gone: dict[str, Any] = {c: None for c in data_columns}
                    gone.update(zip(keys, old_full, strict=True))
                    gone.update(
                        {
                            "_op": "d",
                            "_unavailable": None,
                            **{
                                k: row.get(k)
                                for k in (
                                    "_source_ts",
                                    "_seq_major",
                                    "_seq_minor",
                                    "_seq_row",
                                    "_kafka_partition",
                                    "_kafka_offset",
                                    *_TXN,
                                )
                            },
                        }
                    )
                    add(old_full, gone)
    out: dict[Key, list[dict[str, Any]]] = {}
    for key, by_identity in changes.items():
        events = sorted(by_identity.values(), key=order_key)
        first = order_key(events[0])
        shard = key[0] if shard_column else None
        for (t_shard, *_), t in truncates.items():
            if t_shard == shard and order_key(t) > first:
                mark: dict[str, Any] = {c: None for c in data_columns}
                mark.update(zip(keys, key, strict=True))
                mark.update({k: t.get(k) for k in ("_source_ts", *_POSITION, *_TXN)})
                mark.update({"_op": "t", "_unavailable": None})
                events.append(mark)
        events.sort(key=order_key)
        out[key] = _versions(events, data_columns, set(keys), carry_unavailable)
    return out


_POSITION = ("_seq_major", "_seq_minor", "_seq_row", "_kafka_partition", "_kafka_offset")
# The change's source transaction (tables of a consistency group; absent elsewhere: None).
_TXN = ("_txn_id", "_txn_order")


def _versions(
    events: list[dict[str, Any]], data_columns: Sequence[str], keys: set[str], carry: bool
) -> list[dict[str, Any]]:
    versions: list[dict[str, Any]] = []
    life: dict[str, Any] = {}  # newest value of each column sent in the key's current life
    for i, event in enumerate(events):
        op = event["_op"]
        row = {c: event.get(c) for c in data_columns}
        unavailable = _unavailable(event) if op in ROW_OPS else set()
        if op in ROW_OPS:
            for c in data_columns:
                if c in keys:
                    continue
                if carry and c in unavailable:
                    row[c] = life.get(c, event.get(c))
                else:
                    life[c] = event.get(c)
        else:
            life = {}
        nxt = events[i + 1] if i + 1 < len(events) else None
        row.update({k: event.get(k) for k in ("_source_ts", *_POSITION, *_TXN)})
        row.update(
            {
                "_op": op,
                # As the source sent it: a later recomputation carries the values again.
                "_unavailable": event.get("_unavailable") if op in ROW_OPS else None,
                "_valid_from": event.get("_source_ts"),
                "_valid_to": None if nxt is None else nxt.get("_source_ts"),
                "_valid_to_seq_major": None if nxt is None else nxt.get("_seq_major"),
                "_valid_to_seq_minor": None if nxt is None else nxt.get("_seq_minor"),
                "_valid_to_seq_row": None if nxt is None else nxt.get("_seq_row"),
                "_closed_by": None if nxt is None else nxt["_op"],
                "_is_current": nxt is None,
                "_is_deleted": op in ("d", "t"),
            }
        )
        versions.append(row)
    return versions
