"""The image_values check right after an upsert compares only the ledger rows that upsert applied
(its cost follows the change set); the scheduled check compares the whole lookback window. A value
lost in an older upsert's rows is therefore seen by the scheduled check, and one lost in the newest
upsert's rows by both."""

from __future__ import annotations

import random
from typing import Any

import pytest

from cdc_assets.pipeline.health import health
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.pipeline.shared.watermark import base_state, last_applied_offsets
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.layers import base_layout, ledger_layout
from cdc_assets.sql.backfill import offset_filter
from cdc_assets_dev.demo.events import produce, workload
from cdc_assets_tests.integration.test_ingest import isolated
from cdc_assets_tests.integration.test_upsert import example_spec, ingest, upsert

pytestmark = pytest.mark.integration


def test_the_check_after_an_upsert_compares_that_upsert_s_changes(
    it_settings: Any, spark: Any, iceberg: IcebergCatalogResource, kafka: KafkaResource
) -> None:
    spec = isolated(example_spec(it_settings, "orders"), partitions=2, kafka=kafka)
    ensure_tables(spark, "lake", spec)
    rng = random.Random(13)
    windows = []
    for _ in range(2):
        produce(
            workload(spec, rng, keys=50, events=300), spec.source.topic, kafka.resolved_bootstrap()
        )
        ingest(spark, iceberg, kafka, spec)
        upsert(spark, iceberg, spec)
        base = iceberg.load_catalog().load_table(f"{spec.sink.namespace}.{base_layout(spec).name}")
        windows.append(last_applied_offsets(base))
    first, second = windows
    assert first is not None
    assert second is not None
    # the second window starts where the first ended
    assert {p: r[0] for p, r in second.items()} == {p: r[1] for p, r in first.items()}
    assert base_state(base).watermark == {p: r[1] for p, r in second.items()}

    def mismatches(last_upsert_only: bool) -> Any:
        return health.image_mismatches(
            spark, "lake", iceberg.load_catalog(), spec, last_upsert_only=last_upsert_only
        )

    full, newest = mismatches(False), mismatches(True)
    assert full.ledger_rows == _images(spark, spec)
    assert newest.ledger_rows == _images(spark, spec, second)
    assert 0 < newest.ledger_rows < full.ledger_rows
    assert not any(full.ledger.values())
    assert not any(newest.ledger.values())

    # A value lost from a row of the first upsert: only the whole window sees it.
    ledger = f"lake.{spec.sink.namespace}.{ledger_layout(spec).name}"
    p, (start, end) = next((p, r) for p, r in first.items() if r[1] > r[0])
    spark.sql(
        f"UPDATE {ledger} SET status = NULL WHERE status IS NOT NULL AND _kafka_partition = {p} "
        f"AND _kafka_offset >= {start} AND _kafka_offset < {end}"
    )
    assert mismatches(False).ledger["status"] > 0
    assert mismatches(True).ledger["status"] == 0
    # ... and one lost from a row of the newest upsert: both do.
    p, (start, end) = next((p, r) for p, r in second.items() if r[1] > r[0])
    spark.sql(
        f"UPDATE {ledger} SET status = NULL WHERE status IS NOT NULL AND _kafka_partition = {p} "
        f"AND _kafka_offset >= {start} AND _kafka_offset < {end}"
    )
    assert mismatches(True).ledger["status"] > 0


def _images(spark: Any, spec: Any, offsets: Any = None) -> int:
    """Ledger rows with a row image (of ``offsets`` only, when given): what the check compares."""
    ledger = f"lake.{spec.sink.namespace}.{ledger_layout(spec).name}"
    where = "_op IN ('c', 'u', 'r', 'd') AND _row_json IS NOT NULL"
    if offsets is not None:
        where += f" AND {offset_filter(offsets, alias=ledger.rsplit('.', 1)[-1])}"
    return int(spark.sql(f"SELECT count(*) AS n FROM {ledger} WHERE {where}").collect()[0]["n"])
