"""Values in Debezium's JSON wire encoding for each field plan, and what the generator's
modules share (constants, `KafkaRecord`).
"""

from __future__ import annotations

import base64
import json
import math
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal

from cdc_assets.schema.wire import TOAST_PLACEHOLDER, FieldPlan, Wire

TOAST = TOAST_PLACEHOLDER
DEFAULT_START_TS_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
DEBEZIUM_VERSION = "2.7.3.Final"
# Small on purpose: a demo stream of a few hundred events then crosses binlog files.
BINLOG_FILE_BYTES = 65_536
MYSQL_FAMILY = ("mysql", "mariadb", "tidb")

EPOCH = datetime(1970, 1, 1)
EPOCH_DATE = date(1970, 1, 1)
MICRO = timedelta(microseconds=1)
FIRST_BINLOG_POS = 157  # after the format description and previous-GTIDs events
MYSQL_SERVER_ID = 223344

Row = Mapping[str, object]


@dataclass
class KafkaRecord:
    """One Kafka record. ``row`` is the natural image it was built from (never sent to Kafka)."""

    key: bytes | None
    value: bytes | None
    row: dict[str, object] | None = field(default=None, compare=False, repr=False)


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
    return (_utc_naive(_as_datetime(value)) - EPOCH) // MICRO


def _time_micros(value: object) -> int:
    if isinstance(value, time):
        seconds = (value.hour * 60 + value.minute) * 60 + value.second
        return seconds * 1_000_000 + value.microsecond
    if isinstance(value, timedelta):
        return value // MICRO
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


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def float32(value: float) -> float:
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
    return {"scale": scale, "value": b64(_twos_complement(_unscaled(dec, scale)))}


def _encode_unsigned(value: object) -> int:
    v = _as_int(value)
    return v - 2**64 if v >= 2**63 else v


_Encoder = Callable[[FieldPlan, object], object]
_ENCODERS: dict[Wire, _Encoder] = {
    Wire.INT: lambda p, v: _as_int(v),
    Wire.LONG: lambda p, v: _as_int(v),
    Wire.UNSIGNED_LONG: lambda p, v: _encode_unsigned(v),
    Wire.FLOAT: lambda p, v: float32(_as_float(v)),
    Wire.DOUBLE: lambda p, v: _as_float(v),
    Wire.BOOLEAN: lambda p, v: bool(v),
    Wire.BOOLEAN_INT: lambda p, v: 1 if v else 0,
    Wire.STRING: lambda p, v: _json_text(v),
    Wire.DECIMAL_BYTES: lambda p, v: b64(_twos_complement(_unscaled(_as_decimal(v), p.scale or 0))),
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
    Wire.BYTES_BASE64: lambda p, v: b64(_as_bytes(v)),
    Wire.BYTES_BASE64_URL: lambda p, v: base64.urlsafe_b64encode(_as_bytes(v)).decode("ascii"),
    Wire.BYTES_HEX: lambda p, v: _as_bytes(v).hex(),
}


def toast_wire_value(wire: Wire) -> str:
    """How Debezium sends the unavailable-value placeholder for a column of this encoding."""
    raw = TOAST.encode("utf-8")
    if wire is Wire.BYTES_BASE64:
        return b64(raw)
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
        # An unchanged TOASTed array arrives as an array of the placeholder.
        return [TOAST] if plan.wire is Wire.JSON_ARRAY else toast_wire_value(plan.wire)
    if plan.wire is Wire.JSON_ARRAY:
        assert plan.element is not None
        assert isinstance(value, list | tuple)
        return [encode_value(plan.element, v, connector=connector) for v in value]
    if plan.wire is Wire.ZONED_TIMESTAMP:
        return _iso_datetime(_as_datetime(value), _zoned_width(plan, connector))
    if plan.wire is Wire.ISO_STRING:
        return _encode_iso(plan, value, connector)
    return _ENCODERS[plan.wire](plan, value)
