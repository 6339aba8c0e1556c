"""Column types: source SQL types (parsed with sqlglot) and the Iceberg sink types they map to.

Pure rules, no engine imports. Sink types use Iceberg's names; `cdc_assets.sql` renders them for
Spark. `can_promote` is the one widening rule shared by type overrides and schema evolution.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from sqlglot import exp
from sqlglot.errors import ParseError

from cdc_assets.errors import UnsupportedTypeError

# Connector kinds and the sqlglot dialect that reads their column types.
DIALECTS = {"mysql": "mysql", "mariadb": "mysql", "tidb": "mysql", "postgresql": "postgres"}

PRIMITIVE_SINK_TYPES = (
    "boolean",
    "int",
    "long",
    "float",
    "double",
    "date",
    "timestamp",
    "timestamptz",
    "string",
    "binary",
)
MAX_DECIMAL_PRECISION = 38
_DECIMAL_RE = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")


@dataclass(frozen=True)
class SinkType:
    """An Iceberg type: a primitive (a name, plus precision and scale for decimals) or a nested
    ``list`` (``element``), ``struct`` (``fields``, in order) or ``map`` (string keys, ``value``).
    Nested fields and list elements are always optional: a source array may hold nulls and a JSON
    document may leave out any field."""

    name: str
    precision: int | None = None
    scale: int | None = None
    element: SinkType | None = None
    fields: tuple[tuple[str, SinkType], ...] = ()
    value: SinkType | None = None

    def __str__(self) -> str:
        if self.name == "decimal":
            return f"decimal({self.precision},{self.scale})"
        if self.name == "list":
            return f"list<{self.element}>"
        if self.name == "map":
            return f"map<string,{self.value}>"
        if self.name == "struct":
            return "struct<" + ",".join(f"{n}:{t}" for n, t in self.fields) + ">"
        return self.name

    @property
    def is_integer(self) -> bool:
        return self.name in ("int", "long")

    @property
    def is_floating(self) -> bool:
        return self.name in ("float", "double")

    @property
    def is_nested(self) -> bool:
        return self.name in NESTED_SINK_TYPES


NESTED_SINK_TYPES = ("list", "struct", "map")
_FIELD_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _split_top(text: str) -> list[str]:
    """Split ``text`` at the commas outside angle brackets and parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def _parse_nested(norm: str) -> SinkType | None:
    head, _, rest = norm.partition("<")
    head = head.strip()
    if head not in NESTED_SINK_TYPES or not rest.endswith(">"):
        return None
    inner = rest[:-1].strip()
    if head == "list":
        return SinkType("list", element=parse_sink_type(inner))
    if head == "map":
        parts = _split_top(inner)
        if len(parts) != 2 or parts[0] != "string":
            raise ValueError(f"map type {norm!r}: keys must be string, as in map<string,int>")
        return SinkType("map", value=parse_sink_type(parts[1]))
    fields: list[tuple[str, SinkType]] = []
    for part in _split_top(inner) if inner else []:
        name, colon, type_text = part.partition(":")
        name = name.strip()
        if not colon or not _FIELD_NAME_RE.match(name):
            raise ValueError(f"struct field {part!r} in {norm!r}: write name:type")
        if name in (n for n, _ in fields):
            raise ValueError(f"struct field {name!r} appears twice in {norm!r}")
        fields.append((name, parse_sink_type(type_text)))
    if not fields:
        raise ValueError(f"struct type {norm!r} has no fields")
    return SinkType("struct", fields=tuple(fields))


@lru_cache(maxsize=1024)
def parse_sink_type(text: str) -> SinkType:
    """Parse a sink type name such as ``long``, ``decimal(12,2)``, ``list<int>``,
    ``struct<street:string,zip:int>`` or ``map<string,long>``; raise ValueError if invalid."""
    norm = text.strip().lower()
    if norm in PRIMITIVE_SINK_TYPES:
        return SinkType(norm)
    match = _DECIMAL_RE.match(norm)
    if match:
        precision, scale = int(match.group(1)), int(match.group(2))
        if not 1 <= precision <= MAX_DECIMAL_PRECISION or scale > precision:
            raise ValueError(
                f"decimal({precision},{scale}) is out of range: "
                f"precision 1..{MAX_DECIMAL_PRECISION}, scale 0..precision"
            )
        return SinkType("decimal", precision, scale)
    nested = _parse_nested(norm)
    if nested is not None:
        return nested
    valid = ", ".join(
        (*PRIMITIVE_SINK_TYPES, "decimal(p,s)", "list<t>", "struct<name:t,...>", "map<string,t>")
    )
    raise ValueError(f"unknown sink type {text!r}; valid: {valid}")


@dataclass(frozen=True)
class SourceType:
    """A source column type as declared in the source database, normalised by sqlglot."""

    text: str
    kind: str
    length: int | None = None
    precision: int | None = None
    scale: int | None = None
    element: SourceType | None = None  # of an ARRAY (PostgreSQL ``integer[]``)
    values: tuple[str, ...] = ()  # the allowed values of an ENUM or SET


_INT32 = {"TINYINT", "UTINYINT", "SMALLINT", "USMALLINT", "MEDIUMINT", "UMEDIUMINT", "INT", "YEAR"}
_INT32 |= {"SERIAL", "SMALLSERIAL"}
# PostgreSQL INTERVAL arrives as microseconds (io.debezium.time.MicroDuration) by default.
_INT64 = {"UINT", "BIGINT", "BIGSERIAL", "INTERVAL"}
_STRINGS = {
    "CHAR",
    "NCHAR",
    "VARCHAR",
    "NVARCHAR",
    "TEXT",
    "TINYTEXT",
    "MEDIUMTEXT",
    "LONGTEXT",
    "ENUM",
    "SET",
    "JSON",
    "JSONB",
    "UUID",
    "TIME",
    "TIMETZ",
    "INET",
    "XML",
}
_BINARIES = {"BINARY", "VARBINARY", "BLOB", "TINYBLOB", "MEDIUMBLOB", "LONGBLOB"}
_LENGTHED = {"CHAR", "NCHAR", "VARCHAR", "NVARCHAR", "BINARY", "VARBINARY"}
_TEMPORAL_WITH_FRACTION = {"TIME", "TIMETZ", "DATETIME", "TIMESTAMP", "TIMESTAMPTZ", "TIMESTAMPLTZ"}
SUPPORTED_SOURCE_KINDS = sorted(
    _INT32
    | _INT64
    | _STRINGS
    | _BINARIES
    | {"UBIGINT", "BOOLEAN", "BIT", "FLOAT", "DOUBLE", "DECIMAL", "DATE", "DATETIME"}
    | {"TIMESTAMP", "TIMESTAMPTZ", "TIMESTAMPLTZ", "ARRAY"}
)
# Array elements whose Debezium JSON value is a plain JSON scalar decoded on its own: numbers,
# booleans, text and dates. Not yet: decimals (bytes with a scale), binaries, and timestamps and
# times (their comparison with the source would go through the JDBC driver's time zone).
ARRAY_ELEMENT_KINDS = sorted(
    (_INT32 | _INT64 | {"BOOLEAN", "FLOAT", "DOUBLE", "DATE"})
    | (_STRINGS - {"ENUM", "SET", "TIME", "TIMETZ"})
)


def _int_arg(dtype: exp.DataType, index: int) -> int | None:
    if len(dtype.expressions) <= index:
        return None
    text = dtype.expressions[index].sql()
    return int(text) if text.isdigit() else None


def _unquote(literal_sql: str) -> str:
    text = literal_sql.strip()
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'").replace("\\'", "'")
    return text


# Thousands of specs repeat a few dozen type strings; parsing each once keeps loading fast.
@lru_cache(maxsize=4096)
def parse_source_type(text: str, connector: str) -> SourceType:
    """Parse a column type in the connector's SQL dialect; raise UnsupportedTypeError if unknown."""
    dialect = DIALECTS[connector]
    try:
        dtype = exp.DataType.build(text, dialect=dialect)
    except (ParseError, ValueError) as err:
        raise UnsupportedTypeError(f"cannot parse source type {text!r} for {connector}") from err
    kind = dtype.this.name
    if kind == "ARRAY":
        element = parse_source_type(dtype.expressions[0].sql(dialect=dialect), connector)
        if element.kind not in ARRAY_ELEMENT_KINDS:
            raise UnsupportedTypeError(
                f"unsupported source type {text!r} for {connector}: arrays of {element.text} "
                "are not supported; array elements may be integers, floats, booleans, "
                "character types, uuid, json and dates"
            )
        return SourceType(text, kind, element=element)
    if kind in ("ENUM", "SET"):
        values = tuple(_unquote(e.sql(dialect=dialect)) for e in dtype.expressions)
        return SourceType(text, kind, values=values)
    if kind not in SUPPORTED_SOURCE_KINDS:
        raise UnsupportedTypeError(
            f"unsupported source type {text!r} for {connector} (parsed as {kind}); "
            "supported: integers, decimals, floats, booleans, character and binary types, "
            "json, uuid, enum, set, date, time, datetime and timestamp types, and arrays"
        )
    if kind == "DECIMAL":
        # MySQL's DECIMAL without arguments is DECIMAL(10,0); PostgreSQL's bare NUMERIC has no
        # fixed scale and is kept as text so no digit is lost.
        default_precision = 10 if dialect == "mysql" else None
        precision = _int_arg(dtype, 0) or default_precision
        if precision is None:
            return SourceType(text, kind)
        return SourceType(text, kind, precision=precision, scale=_int_arg(dtype, 1) or 0)
    if kind in _LENGTHED or kind == "BIT":
        return SourceType(text, kind, length=_int_arg(dtype, 0))
    if kind == "FLOAT":
        # MySQL FLOAT(p) with p > 23 is a DOUBLE.
        return SourceType(text, kind, precision=_int_arg(dtype, 0))
    if kind in _TEMPORAL_WITH_FRACTION:
        # Fractional-second digits decide Debezium's wire encoding (ms vs us); the defaults differ.
        default = 0 if dialect == "mysql" else 6
        fsp = _int_arg(dtype, 0)
        return SourceType(text, kind, precision=default if fsp is None else fsp)
    return SourceType(text, kind)


def default_sink_type(source: SourceType) -> SinkType:
    """The Iceberg type a source type lands in when the spec does not override it."""
    kind = source.kind
    if kind == "ARRAY" and source.element is not None:
        return SinkType("list", element=default_sink_type(source.element))
    if kind in _INT32:
        return SinkType("int")
    if kind in _INT64:
        return SinkType("long")
    if kind == "UBIGINT":
        # 64-bit unsigned overflows a signed long; decimal(20,0) holds every value exactly.
        return SinkType("decimal", 20, 0)
    if kind == "BOOLEAN" or (kind == "BIT" and (source.length or 1) == 1):
        return SinkType("boolean")
    if kind == "FLOAT":
        return SinkType("double" if (source.precision or 0) > 23 else "float")
    if kind == "DOUBLE":
        return SinkType("double")
    if kind == "DECIMAL":
        if source.precision is None or source.precision > MAX_DECIMAL_PRECISION:
            return SinkType("string")
        return SinkType("decimal", source.precision, source.scale or 0)
    if kind == "DATE":
        return SinkType("date")
    if kind == "DATETIME" or kind == "TIMESTAMP":
        return SinkType("timestamp")
    if kind in ("TIMESTAMPTZ", "TIMESTAMPLTZ"):
        return SinkType("timestamptz")
    if kind in _BINARIES or kind == "BIT":
        return SinkType("binary")
    return SinkType("string")


def promotion_problems(old: SinkType, new: SinkType, path: str) -> list[str]:
    """Why ``old`` cannot become ``new`` in place, one reason per field, each naming the field's
    path (``address.zip``, ``tags.element``); empty when every value of ``old`` is exactly
    representable in ``new`` (Iceberg widening). A struct may gain fields, never lose one."""
    if old == new:
        return []
    if old.is_nested or new.is_nested:
        if old.name != new.name:
            return [f"{path}: {old} -> {new} changes the type category ({old.name} -> {new.name})"]
        if old.element is not None and new.element is not None:
            return promotion_problems(old.element, new.element, f"{path}.element")
        if old.value is not None and new.value is not None:
            return promotion_problems(old.value, new.value, f"{path}.value")
        new_fields = dict(new.fields)
        problems = []
        for name, old_type in old.fields:
            if name not in new_fields:
                problems.append(
                    f"{path}.{name}: a nested field cannot be removed (soft-drop it: keep it in "
                    "the struct, where it stays null for new rows)"
                )
            else:
                problems += promotion_problems(old_type, new_fields[name], f"{path}.{name}")
        return problems
    if old.name == "int" and new.name == "long":
        return []
    if old.name == "float" and new.name == "double":
        return []
    if (
        old.name == new.name == "decimal"
        and new.scale == old.scale
        and (new.precision or 0) > (old.precision or 0)
    ):
        return []
    return [f"{path}: {old} -> {new} is not a widening"]


def can_promote(old: SinkType, new: SinkType) -> bool:
    """True when every value of ``old`` is exactly representable in ``new`` (Iceberg widening),
    field by field for nested types."""
    return not promotion_problems(old, new, "")


def can_override(default: SinkType, override: SinkType, source: SourceType | None = None) -> bool:
    """A spec may store a column as text, or in any type its default type widens to; a JSON
    column also as any nested type (schema on read) and a SET as ``list<string>``."""
    if override.name == "string" or can_promote(default, override):
        return True
    if source is not None and source.kind in ("JSON", "JSONB") and override.is_nested:
        return True
    return source is not None and source.kind == "SET" and override == LIST_OF_STRINGS


LIST_OF_STRINGS = SinkType("list", element=SinkType("string"))
# The primitives a JSON document's values are read into (JSON has no dates or bytes).
DOCUMENT_LEAF_TYPES = ("boolean", "int", "long", "float", "double", "decimal", "string")


def leaves(sink: SinkType) -> list[SinkType]:
    """The primitive types inside a (nested) type."""
    if sink.element is not None:
        return leaves(sink.element)
    if sink.value is not None:
        return leaves(sink.value)
    if sink.fields:
        return [leaf for _, t in sink.fields for leaf in leaves(t)]
    return [sink]
