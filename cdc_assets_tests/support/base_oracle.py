"""What base must hold: the ledger rows replayed one by one in source order, in plain Python.

Independent of the Spark upsert: no windows, no tombstones, no watermarks. Every change is
applied in the total order of (source position, Kafka partition, Kafka offset); a delete removes
the row, a truncate empties the table, a column the source did not send (TOAST placeholder)
keeps the stored value, and changes at or before a bootstrap position are ignored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cdc_assets.schema.layers import base_layout
from cdc_assets.spec.models import TableSpec

Key = tuple[Any, ...]


def order_key(row: Mapping[str, Any]) -> tuple[int, ...]:
    def part(name: str) -> int:
        value = row[name]
        return -1 if value is None else int(value)

    return (
        part("_seq_major"),
        part("_seq_minor"),
        part("_seq_row"),
        int(row["_kafka_partition"]),
        int(row["_kafka_offset"]),
    )


def replay_base(
    spec: TableSpec,
    ledger_rows: Iterable[Mapping[str, Any]],
    *,
    initial: Mapping[Key, Mapping[str, Any]] | None = None,
    floor: tuple[int, int, int] | None = None,
) -> dict[Key, dict[str, Any]]:
    """Base after applying ``ledger_rows`` (in any order given) on top of ``initial``."""
    columns = base_layout(spec).column_names
    keys = [c.sink_name for c in spec.key_columns]
    table: dict[Key, dict[str, Any]] = {k: dict(v) for k, v in (initial or {}).items()}
    unique = {(r["_kafka_partition"], r["_kafka_offset"]): r for r in ledger_rows}
    for row in sorted(unique.values(), key=order_key):
        if floor is not None and order_key(row)[:3] <= floor:
            continue
        op = row["_op"]
        if op == "t":
            table.clear()
            continue
        key = tuple(row[k] for k in keys)
        before = row.get("_before_json")
        if op == "u" and isinstance(before, dict):
            # an update that moved the row to another key removes the old one
            old = tuple(before.get(c.name) for c in spec.key_columns)
            if None not in old and old != key:
                table.pop(old, None)
        if op == "d":
            table.pop(key, None)
            continue
        missing = set((row.get("_unavailable") or "").split(",")) - {""}
        stored = table.get(key, {})
        table[key] = {c: (stored.get(c) if c in missing else row[c]) for c in columns}
    return table
