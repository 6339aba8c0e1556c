"""Row-for-row difference between a source table and its base mirror (pure).

Source rows come with source column names and the values the database holds; base rows with
sink names. Each source row is turned into the base row it should be through the spec's sink
mapping (renames, transforms, type overrides: ``cdc_assets.schema.sink_values``), values are
brought to one form per sink type (decimals at their scale, instants in UTC), and rows are
matched by primary key. Equal means same type and same value: ``True`` is not ``1`` and a naive
``datetime`` is not an aware one. Reading the rows is
``cdc_assets.pipeline.bootstrap.source_compare``'s job.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, InvalidOperation

from cdc_assets.schema.sink_values import to_sink
from cdc_assets.schema.types import SinkType
from cdc_assets.schema.wire import FieldPlan, plan_fields
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.protect import ProtectionKey, protect_document, protect_text, value_text

Row = Mapping[str, object]
Key = tuple[object, ...]

EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
_WALL_CLOCK = re.compile(r"^(\d{4,})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?$")
_DATE = re.compile(r"^(\d{4,})-(\d{2})-(\d{2})$")
_CLOCK = re.compile(r"^(-?)(\d{2,}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?$")
_SHOWN_CHARS = 120


# --- values read as text or numbers --------------------------------------------------------


def wall_clock(text: str) -> datetime:
    """``YYYY-MM-DD HH:MM:SS[.fraction]`` as a naive datetime (fraction cut to microseconds)."""
    match = _WALL_CLOCK.match(text.strip())
    if match is None:
        raise ValueError(f"not a date and time: {text!r}")
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    micros = int((match.group(7) or "").ljust(6, "0")[:6])
    return datetime(year, month, day, hour, minute, second, micros)


def calendar_date(text: str) -> date:
    match = _DATE.match(text.strip())
    if match is None:
        raise ValueError(f"not a date: {text!r}")
    return date(int(match.group(1)), int(match.group(2)), int(match.group(3)))


def clock_text(text: str) -> str:
    """A time of day (or MySQL duration) as the ledger writes it: ``HH:MM:SS.ffffff``."""
    match = _CLOCK.match(text.strip())
    if match is None:
        raise ValueError(f"not a time: {text!r}")
    sign, hours, minutes, seconds = match.group(1), match.group(2), match.group(3), match.group(4)
    fraction = (match.group(5) or "").ljust(6, "0")[:6]
    return f"{sign}{hours}:{minutes}:{seconds}.{fraction}"


def instant_from_micros(micros: int) -> datetime:
    """Microseconds since the epoch as an aware UTC datetime."""
    return EPOCH_UTC + timedelta(microseconds=int(micros))


def instant_from_seconds(seconds: Decimal | int) -> datetime:
    """Seconds since the epoch (with a fraction, e.g. MariaDB's UNIX_TIMESTAMP) in UTC."""
    micros = (Decimal(seconds) * 1_000_000).to_integral_value()
    return instant_from_micros(int(micros))


# --- one form per sink type --------------------------------------------------------------------


def normalize(sink: SinkType, value: object) -> object:
    """``value`` in the one form its sink type compares in; a value of the wrong kind is left as
    it is, so that it shows as a difference rather than being coerced into agreement."""
    if value is None:
        return None
    name = sink.name
    if sink.element is not None and isinstance(value, list | tuple):
        return [normalize(sink.element, v) for v in value]
    if sink.value is not None and isinstance(value, dict):
        return {k: normalize(sink.value, v) for k, v in value.items()}
    if sink.fields and isinstance(value, dict):
        return {n: normalize(t, value.get(n)) for n, t in sink.fields}
    if name == "decimal" and isinstance(value, Decimal | int) and not isinstance(value, bool):
        number = Decimal(value)
        try:
            scaled = number.quantize(Decimal(1).scaleb(-(sink.scale or 0)))
        except InvalidOperation:
            return number
        return scaled if scaled == number else number
    if name == "timestamptz" and isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC)
    if name == "boolean" and isinstance(value, int) and not isinstance(value, bool):
        return bool(value) if value in (0, 1) else value
    if name == "binary" and isinstance(value, bytearray | memoryview):
        return bytes(value)
    return value


def same(a: object, b: object) -> bool:
    """Equal in type and value (``True`` is not ``1``; naive and aware datetimes differ), element
    by element and field by field for nested values."""
    if a is None or b is None:
        return a is b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


# --- the diff ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ValueDifference:
    column: str
    source: object
    base: object


@dataclass(frozen=True)
class MirrorDiff:
    """How base differs from its source table, with a few examples of each difference."""

    table: str
    source_rows: int
    base_rows: int
    missing: int = 0  # keys in the source, not in base
    extra: int = 0  # keys in base, not in the source
    differing: int = 0  # keys in both whose values differ
    duplicated: int = 0  # keys base holds more than once
    by_column: dict[str, int] = field(default_factory=dict)
    missing_keys: list[Key] = field(default_factory=list)
    extra_keys: list[Key] = field(default_factory=list)
    duplicated_keys: list[Key] = field(default_factory=list)
    examples: list[tuple[Key, list[ValueDifference]]] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return not (self.missing or self.extra or self.differing or self.duplicated)

    def headline(self) -> str:
        counts = f"source {self.source_rows:,} rows, base {self.base_rows:,} rows"
        if self.equal:
            return f"{self.table}: {counts}: equal"
        parts = [f"{self.missing:,} missing from base", f"{self.extra:,} extra in base"]
        columns = ", ".join(f"{c} {n:,}" for c, n in sorted(self.by_column.items()))
        parts.append(f"{self.differing:,} differing" + (f" ({columns})" if columns else ""))
        if self.duplicated:
            parts.append(f"{self.duplicated:,} keys held twice in base")
        return f"{self.table}: {counts}: " + ", ".join(parts)

    def lines(self) -> list[str]:
        """The headline and the examples, one per line (for a terminal or a test failure)."""
        out = [self.headline()]
        for label, keys in (
            ("missing from base", self.missing_keys),
            ("extra in base", self.extra_keys),
            ("held twice in base", self.duplicated_keys),
        ):
            if keys:
                out.append(f"  {label}: " + ", ".join(_shown(k) for k in keys))
        for key, values in self.examples:
            shown = "; ".join(
                f"{v.column}: source {_shown(v.source)} base {_shown(v.base)}" for v in values
            )
            out.append(f"  {_shown(key)}: {shown}")
        return out

    def summary(self) -> str:
        return "\n".join(self.lines())


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def compared_plans(spec: TableSpec) -> list[FieldPlan]:
    """The columns a source still has: every spec column but the soft-dropped ones."""
    dropped = {c.name for c in spec.columns if c.dropped}
    return [p for p in plan_fields(spec) if p.name not in dropped]


def base_image(
    spec: TableSpec, source_row: Row, key: ProtectionKey | None = None
) -> dict[str, object]:
    """The base row a source row should be mirrored as: sink names, sink mapping, one form per
    sink type, protected columns protected (with ``key``, for hash and encrypt). A column the
    source row lacks is an error (compare spec columns only)."""
    out: dict[str, object] = {}
    for plan in compared_plans(spec):
        if plan.name not in source_row:
            raise ValueError(f"{spec.name}: the source row has no column {plan.name!r}")
        value = source_row[plan.name]
        if plan.protect is not None:
            natural = to_sink(replace(plan, sink=plan.natural, protect=None), value)
            text = None if natural is None else value_text(natural)
            out[plan.sink_name] = protect_text(plan.protect, text, key)
            continue
        if plan.protect_paths and plan.parses_document:
            # The document is protected as text, then read into its declared type.
            protected = protect_document(_text(value), plan.protect_paths, key)
            document = None if protected is None else json.dumps(protected)
            out[plan.sink_name] = normalize(plan.sink, to_sink(plan, document))
            continue
        if plan.protect_paths:
            # Compared parsed: Spark writes the rewritten document its own way.
            document = _text(to_sink(plan, value))
            out[plan.sink_name] = protect_document(document, plan.protect_paths, key)
            continue
        out[plan.sink_name] = normalize(plan.sink, to_sink(plan, value))
    return out


def base_values(spec: TableSpec, base_row: Row) -> dict[str, object]:
    """A base row's spec columns in one form per sink type (pipeline columns dropped)."""
    out: dict[str, object] = {}
    for plan in compared_plans(spec):
        if plan.sink_name not in base_row:
            raise ValueError(f"{spec.name}: the base row has no column {plan.sink_name!r}")
        value = base_row[plan.sink_name]
        if plan.protect_paths and not plan.parses_document:
            text = _text(value)
            out[plan.sink_name] = None if text is None else _parsed(text)
            continue
        out[plan.sink_name] = normalize(plan.sink, value)
    return out


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _parsed(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return text  # shown as a difference, not hidden


def _key(spec: TableSpec, row: Mapping[str, object]) -> Key:
    return tuple(row[c.sink_name] for c in spec.key_columns)


def _sorted(keys: Iterable[Key]) -> list[Key]:
    """Keys in their natural order (numbers as numbers), by text if they do not compare."""
    listed = list(keys)
    try:
        return sorted(listed)
    except TypeError:
        return sorted(listed, key=repr)


def diff_mirror(
    spec: TableSpec,
    source_rows: Iterable[Row],
    base_rows: Iterable[Row],
    *,
    examples: int = 5,
    protection_key: ProtectionKey | None = None,
) -> MirrorDiff:
    """Compare a source table (source names and values) with base (sink names and values).
    Protected columns compare (and show) protected forms only: ``protection_key`` protects the
    source's."""
    expected: dict[Key, dict[str, object]] = {}
    source_count = 0
    for row in source_rows:
        image = base_image(spec, row, protection_key)
        expected[_key(spec, image)] = image
        source_count += 1
    actual: dict[Key, dict[str, object]] = {}
    held: Counter[Key] = Counter()
    for row in base_rows:
        stored = base_values(spec, row)
        key = _key(spec, stored)
        held[key] += 1
        actual[key] = stored
    duplicated = _sorted(k for k, n in held.items() if n > 1)
    missing = _sorted(set(expected) - set(actual))
    extra = _sorted(set(actual) - set(expected))
    by_column: Counter[str] = Counter()
    differing: list[tuple[Key, list[ValueDifference]]] = []
    columns = [p.sink_name for p in compared_plans(spec)]
    for key in _sorted(set(expected) & set(actual)):
        want, have = expected[key], actual[key]
        values = [
            ValueDifference(c, want[c], have[c]) for c in columns if not same(want[c], have[c])
        ]
        if values:
            differing.append((key, values))
            by_column.update(v.column for v in values)
    return MirrorDiff(
        table=spec.name,
        source_rows=source_count,
        base_rows=sum(held.values()),
        missing=len(missing),
        extra=len(extra),
        differing=len(differing),
        duplicated=len(duplicated),
        by_column=dict(by_column),
        missing_keys=missing[:examples],
        extra_keys=extra[:examples],
        duplicated_keys=duplicated[:examples],
        examples=differing[:examples],
    )


def summarize(diffs: Sequence[MirrorDiff]) -> str:
    """Several tables' diffs as one report."""
    return "\n".join(line for d in diffs for line in d.lines())
