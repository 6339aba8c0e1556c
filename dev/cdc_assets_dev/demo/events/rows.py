"""Random rows of a table spec: values in each column's range, awkward text, keys by number."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, time, timedelta
from decimal import Decimal

from cdc_assets.schema.wire import FieldPlan, Wire, plan_fields
from cdc_assets.spec.models import TableSpec
from cdc_assets_dev.demo.events.connect_schemas import enum_values
from cdc_assets_dev.demo.events.values import EPOCH, EPOCH_DATE, MICRO, float32

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
TEXTUAL_KINDS = {"TEXT", "TINYTEXT", "MEDIUMTEXT", "LONGTEXT", "VARCHAR", "NVARCHAR", "JSON"}
TEXTUAL_KINDS |= {"JSONB", "XML"}
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
        allowed = enum_values(plan.source.text) or ["a"]
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
        micros = (instant - EPOCH) // MICRO + rng.randrange(1_000_000)
        value = micros // unit
    low, high = _INT_RANGES["INT"] if plan.natural.name == "int" else _INT_RANGES["BIGINT"]
    return value if low <= value <= high else rng.randint(0, high)


def _random_value(plan: FieldPlan, rng: random.Random) -> object:
    kind, natural = plan.source.kind, plan.natural.name
    if plan.transform is not None:
        return _random_epoch(plan, rng)
    if plan.element is not None:
        # PostgreSQL arrays: empty ones, and null elements now and then.
        element = plan.element
        return [
            None if rng.random() < 0.1 else _random_value(element, rng)
            for _ in range(rng.randint(0, 4))
        ]
    if natural == "boolean":
        return rng.random() < 0.5
    if kind in _INT_RANGES:
        return _random_int(plan, rng)
    if kind == "FLOAT":
        return float32(round(rng.uniform(-10_000, 10_000), 3))
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
