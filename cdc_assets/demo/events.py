"""Realistic Debezium JSON events for a table spec, each value encoded as the wire plan says.

An event factory, random rows, a mixed CDC workload, and a Kafka producer for demos and tests.
"""

from __future__ import annotations

import base64
import json
import math
import random
import re
import struct
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Literal

from cdc_assets.errors import ProduceError
from cdc_assets.schema.wire import TOAST_PLACEHOLDER, FieldPlan, Wire, plan_fields
from cdc_assets.spec.models import TableSpec

TOAST = TOAST_PLACEHOLDER
DEFAULT_START_TS_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
DEBEZIUM_VERSION = "2.7.3.Final"
# Small on purpose: a demo stream of a few hundred events then crosses binlog files.
BINLOG_FILE_BYTES = 65_536
MYSQL_FAMILY = ("mysql", "mariadb", "tidb")

EPOCH = datetime(1970, 1, 1)
EPOCH_DATE = date(1970, 1, 1)
_MICRO = timedelta(microseconds=1)
_FIRST_BINLOG_POS = 157  # after the format description and previous-GTIDs events
_MYSQL_SERVER_ID = 223344

Row = Mapping[str, object]


@dataclass
class KafkaRecord:
    """One Kafka record. ``row`` is the natural image it was built from (never sent to Kafka)."""

    key: bytes | None
    value: bytes | None
    row: dict[str, object] | None = field(default=None, compare=False, repr=False)


# --- value encoding --------------------------------------------------------------------------


def _as_int(value: object) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | Decimal | float | str):
        return int(value)
    raise TypeError(f"expected an integer, got {value!r}")


def _as_float(value: object) -> float:
    if isinstance(value, int | float | Decimal | str):
        return float(value)
    raise TypeError(f"expected a number, got {value!r}")


def _as_decimal(value: object) -> Decimal:
    if isinstance(value, Decimal):
        return value
    if isinstance(value, int | str):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value))
    raise TypeError(f"expected a decimal, got {value!r}")


def _as_bytes(value: object) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(f"expected bytes, got {value!r}")


def _as_datetime(value: object) -> datetime:
    if isinstance(value, datetime):
        return value
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day)
    raise TypeError(f"expected a datetime, got {value!r}")


def _as_date(value: object) -> date:
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    raise TypeError(f"expected a date, got {value!r}")


def _utc_naive(value: datetime) -> datetime:
    """Wall-clock UTC without a zone; a naive value is taken as UTC already."""
    if value.tzinfo is None:
        return value
    return value.astimezone(UTC).replace(tzinfo=None)


def _epoch_micros(value: object) -> int:
    return (_utc_naive(_as_datetime(value)) - EPOCH) // _MICRO


def _time_micros(value: object) -> int:
    if isinstance(value, time):
        seconds = (value.hour * 60 + value.minute) * 60 + value.second
        return seconds * 1_000_000 + value.microsecond
    if isinstance(value, timedelta):
        return value // _MICRO
    raise TypeError(f"expected a time, got {value!r}")


def _fraction(micros: int, width: int | None) -> str:
    """Java's ISO formatter: minimal digits (none for zero), or exactly ``width`` digits."""
    digits = f"{micros:06d}"
    if width:
        return "." + (digits + "000")[:width]
    digits = digits.rstrip("0")
    return "." + digits if digits else ""


def _clock(hour: int, minute: int, second: int) -> str:
    return f"{hour:02d}:{minute:02d}:{second:02d}"


def _iso_datetime(value: datetime, width: int | None) -> str:
    """``2026-01-02T03:04:05.123456Z`` from a datetime taken as UTC when naive."""
    v = _utc_naive(value)
    day = f"{v.year:04d}-{v.month:02d}-{v.day:02d}"
    return f"{day}T{_clock(v.hour, v.minute, v.second)}{_fraction(v.microsecond, width)}Z"


def _zoned_width(plan: FieldPlan, connector: str | None) -> int | None:
    # Debezium pads MySQL TIMESTAMP(n) to n digits; PostgreSQL values use the plain ISO format.
    if connector in MYSQL_FAMILY and plan.source.precision:
        return plan.source.precision
    return None


def _iso_time(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, time):
        if value.tzinfo is not None and value.utcoffset():
            shifted = datetime.combine(EPOCH_DATE, value).astimezone(UTC).time()
            value = shifted
        text = _clock(value.hour, value.minute, value.second) + _fraction(value.microsecond, None)
        return text + "Z"
    micros = _time_micros(value)
    sign = "-" if micros < 0 else ""
    seconds, us = divmod(abs(micros), 1_000_000)
    clock = _clock(seconds // 3600, seconds // 60 % 60, seconds % 60)
    return f"{sign}{clock}{_fraction(us, None)}Z"


def _unscaled(value: Decimal, scale: int) -> int:
    """The unscaled integer of ``value`` at ``scale``; refuses to round."""
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise ValueError(f"{value} is not a finite decimal")
    magnitude = int("".join(map(str, digits)) or "0")
    shift = exponent + scale
    if shift >= 0:
        magnitude *= 10**shift
    else:
        magnitude, rest = divmod(magnitude, int(10 ** (-shift)))
        if rest:
            raise ValueError(f"{value} has more than {scale} fractional digits")
    return -magnitude if sign else magnitude


def _twos_complement(unscaled: int) -> bytes:
    """Minimal big-endian two's-complement bytes, like Java's BigInteger.toByteArray."""
    bits = unscaled.bit_length() if unscaled >= 0 else (~unscaled).bit_length()
    return unscaled.to_bytes(bits // 8 + 1, "big", signed=True)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _float32(value: float) -> float:
    """The float32 value as the shortest decimal that reads back to it (Jackson's rendering)."""
    (single,) = struct.unpack("<f", struct.pack("<f", value))
    if not math.isfinite(single):
        return float(single)
    for digits in range(1, 10):
        shortest = float(f"{single:.{digits}g}")
        if struct.unpack("<f", struct.pack("<f", shortest))[0] == single:
            return shortest
    return float(single)


def _json_text(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _encode_iso(plan: FieldPlan, value: object, connector: str | None) -> str:
    natural = plan.natural.name
    if isinstance(value, str):
        return value
    if natural == "date":
        return _as_date(value).isoformat() + "Z"
    if natural == "timestamp":
        return _iso_datetime(_as_datetime(value), None)
    if natural == "timestamptz":
        return _iso_datetime(_as_datetime(value), _zoned_width(plan, connector))
    return _iso_time(value)


def _encode_decimal_variable(value: object) -> dict[str, object]:
    dec = _as_decimal(value)
    exponent = dec.as_tuple().exponent
    scale = max(0, -exponent) if isinstance(exponent, int) else 0
    return {"scale": scale, "value": _b64(_twos_complement(_unscaled(dec, scale)))}


def _encode_unsigned(value: object) -> int:
    v = _as_int(value)
    return v - 2**64 if v >= 2**63 else v


_Encoder = Callable[[FieldPlan, object], object]
_ENCODERS: dict[Wire, _Encoder] = {
    Wire.INT: lambda p, v: _as_int(v),
    Wire.LONG: lambda p, v: _as_int(v),
    Wire.UNSIGNED_LONG: lambda p, v: _encode_unsigned(v),
    Wire.FLOAT: lambda p, v: _float32(_as_float(v)),
    Wire.DOUBLE: lambda p, v: _as_float(v),
    Wire.BOOLEAN: lambda p, v: bool(v),
    Wire.BOOLEAN_INT: lambda p, v: 1 if v else 0,
    Wire.STRING: lambda p, v: _json_text(v),
    Wire.DECIMAL_BYTES: lambda p, v: _b64(
        _twos_complement(_unscaled(_as_decimal(v), p.scale or 0))
    ),
    Wire.DECIMAL_VARIABLE: lambda p, v: _encode_decimal_variable(v),
    Wire.DECIMAL_NUMBER: lambda p, v: _as_float(v),
    Wire.DECIMAL_STRING: lambda p, v: format(_as_decimal(v), "f"),
    Wire.DATE_DAYS: lambda p, v: (_as_date(v) - EPOCH_DATE).days,
    Wire.TIMESTAMP_MILLIS: lambda p, v: _epoch_micros(v) // 1000,
    Wire.TIMESTAMP_MICROS: lambda p, v: _epoch_micros(v),
    Wire.TIMESTAMP_NANOS: lambda p, v: _epoch_micros(v) * 1000,
    Wire.TIME_MILLIS: lambda p, v: _time_micros(v) // 1000,
    Wire.TIME_MICROS: lambda p, v: _time_micros(v),
    Wire.TIME_NANOS: lambda p, v: _time_micros(v) * 1000,
    Wire.BYTES_BASE64: lambda p, v: _b64(_as_bytes(v)),
    Wire.BYTES_BASE64_URL: lambda p, v: base64.urlsafe_b64encode(_as_bytes(v)).decode("ascii"),
    Wire.BYTES_HEX: lambda p, v: _as_bytes(v).hex(),
}


def toast_wire_value(wire: Wire) -> str:
    """How Debezium sends the unavailable-value placeholder for a column of this encoding."""
    raw = TOAST.encode("utf-8")
    if wire is Wire.BYTES_BASE64:
        return _b64(raw)
    if wire is Wire.BYTES_BASE64_URL:
        return base64.urlsafe_b64encode(raw).decode("ascii")
    if wire is Wire.BYTES_HEX:
        return raw.hex()
    return TOAST


def encode_value(plan: FieldPlan, value: object, *, connector: str | None = None) -> object:
    """The JSON value Debezium sends for one natural value; None stays None, TOAST is kept.

    ``connector`` only changes zoned timestamps: MySQL pads their fraction to the column's digits.
    """
    if value is None:
        return None
    if isinstance(value, str) and value == TOAST:
        return toast_wire_value(plan.wire)
    if plan.wire is Wire.ZONED_TIMESTAMP:
        return _iso_datetime(_as_datetime(value), _zoned_width(plan, connector))
    if plan.wire is Wire.ISO_STRING:
        return _encode_iso(plan, value, connector)
    return _ENCODERS[plan.wire](plan, value)


# --- Kafka Connect schemas -------------------------------------------------------------------

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


def _type_name(source_text: str) -> str:
    """``int unsigned`` -> ``INT UNSIGNED``, ``decimal(10,2)`` -> ``DECIMAL``."""
    return " ".join(re.sub(r"\([^)]*\)", " ", source_text).upper().split())


def _enum_values(source_text: str) -> list[str]:
    return [v.replace("''", "'") for v in _ENUM_VALUE_RE.findall(source_text)]


def _named(type_: str, name: str, **extra: object) -> dict[str, object]:
    return {"type": type_, "name": name, "version": 1, **extra}


def _field_schema(spec: TableSpec, plan: FieldPlan) -> dict[str, object]:
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
    elif kind in _STRING_NAMES:
        schema = _named("string", _STRING_NAMES[kind])
        if kind in ("ENUM", "SET"):
            schema["parameters"] = {"allowed": ",".join(_enum_values(plan.source.text))}
    else:
        schema = {"type": "string"}
    schema["optional"] = plan.nullable and not plan.key
    schema["field"] = plan.name
    return schema


def _struct(
    name: str | None, fields: list[dict[str, object]], **extra: object
) -> dict[str, object]:
    schema: dict[str, object] = {"type": "struct", "fields": fields, "optional": False}
    if name is not None:
        schema["name"] = name
    schema.update(extra)
    return schema


def _simple(field_name: str, type_: str, *, optional: bool = False) -> dict[str, object]:
    return {"type": type_, "optional": optional, "field": field_name}


def _source_schema(connector: str) -> dict[str, object]:
    snapshot = _named(
        "string",
        "io.debezium.data.Enum",
        parameters={"allowed": "true,last,false,incremental"},
        optional=True,
        default="false",
        field="snapshot",
    )
    common = [
        _simple("version", "string"),
        _simple("connector", "string"),
        _simple("name", "string"),
        _simple("ts_ms", "int64"),
        snapshot,
        _simple("db", "string"),
    ]
    if connector in MYSQL_FAMILY:
        rest = [
            _simple("table", "string", optional=True),
            _simple("server_id", "int64"),
            _simple("gtid", "string", optional=True),
            _simple("file", "string"),
            _simple("pos", "int64"),
            _simple("row", "int32"),
            _simple("thread", "int64", optional=True),
            _simple("query", "string", optional=True),
        ]
        name = f"io.debezium.connector.{'mariadb' if connector == 'mariadb' else 'mysql'}.Source"
    else:
        rest = [
            _simple("sequence", "string", optional=True),
            _simple("schema", "string"),
            _simple("table", "string"),
            _simple("txId", "int64", optional=True),
            _simple("lsn", "int64", optional=True),
            _simple("xmin", "int64", optional=True),
        ]
        name = "io.debezium.connector.postgresql.Source"
    return _struct(name, common + rest)


def _transaction_block_schema() -> dict[str, object]:
    fields = [
        _simple("id", "string"),
        _simple("total_order", "int64"),
        _simple("data_collection_order", "int64"),
    ]
    return _struct("event.block", fields, optional=True, version=1, field="transaction")


# --- the event factory -----------------------------------------------------------------------


def _dumps(obj: object) -> bytes:
    # Kafka Connect's JsonConverter writes compact JSON with non-ASCII characters as UTF-8.
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class DebeziumEventFactory:
    """Builds the Kafka records a Debezium connector would write for one table.

    Source positions, ``source.ts_ms`` and the payload ``ts_ms`` advance monotonically per event;
    every change made outside ``statement()`` is its own transaction. Deterministic for equal
    arguments and call sequences.
    """

    def __init__(
        self,
        spec: TableSpec,
        *,
        embed_schema: bool = False,
        server_name: str = "dbserver1",
        start_ts_ms: int = DEFAULT_START_TS_MS,
    ) -> None:
        self.spec = spec
        self.plans = plan_fields(spec)
        self.embed_schema = embed_schema
        self.server_name = server_name
        self._connector = spec.source.connector
        self._mysql = self._connector in MYSQL_FAMILY
        by_name = {p.name: p for p in self.plans}
        self._key_plans = [by_name[k] for k in spec.primary_key]
        self._rng = random.Random(start_ts_ms)
        self._ts = start_ts_ms
        self._processed = start_ts_ms
        self._file, self._pos, self._row = 3, _FIRST_BINLOG_POS, 0
        self._gtid_seq = 1
        self._thread = 7
        self._server_uuid = str(uuid.uuid5(uuid.NAMESPACE_DNS, server_name))
        self._lsn, self._txid = 24_023_128, 760
        self._last_commit: int | None = None
        self._in_statement = False
        self._statement_rows = 0
        self._tx_label = self._label()
        prefix_schema = spec.source.schema_ or "public"
        middle = spec.source.database if self._mysql else prefix_schema
        self._prefix = f"{server_name}.{middle}.{spec.source.table}"
        self._data_collection = f"{middle}.{spec.source.table}"

    # positions

    def _label(self) -> str:
        if not self._mysql:
            return f"{self._txid}:{self._lsn}"
        if self._connector == "mariadb":
            return f"0-1-{self._gtid_seq}"
        return f"{self._server_uuid}:{self._gtid_seq}"

    def _new_transaction(self, size: int) -> None:
        self._ts += self._rng.randint(1, 1500)
        if self._mysql:
            step = size + self._rng.randint(120, 360)
            if self._pos + step > BINLOG_FILE_BYTES:
                self._file, self._pos = self._file + 1, _FIRST_BINLOG_POS
            else:
                self._pos += step
            self._row = 0
            self._gtid_seq += 1
            self._thread = self._rng.choice((7, 12, 31, 44))
        else:
            self._last_commit = self._lsn + 8
            self._lsn = self._last_commit + size + self._rng.randint(40, 240)
            self._txid += self._rng.randint(1, 3)
        self._tx_label = self._label()

    def _advance_for_change(self, size: int) -> None:
        if self._in_statement and self._statement_rows > 0:
            # Later rows of one statement: same binlog event (next row), or the next WAL record.
            if self._mysql:
                self._row += 1
            else:
                self._lsn += size + self._rng.randint(24, 64)
        elif not self._in_statement:
            self._new_transaction(size)
        if self._in_statement:
            self._statement_rows += 1

    def _processing_ts(self) -> int:
        self._processed = max(self._processed, self._ts + self._rng.randint(5, 180))
        return self._processed

    @property
    def transaction_id(self) -> str:
        """The id of the current source transaction (GTID, or ``txId:lsn`` on PostgreSQL)."""
        return self._tx_label

    @contextmanager
    def statement(self) -> Iterator[None]:
        """Make the change events built inside one multi-row statement of one transaction."""
        if self._in_statement:
            raise RuntimeError("statements do not nest")
        self._new_transaction(256)
        self._in_statement, self._statement_rows = True, 0
        try:
            yield
        finally:
            self._in_statement = False

    def _source(self, *, snapshot: bool, table: str | None = None) -> dict[str, object]:
        src = self.spec.source
        table_name = src.table if table is None else table
        common: dict[str, object] = {
            "version": DEBEZIUM_VERSION,
            # TiDB is captured with the MySQL connector.
            "connector": "mysql" if self._connector == "tidb" else self._connector,
            "name": self.server_name,
            "ts_ms": self._ts,
            "snapshot": "true" if snapshot else "false",
            "db": src.database,
        }
        if self._mysql:
            return {
                **common,
                "table": table_name,
                "server_id": 0 if snapshot else _MYSQL_SERVER_ID,
                "gtid": None if snapshot else self._tx_label,
                "file": f"mysql-bin.{self._file:06d}",
                "pos": self._pos,
                "row": 0 if snapshot else self._row,
                "thread": None if snapshot else self._thread,
                "query": None,
            }
        previous = None if self._last_commit is None else str(self._last_commit)
        sequence = json.dumps([previous, str(self._lsn)], separators=(",", ":"))
        return {
            **common,
            "sequence": sequence,
            "schema": "" if table == "" else (src.schema_ or "public"),
            "table": table_name,
            "txId": self._txid,
            "lsn": self._lsn,
            "xmin": None,
        }

    # schemas

    def _value_struct(self, field_name: str) -> dict[str, object]:
        fields = [_field_schema(self.spec, p) for p in self.plans]
        return _struct(f"{self._prefix}.Value", fields, optional=True, field=field_name)

    def _envelope_schema(self) -> dict[str, object]:
        fields = [
            self._value_struct("before"),
            self._value_struct("after"),
            {**_source_schema(self._connector), "field": "source"},
            _simple("op", "string"),
            _simple("ts_ms", "int64", optional=True),
            _transaction_block_schema(),
        ]
        return _struct(f"{self._prefix}.Envelope", fields, version=1)

    def _wrap(self, schema: Callable[[], dict[str, object]], payload: object) -> bytes:
        if self.embed_schema:
            return _dumps({"schema": schema(), "payload": payload})
        return _dumps(payload)

    # images and keys

    def _image(self, row: Row | None) -> dict[str, object] | None:
        if row is None:
            return None
        known = {p.name for p in self.plans}
        image = {
            p.name: encode_value(p, row[p.name], connector=self._connector)
            for p in self.plans
            if p.name in row
        }
        # Fields the spec does not know pass through untouched (a newer source column).
        image.update({k: v for k, v in row.items() if k not in known})
        return image

    def key_bytes(self, row: Row) -> bytes:
        """The Kafka key of a row: its primary key columns, encoded like the value."""
        payload = {
            p.name: encode_value(p, row.get(p.name), connector=self._connector)
            for p in self._key_plans
        }
        if not self.embed_schema:
            return _dumps(payload)
        fields = [{**_field_schema(self.spec, p), "optional": False} for p in self._key_plans]
        return _dumps({"schema": _struct(f"{self._prefix}.Key", fields), "payload": payload})

    def _change(
        self, op: str, before: Row | None, after: Row | None, *, snapshot: bool = False
    ) -> KafkaRecord:
        images = (self._image(before), self._image(after))
        if snapshot:
            self._ts += self._rng.randint(0, 2)
        else:
            self._advance_for_change(len(_dumps(images)))
        payload = {
            "before": images[0],
            "after": images[1],
            "source": self._source(snapshot=snapshot),
            "op": op,
            "ts_ms": self._processing_ts(),
            "transaction": None,
        }
        keyed = after if after is not None else before
        natural = after if op != "d" else before
        return KafkaRecord(
            key=None if keyed is None else self.key_bytes(keyed),
            value=self._wrap(self._envelope_schema, payload),
            row=None if natural is None else dict(natural),
        )

    # change events

    def create(self, row: Row) -> KafkaRecord:
        """An insert (op ``c``)."""
        return self._change("c", None, row)

    def update(self, before: Row | None, after: Row) -> KafkaRecord:
        """An update (op ``u``); ``before`` may be None, as PostgreSQL sends by default."""
        return self._change("u", before, after)

    def delete(self, before: Row) -> KafkaRecord:
        """A delete (op ``d``); PostgreSQL sends only the key columns in ``before`` by default."""
        return self._change("d", before, None)

    def read(self, row: Row) -> KafkaRecord:
        """A snapshot read (op ``r``): the position stays at the snapshot's position."""
        return self._change("r", None, row, snapshot=True)

    def truncate(self) -> KafkaRecord:
        """A truncate (op ``t``): no images and no key."""
        self._new_transaction(64)
        payload = {
            "before": None,
            "after": None,
            "source": self._source(snapshot=False),
            "op": "t",
            "ts_ms": self._processing_ts(),
            "transaction": None,
        }
        return KafkaRecord(key=None, value=self._wrap(self._envelope_schema, payload))

    def tombstone(self, key_row: Row) -> KafkaRecord:
        """The tombstone Debezium writes after a delete so compaction can drop the key."""
        return KafkaRecord(key=self.key_bytes(key_row), value=None)

    # other records a topic may carry

    def heartbeat(self) -> KafkaRecord:
        """A heartbeat record: only a timestamp."""
        self._processed = max(self._processed, self._ts) + self._rng.randint(1, 20)
        key = {"serverName": self.server_name}
        value = {"ts_ms": self._processed}
        if not self.embed_schema:
            return KafkaRecord(_dumps(key), _dumps(value))
        key_schema = _struct(
            "io.debezium.connector.common.ServerNameKey", [_simple("serverName", "string")]
        )
        value_schema = _struct(
            "io.debezium.connector.common.Heartbeat", [_simple("ts_ms", "int64")]
        )
        return KafkaRecord(
            _dumps({"schema": key_schema, "payload": key}),
            _dumps({"schema": value_schema, "payload": value}),
        )

    def transaction(
        self,
        status: Literal["BEGIN", "END"],
        txid: str | None = None,
        *,
        event_count: int | None = None,
    ) -> KafkaRecord:
        """A transaction metadata record; ``txid`` defaults to the current transaction."""
        tx = self._tx_label if txid is None else txid
        count = (event_count or 0) if status == "END" else None
        collections = (
            [{"data_collection": self._data_collection, "event_count": count}]
            if status == "END"
            else None
        )
        value = {
            "status": status,
            "id": tx,
            "event_count": count,
            "data_collections": collections,
            "ts_ms": self._ts,
        }
        key = {"id": tx}
        if not self.embed_schema:
            return KafkaRecord(_dumps(key), _dumps(value))
        collection_schema = _struct(
            None,
            [_simple("data_collection", "string"), _simple("event_count", "int64")],
        )
        value_schema = _struct(
            "io.debezium.connector.common.TransactionMetadataValue",
            [
                _simple("status", "string"),
                _simple("id", "string"),
                _simple("event_count", "int64", optional=True),
                {
                    "type": "array",
                    "items": collection_schema,
                    "optional": True,
                    "field": "data_collections",
                },
                _simple("ts_ms", "int64"),
            ],
        )
        key_schema = _struct(
            "io.debezium.connector.common.TransactionMetadataKey", [_simple("id", "string")]
        )
        return KafkaRecord(
            _dumps({"schema": key_schema, "payload": key}),
            _dumps({"schema": value_schema, "payload": value}),
        )

    def schema_change(self, ddl: str) -> KafkaRecord:
        """A record of the schema change topic (MySQL shape) describing the spec's table."""
        self._new_transaction(len(ddl))
        src = self.spec.source
        table_id = f'"{src.database}"."{src.table}"'
        value = {
            "source": self._source(snapshot=False),
            "ts_ms": self._processing_ts(),
            "databaseName": src.database,
            "schemaName": src.schema_,
            "ddl": ddl,
            "tableChanges": [
                {
                    "type": "ALTER",
                    "id": table_id,
                    "table": {
                        "defaultCharsetName": "utf8mb4",
                        "primaryKeyColumnNames": list(self.spec.primary_key),
                        "columns": self._table_columns(),
                        "attributes": [],
                    },
                    "comment": self.spec.description,
                }
            ],
        }
        key = {"databaseName": src.database}
        if not self.embed_schema:
            return KafkaRecord(_dumps(key), _dumps(value))
        key_schema = _struct(
            "io.debezium.connector.mysql.SchemaChangeKey", [_simple("databaseName", "string")]
        )
        return KafkaRecord(
            _dumps({"schema": key_schema, "payload": key}),
            _dumps({"schema": self._schema_change_schema(), "payload": value}),
        )

    def _table_columns(self) -> list[dict[str, object]]:
        columns: list[dict[str, object]] = []
        for position, (col, plan) in enumerate(zip(self.spec.columns, self.plans, strict=True)):
            columns.append(
                {
                    "name": col.name,
                    "jdbcType": _JDBC_TYPES.get(plan.source.kind, 1111),
                    "nativeType": None,
                    # As the MySQL connector reports it: the type name without its size.
                    "typeName": _type_name(col.type),
                    "typeExpression": _type_name(col.type),
                    "charsetName": "utf8mb4" if plan.natural.name == "string" else None,
                    "length": plan.source.length or plan.source.precision,
                    "scale": plan.source.scale,
                    "position": position + 1,
                    "optional": col.nullable,
                    "autoIncremented": False,
                    "generated": False,
                    "comment": col.comment,
                    "hasDefaultValue": col.default is not None,
                    "defaultValueExpression": col.default,
                    "enumValues": _enum_values(plan.source.text) or None,
                }
            )
        return columns

    def _schema_change_schema(self) -> dict[str, object]:
        column_fields = [
            _simple("name", "string"),
            _simple("jdbcType", "int32"),
            _simple("nativeType", "int32", optional=True),
            _simple("typeName", "string"),
            _simple("typeExpression", "string", optional=True),
            _simple("charsetName", "string", optional=True),
            _simple("length", "int32", optional=True),
            _simple("scale", "int32", optional=True),
            _simple("position", "int32"),
            _simple("optional", "boolean", optional=True),
            _simple("autoIncremented", "boolean", optional=True),
            _simple("generated", "boolean", optional=True),
            _simple("comment", "string", optional=True),
            _simple("hasDefaultValue", "boolean", optional=True),
            _simple("defaultValueExpression", "string", optional=True),
            {
                "type": "array",
                "items": {"type": "string", "optional": False},
                "optional": True,
                "field": "enumValues",
            },
        ]
        column = _struct("io.debezium.connector.schema.Column", column_fields)
        attribute = _struct(
            "io.debezium.connector.schema.Attribute",
            [_simple("name", "string"), _simple("value", "string")],
        )
        table_fields = [
            _simple("defaultCharsetName", "string", optional=True),
            {
                "type": "array",
                "items": {"type": "string", "optional": False},
                "optional": True,
                "field": "primaryKeyColumnNames",
            },
            {"type": "array", "items": column, "optional": False, "field": "columns"},
            {"type": "array", "items": attribute, "optional": True, "field": "attributes"},
        ]
        change_fields = [
            _simple("type", "string"),
            _simple("id", "string"),
            {
                **_struct("io.debezium.connector.schema.Table", table_fields),
                "optional": True,
                "field": "table",
            },
            _simple("comment", "string", optional=True),
        ]
        change = _struct("io.debezium.connector.schema.Change", change_fields)
        fields = [
            {**_source_schema(self._connector), "field": "source"},
            _simple("ts_ms", "int64"),
            _simple("databaseName", "string", optional=True),
            _simple("schemaName", "string", optional=True),
            _simple("ddl", "string", optional=True),
            {"type": "array", "items": change, "optional": False, "field": "tableChanges"},
        ]
        return _struct("io.debezium.connector.mysql.SchemaChangeValue", fields)

    def message(self, prefix: str = "audit", content: bytes = b"checkpoint") -> KafkaRecord:
        """A PostgreSQL logical decoding message (op ``m``, from ``pg_logical_emit_message``)."""
        self._new_transaction(len(content))
        payload = {
            "op": "m",
            "ts_ms": self._processing_ts(),
            "source": self._source(snapshot=False, table=""),
            "message": {"prefix": prefix, "content": _b64(content)},
        }
        key = {"prefix": prefix}
        if not self.embed_schema:
            return KafkaRecord(_dumps(key), _dumps(payload))
        message_schema = _struct(
            "io.debezium.connector.postgresql.Message",
            [_simple("prefix", "string"), _simple("content", "bytes")],
            optional=True,
            field="message",
        )
        value_schema = _struct(
            "io.debezium.connector.postgresql.MessageValue",
            [
                _simple("op", "string"),
                _simple("ts_ms", "int64", optional=True),
                {**_source_schema(self._connector), "field": "source"},
                message_schema,
            ],
        )
        key_schema = _struct(
            "io.debezium.connector.postgresql.MessageKey", [_simple("prefix", "string")]
        )
        return KafkaRecord(
            _dumps({"schema": key_schema, "payload": key}),
            _dumps({"schema": value_schema, "payload": payload}),
        )


_JDBC_TYPES = {
    "BIGINT": -5,
    "UBIGINT": -5,
    "BIGSERIAL": -5,
    "INT": 4,
    "UINT": 4,
    "SERIAL": 4,
    "MEDIUMINT": 4,
    "UMEDIUMINT": 4,
    "SMALLINT": 5,
    "USMALLINT": 5,
    "SMALLSERIAL": 5,
    "TINYINT": -6,
    "UTINYINT": -6,
    "BOOLEAN": 16,
    "BIT": -7,
    "FLOAT": 7,
    "DOUBLE": 8,
    "DECIMAL": 3,
    "CHAR": 1,
    "NCHAR": -15,
    "VARCHAR": 12,
    "NVARCHAR": -9,
    "TEXT": -1,
    "TINYTEXT": -1,
    "MEDIUMTEXT": -1,
    "LONGTEXT": -1,
    "DATE": 91,
    "TIME": 92,
    "TIMETZ": 2013,
    "DATETIME": 93,
    "TIMESTAMP": 93,
    "TIMESTAMPTZ": 2014,
    "TIMESTAMPLTZ": 2014,
    "BINARY": -2,
    "VARBINARY": -3,
    "BLOB": 2004,
    "TINYBLOB": 2004,
    "MEDIUMBLOB": 2004,
    "LONGBLOB": 2004,
}


# --- random rows -----------------------------------------------------------------------------

_INT_RANGES: dict[str, tuple[int, int]] = {
    "TINYINT": (-(2**7), 2**7 - 1),
    "UTINYINT": (0, 2**8 - 1),
    "SMALLINT": (-(2**15), 2**15 - 1),
    "USMALLINT": (0, 2**16 - 1),
    "MEDIUMINT": (-(2**23), 2**23 - 1),
    "UMEDIUMINT": (0, 2**24 - 1),
    "INT": (-(2**31), 2**31 - 1),
    "UINT": (0, 2**32 - 1),
    "BIGINT": (-(2**63), 2**63 - 1),
    "UBIGINT": (0, 2**64 - 1),
    "YEAR": (1901, 2155),
    "SERIAL": (1, 2**31 - 1),
    "SMALLSERIAL": (1, 2**15 - 1),
    "BIGSERIAL": (1, 2**63 - 1),
}
_WORDS = (
    "alpha", "orbit", "maple", "river", "quartz", "delta", "ember", "harbor", "lumen", "nova",
    "pixel", "sable", "tundra", "willow", "zephyr", "copper", "meadow", "signal", "atlas", "fjord",
)  # fmt: skip
_UNICODE_WORDS = (
    "café", "naïve", "Zoë", "Ærøskøbing", "Łódź", "straße", "Ελλάδα", "Москва", "日本語",
    "中文字符", "한국어", "עברית", "العربية", "हिन्दी", "😀", "🚀", "👩‍💻", "🇳🇴", "𝄞",
)  # fmt: skip
_AWKWARD = ('"quoted"', "back\\slash", "tab\tstop", "new\nline", "it's", "{not: json}", "a,b;c")
_FIRST_NAMES = ("Ada", "Zoë", "José", "Søren", "Léa", "Mei", "Ярослав", "Aiko", "Chidi", "Noël")
_LAST_NAMES = ("Lovelace", "Núñez", "Øberg", "王", "Schröder", "O'Brien", "Nakamura", "Dubois")
_COUNTRIES = ("US", "GB", "DE", "FR", "NO", "JP", "BR", "IN", "ZA", "MX")
_CURRENCIES = ("USD", "EUR", "GBP", "JPY", "NOK", "CHF", "BRL")
_STATUSES = ("pending", "paid", "shipped", "delivered", "cancelled", "refunded")
_DOMAINS = ("example.com", "example.org", "mail.example.net", "例え.jp")
_TEXTUAL_KINDS = {"TEXT", "TINYTEXT", "MEDIUMTEXT", "LONGTEXT", "VARCHAR", "NVARCHAR", "JSON"}
_TEXTUAL_KINDS |= {"JSONB", "XML"}
_RANGE_START = datetime(2020, 1, 1)
_RANGE_SECONDS = int((datetime(2030, 1, 1) - _RANGE_START).total_seconds())
_FRACTION_CAP = {Wire.TIMESTAMP_MILLIS: 3, Wire.TIME_MILLIS: 3}
_EPOCH_UNITS = {
    "epoch_seconds_to_timestamp": 1_000_000,
    "epoch_millis_to_timestamp": 1_000,
    "epoch_micros_to_timestamp": 1,
}


def _clip(text: str, length: int | None) -> str:
    return text if length is None else text[:length].rstrip()


def _random_text(rng: random.Random, max_len: int) -> str:
    target = rng.randint(1, max(1, max_len))
    parts: list[str] = []
    while sum(len(p) + 1 for p in parts) < target:
        pick = rng.random()
        pool = _WORDS if pick < 0.65 else _UNICODE_WORDS if pick < 0.9 else _AWKWARD
        parts.append(rng.choice(pool))
    text = " ".join(parts)[:target].strip()
    return text or rng.choice(_WORDS)[:max_len]


def _fixed_code(rng: random.Random, length: int) -> str:
    return "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(length))


def _random_string(plan: FieldPlan, rng: random.Random) -> str:
    kind, name, length = plan.source.kind, plan.name.lower(), plan.source.length
    if kind in ("ENUM", "SET"):
        allowed = _enum_values(plan.source.text) or ["a"]
        if kind == "ENUM":
            return rng.choice(allowed)
        return ",".join(v for v in allowed if rng.random() < 0.5)
    if kind == "UUID":
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))
    if kind in ("JSON", "JSONB"):
        doc = {
            "color": rng.choice(("red", "green", "blue")),
            "size": rng.randint(1, 48),
            "tags": [rng.choice(_WORDS) for _ in range(rng.randint(0, 3))],
            "label": rng.choice(_UNICODE_WORDS),
            "gift": rng.random() < 0.2,
        }
        return json.dumps(doc, ensure_ascii=False)
    if kind == "INET":
        return ".".join(str(rng.randint(1, 254)) for _ in range(4))
    if kind == "XML":
        return f"<note><to>{rng.choice(_WORDS)}</to><body>{rng.choice(_WORDS)}</body></note>"
    if kind == "INTERVAL":
        return f"{rng.randint(0, 40)} days {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00"
    if kind in ("CHAR", "NCHAR") and length is not None:
        if length == 2 and "country" in name:
            return rng.choice(_COUNTRIES)
        if length == 3 and "currency" in name:
            return rng.choice(_CURRENCIES)
        # Exactly `length` non-blank characters: PostgreSQL pads CHAR, MySQL strips trailing blanks.
        return _fixed_code(rng, length)
    if "email" in name:
        local = f"{rng.choice(_FIRST_NAMES + _WORDS)}.{rng.choice(_WORDS)}{rng.randint(1, 999)}"
        email = f"{local.lower()}@{rng.choice(_DOMAINS)}"
        if length is None or len(email) <= length:
            return email
    if "status" in name:
        fitting = [s for s in _STATUSES if length is None or len(s) <= length]
        if fitting:
            return rng.choice(fitting)
    if "sku" in name:
        return _clip(f"SKU-{rng.randint(0, 99_999):05d}-{_fixed_code(rng, 2)}", length)
    if name.endswith("name"):
        full = f"{rng.choice(_FIRST_NAMES)} {rng.choice(_LAST_NAMES)}"
        if rng.random() < 0.25:
            full += f" {rng.choice(_UNICODE_WORDS)}"
        return _clip(full, length)
    return _random_text(rng, min(length or 240, 240))


def _random_int(plan: FieldPlan, rng: random.Random) -> int:
    low, high = _INT_RANGES[plan.source.kind]
    name = plan.name.lower()
    if any(word in name for word in ("count", "quantity", "qty")):
        return rng.randint(max(low, 0), min(high, 10_000))
    if name.endswith("id"):
        return rng.randint(max(low, 1), min(high, 10**9))
    roll = rng.random()
    if roll < 0.1:
        return rng.choice((low, high))  # the extremes of the type
    if roll < 0.2:
        return rng.randint(low, high)
    return rng.randint(max(low, -1000), min(high, 100_000))


def _random_decimal(plan: FieldPlan, rng: random.Random) -> Decimal | float:
    precision, scale = plan.source.precision, plan.source.scale or 0
    if precision is None:  # unconstrained NUMERIC: any scale per value
        precision, scale = rng.randint(1, 30), rng.randint(0, 8)
        scale = min(scale, precision)
    digits = precision if rng.random() < 0.4 else rng.randint(1, precision)
    unscaled = rng.randrange(10 ** (digits - 1), 10**digits)
    if rng.random() < 0.25:
        unscaled = -unscaled
    elif rng.random() < 0.05:
        unscaled = 0
    value = Decimal(f"{unscaled}e-{scale}")
    return float(value) if plan.wire is Wire.DECIMAL_NUMBER else value


def _fraction_digits(plan: FieldPlan) -> int:
    return min(plan.source.precision or 0, _FRACTION_CAP.get(plan.wire, 6))


def _random_micros(plan: FieldPlan, rng: random.Random) -> int:
    digits = _fraction_digits(plan)
    return rng.randrange(10**digits) * int(10 ** (6 - digits))


def _random_instant(plan: FieldPlan, rng: random.Random) -> datetime:
    seconds = rng.randrange(_RANGE_SECONDS)
    return _RANGE_START + timedelta(seconds=seconds, microseconds=_random_micros(plan, rng))


def _random_epoch(plan: FieldPlan, rng: random.Random) -> int:
    instant = _RANGE_START + timedelta(seconds=rng.randrange(_RANGE_SECONDS))
    if plan.transform == "epoch_days_to_date":
        value = (instant.date() - EPOCH_DATE).days
    else:
        unit = _EPOCH_UNITS[plan.transform or "epoch_millis_to_timestamp"]
        micros = (instant - EPOCH) // _MICRO + rng.randrange(1_000_000)
        value = micros // unit
    low, high = _INT_RANGES["INT"] if plan.natural.name == "int" else _INT_RANGES["BIGINT"]
    return value if low <= value <= high else rng.randint(0, high)


def _random_value(plan: FieldPlan, rng: random.Random) -> object:
    kind, natural = plan.source.kind, plan.natural.name
    if plan.transform is not None:
        return _random_epoch(plan, rng)
    if natural == "boolean":
        return rng.random() < 0.5
    if kind in _INT_RANGES:
        return _random_int(plan, rng)
    if kind == "FLOAT":
        return _float32(round(rng.uniform(-10_000, 10_000), 3))
    if kind == "DOUBLE":
        return round(rng.uniform(-1e6, 1e6), 6)
    if kind == "DECIMAL":
        return _random_decimal(plan, rng)
    if kind == "DATE":
        return (_RANGE_START + timedelta(days=rng.randrange(_RANGE_SECONDS // 86_400))).date()
    if kind in ("DATETIME", "TIMESTAMP"):
        return _random_instant(plan, rng)
    if kind in ("TIMESTAMPTZ", "TIMESTAMPLTZ"):
        return _random_instant(plan, rng).replace(tzinfo=UTC)
    if kind in ("TIME", "TIMETZ"):
        # Debezium captures MySQL TIME correctly only within one day, so stay inside it.
        clock = time(rng.randrange(24), rng.randrange(60), rng.randrange(60))
        clock = clock.replace(microsecond=_random_micros(plan, rng))
        return clock.replace(tzinfo=UTC) if kind == "TIMETZ" else clock
    if natural == "binary":
        if kind == "BIT":
            bits = plan.source.length or 8
            raw = bytearray(rng.randbytes((bits + 7) // 8))
            raw[-1] &= (1 << (bits % 8 or 8)) - 1  # little-endian: unused high bits stay zero
            return bytes(raw)
        length = plan.source.length
        if kind == "BINARY" and length is not None:
            return rng.randbytes(length)
        return rng.randbytes(rng.randint(0, min(length or 64, 64)))
    return _random_string(plan, rng)


def _key_value(plan: FieldPlan, n: int) -> object:
    kind, natural = plan.source.kind, plan.natural.name
    if kind == "UBIGINT":
        return 2**63 + n  # above the signed range on purpose: exercises the unsigned wrap
    if kind == "YEAR":
        return 1901 + n % 255
    if kind in _INT_RANGES:
        return min(n + 1, _INT_RANGES[kind][1])
    if kind == "DECIMAL":
        scale = plan.source.scale or 0
        return Decimal(f"{(n + 1) * 10**scale}e-{scale}")
    if natural == "boolean":
        return n % 2 == 1
    if natural == "date":
        return _RANGE_START.date() + timedelta(days=n)
    if natural == "timestamp":
        return _RANGE_START + timedelta(minutes=n)
    if natural == "timestamptz":
        return (_RANGE_START + timedelta(minutes=n)).replace(tzinfo=UTC)
    if natural == "binary":
        return (n + 1).to_bytes(plan.source.length or 8, "big")
    if kind == "UUID":
        return str(uuid.UUID(int=n + 1))
    if kind in ("TIME", "TIMETZ"):
        return time((n // 3600) % 24, (n // 60) % 60, n % 60)
    length = plan.source.length
    if kind in ("CHAR", "NCHAR") and length is not None:
        return f"{n:0{length}d}"[-length:]
    return _clip(f"k{n:06d}", length)


def make_key(spec: TableSpec, n: int) -> dict[str, object]:
    """A deterministic primary key for entity ``n`` (n >= 0); distinct n give distinct keys.

    Composite keys read like order lines: (n // 4, n % 4 + 1) for the first two columns.
    """
    by_name = {p.name: p for p in plan_fields(spec)}
    plans = [by_name[k] for k in spec.primary_key]
    parts = [n] if len(plans) == 1 else [n // 4, n % 4] + [n] * (len(plans) - 2)
    return {p.name: _key_value(p, part) for p, part in zip(plans, parts, strict=True)}


def random_row(
    spec: TableSpec, rng: random.Random, key: Mapping[str, object] | None = None
) -> dict[str, object]:
    """A row of natural values valid for every column; ``key`` fixes the key columns."""
    row: dict[str, object] = {}
    fallback_key = make_key(spec, rng.randrange(1_000_000)) if key is None else {}
    for plan in plan_fields(spec):
        if key is not None and plan.name in key:
            row[plan.name] = key[plan.name]
        elif plan.key:
            row[plan.name] = fallback_key[plan.name]
        elif plan.nullable and rng.random() < 0.15:
            row[plan.name] = None
        else:
            row[plan.name] = _random_value(plan, rng)
    return row


# --- workload --------------------------------------------------------------------------------


def _toastable(plan: FieldPlan) -> bool:
    if plan.key:
        return False
    if plan.natural.name == "binary":
        return plan.source.kind != "BIT"
    return plan.source.kind in _TEXTUAL_KINDS and (plan.source.length or 1_000) >= 64


def workload(
    spec: TableSpec,
    rng: random.Random,
    *,
    keys: int,
    events: int,
    embed_schema: bool = False,
    markers: bool = True,
    key_changes: bool = False,
) -> list[KafkaRecord]:
    """A realistic mixed CDC stream of ``events`` change events over ``keys`` entities.

    Snapshot reads of half the keys come first; then creates, repeated updates of the same keys
    (some grouped into multi-row statements), deletes each followed by its tombstone, and
    re-inserts of deleted keys. PostgreSQL streams look like the default replica identity: update
    events carry no before image, delete events only the key, and unchanged large columns may
    arrive as the TOAST placeholder. With ``markers``, heartbeats and transaction BEGIN/END
    records around multi-row statements are interleaved (they do not count as events). With
    ``key_changes``, some updates change the primary key, sent as Debezium does: a delete of the
    old key, its tombstone and a create of the new key in one transaction (one event).
    """
    factory = DebeziumEventFactory(spec, embed_schema=embed_schema)
    plans = factory.plans
    postgres = spec.source.connector == "postgresql"
    key_rows = [make_key(spec, n) for n in range(keys)]
    live: dict[int, dict[str, object]] = {}
    deleted: list[int] = []
    unused = list(range(keys))
    out: list[KafkaRecord] = []

    for n in range(min(keys // 2, max(events // 4, 1), events)):
        unused.remove(n)
        live[n] = random_row(spec, rng, key_rows[n])
        out.append(factory.read(live[n]))
    count = len(out)

    def changed(n: int) -> tuple[dict[str, object], dict[str, object]]:
        """The stored row after an update, and the image the event carries."""
        before = live[n]
        fresh = random_row(spec, rng, key_rows[n])
        data = [p for p in plans if not p.key]
        picked = {p.name for p in rng.sample(data, k=min(len(data), rng.randint(1, 3)))}
        stored = {k: (fresh[k] if k in picked else v) for k, v in before.items()}
        image = dict(stored)
        if postgres:
            for plan in plans:
                toastable = _toastable(plan) and stored[plan.name] is not None
                if plan.name not in picked and toastable and rng.random() < 0.3:
                    image[plan.name] = TOAST  # unchanged out-of-line value: not sent
        return stored, image

    def key_only(n: int) -> dict[str, object]:
        return dict(key_rows[n]) if postgres else dict(live[n])

    while count < events:
        roll = rng.random()
        if markers and rng.random() < 0.03:
            out.append(factory.heartbeat())
        if roll < 0.22 and unused:
            n = unused.pop(rng.randrange(len(unused)))
            live[n] = random_row(spec, rng, key_rows[n])
            out.append(factory.create(live[n]))
            count += 1
        elif roll < 0.32 and deleted:
            n = deleted.pop(rng.randrange(len(deleted)))
            live[n] = random_row(spec, rng, key_rows[n])
            out.append(factory.create(live[n]))
            count += 1
        elif roll < 0.42 and len(live) > 1:
            n = rng.choice(sorted(live))
            out.append(factory.delete(key_only(n)))
            out.append(factory.tombstone(key_rows[n]))
            del live[n]
            deleted.append(n)
            count += 1
        elif roll < 0.5 and len(live) > 2:
            targets = rng.sample(sorted(live), k=min(len(live), rng.randint(2, 4), events - count))
            with factory.statement():
                if markers:
                    out.append(factory.transaction("BEGIN"))
                for n in targets:
                    stored, image = changed(n)
                    out.append(factory.update(None if postgres else live[n], image))
                    live[n] = stored
                if markers:
                    out.append(factory.transaction("END", event_count=len(targets)))
            count += len(targets)
        elif key_changes and roll < 0.54 and len(live) > 1 and unused:
            n = rng.choice(sorted(live))
            m = unused.pop(rng.randrange(len(unused)))
            moved = {**live[n], **key_rows[m]}
            with factory.statement():
                out.append(factory.delete(key_only(n)))
                out.append(factory.tombstone(key_rows[n]))
                out.append(factory.create(moved))
            live[m] = moved
            del live[n]
            deleted.append(n)
            count += 1
        elif live:
            n = rng.choice(sorted(live))
            stored, image = changed(n)
            out.append(factory.update(None if postgres else live[n], image))
            live[n] = stored
            count += 1
        elif unused or deleted:
            continue
        else:
            break
    return out


# --- Kafka -----------------------------------------------------------------------------------


def produce(
    records: Iterable[KafkaRecord],
    topic: str,
    bootstrap_servers: str,
    *,
    partitions_by_key: bool = True,
    timeout_s: float = 60.0,
) -> None:
    """Write records in order; raise ProduceError unless every one was acknowledged.

    By key, records are spread with Kafka Connect's (Java client's) murmur2 partitioner, so a key
    lands where Debezium would put it; otherwise everything goes to partition 0.
    """
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "partitioner": "murmur2_random",
        }
    )
    failures: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    sent = 0
    for record in records:
        while True:
            try:
                producer.produce(
                    topic,
                    value=record.value,
                    key=record.key,
                    partition=-1 if partitions_by_key else 0,  # -1: let the partitioner choose
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                producer.poll(0.5)  # local queue full: let deliveries drain
        sent += 1
        producer.poll(0)
    remaining = producer.flush(timeout_s)
    if remaining or failures:
        detail = "; ".join(failures[:5]) or f"{remaining} still queued after {timeout_s}s"
        raise ProduceError(
            f"{len(failures) + remaining} of {sent} records to {topic!r} were not delivered: "
            f"{detail}"
        )
