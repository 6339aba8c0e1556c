"""Spark settings for small batches: adaptive query execution off and two shuffle partitions
below ``SMALL_WORK_ROWS``, and an ingest batch below ``INTERPRETED_ROWS`` evaluated without
generated code.

With adaptive query execution each query stage runs as a Spark job of its own, and the rest of
the query is planned again once it is done. For a batch of a few hundred changes those rounds
are most of the work: a busy cycle of 30 small tables (about 100 events each) ran 14.3 Spark jobs
per table with it, 8.6 without, and took 0.84x the time one table at a time and 0.89x two at
once (``benchmarks/fleet_threads.py``, docs/benchmarks.md). What adaptive execution buys (fewer
shuffle partitions, skew splits, a broadcast chosen at run time) pays off on large batches, so
it stays on above the threshold and wherever the size is not known in advance. The MERGE into
base keeps it always: base may be large whatever the change set is. Without adaptive execution
nothing coalesces the shuffle partitions either, so a small batch sets them to what coalescing
would have left (``SMALL_WORK_PARTITIONS``): bucketed's write of a hundred changes ran 18 tasks
with the configured 8 partitions, 6 with 2.

Spark compiles generated code for each query's stages and caches it by its text; the decode of
every table is code of its own (its columns and their types), so across a fleet the cache holds
few of them and each small batch compiles its decode again. Below ``INTERPRETED_ROWS`` the ingest
evaluates the expressions as they are instead. One batch of n records, decode, summary and
ledger rows, medians of four tables (``benchmarks/interpreted_ingest.py``, docs/benchmarks.md):
with a code cache of one entry (a fleet), interpreted took 0.37x to 0.65x the time of compiled
code from 100 to 5,000 records and 0.95x at 20,000; with each table's code already cached, 0.51x
to 1.05x up to 5,000 records. The upsert's statements are code of their own per table as well
(the window's offsets and snapshot ids are literals in them); they run interpreted when all they
read (the window, the tombstones, base) is under ``INTERPRETED_ROWS``: a fleet's upsert took
0.85x to 0.89x the time (``benchmarks/interpreted_upsert.py``).

The settings are session settings, and every step thread of the run executor has a session of
its own (``resources.spark``), so one table's small batch does not change another's plan.
"""

from __future__ import annotations

from collections.abc import Mapping

ADAPTIVE_CONF = "spark.sql.adaptive.enabled"
SHUFFLE_PARTITIONS_CONF = "spark.sql.shuffle.partitions"
# Shuffle partitions of a small batch: what adaptive execution's coalescing would have left of
# the configured ones, without its extra planning rounds.
SMALL_WORK_PARTITIONS = 2
# Below this many records (Kafka offsets of the batch, or ledger offsets of the upsert window)
# a query plans statically. The ingest benchmark's batches (100,000 events and more) stay
# adaptive.
SMALL_WORK_ROWS = 50_000
# Below this many records an ingest batch runs interpreted (no whole-stage or expression code
# generation).
INTERPRETED_ROWS = 5_000
INTERPRETED_CONF = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}


def offsets_span(start: Mapping[int, int], end: Mapping[int, int]) -> int:
    """Records between two offset maps (partition -> next offset); a partition missing from
    ``start`` counts from 0."""
    return sum(max(0, e - start.get(p, 0)) for p, e in end.items())


def small_work_conf(records: int | None, *, interpreted: bool = False) -> dict[str, str]:
    """The session settings for a batch of about ``records`` records (None: not known);
    ``interpreted``: the batch may run without generated code when it is small enough (the
    ingest's decode; the upsert decides that with `interpreted_conf`, from every table its
    statements read)."""
    if records is None or records >= SMALL_WORK_ROWS:
        return {}
    static = {ADAPTIVE_CONF: "false", SHUFFLE_PARTITIONS_CONF: str(SMALL_WORK_PARTITIONS)}
    if interpreted:
        return {**static, **interpreted_conf(records)}
    return static


def interpreted_conf(rows: int | None) -> dict[str, str]:
    """``INTERPRETED_CONF`` for statements that read about ``rows`` rows in all, from every
    table they scan (None: not known, so generated code)."""
    return dict(INTERPRETED_CONF) if rows is not None and rows < INTERPRETED_ROWS else {}


def snapshot_records(summary: Mapping[str, str] | None) -> int:
    """Rows an Iceberg table's current snapshot holds by its summary (``total-records``, which
    counts rows a position delete has removed too: an upper bound); 0 without a snapshot."""
    return int((summary or {}).get("total-records", "0"))
