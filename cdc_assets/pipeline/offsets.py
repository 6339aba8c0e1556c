"""Consumed Kafka offsets, kept in the ledger's Iceberg snapshot summaries (no side files).

An incremental ingest commits its data together with the end offsets it consumed
(``cdc.offsets``); the next run starts from the newest such snapshot in the table's current
lineage. Hour rebuilds and redrives commit without the property, so they never move the offsets.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

OFFSETS_PROPERTY = "cdc.offsets"
START_OFFSETS_PROPERTY = "cdc.start-offsets"
COUNTS_PROPERTY = "cdc.counts"
KIND_PROPERTY = "cdc.kind"
# The spec version a ledger commit's rows were decoded with (pipeline.catch_up reads it).
SPEC_VERSION_PROPERTY = "cdc.spec-version"
# The fields of the batch's row images its spec did not know (JSON list), when there were any.
UNKNOWN_FIELDS_PROPERTY = "cdc.unknown-fields"
TOPIC_PROPERTY = "cdc.topic"
# cdc.kind of a redrive commit: rows behind the consumed offsets that an upsert must still read.
REDRIVE_KIND = "redrive"
# cdc.kind of a protection rewrite's commits (pipeline.reprotect): values rewritten in place and
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
        offsets = committed_offsets(iceberg_catalog.load_table(ident), view.source.topic)
        if view.shard is None:
            return dict(offsets)
        out.update({f"{view.shard.shard_name}:{p}": o for p, o in offsets.items()})
    return out
