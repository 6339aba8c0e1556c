"""Read the source's shape from Kafka: Debezium's schema-change topic (MySQL/MariaDB), or the schema
embedded in the newest row events (PostgreSQL). The push side of drift detection, and the "newest
schema seen in events" of the pull side when the source database is not reachable."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cdc_assets.resources.kafka_client import KafkaClient
from cdc_assets.resources.schema_registry import (
    TopicSchemas,
    decode_framed,
    framed_schema_id,
    writer_schema,
)
from cdc_assets.spec.connect_schema import avro_row_fields, row_fields, shape_change_lsn
from cdc_assets.spec.models import TableSpec
from cdc_assets.spec.schema_change import SchemaChange, parse_schema_change
from cdc_assets.spec.source_table import SourceTable, source_table_state


@dataclass(frozen=True)
class SeenChange:
    topic: str
    partition: int
    offset: int
    change: SchemaChange

    @property
    def run_key(self) -> str:
        return f"{self.topic}:{self.partition}:{self.offset}:{self.change.table}"


def matches(spec: TableSpec, change: SchemaChange, topic: str) -> bool:
    """Whether ``change``, read from schema-change topic ``topic``, is of the spec's source table.

    The topic identifies the server (each connector writes its own schema-change topic), so a
    table of the same database and name on another server never matches; a record that names
    its server (``source.name``) must also name the spec's server when the spec sets one.
    """
    source = spec.source
    if source.schema_changes != topic:
        return False
    if source.server is not None and change.server is not None and change.server != source.server:
        return False
    return (
        change.table.lower() == source.table.lower()
        and change.database.lower() == source.database.lower()
    )


def read_schema_changes(
    kafka: KafkaClient, topic: str, start: dict[int, int], max_records: int = 10_000
) -> tuple[list[SeenChange], dict[int, int]]:
    """Table changes recorded on ``topic`` from ``start`` (next offset per partition; earliest
    where missing) up to the current end, and the offsets to start from next time."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            **kafka.client_conf(),
            "group.id": "cdc-assets-schema-changes",
            "enable.auto.commit": False,
        }
    )
    seen: list[SeenChange] = []
    next_offsets = dict(start)
    schemas: TopicSchemas | None = None
    try:
        meta = consumer.list_topics(topic, timeout=kafka.timeout_s).topics.get(topic)
        if meta is None or meta.error is not None:
            return [], next_offsets
        for partition in sorted(meta.partitions):
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=kafka.timeout_s, cached=False
            )
            offset = max(start.get(partition, low), low)
            if offset >= high:
                next_offsets[partition] = max(offset, start.get(partition, 0))
                continue
            consumer.assign([TopicPartition(topic, partition, offset)])
            read = 0
            while offset < high and read < max_records:
                msg = consumer.poll(kafka.timeout_s)
                if msg is None:
                    break
                at = msg.offset()
                if msg.error() is not None or at is None:
                    continue
                offset = at + 1
                read += 1
                value = msg.value()
                if framed_schema_id(value) is not None:  # a connector writing Avro
                    schemas = schemas or kafka.topic_schemas(topic)
                    value = decode_framed(value, schemas)
                for change in parse_schema_change(value):
                    seen.append(SeenChange(topic, partition, at, change))
            next_offsets[partition] = offset
    finally:
        consumer.close()
    return seen, next_offsets


# Every record of a schema-change topic, read once per process and then only what was added:
# the topic is shared by all tables of a server, and each table's check and drift report read
# it whole (at a thousand tables, a thousand full reads per checks run). Records never change;
# a full read every FULL_READ_S picks up a topic that was deleted and created again.
FULL_READ_S = 600.0
_read_topics: dict[tuple[str, str], tuple[float, dict[int, int], list[SeenChange]]] = {}
_read_lock = threading.Lock()


def all_schema_changes(kafka: KafkaClient, topic: str) -> list[SeenChange]:
    """Every table change retained on ``topic``, in the order of its partitions and offsets."""
    key = (kafka.resolved_bootstrap(), topic)
    with _read_lock:
        cached = _read_topics.get(key)
    now = time.monotonic()
    start: dict[int, int] = {}
    seen: list[SeenChange] = []
    read_at = now
    if cached is not None and now - cached[0] <= FULL_READ_S:
        read_at, start, seen = cached
    added, next_offsets = read_schema_changes(kafka, topic, start)
    seen = [*seen, *added]
    with _read_lock:
        _read_topics[key] = (read_at, next_offsets, seen)
    return sorted(seen, key=lambda c: (c.partition, c.offset))


def newest_schema_change(kafka: KafkaClient, spec: TableSpec) -> SeenChange | None:
    """The newest shape (CREATE or ALTER) of the spec's table on its schema-change topic (None:
    none retained); of a sharded table, the newest on any shard's. A DROP has no shape:
    `source_tables` reports it."""
    if spec.source.shards:
        seen = [c for v in spec.shard_specs() if (c := newest_schema_change(kafka, v)) is not None]
        return max(seen, key=lambda c: c.change.ts_ms or 0, default=None)
    topic = spec.source.schema_changes
    if topic is None:
        return None
    changes = all_schema_changes(kafka, topic)
    mine = [c for c in changes if c.change.kind != "DROP" and matches(spec, c.change, topic)]
    return max(mine, key=_recorded, default=None)


def _recorded(seen: SeenChange) -> tuple[int, int, int]:
    """The order changes were recorded in: source time, then position on the topic."""
    return (seen.change.ts_ms or 0, seen.partition, seen.offset)


def source_tables(kafka: KafkaClient, spec: TableSpec) -> dict[str, SourceTable]:
    """Whether the spec's source table (each shard's, of a sharded table: keyed by shard name,
    else by the spec's name) still exists under its name, from its schema-change topic: dropped
    or renamed (`spec.source_table`). {} for a source without one (PostgreSQL)."""
    out: dict[str, SourceTable] = {}
    read: dict[str, list[SeenChange]] = {}
    for view in spec.shard_specs():
        topic = view.source.schema_changes
        if topic is None:
            continue
        if topic not in read:
            seen = all_schema_changes(kafka, topic)
            # One partition (Debezium's default) is the order itself; across several, the
            # source time orders them (a snapshot's records share one).
            one = len({c.partition for c in seen}) <= 1
            read[topic] = sorted(seen, key=(lambda c: c.offset) if one else _recorded)
        server = view.source.server
        changes = [
            c.change
            for c in read[topic]
            if server is None or c.change.server is None or c.change.server == server
        ]
        name = view.shard.shard_name if view.shard is not None else spec.name
        out[name] = source_table_state(changes, view.source.database, view.source.table)
    return out


def newest_change_of(
    kafka: KafkaClient, topic: str, database: str, table: str
) -> SeenChange | None:
    """The newest recorded change of ``database.table`` on schema-change topic ``topic`` (None:
    no record of it is retained): what a spec of that table is onboarded from."""
    changes = all_schema_changes(kafka, topic)
    mine = [
        c
        for c in changes
        if c.change.kind != "DROP"
        and c.change.database.lower() == database.lower()
        and c.change.table.lower() == table.lower()
    ]
    return max(mine, key=_recorded, default=None)


def newest_row_schema(
    kafka: KafkaClient, spec: TableSpec, tail: int = 20
) -> list[Mapping[str, Any]] | None:
    """The row-image field schemas of the newest event on the spec's topic that embeds its
    schema, or whose Avro writer schema the registry holds (None when the events carry no
    schema: JSON converter with schemas disabled); of a sharded table, the first shard's that
    has one."""
    from confluent_kafka import Consumer, TopicPartition

    if spec.source.shards:
        return next(
            (f for v in spec.shard_specs() if (f := newest_row_schema(kafka, v, tail)) is not None),
            None,
        )

    topic = spec.source.topic
    consumer = Consumer(
        {**kafka.client_conf(), "group.id": "cdc-assets-row-schema", "enable.auto.commit": False}
    )
    newest: tuple[int, list[Mapping[str, Any]]] | None = None
    schemas: TopicSchemas | None = None
    try:
        meta = consumer.list_topics(topic, timeout=kafka.timeout_s).topics.get(topic)
        if meta is None or meta.error is not None:
            return None
        for partition in sorted(meta.partitions):
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=kafka.timeout_s, cached=False
            )
            start = max(low, high - tail)
            if start >= high:
                continue
            consumer.assign([TopicPartition(topic, partition, start)])
            offset = start
            while offset < high:
                msg = consumer.poll(kafka.timeout_s)
                if msg is None:
                    break
                at = msg.offset()
                if msg.error() is not None or at is None:
                    continue
                offset = at + 1
                value = msg.value()
                if framed_schema_id(value) is not None:  # Avro: the writer schema of its id
                    schemas = schemas or kafka.topic_schemas(topic)
                    writer = writer_schema(value, schemas)
                    fields = avro_row_fields(writer) if writer is not None else None
                else:
                    fields = row_fields(value)
                stamp = msg.timestamp()[1]
                if fields and (newest is None or stamp >= newest[0]):
                    newest = (stamp, fields)
    finally:
        consumer.close()
    return None if newest is None else newest[1]


def row_schema_change_position(
    kafka: KafkaClient, spec: TableSpec, fields: list[Mapping[str, Any]], tail: int = 500
) -> dict[str, int] | None:
    """The source position (``{"lsn": n}``) after which every record on a PostgreSQL table's
    topic has the row fields ``fields``, read from the newest ``tail`` records of each partition
    (`spec.connect_schema.shape_change_lsn`); None when those do not show the change, the events
    embed no schema, or the table is sharded (each shard changes on its own)."""
    from confluent_kafka import Consumer, TopicPartition

    if spec.source.shards or spec.source.connector != "postgresql":
        return None
    topic = spec.source.topic
    consumer = Consumer(
        {**kafka.client_conf(), "group.id": "cdc-assets-row-schema", "enable.auto.commit": False}
    )
    seen: list[tuple[int, int | None, list[Mapping[str, Any]] | None]] = []
    try:
        meta = consumer.list_topics(topic, timeout=kafka.timeout_s).topics.get(topic)
        if meta is None or meta.error is not None:
            return None
        for partition in sorted(meta.partitions):
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=kafka.timeout_s, cached=False
            )
            offset = max(low, high - tail)
            consumer.assign([TopicPartition(topic, partition, offset)])
            while offset < high:
                msg = consumer.poll(kafka.timeout_s)
                if msg is None:
                    return None  # the window could not be read whole: no position
                at = msg.offset()
                if msg.error() is not None or at is None:
                    continue
                offset = at + 1
                value = msg.value()
                if framed_schema_id(value) is not None:
                    return None  # Avro: the registry's versions are applied one by one
                seen.append((partition, _lsn(value), row_fields(value)))
    finally:
        consumer.close()
    lsn = shape_change_lsn(seen, fields)
    return None if lsn is None else {"lsn": lsn}


def _lsn(value: bytes | None) -> int | None:
    try:
        record = json.loads(value) if value is not None else None
        payload = record.get("payload", record) if isinstance(record, dict) else None
        lsn = payload["source"]["lsn"] if isinstance(payload, dict) else None
        return int(lsn) if lsn is not None else None
    except (ValueError, TypeError, KeyError, UnicodeDecodeError):
        return None


def row_schema_versions(
    kafka: KafkaClient, spec: TableSpec
) -> list[tuple[int, list[Mapping[str, Any]]]] | None:
    """The row fields of every writer schema version of the spec's value subject, oldest first,
    as (schema id, fields); None when the topic has no subject in a registry (JSON, or no
    registry configured) or the table is sharded (each shard has a subject of its own)."""
    if spec.source.shards:
        return None
    schemas = kafka.topic_schemas(spec.source.topic)
    out = []
    for schema_id, text in schemas.schemas.items():  # in version order
        fields = avro_row_fields(json.loads(text))
        if fields is not None:
            out.append((schema_id, fields))
    return out or None
