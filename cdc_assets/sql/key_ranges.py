"""Key ranges of one upsert's changes, so that its MERGEs read only the files that may hold them.

Base and tombstones write each file sorted by key within its bucket (the layouts' write order),
so a file's min/max statistics bound a key range. The MERGE condition ``t.key = s.key`` then gets
``AND t.key IN <ranges>``, where every change's key lies in one of the ranges: the condition
matches exactly the same pairs, and Iceberg skips every file whose bounds miss all the ranges.
A table whose inserts and updates go to recent keys (most OLTP tables) then reads its recent files
only.

The ranges are the change set's keys split at their widest gaps: one old key updated among a
thousand new ones costs one more range, not a scan of everything between them. Only integer keys
have gaps; a string key gets its minimum and maximum. Pure: SQL text and values, no Spark.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.ddl import literal, quote

MAX_RANGES = 16  # the widest gaps split the change set into at most this many ranges
_INTEGERS = ("byte", "short", "int", "long")
_ORDERED = (*_INTEGERS, "string")


@dataclass(frozen=True)
class KeyRanges:
    """Closed ranges ``[low, high]`` of one key column holding every key of a change set."""

    column: str  # the key's sink name
    ranges: tuple[tuple[int | str, int | str], ...]

    def condition(self, alias: str) -> str:
        """SQL true for a row of ``alias`` whose key lies in a range."""
        ref = f"{alias}.{quote(self.column)}"
        parts = [
            f"{ref} = {_value(low)}"
            if low == high
            else f"{ref} BETWEEN {_value(low)} AND {_value(high)}"
            for low, high in self.ranges
        ]
        return "(" + " OR ".join(parts) + ")"


def _value(value: int | str) -> str:
    return str(int(value)) if isinstance(value, int) else literal(value)


def prune_column(spec: TableSpec) -> tuple[str, bool] | None:
    """The key column to prune by (its sink name, and whether it is an integer): the first key
    of an integer or string type, leaving out a sharded table's shard column (it holds a few
    names, which bound nothing). None when no key column qualifies."""
    by_sink = {c.sink_name: c for c in spec.columns}
    for name in spec.key_sink_names:
        column = by_sink.get(name)
        if column is None:  # the shard column
            continue
        kind = column.sink_type(spec.source.connector).name
        if kind in _ORDERED:
            return name, kind in _INTEGERS
        return None  # the first data key is not orderable here: the others alone bound little
    return None


def render_key_ranges(spec: TableSpec, changes: str, max_ranges: int = MAX_RANGES) -> str | None:
    """A query over ``changes`` (the bucketed table) returning rows ``(kind, low, high)``: one
    ``span`` row (minimum and maximum key; NULLs for no changes) and, for an integer key, up to
    ``max_ranges - 1`` ``gap`` rows, the widest gaps between consecutive keys. None when the
    spec has no key to prune by."""
    found = prune_column(spec)
    if found is None:
        return None
    column, integer = found
    keys = f"SELECT DISTINCT {quote(column)} AS k FROM {changes}"
    span = "SELECT 'span' AS kind, min(k) AS low, max(k) AS high FROM keys"
    if not integer or max_ranges < 2:
        return f"WITH keys AS ({keys}) {span}"
    # DECIMAL: the width of a gap between two longs may not fit a long. The window's partition
    # (keys in blocks of 2^32) keeps Spark from moving all keys into one task unasked, which
    # it warns about on every run; a gap across two blocks is then not cut, which only makes
    # a range wider.
    gaps = (
        "SELECT 'gap' AS kind, low, high FROM (SELECT lag(k) OVER (PARTITION BY "
        "shiftright(k, 32) ORDER BY k) AS low, "
        "k AS high FROM keys) WHERE low IS NOT NULL AND high - low > 1 "
        f"ORDER BY CAST(high AS DECIMAL(20, 0)) - low DESC LIMIT {max_ranges - 1}"
    )
    return f"WITH keys AS ({keys}) {span} UNION ALL SELECT * FROM ({gaps})"


def key_ranges(
    spec: TableSpec, rows: Sequence[tuple[str, int | str | None, int | str | None]]
) -> KeyRanges | None:
    """The ranges from the rows of ``render_key_ranges``: the span cut at each gap. None when
    there is nothing to prune by (no key column that qualifies, or no changes)."""
    found = prune_column(spec)
    spans = [(low, high) for kind, low, high in rows if kind == "span"]
    if found is None or not spans:
        return None
    start, end = spans[0]
    if start is None or end is None:
        return None
    gaps = sorted(
        (low, high)
        for kind, low, high in rows
        if kind == "gap" and low is not None and high is not None
    )
    ranges: list[tuple[int | str, int | str]] = []
    for low, high in gaps:
        ranges.append((start, low))
        start = high
    ranges.append((start, end))
    return KeyRanges(found[0], tuple(ranges))
