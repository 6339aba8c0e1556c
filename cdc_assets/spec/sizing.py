"""How many buckets a new table's base gets, from the size of its source table.

Every upsert writes a data file and a delete file into each bucket its changes touch, and a
small change set touches most buckets. Sixteen buckets on a table of a few thousand rows cost a
fleet of small tables most of an upsert's time (``benchmarks/fleet_threads.py --buckets``), and
they buy nothing: one task reads such a base whole in well under a second. A bucket count is
fixed at onboarding (changing it rewrites base; ``spec.schema.evolution`` rejects it), so it is
chosen there, when the source can be asked how big the table is.
"""

from __future__ import annotations

from dataclasses import dataclass

# The spec's default, for specs that name no count (kept for every existing table).
DEFAULT_BUCKETS = 16
# One bucket per this much of the source's on-disk size (InnoDB pages and indexes' share of
# them, a PostgreSQL heap). The same rows in Parquet take about a third to a fifth of that: a
# bucket then holds about one 128 MiB target-size file (base's `write.target-file-size-bytes`).
SOURCE_BYTES_PER_BUCKET = 512 * 1024 * 1024
MAX_BUCKETS = 1024


@dataclass(frozen=True)
class SourceSize:
    """What the source reports about a table's size: estimates, as both databases keep them."""

    bytes: int | None
    rows: int | None

    def describe(self) -> str:
        mib = "unknown size" if self.bytes is None else f"{self.bytes / 2**20:,.1f} MiB"
        rows = "" if self.rows is None or self.rows < 0 else f", about {self.rows:,} rows"
        return mib + rows


def buckets_for(size: SourceSize | None) -> int:
    """The bucket count for a table of ``size``: a power of two, one bucket per
    ``SOURCE_BYTES_PER_BUCKET`` (at least one, at most ``MAX_BUCKETS``); the spec's default
    when the size is unknown."""
    if size is None or size.bytes is None or size.bytes < 0:
        return DEFAULT_BUCKETS
    need = -(-size.bytes // SOURCE_BYTES_PER_BUCKET)  # ceiling
    buckets = 1
    while buckets < need and buckets < MAX_BUCKETS:
        buckets *= 2
    return buckets
