"""Spark settings for small batches: adaptive query execution off below ``SMALL_WORK_ROWS``.

With adaptive query execution each query stage runs as a Spark job of its own, and the rest of
the query is planned again once it is done. For a batch of a few hundred changes those rounds
are most of the work: a busy cycle of 30 small tables (about 100 events each) ran 14.3 Spark jobs
per table with it, 8.6 without, and took 0.84x the time one table at a time and 0.89x two at
once (``benchmarks/fleet_threads.py``, docs/benchmarks.md). What adaptive execution buys (fewer
shuffle partitions, skew splits, a broadcast chosen at run time) pays off on large batches, so
it stays on above the threshold and wherever the size is not known in advance. The MERGE into
base keeps it always: base may be large whatever the change set is.

The setting is a session setting, and every step thread of the run executor has a session of
its own (``resources.spark``), so one table's small batch does not change another's plan.
"""

from __future__ import annotations

from collections.abc import Mapping

ADAPTIVE_CONF = "spark.sql.adaptive.enabled"
# Below this many records (Kafka offsets of the batch, or ledger offsets of the upsert window)
# a query plans statically. The ingest benchmark's batches (100,000 events and more) stay
# adaptive.
SMALL_WORK_ROWS = 50_000


def offsets_span(start: Mapping[int, int], end: Mapping[int, int]) -> int:
    """Records between two offset maps (partition -> next offset); a partition missing from
    ``start`` counts from 0."""
    return sum(max(0, e - start.get(p, 0)) for p, e in end.items())


def small_work_conf(records: int | None) -> dict[str, str]:
    """The session settings for a batch of about ``records`` records (None: not known)."""
    if records is None or records >= SMALL_WORK_ROWS:
        return {}
    return {ADAPTIVE_CONF: "false"}
