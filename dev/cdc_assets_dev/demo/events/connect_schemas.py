"""The Kafka Connect schemas Debezium embeds in a JSON record (`schemas.enable`): field,
source and transaction-block schemas.
"""

from __future__ import annotations

import re

from cdc_assets.schema.wire import FieldPlan, Wire
from cdc_assets.spec.models import TableSpec
from cdc_assets_dev.demo.events.values import MYSQL_FAMILY

_INT16_KINDS = {"TINYINT", "UTINYINT", "SMALLINT", "SMALLSERIAL"}
_STRING_NAMES = {
    "JSON": "io.debezium.data.Json",
    "JSONB": "io.debezium.data.Json",
    "UUID": "io.debezium.data.Uuid",
    "XML": "io.debezium.data.Xml",
    "ENUM": "io.debezium.data.Enum",
    "SET": "io.debezium.data.EnumSet",
}
_ISO_NAMES = {
    "DATE": "io.debezium.time.IsoDate",
    "TIME": "io.debezium.time.IsoTime",
    "TIMETZ": "io.debezium.time.ZonedTime",
    "DATETIME": "io.debezium.time.IsoTimestamp",
    "TIMESTAMP": "io.debezium.time.IsoTimestamp",
    "TIMESTAMPTZ": "io.debezium.time.ZonedTimestamp",
    "TIMESTAMPLTZ": "io.debezium.time.ZonedTimestamp",
}
_ENUM_VALUE_RE = re.compile(r"'((?:[^']|'')*)'")


def type_name(source_text: str) -> str:
    """``int unsigned`` -> ``INT UNSIGNED``, ``decimal(10,2)`` -> ``DECIMAL``."""
    return " ".join(re.sub(r"\([^)]*\)", " ", source_text).upper().split())


def enum_values(source_text: str) -> list[str]:
    return [v.replace("''", "'") for v in _ENUM_VALUE_RE.findall(source_text)]


def _named(type_: str, name: str, **extra: object) -> dict[str, object]:
    return {"type": type_, "name": name, "version": 1, **extra}


def field_schema(spec: TableSpec, plan: FieldPlan) -> dict[str, object]:
    """The Kafka Connect schema of one column, with Debezium's semantic names."""
    kind, wire = plan.source.kind, plan.wire
    connect = spec.source.time_precision_mode == "connect"
    schema: dict[str, object]
    if wire is Wire.INT:
        int_type = "int16" if kind in _INT16_KINDS else "int32"
        schema = _named(int_type, "io.debezium.time.Year") if kind == "YEAR" else {"type": int_type}
    elif wire in (Wire.LONG, Wire.UNSIGNED_LONG):
        schema = {"type": "int64"}
    elif wire is Wire.FLOAT:
        schema = {"type": "float32"}
    elif wire in (Wire.DOUBLE, Wire.DECIMAL_NUMBER):
        schema = {"type": "float64"}
    elif wire is Wire.BOOLEAN:
        schema = {"type": "boolean"}
    elif wire is Wire.BOOLEAN_INT:
        schema = {"type": "int16"}
    elif wire is Wire.DECIMAL_BYTES:
        precision = plan.source.precision or 20
        params = {"scale": str(plan.scale or 0), "connect.decimal.precision": str(precision)}
        schema = _named("bytes", "org.apache.kafka.connect.data.Decimal", parameters=params)
    elif wire is Wire.DECIMAL_VARIABLE:
        fields = [
            {"type": "int32", "optional": False, "field": "scale"},
            {"type": "bytes", "optional": False, "field": "value"},
        ]
        schema = _named(
            "struct",
            "io.debezium.data.VariableScaleDecimal",
            fields=fields,
            doc="Variable scaled decimal",
        )
    elif wire is Wire.DATE_DAYS:
        name = "org.apache.kafka.connect.data.Date" if connect else "io.debezium.time.Date"
        schema = _named("int32", name)
    elif wire is Wire.TIMESTAMP_MILLIS:
        name = (
            "org.apache.kafka.connect.data.Timestamp" if connect else "io.debezium.time.Timestamp"
        )
        schema = _named("int64", name)
    elif wire is Wire.TIMESTAMP_MICROS:
        schema = _named("int64", "io.debezium.time.MicroTimestamp")
    elif wire is Wire.TIMESTAMP_NANOS:
        schema = _named("int64", "io.debezium.time.NanoTimestamp")
    elif wire is Wire.TIME_MILLIS:
        name = "org.apache.kafka.connect.data.Time" if connect else "io.debezium.time.Time"
        schema = _named("int32", name)
    elif wire is Wire.TIME_MICROS:
        schema = _named("int64", "io.debezium.time.MicroTime")
    elif wire is Wire.TIME_NANOS:
        schema = _named("int64", "io.debezium.time.NanoTime")
    elif wire is Wire.ZONED_TIMESTAMP:
        schema = _named("string", "io.debezium.time.ZonedTimestamp")
    elif wire is Wire.ISO_STRING:
        schema = _named("string", _ISO_NAMES.get(kind, "io.debezium.time.IsoTimestamp"))
    elif wire is Wire.BYTES_BASE64 and kind == "BIT":
        length = str(plan.source.length or 1)
        schema = _named("bytes", "io.debezium.data.Bits", parameters={"length": length})
    elif wire is Wire.BYTES_BASE64:
        as_text = spec.source.debezium.binary_handling_mode == "base64"
        schema = {"type": "string" if as_text else "bytes"}
    elif wire in (Wire.BYTES_BASE64_URL, Wire.BYTES_HEX, Wire.DECIMAL_STRING):
        schema = {"type": "string"}
    elif wire is Wire.JSON_ARRAY and plan.element is not None:
        items = field_schema(spec, plan.element)
        items.pop("field", None)
        items["optional"] = True  # PostgreSQL array elements may be null
        schema = {"type": "array", "items": items}
    elif kind in _STRING_NAMES:
        schema = _named("string", _STRING_NAMES[kind])
        if kind in ("ENUM", "SET"):
            schema["parameters"] = {"allowed": ",".join(enum_values(plan.source.text))}
    else:
        schema = {"type": "string"}
    schema["optional"] = plan.nullable and not plan.key
    schema["field"] = plan.name
    return schema


def struct_schema(
    name: str | None, fields: list[dict[str, object]], **extra: object
) -> dict[str, object]:
    schema: dict[str, object] = {"type": "struct", "fields": fields, "optional": False}
    if name is not None:
        schema["name"] = name
    schema.update(extra)
    return schema


def simple_field(field_name: str, type_: str, *, optional: bool = False) -> dict[str, object]:
    return {"type": type_, "optional": optional, "field": field_name}


def source_schema(connector: str) -> dict[str, object]:
    snapshot = _named(
        "string",
        "io.debezium.data.Enum",
        parameters={"allowed": "true,last,false,incremental"},
        optional=True,
        default="false",
        field="snapshot",
    )
    common = [
        simple_field("version", "string"),
        simple_field("connector", "string"),
        simple_field("name", "string"),
        simple_field("ts_ms", "int64"),
        snapshot,
        simple_field("db", "string"),
    ]
    if connector in MYSQL_FAMILY:
        rest = [
            simple_field("table", "string", optional=True),
            simple_field("server_id", "int64"),
            simple_field("gtid", "string", optional=True),
            simple_field("file", "string"),
            simple_field("pos", "int64"),
            simple_field("row", "int32"),
            simple_field("thread", "int64", optional=True),
            simple_field("query", "string", optional=True),
        ]
        name = f"io.debezium.connector.{'mariadb' if connector == 'mariadb' else 'mysql'}.Source"
    else:
        rest = [
            simple_field("sequence", "string", optional=True),
            simple_field("schema", "string"),
            simple_field("table", "string"),
            simple_field("txId", "int64", optional=True),
            simple_field("lsn", "int64", optional=True),
            simple_field("xmin", "int64", optional=True),
        ]
        name = "io.debezium.connector.postgresql.Source"
    return struct_schema(name, common + rest)


def transaction_block_schema() -> dict[str, object]:
    fields = [
        simple_field("id", "string"),
        simple_field("total_order", "int64"),
        simple_field("data_collection_order", "int64"),
    ]
    return struct_schema("event.block", fields, optional=True, version=1, field="transaction")
