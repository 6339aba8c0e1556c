"""The upsert's progress, kept in Iceberg snapshot summaries of base and the bucketed table.

Base commits its data together with the watermark it reached (``cdc.watermark``: the next ledger
offset to apply per Kafka partition), the ledger snapshot it read, and the floor (the source
position at or before which changes are ignored: a bootstrap dump or a truncate). The next run
resumes from the newest snapshot of base's lineage that carries them, so compaction snapshots in
between do not matter. The bucketed table records the state it started from and the state base
reaches once it is merged, which is how the base step knows the two belong together.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cdc_assets.pipeline.offsets import decode_offsets, encode_offsets
from cdc_assets.schema.position import Position

WATERMARK = "cdc.watermark"
WATERMARK_TS = "cdc.watermark-ts"
LEDGER_SNAPSHOT = "cdc.ledger-snapshot"
LEDGER_SEQUENCE = "cdc.ledger-sequence"
FLOOR = "cdc.floor"
# The newest source position base has applied: a run whose changes are all newer has no change
# delivered late, and skips looking for one (pipeline.upsert).
MAX_POSITION = "cdc.max-position"
UPSERT_KIND = "cdc.kind"
FROM_STATE = "cdc.from-state"
TRUNCATE = "cdc.truncate"
COUNTS = "cdc.counts"

SESSION_PROPERTY_PREFIX = "spark.sql.iceberg.snapshot-property."
# How a lost commit race shows in the text of a py4j/pyspark error.
CONFLICT_MARKERS = ("CommitFailedException", "ValidationException", "Found conflicting files")


@dataclass(frozen=True)
class UpsertState:
    """Where base stands: what it has applied of the ledger, and what it ignores."""

    watermark: Mapping[int, int] = field(default_factory=dict)
    watermark_ts: datetime | None = None
    ledger_sequence: int = 0  # data sequence number of the newest ledger snapshot read
    ledger_snapshot: int | None = None
    floor: Position | None = None
    max_position: Position | None = None

    def properties(self) -> dict[str, str]:
        props = {
            WATERMARK: encode_offsets(self.watermark),
            LEDGER_SEQUENCE: str(self.ledger_sequence),
        }
        if self.watermark_ts is not None:
            props[WATERMARK_TS] = self.watermark_ts.isoformat()
        if self.ledger_snapshot is not None:
            props[LEDGER_SNAPSHOT] = str(self.ledger_snapshot)
        if self.floor is not None:
            props[FLOOR] = self.floor.text()
        if self.max_position is not None:
            props[MAX_POSITION] = self.max_position.text()
        return props

    def token(self) -> str:
        """A compact identity of the state, to tell whether two states are the same."""
        return json.dumps(
            [encode_offsets(self.watermark), self.ledger_sequence, self.floor and self.floor.text()]
        )

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> UpsertState:
        ts = props.get(WATERMARK_TS)
        floor = props.get(FLOOR)
        newest = props.get(MAX_POSITION)
        snapshot = props.get(LEDGER_SNAPSHOT)
        return cls(
            watermark=decode_offsets(props.get(WATERMARK, "{}")),
            watermark_ts=datetime.fromisoformat(ts) if ts else None,
            ledger_sequence=int(props.get(LEDGER_SEQUENCE, "0")),
            ledger_snapshot=int(snapshot) if snapshot else None,
            floor=Position.parse(floor) if floor else None,
            max_position=Position.parse(newest) if newest else None,
        )


def _summary_props(snapshot: Any) -> dict[str, str]:
    summary = snapshot.summary
    return dict(summary.additional_properties) if summary is not None else {}


def state_snapshot(table: Any) -> Any | None:
    """The newest snapshot of the current lineage that recorded an upsert state (pyiceberg)."""
    from pyiceberg.table.snapshots import ancestors_of

    current = table.current_snapshot()
    if current is None:
        return None
    for snapshot in ancestors_of(current, table.metadata):
        if WATERMARK in _summary_props(snapshot):
            return snapshot
    return None


def base_state(table: Any) -> UpsertState:
    """The state base has reached (empty when nothing was applied yet)."""
    snapshot = state_snapshot(table)
    return (
        UpsertState() if snapshot is None else UpsertState.from_properties(_summary_props(snapshot))
    )


def last_applied_offsets(table: Any) -> dict[int, tuple[int, int]] | None:
    """The Kafka offset ranges (partition -> [start, end)) of the ledger rows base's newest
    upsert state applied: from the state before it to it. None when base has no state."""
    from pyiceberg.table.snapshots import ancestors_of

    current = table.current_snapshot()
    states: list[UpsertState] = []
    if current is not None:
        for snapshot in ancestors_of(current, table.metadata):
            props = _summary_props(snapshot)
            if WATERMARK in props:
                states.append(UpsertState.from_properties(props))
                if len(states) == 2:
                    break
    if not states:
        return None
    end = states[0].watermark
    start = states[1].watermark if len(states) == 2 else {}
    return {p: (start.get(p, 0), e) for p, e in end.items()}


def current_properties(table: Any) -> dict[str, str]:
    """Summary properties of the table's current snapshot ({} for an empty table)."""
    current = table.current_snapshot()
    return {} if current is None else _summary_props(current)


@contextmanager
def snapshot_properties(spark: Any, props: Mapping[str, str]) -> Iterator[None]:
    """Spark SQL commits inside the block carry ``props`` in their snapshot summary."""
    keys = [SESSION_PROPERTY_PREFIX + k for k in props]
    for key, value in zip(keys, props.values(), strict=True):
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key in keys:
            spark.conf.unset(key)


def commit_properties_only(table: Any, props: Mapping[str, str]) -> None:
    """A snapshot that changes no data and records ``props`` (pyiceberg empty append)."""
    empty = table.schema().as_arrow().empty_table()
    table.append(empty, snapshot_properties=dict(props))


def is_commit_conflict(exc: BaseException) -> bool:
    """Whether an error (as py4j/pyspark wrap it) is a lost Iceberg commit race."""
    text = f"{type(exc).__name__}: {exc}"
    return any(marker in text for marker in CONFLICT_MARKERS)
