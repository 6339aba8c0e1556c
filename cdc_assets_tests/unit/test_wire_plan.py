"""The wire plan follows Debezium's documented type mappings, row by row.

Sources: the "Data type mappings" sections of Debezium's MySQL and PostgreSQL connector docs.
"""

from __future__ import annotations

from typing import Any

import pytest

from cdc_assets.schema.wire import Wire, plan_fields
from cdc_assets.spec import TableSpec

W = Wire

# (connector, source type, debezium settings, expected wire, expected decimal scale)
ROWS: list[tuple[str, str, dict[str, str], Wire, int | None]] = [
    # MySQL, time.precision.mode=adaptive_time_microseconds (the default)
    (
        "mysql",
        "datetime",
        {},
        W.TIMESTAMP_MILLIS,
        None,
    ),  # DATETIME(0-3): io.debezium.time.Timestamp
    ("mysql", "datetime(3)", {}, W.TIMESTAMP_MILLIS, None),
    ("mysql", "datetime(4)", {}, W.TIMESTAMP_MICROS, None),  # DATETIME(4-6): MicroTimestamp
    ("mysql", "datetime(6)", {}, W.TIMESTAMP_MICROS, None),
    ("mysql", "timestamp", {}, W.ZONED_TIMESTAMP, None),  # TIMESTAMP: ZonedTimestamp string
    ("mysql", "timestamp(6)", {}, W.ZONED_TIMESTAMP, None),
    ("mysql", "date", {}, W.DATE_DAYS, None),  # io.debezium.time.Date, days since epoch
    ("mysql", "time", {}, W.TIME_MICROS, None),  # TIME(M): always MicroTime in this mode
    ("mysql", "time(2)", {}, W.TIME_MICROS, None),
    ("mysql", "time(6)", {}, W.TIME_MICROS, None),
    # MySQL, time.precision.mode=adaptive (deprecated): TIME(0-3) io.debezium.time.Time in ms
    ("mysql", "time(3)", {"time_precision_mode": "adaptive"}, W.TIME_MILLIS, None),
    ("mysql", "time(6)", {"time_precision_mode": "adaptive"}, W.TIME_MICROS, None),
    ("mysql", "datetime(2)", {"time_precision_mode": "adaptive"}, W.TIMESTAMP_MILLIS, None),
    # MySQL, time.precision.mode=connect: Kafka Connect Date/Time/Timestamp (ms)
    ("mysql", "datetime(6)", {"time_precision_mode": "connect"}, W.TIMESTAMP_MILLIS, None),
    ("mysql", "time(6)", {"time_precision_mode": "connect"}, W.TIME_MILLIS, None),
    ("mysql", "date", {"time_precision_mode": "connect"}, W.DATE_DAYS, None),
    ("mysql", "timestamp(6)", {"time_precision_mode": "connect"}, W.ZONED_TIMESTAMP, None),
    # MySQL decimals: precise (Decimal bytes with a scale), double, string
    ("mysql", "decimal(10,2)", {}, W.DECIMAL_BYTES, 2),
    ("mysql", "decimal", {}, W.DECIMAL_BYTES, 0),  # MySQL DECIMAL is DECIMAL(10,0)
    ("mysql", "decimal(10,2)", {"decimal_handling_mode": "double"}, W.DECIMAL_NUMBER, None),
    ("mysql", "decimal(10,2)", {"decimal_handling_mode": "string"}, W.DECIMAL_STRING, None),
    # MySQL integers; BIGINT UNSIGNED per bigint.unsigned.handling.mode
    ("mysql", "tinyint", {}, W.INT, None),
    ("mysql", "smallint", {}, W.INT, None),
    ("mysql", "mediumint", {}, W.INT, None),
    ("mysql", "int", {}, W.INT, None),
    ("mysql", "int unsigned", {}, W.LONG, None),  # INT UNSIGNED: INT64
    ("mysql", "bigint", {}, W.LONG, None),
    ("mysql", "bigint unsigned", {}, W.UNSIGNED_LONG, None),  # long: wraps into INT64
    ("mysql", "bigint unsigned", {"bigint_unsigned_handling_mode": "precise"}, W.DECIMAL_BYTES, 0),
    ("mysql", "year", {}, W.INT, None),  # io.debezium.time.Year, INT32
    # MySQL BOOLEAN is TINYINT(1); snapshots (SHOW CREATE TABLE) send it as a number 0/1
    ("mysql", "boolean", {}, W.BOOLEAN_INT, None),
    ("mariadb", "bool", {}, W.BOOLEAN_INT, None),
    ("mysql", "bit(1)", {}, W.BOOLEAN, None),  # BIT(1): BOOLEAN
    ("mysql", "bit(8)", {}, W.BYTES_BASE64, None),  # BIT(>1): io.debezium.data.Bits bytes
    ("mysql", "bit(8)", {"binary_handling_mode": "hex"}, W.BYTES_BASE64, None),  # Bits ignore it
    ("mysql", "float", {}, W.FLOAT, None),
    ("mysql", "double", {}, W.DOUBLE, None),
    # MySQL strings
    ("mysql", "varchar(255)", {}, W.STRING, None),
    ("mysql", "char(2)", {}, W.STRING, None),
    ("mysql", "text", {}, W.STRING, None),
    ("mysql", "json", {}, W.STRING, None),  # io.debezium.data.Json
    ("mysql", "enum('a','b')", {}, W.STRING, None),  # io.debezium.data.Enum
    ("mysql", "set('a','b')", {}, W.STRING, None),  # io.debezium.data.EnumSet
    # MySQL binary types per binary.handling.mode (bytes: base64 through the JSON converter)
    ("mysql", "varbinary(16)", {}, W.BYTES_BASE64, None),
    ("mysql", "binary(16)", {"binary_handling_mode": "base64"}, W.BYTES_BASE64, None),
    ("mysql", "blob", {"binary_handling_mode": "base64-url-safe"}, W.BYTES_BASE64_URL, None),
    ("mysql", "blob", {"binary_handling_mode": "hex"}, W.BYTES_HEX, None),
    ("mariadb", "datetime(6)", {}, W.TIMESTAMP_MICROS, None),
    ("tidb", "timestamp(3)", {}, W.ZONED_TIMESTAMP, None),
    # PostgreSQL, time.precision.mode=adaptive (the default)
    ("postgresql", "timestamp", {}, W.TIMESTAMP_MICROS, None),  # TIMESTAMP: TIMESTAMP(6)
    ("postgresql", "timestamp(6)", {}, W.TIMESTAMP_MICROS, None),  # MicroTimestamp
    ("postgresql", "timestamp(3)", {}, W.TIMESTAMP_MILLIS, None),  # TIMESTAMP(1-3): Timestamp
    ("postgresql", "timestamptz", {}, W.ZONED_TIMESTAMP, None),
    ("postgresql", "timestamp with time zone", {}, W.ZONED_TIMESTAMP, None),
    ("postgresql", "date", {}, W.DATE_DAYS, None),
    ("postgresql", "time", {}, W.TIME_MICROS, None),  # TIME(4-6): MicroTime
    ("postgresql", "time(3)", {}, W.TIME_MILLIS, None),  # TIME(1-3): io.debezium.time.Time
    ("postgresql", "timetz", {}, W.ISO_STRING, None),  # io.debezium.time.ZonedTime string
    # PostgreSQL, other time precision modes
    (
        "postgresql",
        "time(3)",
        {"time_precision_mode": "adaptive_time_microseconds"},
        W.TIME_MICROS,
        None,
    ),
    ("postgresql", "timestamp(6)", {"time_precision_mode": "connect"}, W.TIMESTAMP_MILLIS, None),
    ("postgresql", "time", {"time_precision_mode": "connect"}, W.TIME_MILLIS, None),
    ("postgresql", "timestamptz", {"time_precision_mode": "connect"}, W.ZONED_TIMESTAMP, None),
    # PostgreSQL decimals
    ("postgresql", "numeric(12,2)", {}, W.DECIMAL_BYTES, 2),
    ("postgresql", "decimal(5,4)", {}, W.DECIMAL_BYTES, 4),
    ("postgresql", "numeric", {}, W.DECIMAL_VARIABLE, None),  # VariableScaleDecimal struct
    ("postgresql", "numeric", {"decimal_handling_mode": "double"}, W.DECIMAL_NUMBER, None),
    ("postgresql", "numeric(12,2)", {"decimal_handling_mode": "string"}, W.DECIMAL_STRING, None),
    # PostgreSQL basic types
    ("postgresql", "boolean", {}, W.BOOLEAN, None),
    ("postgresql", "bit(1)", {}, W.BOOLEAN, None),
    ("postgresql", "bit(4)", {}, W.BYTES_BASE64, None),
    ("postgresql", "smallint", {}, W.INT, None),
    ("postgresql", "integer", {}, W.INT, None),
    ("postgresql", "bigint", {}, W.LONG, None),
    ("postgresql", "bigserial", {}, W.LONG, None),
    ("postgresql", "real", {}, W.FLOAT, None),
    ("postgresql", "double precision", {}, W.DOUBLE, None),
    ("postgresql", "bytea", {}, W.BYTES_BASE64, None),
    ("postgresql", "bytea", {"binary_handling_mode": "hex"}, W.BYTES_HEX, None),
    ("postgresql", "uuid", {}, W.STRING, None),  # io.debezium.data.Uuid
    ("postgresql", "jsonb", {}, W.STRING, None),  # io.debezium.data.Json
    ("postgresql", "xml", {}, W.STRING, None),  # io.debezium.data.Xml
    ("postgresql", "inet", {}, W.STRING, None),
    ("postgresql", "varchar(20)", {}, W.STRING, None),
]

# Rows where wire.py and Debezium's documentation disagree; strict, so a fix shows up here.
DISAGREEMENTS = [
    pytest.param(
        "postgresql",
        "interval",
        {},
        W.LONG,
        None,
        id="postgresql-interval-microduration",
    ),
    pytest.param(
        "mysql",
        "float(30)",
        {},
        W.DOUBLE,
        None,
        id="mysql-float-p-over-23",
    ),
]


def _spec(connector: str, type_text: str, debezium: dict[str, str]) -> TableSpec:
    source: dict[str, Any] = {
        "connector": connector,
        "database": "lab",
        "table": "t",
        "topic": "lab.t",
        "debezium": debezium,
    }
    if connector == "postgresql":
        source["schema"] = "public"
    return TableSpec.model_validate(
        {
            "spec_version": 1,
            "name": "t",
            "source": source,
            "columns": [
                {"id": 1, "name": "id", "type": "bigint", "nullable": False},
                {"id": 2, "name": "v", "type": type_text},
            ],
            "primary_key": ["id"],
            "sink": {"namespace": "lab"},
        }
    )


def _id(row: tuple[str, str, dict[str, str], Wire, int | None]) -> str:
    connector, type_text, settings, _, _ = row
    return "-".join([connector, type_text, *settings.values()])


def test_table_is_large_and_unique() -> None:
    assert len(ROWS) >= 25
    assert len({_id(r) for r in ROWS}) == len(ROWS)


@pytest.mark.parametrize(
    ("connector", "type_text", "settings", "wire", "scale"),
    [pytest.param(*row, id=_id(row)) for row in ROWS] + DISAGREEMENTS,
)
def test_wire_encoding(
    connector: str, type_text: str, settings: dict[str, str], wire: Wire, scale: int | None
) -> None:
    plan = plan_fields(_spec(connector, type_text, settings))[1]
    assert plan.wire is wire
    assert plan.scale == scale


def test_primary_key_and_nullability_reach_the_plan() -> None:
    key, value = plan_fields(_spec("mysql", "int", {}))
    assert key.key
    assert not key.nullable
    assert not value.key
    assert value.nullable
