"""Consumed Kafka offsets, kept in the ledger's Iceberg snapshot summaries (no side files).

An incremental ingest commits its data together with the end offsets it consumed
(``cdc.offsets``); the next run starts from the newest such snapshot in the table's current
lineage. Hour rebuilds and redrives commit without the property, so they never move the offsets.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cdc_assets.errors import CdcAssetsError

OFFSETS_PROPERTY = "cdc.offsets"
START_OFFSETS_PROPERTY = "cdc.start-offsets"
COUNTS_PROPERTY = "cdc.counts"
KIND_PROPERTY = "cdc.kind"
# The spec version a ledger commit's rows were decoded with (pipeline.evolution.catch_up reads it).
SPEC_VERSION_PROPERTY = "cdc.spec-version"
# The fields of the batch's row images its spec did not know (JSON list), when there were any.
UNKNOWN_FIELDS_PROPERTY = "cdc.unknown-fields"
TOPIC_PROPERTY = "cdc.topic"
# After a followed rename of the source table (`source.renamed_from`), the ledger numbers the
# new topic's records on from where the old topic's ended: ledger offset = Kafka offset + shift
# (JSON, per partition), so every offset range, upsert window and dead letter stays unique and
# in order across the rename. Absent: no shift.
SHIFT_PROPERTY = "cdc.offset-shift"
# cdc.kind of a redrive commit: rows behind the consumed offsets that an upsert must still read.
REDRIVE_KIND = "redrive"
# cdc.kind of a protection rewrite's commits (pipeline.maintenance.reprotect): values rewritten in
# place and
# the offsets stamped again; nothing for an upsert to read.
REPROTECT_KIND = "protect-rewrite"


def encode_offsets(offsets: Mapping[int, int]) -> str:
    return json.dumps({str(p): o for p, o in sorted(offsets.items())}, separators=(",", ":"))


def decode_offsets(text: str) -> dict[int, int]:
    return {int(p): int(o) for p, o in json.loads(text).items()}


def committed_snapshot(table: Any) -> Any | None:
    """The newest snapshot of the current lineage that recorded consumed offsets (pyiceberg)."""
    from pyiceberg.table.snapshots import ancestors_of

    current = table.current_snapshot()
    if current is None:
        return None
    for snapshot in ancestors_of(current, table.metadata):
        summary = snapshot.summary
        if summary is not None and summary.additional_properties.get(OFFSETS_PROPERTY):
            return snapshot
    return None


def committed_offsets(table: Any, topic: str | None = None) -> dict[int, int]:
    """Next offset to read per Kafka partition, as committed with the ledger data ({} if none).

    With ``topic``, offsets committed for another topic (the spec's topic changed) do not count.
    """
    snapshot = committed_snapshot(table)
    if snapshot is None:
        return {}
    props = snapshot.summary.additional_properties
    if topic is not None and props.get(TOPIC_PROPERTY, topic) != topic:
        return {}
    return decode_offsets(props[OFFSETS_PROPERTY])


@dataclass(frozen=True)
class LedgerMark:
    """Where a ledger stands: the topic its newest offset commit read (None: no commit yet), the
    next offset per partition in the ledger's numbering, and that topic's shift to it."""

    topic: str | None = None
    offsets: dict[int, int] = field(default_factory=dict)
    shift: dict[int, int] = field(default_factory=dict)

    def kafka_offsets(self) -> dict[int, int]:
        """The next Kafka offset of ``topic`` to read, per partition."""
        return {p: o - self.shift.get(p, 0) for p, o in self.offsets.items()}


def ledger_mark(table: Any) -> LedgerMark:
    """The ledger's mark, from its newest snapshot with consumed offsets (pyiceberg table)."""
    snapshot = committed_snapshot(table)
    if snapshot is None:
        return LedgerMark()
    props = snapshot.summary.additional_properties
    shift = props.get(SHIFT_PROPERTY)
    return LedgerMark(
        props.get(TOPIC_PROPERTY),
        decode_offsets(props[OFFSETS_PROPERTY]),
        decode_offsets(shift) if shift else {},
    )


class ForeignTopicError(CdcAssetsError):
    """The ledger was last written from a topic the spec neither reads nor lists as former."""


@dataclass(frozen=True)
class TopicRead:
    """What an ingest reads next: ``topic`` from Kafka offsets ``committed`` on (None: from
    offset 0 of every partition, the first read of a topic the ledger moved to), numbered in
    the ledger as Kafka offset + ``shift``."""

    topic: str
    shift: dict[int, int]
    committed: dict[int, int] | None

    def ledger(self, kafka_offsets: Mapping[int, int]) -> dict[int, int]:
        return {p: o + self.shift.get(p, 0) for p, o in kafka_offsets.items()}


def next_read(
    topic: str,
    former_topics: list[str],
    mark: LedgerMark,
    unread: Callable[[str], bool],
    table: str = "",
) -> TopicRead:
    """The topic to read next (pure but for ``unread``, which says whether Kafka holds records
    of a former topic past the mark). The topics of a followed rename are read in turn, each to
    its end: a former topic's records all precede the rename, the new one's all follow it."""
    if mark.topic is None or mark.topic == topic:
        return TopicRead(topic, mark.shift, mark.kafka_offsets())
    if mark.topic not in former_topics:
        raise ForeignTopicError(
            f"{table}: the ledger was last written from topic {mark.topic}, which the spec "
            f"neither reads ({topic}) nor lists in source.renamed_from; a source table's rename "
            "is followed by the evolution (which records the old name; a code location not "
            "reloaded since reads with the spec before it), and a spec pointed at another topic "
            "by hand would mix two offset sequences in one ledger"
        )
    if unread(mark.topic):
        return TopicRead(mark.topic, mark.shift, mark.kafka_offsets())
    after = former_topics.index(mark.topic) + 1
    following = former_topics[after] if after < len(former_topics) else topic
    # The old topic's end in the ledger's numbering is where the next one's numbering starts.
    return TopicRead(following, dict(mark.offsets), None)


def table_offsets(iceberg_catalog: Any, spec: Any) -> dict[Any, int]:
    """Where a table's ledgers stand, for the audit trail: partition -> next offset, and for a
    sharded table ``<shard>:<partition>`` -> next offset over every shard's ledger."""
    from cdc_assets.schema.layers import ledger_layout

    out: dict[Any, int] = {}
    for view in spec.shard_specs():
        layout = ledger_layout(view)
        ident = f"{layout.namespace}.{layout.name}"
        if not iceberg_catalog.table_exists(ident):
            continue
        offsets = ledger_mark(iceberg_catalog.load_table(ident)).offsets
        if view.shard is None:
            return dict(offsets)
        out.update({f"{view.shard.shard_name}:{p}": o for p, o in offsets.items()})
    return out
