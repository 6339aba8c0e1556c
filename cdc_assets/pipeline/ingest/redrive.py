"""Replay dead letters through the current spec and decoding after a fix.

Records that now decode are inserted into the ledger (skipped if their Kafka coordinates are
already there) and then removed from the dead-letter table; both steps are idempotent, so a
crash between them is repaired by running redrive again. Records that still fail stay as they
are; the result counts them by today's reason.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from cdc_assets.pipeline.ingest.gtid_floor import fill_gtid_floor, needs_floor
from cdc_assets.pipeline.ingest.ingest import (
    classify_records,
    dead_letter_identifier,
    ledger_identifier,
    ledger_rows,
    prepare,
)
from cdc_assets.pipeline.shared.batch_cache import cached_batch
from cdc_assets.pipeline.shared.offsets import (
    KIND_PROPERTY,
    REDRIVE_KIND,
    SPEC_VERSION_PROPERTY,
)
from cdc_assets.pipeline.shared.protection import configured_keys
from cdc_assets.pipeline.shared.watermark import snapshot_properties
from cdc_assets.resources.schema_registry import (
    TopicSchemas,
    configured_registry,
    topic_schemas,
)
from cdc_assets.schema.layers import ledger_layout
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.ddl import literal, quote
from cdc_assets.sql.decode import DEAD, LEDGER, SKIP
from cdc_assets.sql.protect import opened_payload_sql


@dataclass
class RedriveResult:
    table: str
    replayed: int = 0
    to_ledger: int = 0
    still_dead: int = 0
    skipped: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def redrive(
    spark: Any,
    catalog: str,
    spec: TableSpec,
    *,
    reason_contains: str | None = None,
    schemas: TopicSchemas | None = None,
) -> RedriveResult:
    """Replay the table's dead letters (optionally only those whose reason contains a text).

    Values in a schema registry's wire format are decoded again with ``schemas`` (default: the
    topic's writer schemas in the configured registry, `configured_registry`).
    """
    from pyspark.sql import functions as F

    if schemas is None:
        schemas = topic_schemas(configured_registry(), spec.source.topic)

    started = time.monotonic()
    dlt = dead_letter_identifier(catalog, spec)
    where = f" WHERE reason LIKE {literal('%' + reason_contains + '%')}" if reason_contains else ""
    letters = spark.sql(f"SELECT * FROM {dlt}{where}")
    records = letters.select(
        F.expr("unbase64(key_b64)").alias("key"),
        # Sealed payloads (a table that protects values) are opened with the configured key:
        # the record is protected again by the ingest's decode, like any other.
        F.expr(opened_payload_sql("payload_b64", configured_keys())).alias("value"),
        F.col("partition"),
        F.col("offset"),
        F.col("kafka_ts").alias("timestamp"),
    )
    result = RedriveResult(spec.name)
    with cached_batch(spark, prepare(classify_records(records, spec, schemas), spec)) as classified:
        for row in classified.groupBy("_status", "_reason").count().collect():
            result.replayed += row["count"]
            if row["_status"] == LEDGER:
                result.to_ledger += row["count"]
            elif row["_status"] == SKIP:
                result.skipped += row["count"]
            else:
                result.still_dead += row["count"]
                result.reasons[row["_reason"]] = row["count"]
        fixed = classified.filter(F.col("_status") != DEAD)
        if result.to_ledger:
            ledger = ledger_identifier(catalog, spec)
            rows = fill_gtid_floor(spark, spec, ledger_rows(classified, spec), ledger)
            if needs_floor(spec):
                rows = rows.localCheckpoint()  # a MERGE's source must not read its target
            _insert_missing(spark, catalog, spec, rows)
        if result.to_ledger or result.skipped:
            view = f"cdc_redriven_{spec.name}"
            # Checkpointed: the keys come from the dead-letter table itself, and Spark cannot
            # plan a MERGE whose source still reads its target.
            fixed.select(
                F.lit(spec.source.topic).alias("topic"),
                F.col("_kafka_partition").alias("partition"),
                F.col("_kafka_offset").alias("offset"),
            ).localCheckpoint().createOrReplaceTempView(view)
            spark.sql(
                f"MERGE INTO {dlt} t USING {view} s ON t.topic = s.topic "
                "AND t.`partition` = s.`partition` AND t.`offset` = s.`offset` "
                "WHEN MATCHED THEN DELETE"
            )
            spark.catalog.dropTempView(view)
    result.seconds = time.monotonic() - started
    return result


def _insert_missing(spark: Any, catalog: str, spec: TableSpec, rows: Any) -> None:
    """Insert ledger rows whose Kafka coordinates are not in the ledger yet."""
    view = f"cdc_redrive_rows_{spec.name}"
    rows = rows.persist()
    hours = [r["dt"] for r in rows.select("dt").distinct().collect()]
    rows.createOrReplaceTempView(view)
    # Restricting the target to the affected days keeps the MERGE from scanning the ledger.
    days = ", ".join(literal(d) for d in hours)
    # By name: the ledger may already have columns of a newer spec (schema evolution).
    columns = ledger_layout(spec).column_names
    names = ", ".join(quote(c) for c in columns)
    values = ", ".join(f"s.{quote(c)}" for c in columns)
    # Marked so the upsert finds these rows: their offsets are behind base's watermark.
    # The spec version too: an upsert that merges these rows with an older spec's MERGE must
    # know what it consumed to catch up (pipeline.evolution.catch_up).
    marks = {KIND_PROPERTY: REDRIVE_KIND, SPEC_VERSION_PROPERTY: str(spec.spec_version)}
    with snapshot_properties(spark, marks):
        spark.sql(
            f"MERGE INTO {ledger_identifier(catalog, spec)} t USING {view} s "
            f"ON t.dt IN ({days}) AND t._kafka_partition = s._kafka_partition "
            "AND t._kafka_offset = s._kafka_offset "
            f"WHEN NOT MATCHED THEN INSERT ({names}) VALUES ({values})"
        )
    spark.catalog.dropTempView(view)
    rows.unpersist()
