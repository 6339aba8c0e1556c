"""Spark and pyiceberg open the same JDBC (SQLite) catalog: each reads what the other wrote."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa
from pyiceberg.schema import Schema
from pyiceberg.types import DecimalType, LongType, NestedField, StringType, TimestamptzType

from cdc_assets.resources import IcebergCatalogResource


def test_table_written_by_spark_is_read_by_pyiceberg(
    spark: Any, iceberg: IcebergCatalogResource
) -> None:
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.rt")
    spark.sql(
        "CREATE TABLE lake.rt.from_spark (id BIGINT NOT NULL, amount DECIMAL(12,2), "
        "at TIMESTAMP) USING iceberg PARTITIONED BY (bucket(4, id))"
    )
    spark.sql(
        "INSERT INTO lake.rt.from_spark VALUES "
        "(1, 10.50, TIMESTAMP'2026-01-02 03:04:05'), (2, NULL, NULL), (3, 0.01, NULL)"
    )
    table = iceberg.load_catalog().load_table("rt.from_spark")
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert rows == [
        {
            "id": 1,
            "amount": Decimal("10.50"),
            "at": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
        },
        {"id": 2, "amount": None, "at": None},
        {"id": 3, "amount": Decimal("0.01"), "at": None},
    ]
    assert str(table.spec()) == "[\n  1000: id_bucket: bucket[4](1)\n]"


def test_table_created_by_pyiceberg_is_read_by_spark(
    spark: Any, iceberg: IcebergCatalogResource
) -> None:
    catalog = iceberg.load_catalog()
    catalog.create_namespace_if_not_exists("rt")
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "name", StringType(), required=False),
        NestedField(3, "price", DecimalType(10, 3), required=False),
        NestedField(4, "seen", TimestamptzType(), required=False),
    )
    table = catalog.create_table("rt.from_pyiceberg", schema=schema)
    seen = dt.datetime(2026, 5, 6, 7, 8, 9, 123456, tzinfo=dt.UTC)
    table.append(
        pa.table(
            {
                "id": pa.array([7, 8], pa.int64()),
                "name": ["seven", "åtta"],
                "price": pa.array([Decimal("1.250"), None], pa.decimal128(10, 3)),
                "seen": pa.array([seen, None], pa.timestamp("us", tz="UTC")),
            }
        )
    )
    spark.sql("REFRESH TABLE lake.rt.from_pyiceberg")
    rows = [
        r.asDict() for r in spark.sql("SELECT * FROM lake.rt.from_pyiceberg ORDER BY id").collect()
    ]
    assert [(r["id"], r["name"], r["price"]) for r in rows] == [
        (7, "seven", Decimal("1.250")),
        (8, "åtta", None),
    ]
    # PySpark returns a naive datetime in the Python process's local time zone.
    assert rows[0]["seen"].timestamp() == seen.timestamp()

    # and a write from Spark lands in the same table pyiceberg sees
    spark.sql("INSERT INTO lake.rt.from_pyiceberg VALUES (9, 'nine', 9.999, NULL)")
    table = catalog.load_table("rt.from_pyiceberg")
    assert sorted(r["id"] for r in table.scan().to_arrow().to_pylist()) == [7, 8, 9]
