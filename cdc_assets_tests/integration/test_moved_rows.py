"""Primary-key updates of PostgreSQL rows whose large column was stored out of line (TOAST), on
the real stack: Debezium sends a delete of the old key and a create of the new key that carries
the placeholder for that column, with the old key in the `__debezium.oldkey` header. Base must
hold the text the row had under its old key, also when the move and the row's last value arrive
in different runs, through chains of moves, and onto a key that held another row before.

Regression test: found by `test_sources_converge.py` on real events (base held NULL)."""

from __future__ import annotations

import json
import random
from typing import Any

from confluent_kafka import Producer

from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.layers import ledger_layout
from cdc_assets.settings import Settings
from cdc_assets_dev.demo.events import TOAST, DebeziumEventFactory, KafkaRecord, random_row
from cdc_assets_tests.integration.test_ingest import isolated, read_table
from cdc_assets_tests.integration.test_upsert import example_spec, ingest, upsert

OLD_KEY = "__debezium.oldkey"


def test_moved_rows_keep_their_out_of_line_values(
    it_settings: Settings, spark: Any, iceberg: IcebergCatalogResource, kafka: KafkaResource
) -> None:
    spec = isolated(example_spec(it_settings, "orders"), kafka=kafka)
    ensure_tables(spark, "lake", spec)
    factory = DebeziumEventFactory(spec)
    rng = random.Random(3)
    producer = Producer(kafka.client_conf())

    def row(order_id: int, note: str | None) -> dict[str, object]:
        return {**random_row(spec, rng, {"order_id": order_id}), "note": note}

    def send(*records: tuple[KafkaRecord, int | None]) -> None:
        for record, old_key in records:
            headers = [(OLD_KEY, json.dumps({"order_id": old_key}).encode())] if old_key else None
            producer.produce(spec.source.topic, key=record.key, value=record.value, headers=headers)
        assert producer.flush(30) == 0

    def move(old: dict[str, object], new_id: int, **changes: object) -> list:
        """Debezium's primary-key update: delete, tombstone, create lacking the TOAST value."""
        moved = {**old, **changes, "order_id": new_id, "note": TOAST}
        with factory.statement():
            return [
                (factory.delete({"order_id": old["order_id"]}), None),
                (factory.tombstone({"order_id": old["order_id"]}), None),
                (factory.create(moved), old["order_id"]),
            ]

    def run() -> dict[int, dict[str, object]]:
        ingest(spark, iceberg, kafka, spec)
        upsert(spark, iceberg, spec)
        return {r["order_id"]: r for r in read_table(iceberg, spec.sink.namespace, spec.name)}

    long1, long2, long6 = ("x" * 3000 + str(i) for i in (1, 2, 6))
    rows = {1: row(1, long1), 2: row(2, long2), 6: row(6, long6), 9: row(9, "old nine")}
    send(*((factory.create(r), None) for r in rows.values()))
    assert {k: r["note"] for k, r in run().items()} == {1: long1, 2: long2, 6: long6, 9: "old nine"}

    # One run: 1 -> 3 then an update of 3 that leaves the note alone; 2 -> 4 -> 5; 9 deleted and
    # 6 moved onto 9, whose stale row base still holds until this run's MERGE.
    moved3 = {**rows[1], "order_id": 3, "status": "paid"}
    send(
        *move(rows[1], 3),
        (factory.update(None, {**moved3, "note": TOAST}), None),
        *move(rows[2], 4),
        *move({**rows[2], "order_id": 4}, 5),
        (factory.delete({"order_id": 9}), None),
        (factory.tombstone({"order_id": 9}), None),
        *move(rows[6], 9),
    )
    base = run()
    assert {k: r["note"] for k, r in base.items()} == {3: long1, 5: long2, 9: long6}
    assert base[3]["status"] == "paid"
    ledger = read_table(iceberg, spec.sink.namespace, ledger_layout(spec).name)
    creates = {r["order_id"]: r["_before_json"] for r in ledger if r["_op"] == "c"}
    assert json.loads(creates[5]) == {"order_id": 4}  # the header, kept by the ingest

    # A later run: 3 -> 7. Key 3's own history holds only placeholders; its life began with
    # the move from 1, whose create carried the text.
    send(*move(moved3, 7, status="shipped"))
    base = run()
    assert {k: r["note"] for k, r in base.items()} == {5: long2, 7: long1, 9: long6}
    assert base[7]["status"] == "shipped"
    assert all(r["_unavailable"] is None for r in base.values() if "_unavailable" in r)
