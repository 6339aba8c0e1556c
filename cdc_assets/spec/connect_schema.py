"""The source table's shape from the Kafka Connect schema embedded in a Debezium row event
(PostgreSQL has no schema-change topic: a changed embedded schema is how a change shows).

The row image struct (``after``, else ``before``) gives column names, order, optionality and
Connect types with Debezium's semantic names; they map back to PostgreSQL types. Connect types
lose some source detail (a ``varchar(40)`` arrives as a plain string) unless the connector runs
with ``column.propagate.source.type``, whose parameters are used when present. Columns the spec
already has keep the spec's type text, so only new or vanished columns come from the schema.
Pure: no Kafka here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from cdc_assets.spec.models import TableSpec

# Debezium semantic names (and Connect logical names) -> PostgreSQL types.
_NAMED = {
    "io.debezium.time.Date": "date",
    "org.apache.kafka.connect.data.Date": "date",
    "io.debezium.time.Time": "time",
    "io.debezium.time.MicroTime": "time",
    "io.debezium.time.NanoTime": "time",
    "org.apache.kafka.connect.data.Time": "time",
    "io.debezium.time.Timestamp": "timestamp",
    "io.debezium.time.MicroTimestamp": "timestamp",
    "io.debezium.time.NanoTimestamp": "timestamp",
    "org.apache.kafka.connect.data.Timestamp": "timestamp",
    "io.debezium.time.ZonedTimestamp": "timestamptz",
    "io.debezium.time.ZonedTime": "timetz",
    "io.debezium.time.MicroDuration": "interval",
    "io.debezium.data.Uuid": "uuid",
    "io.debezium.data.Json": "jsonb",
    "io.debezium.data.Xml": "xml",
    "io.debezium.data.VariableScaleDecimal": "numeric",
}
_PLAIN = {
    "int16": "smallint",
    "int32": "integer",
    "int64": "bigint",
    "float32": "real",
    "float64": "double precision",
    "boolean": "boolean",
    "string": "text",
    "bytes": "bytea",
}


def pg_type(field: Mapping[str, Any]) -> str:
    """The PostgreSQL type of one Connect field schema."""
    params = field.get("parameters") or {}
    source = params.get("__debezium.source.column.type")
    if source:
        length = params.get("__debezium.source.column.length")
        scale = params.get("__debezium.source.column.scale")
        text = str(source).lower()
        if length and text in ("varchar", "char", "bpchar", "numeric", "bit", "varbit"):
            text = text.replace("bpchar", "char")
            size = f"{length},{scale}" if scale and text == "numeric" else str(length)
            return f"{text}({size})"
        return text
    name = field.get("name")
    if name == "org.apache.kafka.connect.data.Decimal":
        scale = params.get("scale", "0")
        precision = params.get("connect.decimal.precision")
        return f"numeric({precision},{scale})" if precision else "numeric"
    if name in _NAMED:
        return _NAMED[str(name)]
    return _PLAIN.get(str(field.get("type")), "text")


def row_fields(value: bytes | str | None) -> list[Mapping[str, Any]] | None:
    """The field schemas of the row image struct of an event with an embedded schema."""
    if value is None:
        return None
    try:
        record = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("schema"), dict):
        return None
    envelope = record["schema"].get("fields") or []
    images = {f.get("field"): f for f in envelope if isinstance(f, dict)}
    for image in ("after", "before"):
        struct = images.get(image)
        if isinstance(struct, dict) and struct.get("type") == "struct" and struct.get("fields"):
            return [f for f in struct["fields"] if isinstance(f, dict) and f.get("field")]
    return None


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def create_table_from_fields(spec: TableSpec, fields: list[Mapping[str, Any]]) -> str:
    """PostgreSQL CREATE TABLE of the table as the embedded schema describes it."""
    known = spec.columns_by_name
    lines = []
    for field in fields:
        name = str(field["field"])
        column = known.get(name)
        type_text = column.type if column is not None else pg_type(field)
        line = f"  {_quote(name)} {type_text}"
        if not field.get("optional", True):
            line += " NOT NULL"
        lines.append(line)
    keys = ", ".join(_quote(k) for k in spec.primary_key)
    lines.append(f"  PRIMARY KEY ({keys})")
    table = spec.source.table
    return f"CREATE TABLE {_quote(table)} (\n" + ",\n".join(lines) + "\n)"


def differs(spec: TableSpec, fields: list[Mapping[str, Any]]) -> bool:
    """Whether the embedded schema names other columns than the spec (in any order)."""
    live = {c.name for c in spec.columns if not c.dropped}
    return {str(f["field"]) for f in fields} != live
