"""The source table's shape from the Kafka Connect schema embedded in a Debezium row event
(PostgreSQL has no schema-change topic: a changed embedded schema is how a change shows).

The row image struct (``after``, else ``before``) gives column names, order, optionality and
Connect types with Debezium's semantic names; they map back to PostgreSQL types. Connect types
lose some source detail (a ``varchar(40)`` arrives as a plain string) unless the connector runs
with ``column.propagate.source.type``, whose parameters are used when present. Columns the spec
already has keep the spec's type text unless the schema says something exact about them: a
propagated source type, a decimal's precision and scale, an integer's or a float's width. So a
widening such as ``numeric(12,2)`` -> ``numeric(16,2)`` or ``integer`` -> ``bigint`` shows, while a
``varchar(20)`` that merely arrives as a Connect string does not look changed.
Pure: no Kafka here.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
from collections.abc import Mapping, Sequence
from typing import Any

from cdc_assets.errors import CdcAssetsError
from cdc_assets.schema.wire import Wire, plan_column
from cdc_assets.spec.models import ColumnSpec, TableSpec

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
        if text.startswith("_"):  # an array's element type, as PostgreSQL names arrays
            return f"{text[1:]}[]"
        if length and text in ("varchar", "char", "bpchar", "numeric", "bit", "varbit"):
            text = text.replace("bpchar", "char")
            size = f"{length},{scale}" if scale and text == "numeric" else str(length)
            return f"{text}({size})"
        return text
    name = field.get("name")
    if field.get("type") == "array" and isinstance(field.get("items"), Mapping):
        return pg_type(field["items"]) + "[]"
    if name == "io.debezium.data.Enum" and params.get("allowed"):
        labels = ",".join("'" + v.replace("'", "''") + "'" for v in params["allowed"].split(","))
        return f"enum({labels})"
    if name == "org.apache.kafka.connect.data.Decimal":
        scale = params.get("scale", "0")
        precision = params.get("connect.decimal.precision")
        return f"numeric({precision},{scale})" if precision else "numeric"
    if name in _NAMED:
        return _NAMED[str(name)]
    return _PLAIN.get(str(field.get("type")), "text")


# Spellings of one PostgreSQL type, to compare the spec's type text with a Connect-derived one.
_ALIASES = {
    "int": "integer",
    "int4": "integer",
    "int8": "bigint",
    "int2": "smallint",
    "decimal": "numeric",
    "float4": "real",
    "float8": "double precision",
    "float": "double precision",
}
_EXACT_PLAIN = {"int16", "int32", "int64", "float32", "float64"}


def _normalized(type_text: str) -> str:
    text = " ".join(type_text.lower().split()).replace(", ", ",").replace(" (", "(")
    if text.endswith("[]"):
        return _normalized(text[:-2]) + "[]"
    head, paren, rest = text.partition("(")
    return _ALIASES.get(head.strip(), head.strip()) + paren + rest


def _is_exact(field: Mapping[str, Any]) -> bool:
    """Whether the Connect schema states the column's type exactly (not a lossy mapping)."""
    params = field.get("parameters") or {}
    if params.get("__debezium.source.column.type"):
        return True
    if field.get("type") == "array" and isinstance(field.get("items"), Mapping):
        return _is_exact(field["items"])  # integer[] -> bigint[] shows, text[] stays as written
    name = field.get("name")
    if name == "org.apache.kafka.connect.data.Decimal":
        return bool(params.get("connect.decimal.precision"))
    if name == "io.debezium.data.Enum":
        return bool(params.get("allowed"))  # the labels, in order: an added label shows
    return name is None and str(field.get("type")) in _EXACT_PLAIN


def column_type(spec_type: str | None, field: Mapping[str, Any]) -> str:
    """The type of one column as the schema shows it: the spec's own text (``spec_type``) unless
    the schema states a different type exactly; for a column the spec lacks, the mapped type."""
    if spec_type is None:
        return pg_type(field)
    if _is_exact(field):
        derived = pg_type(field)
        if _normalized(derived) != _normalized(spec_type):
            return derived
    return spec_type


# The wire encodings a plain Connect string carries (text, decimals and times as strings, bytes
# as base64 or hex): a column sent in any other one that now arrives as a plain string changed
# type (an ``ALTER COLUMN ... TYPE text``), though "string" alone does not say which text type.
_STRING_WIRES = {
    Wire.STRING,
    Wire.DECIMAL_STRING,
    Wire.ZONED_TIMESTAMP,
    Wire.ISO_STRING,
    Wire.BYTES_BASE64,
    Wire.BYTES_BASE64_URL,
    Wire.BYTES_HEX,
}


def known_column_type(spec: TableSpec, column: ColumnSpec, field: Mapping[str, Any]) -> str:
    """A spec column's type as the schema shows it (``column_type``), and the schema's own
    mapping when a column the spec sends in another encoding arrives as a plain string."""
    shown = column_type(column.type, field)
    if shown != column.type or field.get("name") or field.get("type") != "string":
        return shown
    try:
        wire = plan_column(spec, column).wire
    except CdcAssetsError:  # a type the wire rules do not know: as the schema shows it
        return shown
    return shown if wire in _STRING_WIRES else pg_type(field)


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
    for field in _stored(spec, fields):
        name = str(field["field"])
        column = known.get(name)
        type_text = pg_type(field) if column is None else known_column_type(spec, column, field)
        line = f"  {_quote(name)} {type_text}"
        if not field.get("optional", True):
            line += " NOT NULL"
        # A known column keeps the spec's default (a schema states a default only for a few
        # types, and changing one affects inserts only, which arrive as events); a new column
        # takes the schema's, so that older rows read it (``backfill_default``).
        default = column.default if column is not None else field_default(field)
        if default is not None:
            # quoted: the DDL import keeps a literal's text, so any default reads back the same
            line += " DEFAULT '" + default.replace("'", "''") + "'"
        lines.append(line)
    keys = ", ".join(_quote(k) for k in spec.primary_key)
    lines.append(f"  PRIMARY KEY ({keys})")
    table = spec.source.table
    return f"CREATE TABLE {_quote(table)} (\n" + ",\n".join(lines) + "\n)"


def field_default(field: Mapping[str, Any]) -> str | None:
    """A field's default as spec text: a plain integer, string or boolean as itself, a decimal
    from its unscaled bytes, a date from its day number. Other logical types (times,
    timestamps) are left out."""
    value = field.get("default")
    if value is None:
        return None
    kind, logical = field.get("type"), field.get("name")
    if logical == "org.apache.kafka.connect.data.Decimal" and isinstance(value, str):
        scale = int((field.get("parameters") or {}).get("scale", 0))
        unscaled = int.from_bytes(base64.b64decode(value), "big", signed=True)
        return str(decimal.Decimal(unscaled).scaleb(-scale))
    if logical == "io.debezium.time.Date" and isinstance(value, int):
        return (datetime.date(1970, 1, 1) + datetime.timedelta(days=value)).isoformat()
    if logical:
        return None
    if kind == "boolean" and isinstance(value, bool):
        return "true" if value else "false"
    if kind in ("int8", "int16", "int32", "int64") and isinstance(value, int):
        return str(value)
    if kind == "string" and isinstance(value, str):
        return value
    return None


def _stored(spec: TableSpec, fields: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The fields but those the spec drops at ingest (``pipeline.drop_fields``): never columns."""
    dropped = set(spec.pipeline.drop_fields)
    return [f for f in fields if str(f["field"]) not in dropped]


def names_differ(spec: TableSpec, fields: list[Mapping[str, Any]]) -> bool:
    """Whether the embedded schema names other columns than the spec (in any order)."""
    return {str(f["field"]) for f in _stored(spec, fields)} != {
        c.name for c in spec.columns if not c.dropped
    }


def differs(spec: TableSpec, fields: list[Mapping[str, Any]]) -> bool:
    """Whether the embedded schema names other columns than the spec (in any order), or states a
    known column's type exactly and differently."""
    if names_differ(spec, fields):
        return True
    live = {c.name: c for c in spec.columns if not c.dropped}
    return any(
        known_column_type(spec, live[str(f["field"])], f) != live[str(f["field"])].type
        for f in _stored(spec, fields)
    )


# Avro types -> Connect types, for fields without a ``connect.type`` of their own.
_AVRO_TO_CONNECT = {
    "int": "int32",
    "long": "int64",
    "float": "float32",
    "double": "float64",
    "boolean": "boolean",
    "string": "string",
    "bytes": "bytes",
    "record": "struct",
    "array": "array",
    "map": "map",
    "enum": "string",
    "fixed": "bytes",
}


def _connect_field(name: str, avro: Any) -> dict[str, Any]:
    """One Connect field schema from the Avro type Kafka Connect's Avro converter wrote."""
    optional = False
    if isinstance(avro, list):
        branches = [b for b in avro if b != "null"]
        optional = len(branches) < len(avro)
        avro = branches[0] if len(branches) == 1 else {"type": "string"}
    if isinstance(avro, str):
        avro = {"type": avro}
    field: dict[str, Any] = {
        "field": name,
        "optional": optional,
        "type": avro.get("connect.type") or _AVRO_TO_CONNECT.get(str(avro.get("type")), "string"),
    }
    if avro.get("type") == "array":
        items = _connect_field("", avro.get("items", "string"))
        items.pop("field")
        field["items"] = items
    if avro.get("connect.name"):
        field["name"] = avro["connect.name"]
    if avro.get("connect.parameters"):
        field["parameters"] = dict(avro["connect.parameters"])
    if avro.get("logicalType") == "decimal" and "parameters" not in field:
        field["name"] = "org.apache.kafka.connect.data.Decimal"
        field["parameters"] = {
            "scale": str(avro.get("scale", 0)),
            "connect.decimal.precision": str(avro.get("precision", "")),
        }
    return field


def avro_row_fields(writer_schema: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    """The row image's field schemas (as `row_fields` gives them) of a Debezium envelope's Avro
    writer schema: what a connector's newest schema version says the table looks like."""
    if writer_schema.get("type") != "record":
        return None
    named: dict[str, Mapping[str, Any]] = {}
    for field in writer_schema.get("fields") or []:
        branches = field.get("type")
        for branch in branches if isinstance(branches, list) else [branches]:
            if isinstance(branch, dict) and branch.get("type") == "record":
                named[str(field.get("name"))] = branch
    for image in ("after", "before"):
        record = named.get(image)
        if record is not None and record.get("fields"):
            return [_connect_field(str(f["name"]), f["type"]) for f in record["fields"]]
    return None


def next_version(
    spec: TableSpec, versions: list[tuple[int, list[Mapping[str, Any]]]]
) -> tuple[int, list[Mapping[str, Any]]] | None:
    """Of a topic's writer schema versions (oldest first, as (schema id, row fields)), the one
    to evolve to next: the first after the newest version with the spec's shape that differs
    from it. So versions registered between two looks are applied one at a time, in order,
    never collapsed into the newest. When no version has the spec's shape (a spec from the
    information_schema whose types the schemas only approximate), the newest; None when there
    is nothing to apply."""
    if not versions:
        return None
    same = [i for i, (_, fields) in enumerate(versions) if not differs(spec, fields)]
    if not same:
        return versions[-1]
    return next(((s, f) for s, f in versions[same[-1] + 1 :] if differs(spec, f)), None)


def shape_change_lsn(
    seen: Sequence[tuple[int, int | None, list[Mapping[str, Any]] | None]],
    fields: list[Mapping[str, Any]],
) -> int | None:
    """Where a PostgreSQL table took the shape ``fields``, from the newest records of its topic
    (``seen``: partition, the record's LSN and its row fields, in offset order per partition;
    records without fields are skipped): the LSN of the newest record of another shape, so that
    every record after it has ``fields``. None when that is not certain: a partition's records
    read all have ``fields`` (the change is older than what was read), one has another shape
    after ``fields`` (more than one change), or another shape's LSN is not below every record
    of ``fields``. A row image does not say which shape wrote it; this says which rows came
    after the change."""
    partitions: dict[int, list[tuple[int, bool]]] = {}
    for partition, lsn, row in seen:
        if lsn is not None and row:
            partitions.setdefault(partition, []).append((lsn, row == fields))
    older: list[int] = []
    newer: list[int] = []
    for records in partitions.values():
        first = next((i for i, (_, new) in enumerate(records) if new), None)
        if first is None:
            older += [lsn for lsn, _ in records]
            continue
        if first == 0 or not all(new for _, new in records[first:]):
            return None
        older += [lsn for lsn, _ in records[:first]]
        newer += [lsn for lsn, _ in records[first:]]
    if not older or not newer or max(older) >= min(newer):
        return None
    return max(older)
