"""Kafka -> ledger on the real stack, compared with the plain-Python oracle row for row.

The oracle reads the topic with a plain Kafka client and decides every record's fate on its
own; the ledger and dead-letter tables are read back with pyiceberg, not Spark.
"""

from __future__ import annotations

import json
import math
import random
import uuid
from collections import Counter
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import NewTopic

from cdc_assets.pipeline.ingest.envelope_reader import READER_CONF
from cdc_assets.pipeline.ingest.ingest import ingest_incremental
from cdc_assets.pipeline.shared.batch_cache import session_conf
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.layers import dead_letter_layout, ledger_layout
from cdc_assets.settings import Settings
from cdc_assets.spec import load_specs
from cdc_assets.spec.models import TableSpec
from cdc_assets_dev.demo.events import KafkaRecord, produce, workload
from cdc_assets_tests.support.bad_records import cases, users_spec
from cdc_assets_tests.support.oracle import Outcome, expected_outcome

FOREVER = {"retention.ms": "-1"}


def isolated(spec: TableSpec, *, partitions: int = 1, kafka: KafkaResource) -> TableSpec:
    """The spec on a fresh topic and namespace, so tests never see each other's data."""
    tag = uuid.uuid4().hex[:8]
    topic = f"it.{spec.name}.{tag}"
    admin = kafka.admin()
    # Kept forever: tests back-date records (hours of February), and the broker's retention
    # check (every 5 minutes, 7 days by default) would otherwise delete them mid-test.
    keep = NewTopic(topic, num_partitions=partitions, replication_factor=1, config=FOREVER)
    admin.create_topics([keep])[topic].result(30)
    return spec.model_copy(
        update={
            "source": spec.source.model_copy(update={"topic_": topic}),
            "sink": spec.sink.model_copy(update={"namespace": f"it_{tag}"}),
        }
    )


def consume_all(kafka: KafkaResource, topic: str) -> list[tuple[int, int, datetime, Any, Any]]:
    """Every record of the topic with its coordinates, read with a plain Kafka client."""
    consumer = Consumer({**kafka.client_conf(), "group.id": f"oracle-{uuid.uuid4().hex}"})
    try:
        meta = consumer.list_topics(topic, timeout=15).topics[topic]
        out = []
        for partition in meta.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=15)
            consumer.assign([TopicPartition(topic, partition, low)])
            while low < high:
                msg = consumer.poll(15)
                assert msg is not None
                assert msg.error() is None, msg.error()
                stamp = datetime.fromtimestamp(msg.timestamp()[1] / 1000, UTC)
                out.append((partition, msg.offset(), stamp, msg.key(), msg.value()))
                low = msg.offset() + 1
        return out
    finally:
        consumer.close()


def read_table(iceberg: IcebergCatalogResource, namespace: str, name: str) -> list[dict[str, Any]]:
    table = iceberg.load_catalog().load_table(f"{namespace}.{name}")
    rows: list[dict[str, Any]] = table.scan().to_arrow().to_pylist()
    return [{k: _maps_as_dicts(v) for k, v in row.items()} for row in rows]


def _maps_as_dicts(value: Any) -> Any:
    """pyarrow gives a map as a list of (key, value) tuples: as a dict, as the oracle has it."""
    if isinstance(value, list):
        if value and all(isinstance(e, tuple) and len(e) == 2 for e in value):
            return {k: _maps_as_dicts(v) for k, v in value}
        return [_maps_as_dicts(e) for e in value]
    if isinstance(value, dict):
        return {k: _maps_as_dicts(v) for k, v in value.items()}
    return value


def same(expected: Any, actual: Any, column: str) -> bool:
    if column in ("_row_json", "_before_json"):
        return expected == (json.loads(actual) if actual is not None else None)
    if isinstance(expected, float) and isinstance(actual, float):
        return math.isclose(expected, actual, rel_tol=1e-6) or (
            math.isnan(expected) and math.isnan(actual)
        )
    if isinstance(expected, Decimal) and isinstance(actual, Decimal):
        return expected == actual
    if isinstance(actual, bytes | bytearray) and isinstance(expected, bytes | bytearray):
        return bytes(actual) == bytes(expected)
    return bool(expected == actual)


def assert_ledger_matches(
    spec: TableSpec, outcomes: dict[tuple[int, int], Outcome], ledger: list[dict[str, Any]]
) -> None:
    expected = {k: o.row for k, o in outcomes.items() if o.status == "ledger"}
    actual = {(r["_kafka_partition"], r["_kafka_offset"]): r for r in ledger}
    assert sorted(actual) == sorted(expected), "ledger holds other records than the oracle says"
    columns = [c.name for c in ledger_layout(spec).columns if c.name != "_processed_at"]
    diffs = []
    for coords, want in expected.items():
        assert want is not None
        got = actual[coords]
        for c in columns:
            if not same(want[c], got[c], c):
                diffs.append(f"{coords} {c}: oracle {want[c]!r} ledger {got[c]!r}")
    assert not diffs, "\n".join(diffs[:30])


def run_ingest(
    spark: Any, iceberg: IcebergCatalogResource, kafka: KafkaResource, spec: TableSpec
) -> Any:
    ensure_tables(spark, "lake", spec)
    return ingest_incremental(spark, "lake", iceberg.load_catalog(), kafka, spec)


@pytest.mark.parametrize(
    ("table", "embed_schema", "partitions", "reader"),
    [
        ("users", False, 2, "jvm"),
        ("orders", True, 1, "jvm"),
        ("order_items", False, 3, "jvm"),
        # Spark's own functions instead of the project's (a session without its jar)
        ("orders", True, 2, "sql"),
    ],
)
def test_workload_matches_oracle(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    table: str,
    embed_schema: bool,
    partitions: int,
    reader: str,
) -> None:
    base = next(s for s in load_specs(it_settings.specs_dir) if s.name == table)
    spec = isolated(base, partitions=partitions, kafka=kafka)
    records = workload(spec, random.Random(7), keys=60, events=400, embed_schema=embed_schema)
    produce(records, spec.source.topic, kafka.resolved_bootstrap())

    with session_conf(spark, {READER_CONF: reader}):
        result = run_ingest(spark, iceberg, kafka, spec)

    topic_records = consume_all(kafka, spec.source.topic)
    outcomes = {(p, o): expected_outcome(spec, p, o, ts, k, v) for p, o, ts, k, v in topic_records}
    statuses = Counter(o.status for o in outcomes.values())
    assert (result.read, result.ledger, result.dead, result.skipped) == (
        len(topic_records),
        statuses["ledger"],
        statuses["dead"],
        statuses["skip"],
    )
    assert result.dead == 0
    assert statuses["ledger"] > 300
    ledger = read_table(iceberg, spec.sink.namespace, ledger_layout(spec).name)
    assert_ledger_matches(spec, outcomes, ledger)

    # at-least-once delivery: the same events again are new records, not a rerun of old ones
    again = run_ingest(spark, iceberg, kafka, spec)
    assert again.read == 0


@pytest.mark.parametrize("reader", ["jvm", "sql"])
def test_bad_records_land_where_the_corpus_says(
    spark: Any, iceberg: IcebergCatalogResource, kafka: KafkaResource, reader: str
) -> None:
    spec = isolated(users_spec(), kafka=kafka)
    corpus = cases()
    produce(
        [KafkaRecord(c.key, c.value) for c in corpus],
        spec.source.topic,
        kafka.resolved_bootstrap(),
        partitions_by_key=False,
    )
    with session_conf(spark, {READER_CONF: reader}):
        result = run_ingest(spark, iceberg, kafka, spec)

    by_offset = dict(enumerate(corpus))
    dead = {
        r["offset"]: (r["stage"], r["reason"])
        for r in read_table(iceberg, spec.sink.namespace, dead_letter_layout(spec).name)
    }
    ledger = {
        r["_kafka_offset"]
        for r in read_table(iceberg, spec.sink.namespace, ledger_layout(spec).name)
    }
    wrong = []
    for offset, case in by_offset.items():
        if case.status == "dead":
            got = dead.get(offset)
            if got != (case.stage, case.reason):
                wrong.append(f"{case.name}: expected dead {case.reason!r}, got {got}")
        elif case.status == "ledger" and offset not in ledger:
            wrong.append(f"{case.name}: expected in ledger; dead={dead.get(offset)}")
        elif case.status == "skip" and (offset in ledger or offset in dead):
            wrong.append(f"{case.name}: expected skipped ({case.reason})")
    assert not wrong, "\n".join(wrong)
    expected_skips = Counter(c.reason for c in corpus if c.status == "skip")
    assert result.skip_reasons == dict(expected_skips)
    assert result.read == len(corpus) == result.ledger + result.dead + result.skipped
    assert "nickname" in result.unknown_fields or result.unknown_fields
