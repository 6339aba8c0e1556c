"""A sharded table on generated events: an update carrying both keys (a producer other than
Debezium, which sends a delete and a create) removes the old key from base on its own shard."""

from __future__ import annotations

import uuid
from typing import Any

from confluent_kafka.admin import NewTopic

from cdc_assets.pipeline.ingest.ingest import ingest_incremental
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.pipeline.upsert.upsert import build_bucketed, merge_base
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.spec.models import TableSpec
from cdc_assets_dev.demo.events import DebeziumEventFactory, produce
from cdc_assets_tests.integration.test_ingest import read_table
from cdc_assets_tests.unit.test_source_identity import USERS


def test_an_update_moving_its_key_on_one_shard_removes_the_old_key_there(
    spark: Any, iceberg: IcebergCatalogResource, kafka: KafkaResource
) -> None:
    tag = uuid.uuid4().hex[:8]
    shards = [
        {"server": "eu-1", "topic": f"it.eu.{tag}", "name": "eu"},
        {"server": "us-1", "topic": f"it.us.{tag}", "name": "us"},
    ]
    admin = kafka.admin()
    for shard in shards:
        admin.create_topics([NewTopic(shard["topic"], 1, 1)])[shard["topic"]].result(30)
    source = {k: v for k, v in USERS["source"].items() if k != "topic"}  # type: ignore[attr-defined]
    spec = TableSpec.model_validate(
        {**USERS, "source": {**source, "shards": shards}, "sink": {"namespace": f"it_{tag}"}}
    )
    ensure_tables(spark, "lake", spec)
    eu, us = spec.shard_specs()
    for view in (eu, us):
        f = DebeziumEventFactory(view)
        rows = [{"id": i, "email": f"{i}@{view.shard.shard_name}"} for i in (1, 2)]  # type: ignore[union-attr]
        events = [f.create(r) for r in rows]
        if view is eu:
            events.append(f.update(rows[0], {**rows[0], "id": 10}))  # one update, both keys
        produce(events, view.source.topic, kafka.resolved_bootstrap())
        ingest_incremental(spark, "lake", iceberg.load_catalog(), kafka, view)
        build_bucketed(spark, "lake", iceberg.load_catalog(), view)
        merge_base(spark, "lake", iceberg.load_catalog(), view)
    base = read_table(iceberg, spec.sink.namespace, spec.name)
    assert sorted((r["_shard"], r["id"]) for r in base) == [
        ("eu", 2),
        ("eu", 10),
        ("us", 1),
        ("us", 2),
    ]
