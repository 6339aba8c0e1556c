"""Which columns a row decoded under an older spec version may lack: the columns a catch-up
backfill recovers from the ledger's row images (``pipeline.evolution.catch_up``). Pure: specs in,
names out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from cdc_assets.schema.wire import FieldPlan, Wire, plan_column
from cdc_assets.spec.models import TableSpec


def changed_columns(old: TableSpec, new: TableSpec) -> list[str]:
    """Sink names of ``new``'s live columns that a row decoded under ``old`` may hold wrong:
    added since (an id ``old`` does not know: null in the row), renamed at the source (``old``
    looked its value up under the former name: null in the row, or a dead letter when the column
    is NOT NULL), or whose source type, sink type or transform changed (a widened value ``old``
    refused into the dead letters, a longer varchar). Soft-dropped columns are left alone: they
    stay null for new rows anyway."""
    before = {c.id: c for c in old.columns}
    connector = new.source.connector
    out = []
    for col in new.columns:
        if col.dropped:
            continue
        prior = before.get(col.id)
        if (
            prior is None
            or prior.name != col.name
            or prior.type != col.type
            or prior.sink_type(old.source.connector) != col.sink_type(connector)
            or prior.sink.transform != col.sink.transform
        ):
            out.append(col.sink_name)
    return out


def reencoded_columns(old: TableSpec, new: TableSpec) -> list[str]:
    """Sink names of ``new``'s live columns whose values Debezium sends in another encoding than
    under ``old`` although both read them (``datetime(3)`` -> ``datetime(6)``: epoch millis ->
    micros). A row image does not say which encoding wrote it, so an image from before the
    source's change must not be decoded with the new one: a backfill re-decodes such a column
    only in images after the change's source position."""
    before = {c.id: c for c in old.columns}
    out = []
    for col in new.columns:
        prior = before.get(col.id)
        if col.dropped or prior is None or prior.dropped:
            continue
        if reencoded(plan_column(old, prior), plan_column(new, col)):
            out.append(col.sink_name)
    return out


# Encodings of one kind of value in different units: the same number is another value in each.
_UNITS = (
    {Wire.TIMESTAMP_MILLIS, Wire.TIMESTAMP_MICROS, Wire.TIMESTAMP_NANOS},
    {Wire.TIME_MILLIS, Wire.TIME_MICROS, Wire.TIME_NANOS},
)


def reencoded(was: FieldPlan, now: FieldPlan) -> bool:
    """Whether the same raw value means another value under ``now`` than under ``was``: a
    temporal unit changed (millis -> micros), a decimal's unscaled bytes got another scale, or
    a decimal became text.
    (An int read as a bigint is the same number.)"""
    if (was.wire, now.wire) == (Wire.DECIMAL_BYTES, Wire.STRING):
        return True  # text that is valid base64 ("1234") reads as unscaled bytes
    if was.wire != now.wire:
        return any(was.wire in unit and now.wire in unit for unit in _UNITS)
    return was.wire is Wire.DECIMAL_BYTES and was.scale != now.scale


def value_columns(spec: TableSpec) -> list[str]:
    """Every live non-key column: what to recover when the older version itself is unknown."""
    keys = set(spec.primary_key)
    return [c.sink_name for c in spec.columns if not c.dropped and c.name not in keys]


def dead_letter_reasons(old: TableSpec | None, new: TableSpec, columns: list[str]) -> list[str]:
    """Texts that pick, by reason, the dead letters a backfill of ``columns`` (sink names of
    ``new``) should replay: a value ``old``'s narrower type refused (``column 'x': ...``), and,
    for a column renamed at the source since ``old``, every letter naming its former name (a NOT
    NULL column looked up under that name was missing: ``column 'x' is null ...``). Columns
    ``new`` soft-dropped or dropped that ``old`` declared NOT NULL likewise: their letters were
    refused for a value the source no longer sends."""
    before = {c.id: c for c in old.columns} if old is not None else {}
    wanted = set(columns)
    out: list[str] = []
    for col in new.columns:
        prior = before.get(col.id)
        if col.sink_name in wanted:
            out.append(f"column {col.name!r}:")
            if prior is not None and prior.name != col.name:
                out.append(f"column {prior.name!r}")
        elif col.dropped and prior is not None and not prior.dropped and not prior.nullable:
            out.append(f"column {prior.name!r} is null but declared not nullable")
    if old is not None:
        kept = {c.id for c in new.columns}
        out += [
            f"column {c.name!r} is null but declared not nullable"
            for c in old.columns
            if c.id not in kept and not c.nullable and c.name not in old.primary_key
        ]
    return list(dict.fromkeys(out))


# A convert-stage reason that names a value the spec's column refused (see `sql.decode`):
# ``column 'x': value does not fit int``, ``column 'x': cannot decode as bigint`` and
# ``column 'x' is null but declared not nullable``. A transform that failed is not one.
_REFUSED = re.compile(
    r"^column (?P<q>['\"])(?P<name>.*?)(?P=q)"
    r"(?:: value does not fit |: cannot decode as | is null but declared not nullable)"
)


def refused_column(reason: str) -> str | None:
    """The source column whose type or nullability refused the value, when a dead letter's
    ``reason`` says so: a value the source database stored that the spec cannot hold (the
    source's type is wider, another type, or nullable now: an evolution would take it)."""
    match = _REFUSED.match(reason)
    return match.group("name") if match else None


# Ledger table properties: the source position of the change after which a column's row images
# are in its current encoding (`reencoded_columns`), one per column, for the checks that decode
# the images again (`pipeline.health.image_mismatches`).
REENCODED_PROPERTY_PREFIX = "cdc.reencoded-after."


def reencoded_positions(properties: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """Column (sink name) -> the source position its current encoding starts after, from a
    ledger table's properties; a value that is not a JSON object is left out."""
    out: dict[str, dict[str, Any]] = {}
    for key, value in properties.items():
        if not key.startswith(REENCODED_PROPERTY_PREFIX):
            continue
        try:
            position = json.loads(value)
        except ValueError:
            continue
        if isinstance(position, dict):
            out[key[len(REENCODED_PROPERTY_PREFIX) :]] = position
    return out
