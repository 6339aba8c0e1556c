"""What the ingest must do with one Kafka record, decided in plain Python from the spec alone.

Written apart from the ingest (no cdc_assets.sql or cdc_assets.pipeline) so the two can be compared.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Context, Decimal, InvalidOperation, localcontext
from typing import Literal

from cdc_assets.schema.sink_values import plain, to_sink
from cdc_assets.schema.wire import TOAST_PLACEHOLDER, FieldPlan, Wire, plan_fields
from cdc_assets.spec.models import TableSpec
from cdc_assets_dev.demo.events import KafkaRecord

Status = Literal["ledger", "dead", "skip"]
Coordinates = tuple[int, int, datetime, bytes | None, bytes | None]

CHANGE_OPS = ("c", "u", "d", "r", "t")
MYSQL_FAMILY = ("mysql", "mariadb", "tidb")
LENGTH_CHECKED_KINDS = ("CHAR", "NCHAR", "VARCHAR", "NVARCHAR")
EPOCH = datetime(1970, 1, 1)
EPOCH_UTC = EPOCH.replace(tzinfo=UTC)
EPOCH_DATE = date(1970, 1, 1)
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
FLOAT32_MAX = 3.4028234663852886e38
_BIG = Context(prec=400)  # exact arithmetic for any decimal a wire value can carry

_ZONED_RE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?"
    r"(Z|[+-]\d{2}:?\d{2}(?::?\d{2})?)?$"
)
_DATE_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})(Z|[+-]\d{2}:?\d{2})?$")
_HEX_RE = re.compile(r"^(?:[0-9a-fA-F]{2})*$")
_URLSAFE_RE = re.compile(r"^[A-Za-z0-9_-]*={0,2}$")


@dataclass(frozen=True)
class Outcome:
    """The verdict on one record: where it goes, why, and the ledger row it must become."""

    status: Status
    stage: str | None
    reason: str
    row: dict[str, object] | None = None


def skip(reason: str) -> Outcome:
    return Outcome("skip", None, reason)


def dead(stage: str, reason: str) -> Outcome:
    return Outcome("dead", stage, reason)


class UndecodableError(Exception):
    """A raw JSON value does not decode under its column's wire encoding."""


class DoesNotFitError(Exception):
    """A decoded value is outside what its source column type can hold."""


# --- value decoding --------------------------------------------------------------------------


_INT_TEXT = re.compile(r"^[+-]?\d+$")
_NUMBER_TEXT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def _json_int(raw: object, bounds: tuple[int, int]) -> int:
    # Values are read from their JSON text, so "17" (a JSON string) is the integer 17.
    if isinstance(raw, str) and _INT_TEXT.match(raw.strip()):
        raw = int(raw)
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise UndecodableError
    if not bounds[0] <= raw <= bounds[1]:
        raise UndecodableError
    return raw


def _json_number(raw: object) -> float:
    if isinstance(raw, str) and _NUMBER_TEXT.match(raw.strip()):
        raw = float(raw)
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise UndecodableError
    try:
        return float(raw)
    except OverflowError:
        raise UndecodableError from None


def _json_str(raw: object) -> str:
    if not isinstance(raw, str):
        raise UndecodableError
    return raw


def _base64(raw: object) -> bytes:
    try:
        return base64.b64decode(_json_str(raw), validate=True)
    except (binascii.Error, ValueError):
        raise UndecodableError from None


def _base64_url(raw: object) -> bytes:
    text = _json_str(raw)
    if not _URLSAFE_RE.match(text):
        raise UndecodableError
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise UndecodableError from None


def _hex(raw: object) -> bytes:
    text = _json_str(raw)
    if not _HEX_RE.match(text):
        raise UndecodableError
    return bytes.fromhex(text)


def _unscaled_decimal(raw_bytes: bytes, scale: int) -> Decimal:
    if not raw_bytes:
        raise UndecodableError  # Java's BigInteger rejects a zero-length magnitude
    unscaled = int.from_bytes(raw_bytes, "big", signed=True)
    return Decimal(f"{unscaled}e{-scale}")


def _fraction_micros(text: str | None) -> int:
    return int((text or "").ljust(6, "0")[:6])


def _offset(text: str | None) -> timedelta:
    if text is None or text == "Z":
        return timedelta(0)
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    hours, minutes, seconds = int(digits[:2]), int(digits[2:4]), int(digits[4:6] or 0)
    return sign * timedelta(hours=hours, minutes=minutes, seconds=seconds)


def parse_instant(text: str, *, zone_required: bool) -> datetime:
    """An ISO-8601 date-time as an aware UTC datetime; a value without a zone is taken as UTC."""
    match = _ZONED_RE.match(text)
    if match is None or (zone_required and match.group(8) is None):
        raise UndecodableError
    year, month, day, hour, minute = (int(match.group(i)) for i in range(1, 6))
    second = int(match.group(6) or 0)
    try:
        local = datetime(year, month, day, hour, minute, second, _fraction_micros(match.group(7)))
        return (local - _offset(match.group(8))).replace(tzinfo=UTC)
    except (ValueError, OverflowError):
        raise UndecodableError from None


def _parse_date(text: str) -> date:
    match = _DATE_RE.match(text)
    if match is None:
        raise UndecodableError
    try:
        return date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
    except ValueError:
        raise UndecodableError from None


def _since_epoch(units: int, per_second: int) -> datetime:
    micros = units * 1_000_000 // per_second
    try:
        return EPOCH + timedelta(microseconds=micros)
    except OverflowError:
        raise UndecodableError from None


def time_text(micros: int) -> str:
    """``HH:MM:SS.ffffff`` from units since midnight; hours may pass 23, negatives get a sign."""
    sign = "-" if micros < 0 else ""
    seconds, fraction = divmod(abs(micros), 1_000_000)
    hours, rest = divmod(seconds, 3600)
    return f"{sign}{hours:02d}:{rest // 60:02d}:{rest % 60:02d}.{fraction:06d}"


def _element_text(value: object) -> object:
    """An array element as the ingest reads it: a JSON string as itself, any other JSON value
    as its text (so a number in a text array is that number's text)."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


def decode_natural(plan: FieldPlan, raw: object) -> object:
    """A non-null raw JSON value as its natural Python value; raises UndecodableError."""
    wire, natural = plan.wire, plan.natural.name
    if wire is Wire.JSON_ARRAY:
        assert plan.element is not None
        if not isinstance(raw, list):
            raise UndecodableError
        texts = [_element_text(e) for e in raw]
        return [None if t is None else decode_natural(plan.element, t) for t in texts]
    if wire in (Wire.INT, Wire.LONG):
        return _json_int(raw, INT32 if natural == "int" else INT64)
    if wire is Wire.UNSIGNED_LONG:
        signed = _json_int(raw, INT64)
        return Decimal(signed + 2**64 if signed < 0 else signed)
    if wire is Wire.FLOAT:
        number = _json_number(raw)
        if abs(number) > FLOAT32_MAX and abs(number) != float("inf"):
            raise UndecodableError
        return number
    if wire in (Wire.DOUBLE, Wire.DECIMAL_NUMBER):
        return _json_number(raw)
    if raw in ("true", "false"):  # read from the JSON text: the string "true" is true
        raw = raw == "true"
    if wire is Wire.BOOLEAN:
        if not isinstance(raw, bool):
            raise UndecodableError
        return raw
    if wire is Wire.BOOLEAN_INT:
        # Snapshots send MySQL BOOLEAN as TINYINT(1) (0/1), a table created while streaming as
        # true/false; both read the same, and any non-zero TINYINT is true as in MySQL.
        if isinstance(raw, bool):
            return raw
        return _json_int(raw, (-128, 255)) != 0
    if wire is Wire.STRING:
        return _json_str(raw)
    if wire is Wire.DECIMAL_BYTES:
        value = _unscaled_decimal(_base64(raw), plan.scale or 0)
        return plain(value) if natural == "string" else value
    if wire is Wire.DECIMAL_VARIABLE:
        if not isinstance(raw, dict):
            raise UndecodableError
        scale = _json_int(raw.get("scale"), INT32)
        value = _unscaled_decimal(_base64(raw.get("value")), scale)
        return plain(value) if natural == "string" else value
    if wire is Wire.DECIMAL_STRING:
        text = _json_str(raw)
        try:
            value = Decimal(text)
        except InvalidOperation:
            raise UndecodableError from None
        if natural == "string":
            return text
        if not value.is_finite():
            raise UndecodableError
        return value
    if wire is Wire.DATE_DAYS:
        try:
            return EPOCH_DATE + timedelta(days=_json_int(raw, INT32))
        except OverflowError:
            raise UndecodableError from None
    if wire is Wire.TIMESTAMP_MILLIS:
        return _since_epoch(_json_int(raw, INT64), 1_000)
    if wire is Wire.TIMESTAMP_MICROS:
        return _since_epoch(_json_int(raw, INT64), 1_000_000)
    if wire is Wire.TIMESTAMP_NANOS:
        return _since_epoch(_json_int(raw, INT64), 1_000_000_000)
    if wire is Wire.ZONED_TIMESTAMP:
        return parse_instant(_json_str(raw), zone_required=True)
    if wire is Wire.ISO_STRING:
        text = _json_str(raw)
        if natural == "date":
            return _parse_date(text)
        if natural == "timestamp":
            return parse_instant(text, zone_required=False).replace(tzinfo=None)
        if natural == "timestamptz":
            return parse_instant(text, zone_required=False)
        return text
    if wire is Wire.TIME_MILLIS:
        return time_text(_json_int(raw, INT32) * 1_000)
    if wire is Wire.TIME_MICROS:
        return time_text(_json_int(raw, INT64))
    if wire is Wire.TIME_NANOS:
        return time_text(_json_int(raw, INT64) // 1_000)
    if wire is Wire.BYTES_BASE64:
        return _base64(raw)
    if wire is Wire.BYTES_BASE64_URL:
        return _base64_url(raw)
    if wire is Wire.BYTES_HEX:
        return _hex(raw)
    raise AssertionError(f"unhandled wire encoding {wire}")


def check_fits(plan: FieldPlan, value: object) -> None:
    """Raise DoesNotFitError when a decoded value exceeds its column's declared length or digits."""
    source = plan.source
    length = source.length if source.kind in LENGTH_CHECKED_KINDS else None
    if length is not None and isinstance(value, str) and len(value) > length:
        raise DoesNotFitError
    if plan.natural.name == "decimal" and isinstance(value, Decimal):
        precision, scale = plan.natural.precision or 38, plan.natural.scale or 0
        with localcontext(_BIG):
            if value != value.quantize(Decimal(f"1e{-scale}")):
                raise DoesNotFitError
            if abs(value) >= Decimal(10) ** (precision - scale):
                raise DoesNotFitError


# --- envelope --------------------------------------------------------------------------------


def is_toast(plan: FieldPlan, raw: object) -> bool:
    """True when a raw value is Debezium's placeholder for a value it did not send."""
    if raw == TOAST_PLACEHOLDER:
        return True
    if plan.wire is Wire.JSON_ARRAY:
        return raw == [TOAST_PLACEHOLDER]
    placeholder = TOAST_PLACEHOLDER.encode("utf-8")
    if plan.wire is Wire.BYTES_BASE64:
        return raw == base64.b64encode(placeholder).decode("ascii")
    if plan.wire is Wire.BYTES_BASE64_URL:
        return raw == base64.urlsafe_b64encode(placeholder).decode("ascii")
    if plan.wire is Wire.BYTES_HEX:
        return isinstance(raw, str) and raw.lower() == placeholder.hex()
    return False


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _millis_instant(value: object) -> datetime | None:
    millis = _int_or_none(value)
    if millis is None:
        return None
    try:
        return EPOCH_UTC + timedelta(milliseconds=millis)
    except OverflowError:
        return None


def source_sequence(connector: str, source: dict[str, object]) -> tuple[int | None, ...]:
    """(_seq_major, _seq_minor, _seq_row): binlog (file number, pos, row) or (lsn, 0, 0)."""
    if connector in MYSQL_FAMILY:
        file_name = source.get("file")
        if not isinstance(file_name, str) or not file_name:
            return (None, None, None)
        suffix = file_name.rsplit(".", 1)[-1]
        major = int(suffix) if suffix.isdigit() else None
        return (major, _int_or_none(source.get("pos")), _int_or_none(source.get("row")))
    lsn = _int_or_none(source.get("lsn"))
    return (lsn, 0, 0) if lsn is not None else (None, None, None)


def _image_columns(
    plans: Sequence[FieldPlan], op: str, image: dict[str, object]
) -> Outcome | tuple[dict[str, object], list[str]]:
    """The sink values of one image, or the dead-letter outcome of its first bad column."""
    # a renamed column's value sits under a former name in events older than the rename
    raws = {
        p.name: next((image[n] for n in (p.name, *p.aliases) if image.get(n) is not None), None)
        for p in plans
    }
    unavailable = {p.name for p in plans if is_toast(p, raws[p.name])}
    for plan in plans:
        if plan.key and (raws[plan.name] is None or plan.name in unavailable):
            return dead("convert", f"primary key column {plan.name!r} is null")
    values: dict[str, object] = {}
    for plan in plans:
        raw = raws[plan.name]
        if plan.name in unavailable or raw is None:
            if raw is None and op != "d" and not plan.nullable and not plan.key:
                return dead("convert", f"column {plan.name!r} is null but declared not nullable")
            values[plan.sink_name] = None
            continue
        try:
            natural = decode_natural(plan, raw)
        except UndecodableError:
            return dead("convert", f"column {plan.name!r}: cannot decode as {plan.decode_as}")
        try:
            check_fits(plan, natural)
        except DoesNotFitError:
            return dead("convert", f"column {plan.name!r}: value does not fit {plan.source.text}")
        if plan.parses_document:
            try:
                values[plan.sink_name] = to_sink(plan, natural)
            except ValueError:  # not JSON, or a document that does not fit the declared type
                return dead("convert", f"column {plan.name!r}: cannot decode as {plan.decode_as}")
            continue
        try:
            values[plan.sink_name] = to_sink(plan, natural)
        except OverflowError:
            return dead("convert", f"column {plan.name!r}: cannot apply {plan.transform}")
    return values, [p.sink_name for p in plans if p.name in unavailable]


def expected_outcome(
    spec: TableSpec,
    partition: int,
    offset: int,
    timestamp: datetime,
    key: bytes | None,
    value: bytes | None,
) -> Outcome:
    """What the ingest must do with one record of the spec's topic (rules apply in order)."""
    del key  # the value alone decides; the key only routes the record
    if value is None:
        return skip("tombstone")
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return dead("decode", "value is not valid UTF-8")
    try:
        parsed = json.loads(text)
    except ValueError:
        return dead("decode", "value is not a JSON object")
    if not isinstance(parsed, dict):
        return dead("decode", "value is not a JSON object")
    payload = parsed.get("payload")
    envelope: dict[str, object] = payload if isinstance(payload, dict) else parsed

    if "ddl" in envelope or "tableChanges" in envelope:
        return skip("schema change event")
    if envelope.get("status") in ("BEGIN", "END"):
        return skip("transaction metadata")
    op = envelope.get("op")
    if op is None:
        if "ts_ms" in envelope and not {"before", "after", "source"} & envelope.keys():
            return skip("heartbeat")
        return dead("envelope", "not a Debezium change event: no op field")
    if op == "m":
        return skip("logical decoding message")
    if op not in CHANGE_OPS:
        return dead("envelope", f"unknown op code {op!r}")
    source = envelope.get("source")
    source = source if isinstance(source, dict) else {}
    table = source.get("table")
    if table is not None and table != spec.source.table:
        return dead("envelope", f"event for table {table!r}, expected {spec.source.table!r}")
    before, after = envelope.get("before"), envelope.get("after")
    before = before if isinstance(before, dict) else None
    after = after if isinstance(after, dict) else None
    if op in ("c", "u", "r") and after is None:
        return dead("envelope", f"op {op!r} event has no after image")
    if op == "d" and before is None:
        return dead("envelope", "op 'd' event has no before image")

    plans = plan_fields(spec)
    image = None if op == "t" else (before if op == "d" else after)
    if image is None:
        values: dict[str, object] = {p.sink_name: None for p in plans}
        unavailable: list[str] = []
    else:
        decoded = _image_columns(plans, op, image)
        if isinstance(decoded, Outcome):
            return decoded
        values, unavailable = decoded

    kafka_ts = timestamp if timestamp.tzinfo else timestamp.replace(tzinfo=UTC)
    kafka_ts = kafka_ts.astimezone(UTC)
    seq = source_sequence(spec.source.connector, source)
    row: dict[str, object] = {
        **values,
        "_op": op,
        "_source_ts": _millis_instant(source.get("ts_ms"))
        or _millis_instant(envelope.get("ts_ms")),
        "_seq_major": seq[0],
        "_seq_minor": seq[1],
        "_seq_row": seq[2],
        "_kafka_partition": partition,
        "_kafka_offset": offset,
        "_kafka_ts": kafka_ts,
        "_row_json": image,
        "_before_json": before,
        "_unavailable": ",".join(unavailable) or None,
        "dt": kafka_ts.strftime("%Y-%m-%d"),
        "hr": kafka_ts.hour,
    }
    if spec.consistency is not None:
        block = envelope.get("transaction")
        block = block if isinstance(block, dict) else {}
        row["_txn_id"] = block.get("id")
        row["_txn_order"] = block.get("data_collection_order")
    return Outcome("ledger", None, "ok", row)


def replay(spec: TableSpec, records: Iterable[Coordinates]) -> list[Outcome]:
    """The outcome of each (partition, offset, timestamp, key, value) record, in order."""
    return [expected_outcome(spec, *record) for record in records]


def assign_coordinates(
    records: Sequence[KafkaRecord],
    *,
    partitions: int = 1,
    start: datetime = datetime(2026, 1, 1, 0, 59, 30, tzinfo=UTC),
    step: timedelta = timedelta(milliseconds=250),
) -> list[Coordinates]:
    """Kafka coordinates as a keyed producer would give them: same key, same partition."""
    next_offset = [0] * partitions
    out: list[Coordinates] = []
    for i, record in enumerate(records):
        partition = 0 if record.key is None else zlib.crc32(record.key) % partitions
        out.append((partition, next_offset[partition], start + i * step, record.key, record.value))
        next_offset[partition] += 1
    return out
