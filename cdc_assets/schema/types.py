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


@dataclass(frozen=True, order=True)
class SinkType:
    """An Iceberg primitive type: a name plus precision and scale for decimals."""

    name: str
    precision: int | None = None
    scale: int | None = None

    def __str__(self) -> str:
        if self.name == "decimal":
            return f"decimal({self.precision},{self.scale})"
        return self.name

    @property
    def is_integer(self) -> bool:
        return self.name in ("int", "long")

    @property
    def is_floating(self) -> bool:
        return self.name in ("float", "double")


@lru_cache(maxsize=1024)
def parse_sink_type(text: str) -> SinkType:
    """Parse a sink type name such as ``long`` or ``decimal(12,2)``; raise ValueError if invalid."""
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
    valid = ", ".join((*PRIMITIVE_SINK_TYPES, "decimal(p,s)"))
    raise ValueError(f"unknown sink type {text!r}; valid: {valid}")


@dataclass(frozen=True)
class SourceType:
    """A source column type as declared in the source database, normalised by sqlglot."""

    text: str
    kind: str
    length: int | None = None
    precision: int | None = None
    scale: int | None = None


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
    | {"TIMESTAMP", "TIMESTAMPTZ", "TIMESTAMPLTZ"}
)


def _int_arg(dtype: exp.DataType, index: int) -> int | None:
    if len(dtype.expressions) <= index:
        return None
    text = dtype.expressions[index].sql()
    return int(text) if text.isdigit() else None


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
    if kind not in SUPPORTED_SOURCE_KINDS:
        raise UnsupportedTypeError(
            f"unsupported source type {text!r} for {connector} (parsed as {kind}); "
            "supported: integers, decimals, floats, booleans, character and binary types, "
            "json, uuid, enum, date, time, datetime and timestamp types"
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


def can_promote(old: SinkType, new: SinkType) -> bool:
    """True when every value of ``old`` is exactly representable in ``new`` (Iceberg widening)."""
    if old == new:
        return True
    if old.name == "int" and new.name == "long":
        return True
    if old.name == "float" and new.name == "double":
        return True
    if old.name == "decimal" and new.name == "decimal":
        return new.scale == old.scale and (new.precision or 0) > (old.precision or 0)
    return False


def can_override(default: SinkType, override: SinkType) -> bool:
    """A spec may store a column as text, or in any type its default type widens to."""
    return override.name == "string" or can_promote(default, override)
