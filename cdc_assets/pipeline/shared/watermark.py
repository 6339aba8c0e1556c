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

from cdc_assets.pipeline.shared.offsets import decode_offsets, encode_offsets
from cdc_assets.schema.position import Position
from cdc_assets.spec.models import TableSpec

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
# On bucketed: how many changes of its window may have become a delete (sql.upsert.may_delete).
# "0" spares base the probe of bucketed's deletes; a table written before it has none.
DELETE_CANDIDATES = "cdc.delete-candidates"
COUNTS = "cdc.counts"

SESSION_PROPERTY_PREFIX = "spark.sql.iceberg.snapshot-property."
# How a lost commit race shows in the text of a py4j/pyspark error.
CONFLICT_MARKERS = ("CommitFailedException", "ValidationException", "Found conflicting files")


def shard_of(spec: TableSpec) -> str | None:
    """The shard name a per-shard view's state is kept under (None: one source)."""
    return spec.shard.shard_name if spec.shard is not None else None


def state_key(key: str, shard: str | None) -> str:
    """The base summary property of ``key`` for one shard: each shard of a sharded table has
    its own ledger, so its own watermark, floor and positions (``cdc.shard.<name>.watermark``)."""
    return key if shard is None else f"cdc.shard.{shard}.{key.removeprefix('cdc.')}"


# The state keys base carries per shard (the others describe one commit).
STATE_KEYS = (WATERMARK, WATERMARK_TS, LEDGER_SNAPSHOT, LEDGER_SEQUENCE, FLOOR, MAX_POSITION)


@dataclass(frozen=True)
class UpsertState:
    """Where base stands: what it has applied of the ledger, and what it ignores. A sharded
    table's base holds one per shard (``shard``), under that shard's property names."""

    watermark: Mapping[int, int] = field(default_factory=dict)
    watermark_ts: datetime | None = None
    ledger_sequence: int = 0  # data sequence number of the newest ledger snapshot read
    ledger_snapshot: int | None = None
    floor: Position | None = None
    max_position: Position | None = None
    shard: str | None = None

    def properties(self) -> dict[str, str]:
        """The state as base summary properties (under the shard's names for a shard)."""
        return {state_key(k, self.shard): v for k, v in self._properties().items()}

    def _properties(self) -> dict[str, str]:
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
    def from_properties(cls, props: Mapping[str, str], shard: str | None = None) -> UpsertState:
        if shard is not None:
            props = {
                k: props[state_key(k, shard)] for k in STATE_KEYS if state_key(k, shard) in props
            }
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
            shard=shard,
        )


def _summary_props(snapshot: Any) -> dict[str, str]:
    summary = snapshot.summary
    return dict(summary.additional_properties) if summary is not None else {}


def state_snapshot(table: Any, shard: str | None = None) -> Any | None:
    """The newest snapshot of the current lineage that recorded an upsert state (pyiceberg)."""
    from pyiceberg.table.snapshots import ancestors_of

    current = table.current_snapshot()
    if current is None:
        return None
    key = state_key(WATERMARK, shard)
    for snapshot in ancestors_of(current, table.metadata):
        if key in _summary_props(snapshot):
            return snapshot
    return None


def base_state(table: Any, shard: str | None = None) -> UpsertState:
    """The state base has reached (empty when nothing was applied yet), of one shard's ledger
    for a sharded table."""
    snapshot = state_snapshot(table, shard)
    if snapshot is None:
        return UpsertState(shard=shard)
    return UpsertState.from_properties(_summary_props(snapshot), shard)


def shard_states(table: Any, shards: list[str]) -> dict[str, str]:
    """Every shard's newest state as properties: a base commit of one shard carries the
    others' forward, so snapshot expiry never takes a shard's state away."""
    out: dict[str, str] = {}
    for shard in shards:
        snapshot = state_snapshot(table, shard)
        if snapshot is not None:
            props = _summary_props(snapshot)
            out.update(
                {
                    state_key(k, shard): props[state_key(k, shard)]
                    for k in STATE_KEYS
                    if state_key(k, shard) in props
                }
            )
    return out


def last_applied_offsets(table: Any, shard: str | None = None) -> dict[int, tuple[int, int]] | None:
    """The Kafka offset ranges (partition -> [start, end)) of the ledger rows base's newest
    upsert state applied: from the state before it to it. None when base has no state."""
    from pyiceberg.table.snapshots import ancestors_of

    current = table.current_snapshot()
    states: list[UpsertState] = []
    if current is not None:
        for snapshot in ancestors_of(current, table.metadata):
            props = _summary_props(snapshot)
            if state_key(WATERMARK, shard) in props:
                state = UpsertState.from_properties(props, shard)
                # Other shards' commits carry this shard's state forward unchanged.
                if states and state.token() == states[-1].token():
                    continue
                states.append(state)
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


def readable_snapshot(table: Any) -> int | None:
    """The ledger snapshot to read, with the table's current schema.

    Spark reads a pinned snapshot (VERSION AS OF) with the schema it was written with; right
    after phase 1 that schema lacks the new columns. An empty commit gives the current schema a
    snapshot (it carries no offsets, so the ingest's resume point does not move).
    """
    current = table.current_snapshot()
    if current is None:
        return None
    if current.schema_id != table.schema().schema_id:
        commit_properties_only(table, {})
        current = table.refresh().current_snapshot()
    return int(current.snapshot_id)
