"""The demo stream: a realistic Debezium workload per example table plus a few bad records."""

from __future__ import annotations

import json
import random

from cdc_assets.spec.models import TableSpec
from cdc_assets_dev.demo.events import DebeziumEventFactory, KafkaRecord, produce, workload

DEMO_PARTITIONS = 3


def bad_records(spec: TableSpec) -> list[KafkaRecord]:
    """Records a real topic sees now and then; each must end up as a dead letter."""
    factory = DebeziumEventFactory(spec)
    key_column = spec.primary_key[0]
    return [
        KafkaRecord(b"garbage", b'{"op": "c", "after": {'),  # truncated JSON
        KafkaRecord(b"null-key", json.dumps({"op": "c", "after": {key_column: None}}).encode()),
        KafkaRecord(b"odd-op", json.dumps({"op": "x", "after": {key_column: 1}}).encode()),
        KafkaRecord(b"\xff", b"\xff\xfe not utf-8"),
        factory.heartbeat(),  # skipped, not a dead letter
    ]


def demo_records(spec: TableSpec, *, seed: int, keys: int, events: int) -> list[KafkaRecord]:
    rng = random.Random(seed)
    records = workload(spec, rng, keys=keys, events=events)
    for bad in bad_records(spec):
        records.insert(rng.randrange(len(records)), bad)
    return records


def produce_demo(
    specs: list[TableSpec], bootstrap: str, *, seed: int = 2026, keys: int = 200, events: int = 2000
) -> dict[str, int]:
    """Create each topic (3 partitions) if needed and produce the demo stream; counts by table."""
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = set(admin.list_topics(timeout=15).topics)
    missing = [s.source.topic for s in specs if s.source.topic not in existing]
    if missing:
        futures = admin.create_topics(
            [NewTopic(t, num_partitions=DEMO_PARTITIONS, replication_factor=1) for t in missing]
        )
        for future in futures.values():
            future.result(30)
    counts = {}
    for i, spec in enumerate(specs):
        records = demo_records(spec, seed=seed + i, keys=keys, events=events)
        produce(records, spec.source.topic, bootstrap)
        counts[spec.name] = len(records)
    return counts
