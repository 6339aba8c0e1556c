"""What the raw layer reports about a topic: offsets, the ledger's lag and retention headroom."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from cdc_assets.pipeline.shared.offsets import ledger_mark
from cdc_assets.resources.kafka_client import KafkaClient, PartitionOffsets
from cdc_assets.schema.layers import ledger_layout
from cdc_assets.spec.models import TableSpec


@dataclass(frozen=True)
class TopicObservation:
    topic: str
    partitions: list[PartitionOffsets]
    committed: dict[int, int]
    retention_ms: int | None
    oldest_unread_ms: int | None  # Kafka timestamp of the oldest record the ledger has not read

    @property
    def lag(self) -> dict[int, int]:
        """Records per partition that the ledger has not consumed yet."""
        return {
            p.partition: p.latest - max(self.committed.get(p.partition, p.earliest), p.earliest)
            for p in self.partitions
        }

    @property
    def retention_headroom_s(self) -> float | None:
        """Seconds before the oldest unread record falls out of retention (None: no limit)."""
        if self.retention_ms is None or self.oldest_unread_ms is None:
            return None
        return (self.oldest_unread_ms + self.retention_ms) / 1000 - time.time()


def observe_topic(kafka: KafkaClient, iceberg_catalog: Any, spec: TableSpec) -> TopicObservation:
    """Offsets of the spec's topic compared with what the ledger has committed."""
    topic = spec.source.topic
    partitions = kafka.topic_offsets(topic)
    layout = ledger_layout(spec)
    ident = f"{layout.namespace}.{layout.name}"
    mark = (
        ledger_mark(iceberg_catalog.load_table(ident))
        if iceberg_catalog.table_exists(ident)
        else None
    )
    # In Kafka's numbering; a ledger still on a former name's topic has read none of this one.
    committed = mark.kafka_offsets() if mark is not None and mark.topic in (None, topic) else {}
    unread = {
        p.partition: max(committed.get(p.partition, p.earliest), p.earliest)
        for p in partitions
        if p.latest > max(committed.get(p.partition, p.earliest), p.earliest)
    }
    stamps = kafka.record_timestamps(topic, unread) if unread else {}
    return TopicObservation(
        topic=topic,
        partitions=partitions,
        committed=committed,
        retention_ms=kafka.retention_ms(topic),
        oldest_unread_ms=min(stamps.values()) if stamps else None,
    )
