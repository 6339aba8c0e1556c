"""A column the source adds with a constant default, with generated events (issue 54): MySQL,
MariaDB (instant ADD COLUMN) and PostgreSQL 11+ give the rows they have the default without a
change event. Base must read the default for every row whose newest change predates the
column, and the value of the image for every later one, whether the evolution runs after the
ingest read the new events (backfill from the ledger) or a change older than the column is
read after the evolution (the ingest decodes it so)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg
from confluent_kafka import Producer

from cdc_assets.checks.runner import run_checks
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.layers import dead_letter_layout
from cdc_assets.settings import Settings
from cdc_assets.spec.models import TableSpec
from cdc_assets_dev.demo.events import workload
from cdc_assets_tests.integration.test_evolution_policies import base_rows, images, push
from cdc_assets_tests.integration.test_evolve import later
from cdc_assets_tests.integration.test_ingest import read_table
from cdc_assets_tests.integration.test_schema_evolution_flow import (
    Table,
    schema_record,
)
from cdc_assets_tests.integration.test_upsert import ingest, upsert

ALTER = "ALTER TABLE users ADD COLUMN status VARCHAR(10) NOT NULL DEFAULT 'open'"


def with_status(v1: TableSpec) -> TableSpec:
    """The source after ``ALTER``: every row has a status, 'open' unless set since."""
    data = v1.model_dump(mode="json", by_alias=True)
    data["columns"].append(
        {"id": 9, "name": "status", "type": "varchar(10)", "nullable": False, "default": "open"}
    )
    return TableSpec.model_validate(data)


def test_older_rows_read_the_default_of_a_column_added_with_one(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    resources: dict[str, Any],
    tmp_path: Path,
) -> None:
    table = Table(it_settings, kafka, tmp_path)
    v1 = table.v1
    ensure_tables(spark, "lake", v1)
    shape = with_status(v1)
    before = workload(v1, random.Random(81), keys=30, events=80)
    after = later(workload(shape, random.Random(82), keys=12, events=40), 1)
    # Days old: outside the ledger partitions a backfill from the change point reads (the
    # sensor's detection time less the upsert lookback), as a table's older rows are.
    days_ago = int((datetime.now(UTC) - timedelta(days=5)).timestamp() * 1000)
    producer = Producer(kafka.client_conf())
    for record in before:
        producer.produce(v1.source.topic, value=record.value, key=record.key, timestamp=days_ago)
    assert producer.flush(30) == 0
    ingest(spark, iceberg, kafka, v1)
    upsert(spark, iceberg, v1)
    table.produce([schema_record(shape, ALTER)], table.schema_topic)
    table.produce(after)
    ingest(spark, iceberg, kafka, v1)  # still the old spec: status only in _row_json
    # detected now, as the sensor passes it: the backfill still reads the ledger from its start
    result = push(spark, iceberg, table, shape, ALTER, detected_at=datetime.now(UTC))
    assert result.decision == "applied", result
    evolved = table.spec()
    status = evolved.columns_by_name["status"]
    assert (status.default, status.backfill_default, status.nullable) == ("open", True, True)
    # A change older than the column, read after the evolution (a server behind, a replay):
    # its image lacks status, so the row reads the default too.
    late = later(workload(v1, random.Random(83), keys=40, events=30, markers=False), 2)
    table.produce(late)
    ingest(spark, iceberg, kafka, evolved)
    upsert(spark, iceberg, evolved)

    base = base_rows(iceberg, evolved)
    expected = images(before + after + late)
    assert sorted(base) == sorted(expected)
    want = {k: image.get("status", "open") for k, image in expected.items()}
    got = {k: row["status"] for k, row in base.items()}
    assert got == want
    assert "open" in got.values()
    assert set(got.values()) != {"open"}  # values set since the ALTER are kept
    dead = dead_letter_layout(evolved)
    assert not read_table(iceberg, dead.namespace, dead.name)
    # the checks that compare typed values with the row images agree with the default
    outcomes, _ = run_checks(
        table.defs(resources),
        dg.DagsterInstance.ephemeral(),
        checks=["image_values", "null_counts", "schema_converged"],
    )
    failed = {o.check: o.description for o in outcomes if not o.passed}
    assert not failed
