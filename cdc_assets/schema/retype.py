"""How the values written before a type change Iceberg cannot make reach the new column (pure;
see `schema.changes.RetireColumn`).

The evolution keeps the old column and adds a new one for the source field in its new type; a
backfill then fills the new column for the ledger rows written before. Two ways:

- **From the row image.** Where an old raw value reads as itself under the new type (any value
  sent as its text into a string, a string parsed into a number, an int into a double), every
  image is decoded with the new type, whichever type wrote it.
- **From the old column's value.** Where the raw value would read as another value under the new
  type, or where reading it anew would round (a decimal's scale or precision; a timestamp with
  or without a zone), the rows written before the source's change take the old column's value,
  converted exactly or counted as not converting, and only the rows after the change are decoded
  from their images. The change's source position tells the two apart. Without it, a row whose
  old value was decoded under the old encoding may have been read wrong (a decimal's unscaled
  bytes at the old scale) and is counted rather than converted; where the old decoding refused
  the new encoding outright (epoch numbers against zoned strings), those rows became dead
  letters and every ledger row is from before the change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cdc_assets.schema.recover import reencoded
from cdc_assets.schema.types import SinkType
from cdc_assets.schema.wire import Wire, plan_column
from cdc_assets.spec.models import TableSpec

_TEXT_WIRES = (
    Wire.INT, Wire.LONG, Wire.FLOAT, Wire.DOUBLE, Wire.BOOLEAN, Wire.STRING,
    Wire.DECIMAL_STRING, Wire.DECIMAL_NUMBER,
)  # fmt: skip
# Wire pairs whose old raw values the new type reads as the same values.
_IMAGE_READABLE = {(old, Wire.STRING) for old in _TEXT_WIRES} | {
    (Wire.STRING, Wire.INT),
    (Wire.STRING, Wire.LONG),
    (Wire.STRING, Wire.DOUBLE),
    (Wire.INT, Wire.DOUBLE),
}
_TIMESTAMPS = frozenset({"timestamp", "timestamptz"})


def image_readable(old: Wire, new: Wire) -> bool:
    """Whether every old raw value of a field reads as itself under the new encoding."""
    return (old, new) in _IMAGE_READABLE


def value_converts(old: SinkType, new: SinkType) -> bool:
    """Whether an old column's stored values convert exactly, or are refused, into the new
    type: a decimal into another decimal (exact when the value fits the new scale and
    precision) or into its text, a timestamp without a zone into one with a zone and back (the
    wall clock read as UTC, the zone Debezium reads DATETIME values in)."""
    if old.name == new.name == "decimal":
        return old != new
    if (old.name, new.name) == ("decimal", "string"):
        return True  # its text, every digit of the scale kept, as the source's cast writes it
    return {old.name, new.name} == _TIMESTAMPS


@dataclass(frozen=True)
class Converted:
    """A new column filled from a retired one's values: ``retired`` is the old column's sink
    name; ``misread``: the old encoding would have read the new raw values as other values."""

    retired: str
    old: SinkType
    new: SinkType
    misread: bool


def converted_columns(old: TableSpec, new: TableSpec) -> dict[str, Converted]:
    """Sink names of ``new``'s columns added since ``old`` for a source field ``old`` held
    under a type `value_converts` from (retired in ``new``), with their conversions."""
    before = {c.id: c for c in old.columns}
    live_before = {c.name: c for c in old.columns if not c.dropped}
    retired_ids = {c.id for c in new.columns if c.dropped}
    out: dict[str, Converted] = {}
    for col in new.columns:
        if col.dropped or col.id in before:
            continue
        prior = live_before.get(col.name)
        if prior is None or prior.id not in retired_ids:
            continue
        was = prior.sink_type(old.source.connector)
        now = col.sink_type(new.source.connector)
        if not value_converts(was, now):
            continue
        misread = reencoded(plan_column(old, prior), plan_column(new, col))
        out[col.sink_name] = Converted(prior.sink_name, was, now, misread)
    return out


def retired_conversions(spec: TableSpec) -> dict[str, Converted]:
    """`converted_columns` read from ``spec`` alone: each live column with a retired column of
    its source field (``<name>__v<n>``, soft-dropped; the newest when it was retired more than
    once) of a type `value_converts` from. For a check that compares the ledger's values with
    its row images: a row that holds a retired value was written before the change, in an
    encoding the images do not say."""
    out: dict[str, Converted] = {}
    connector = spec.source.connector
    for col in spec.columns:
        if col.dropped:
            continue
        pattern = re.compile(rf"{re.escape(col.name)}__v(\d+)(?:_(\d+))?")
        retired = [
            (int(m.group(1)), int(m.group(2) or 0), c)
            for c in spec.columns
            if c.dropped and (m := pattern.fullmatch(c.name))
        ]
        if not retired:
            continue
        prior = max(retired, key=lambda r: r[:2])[2]
        was, now = prior.sink_type(connector), col.sink_type(connector)
        if value_converts(was, now):
            misread = reencoded(plan_column(spec, prior), plan_column(spec, col))
            out[col.sink_name] = Converted(prior.sink_name, was, now, misread)
    return out
