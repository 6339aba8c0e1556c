"""How each column's value arrives in a Debezium JSON event, derived from the spec (pure).

Debezium encodes a value according to the source type, its fractional-second precision and the
connector settings (``time.precision.mode``, ``decimal.handling.mode``, ``binary.handling.mode``,
``bigint.unsigned.handling.mode``). The ingest reads every field as raw JSON text and decodes it
with the encoding named here; the same table is the contract for the event generator and tests.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from cdc_assets.schema.types import SinkType, SourceType, default_sink_type, parse_source_type
from cdc_assets.spec.models import ColumnSpec, Protection, TableSpec

TOAST_PLACEHOLDER = "__debezium_unavailable_value"


class Wire(StrEnum):
    """A wire encoding: what the JSON value of a field looks like."""

    INT = "int"  # JSON integer
    LONG = "long"  # JSON integer
    UNSIGNED_LONG = "unsigned_long"  # JSON integer, 64-bit unsigned wrapped into a signed long
    FLOAT = "float"  # JSON number
    DOUBLE = "double"  # JSON number
    BOOLEAN = "boolean"  # JSON true/false
    BOOLEAN_INT = "boolean_int"  # JSON 0/1: MySQL BOOLEAN is TINYINT(1), sent as a number
    STRING = "string"  # JSON string
    DECIMAL_BYTES = "decimal_bytes"  # base64 of the unscaled two's-complement big-endian integer
    DECIMAL_VARIABLE = "decimal_variable"  # {"scale": s, "value": base64} (PostgreSQL numeric)
    DECIMAL_NUMBER = "decimal_number"  # JSON number (decimal.handling.mode=double)
    DECIMAL_STRING = "decimal_string"  # JSON string "123.45" (decimal.handling.mode=string)
    DATE_DAYS = "date_days"  # days since 1970-01-01
    TIMESTAMP_MILLIS = "timestamp_millis"  # ms since epoch (wall clock as if UTC for DATETIME)
    TIMESTAMP_MICROS = "timestamp_micros"
    TIMESTAMP_NANOS = "timestamp_nanos"
    ZONED_TIMESTAMP = "zoned_timestamp"  # ISO-8601 string with zone, e.g. 2026-01-02T03:04:05Z
    ISO_STRING = "iso_string"  # ISO-8601 date, time or timestamp string (isostring mode)
    TIME_MILLIS = "time_millis"  # ms since midnight
    TIME_MICROS = "time_micros"
    TIME_NANOS = "time_nanos"
    BYTES_BASE64 = "bytes_base64"
    BYTES_BASE64_URL = "bytes_base64_url"
    BYTES_HEX = "bytes_hex"
    JSON_ARRAY = "json_array"  # JSON array, each element in the element's own encoding


@dataclass(frozen=True)
class FieldPlan:
    """One column: its JSON field name, wire encoding, the type it decodes to and its sink type."""

    name: str
    sink_name: str
    wire: Wire
    natural: SinkType  # what the wire value decodes to before any override or transform
    sink: SinkType
    source: SourceType
    scale: int | None = None  # for DECIMAL_BYTES
    nullable: bool = True
    key: bool = False
    transform: str | None = None
    element: FieldPlan | None = None  # of a JSON_ARRAY: how each element decodes
    # Former source names (renames), looked up when the image lacks ``name``: an event written
    # before the rename. A former name another column has taken since is left out.
    aliases: tuple[str, ...] = ()
    # The value of an image that lacks the field (under every name): a row the source had
    # before the column was added (``ColumnSpec.backfill_default``); None: null.
    default: str | None = None
    # How the value is protected before it is stored (`sql.protect`); its sink is then string.
    protect: Protection | None = None
    # A JSON document's fields protected inside it (dotted path -> protection).
    protect_paths: tuple[tuple[str, Protection], ...] = ()

    @property
    def parses_document(self) -> bool:
        """A JSON column stored as a nested type: its text is parsed as a JSON document."""
        return self.sink.is_nested and self.source.kind in ("JSON", "JSONB")

    @property
    def decode_as(self) -> str:
        """What a dead letter says the value could not be decoded as."""
        if self.parses_document or self.wire is Wire.JSON_ARRAY:
            return str(self.sink if self.parses_document else self.natural)
        return self.wire.value

    @property
    def splits_set(self) -> bool:
        """A SET column stored as ``list<string>``: its comma-joined text is split."""
        return self.sink.is_nested and self.source.kind == "SET"


_BINARY_WIRE = {
    "bytes": Wire.BYTES_BASE64,  # the JSON converter writes bytes as base64
    "base64": Wire.BYTES_BASE64,
    "base64-url-safe": Wire.BYTES_BASE64_URL,
    "hex": Wire.BYTES_HEX,
}
_INT_KINDS = {"TINYINT", "UTINYINT", "SMALLINT", "USMALLINT", "MEDIUMINT", "UMEDIUMINT", "INT"}
_INT_KINDS |= {"YEAR", "SERIAL", "SMALLSERIAL"}


def _temporal_wire(source: SourceType, mode: str) -> Wire | None:
    kind, fsp = source.kind, source.precision or 0
    if kind in ("TIMESTAMPTZ", "TIMESTAMPLTZ"):
        return Wire.ISO_STRING if mode == "isostring" else Wire.ZONED_TIMESTAMP
    if mode == "isostring" and kind in ("DATE", "TIME", "DATETIME", "TIMESTAMP"):
        return Wire.ISO_STRING
    if kind == "DATE":
        return Wire.DATE_DAYS
    if kind == "TIMETZ":
        return Wire.ISO_STRING
    if kind == "TIME":
        if mode == "connect" or (mode == "adaptive" and fsp <= 3):
            return Wire.TIME_MILLIS
        return Wire.TIME_MICROS
    if kind in ("DATETIME", "TIMESTAMP"):
        if mode == "connect" or fsp <= 3:
            return Wire.TIMESTAMP_MILLIS
        return Wire.TIMESTAMP_MICROS
    return None


def _wire_for(spec: TableSpec, source: SourceType) -> tuple[Wire, int | None]:
    dbz = spec.source.debezium
    kind = source.kind
    if kind == "ARRAY":
        return Wire.JSON_ARRAY, None
    temporal = _temporal_wire(source, spec.source.time_precision_mode)
    if temporal is not None:
        return temporal, None
    if kind in _INT_KINDS:
        return Wire.INT, None
    if kind in ("UINT", "BIGINT", "BIGSERIAL", "INTERVAL"):
        return Wire.LONG, None
    if kind == "UBIGINT":
        if dbz.bigint_unsigned_handling_mode == "precise":
            return Wire.DECIMAL_BYTES, 0
        return Wire.UNSIGNED_LONG, None
    if kind == "FLOAT":
        return (Wire.DOUBLE if (source.precision or 0) > 23 else Wire.FLOAT), None
    if kind == "DOUBLE":
        return Wire.DOUBLE, None
    if kind == "BOOLEAN" and spec.source.connector != "postgresql":
        return Wire.BOOLEAN_INT, None
    if kind == "BOOLEAN" or (kind == "BIT" and (source.length or 1) == 1):
        return Wire.BOOLEAN, None
    if kind == "BIT":
        return Wire.BYTES_BASE64, None  # io.debezium.data.Bits is always bytes
    if kind == "DECIMAL":
        mode = dbz.decimal_handling_mode
        if mode == "double":
            return Wire.DECIMAL_NUMBER, None
        if mode == "string":
            return Wire.DECIMAL_STRING, None
        if source.precision is None:
            return Wire.DECIMAL_VARIABLE, None
        return Wire.DECIMAL_BYTES, source.scale or 0
    if default_sink_type(source).name == "binary":
        return _BINARY_WIRE[dbz.binary_handling_mode], None
    return Wire.STRING, None


def _natural(wire: Wire, source: SourceType) -> SinkType:
    """The type a wire value decodes to; equal to the default sink type except for doubles."""
    if wire is Wire.DECIMAL_NUMBER:
        return SinkType("double")
    if wire is Wire.JSON_ARRAY and source.element is not None:
        return SinkType("list", element=default_sink_type(source.element))
    if wire is Wire.DECIMAL_STRING and (source.precision is None or source.precision > 38):
        return SinkType("string")
    return default_sink_type(source)


def _element_plan(spec: TableSpec, name: str, sink_name: str, source: SourceType) -> FieldPlan:
    wire, scale = _wire_for(spec, source)
    natural = _natural(wire, source)
    return FieldPlan(
        name=name,
        sink_name=sink_name,
        wire=wire,
        natural=natural,
        sink=natural,
        source=source,
        scale=scale,
    )


def plan_column(spec: TableSpec, column: ColumnSpec) -> FieldPlan:
    source = column.source_type(spec.source.connector)
    wire, scale = _wire_for(spec, source)
    element = None
    if source.element is not None:
        # The element's intermediate columns are named after the column's with an ``_e`` suffix:
        # its raw text is the lambda variable of the ``transform`` over the array.
        element = _element_plan(spec, column.name, f"{column.sink_name}_e", source.element)
    return FieldPlan(
        element=element,
        name=column.name,
        sink_name=column.sink_name,
        wire=wire,
        natural=_natural(wire, source),
        sink=column.sink_type(spec.source.connector),
        source=source,
        scale=scale,
        nullable=column.nullable,
        key=column.name in spec.primary_key,
        transform=column.sink.transform.value if column.sink.transform else None,
        aliases=tuple(n for n in column.former_names if n not in spec.columns_by_name),
        default=column.default if column.backfill_default and not column.dropped else None,
        protect=column.protect,
        protect_paths=tuple(sorted(column.protect_paths.items())),
    )


def stored_text_plan(plan: FieldPlan) -> FieldPlan:
    """A protected column's plan for reading what the ingest stored (the protected text, in
    ``_row_json`` as in the typed column): the text as it is, never decoded or protected again."""
    if plan.protect is None:
        return plan
    text = SinkType("string")
    return replace(
        plan,
        wire=Wire.STRING,
        natural=text,
        sink=text,
        source=parse_source_type("longtext", "mysql"),
        scale=None,
        element=None,
        transform=None,
        protect=None,
    )


def plan_fields(spec: TableSpec) -> list[FieldPlan]:
    """The decoding plan of every spec column, in spec order."""
    return [plan_column(spec, c) for c in spec.columns]
