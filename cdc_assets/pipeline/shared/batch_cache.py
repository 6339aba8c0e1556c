"""Keeping one classified batch in Spark's cache while it is counted and written.

The ingest, a rebuild and a redrive read their classified batch several times (summary,
dead letters, ledger rows), so it is cached once. Spark compresses cached columns by default;
for a batch that lives a few seconds and is read two or three times that compression costs more
CPU than it saves: on 1M `users` events it took about 6 of the ingest's 45 CPU seconds (see the
ingest benchmark in docs/benchmarks.md). A batch of up to `UNCOMPRESSED_MAX_RECORDS` records is
therefore cached uncompressed and as objects, spilling to disk when memory runs short. A larger
backlog keeps the compressed cache, which takes about a third of the memory: a 2M-event backlog
cached uncompressed filled a 2g driver's heap and ran slower than compressed.

A run takes several tables at once in one driver (``assets/tables.py``), and
two cached backlogs of a million records each would not fit that heap together. So a driver
process holds at most one large batch (``LARGE_BATCH_RECORDS`` records or more, or of unknown
size) in its cache at a time: a second large batch waits for the first to be written and
released. Small batches, a busy fleet's usual case, never wait.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from cdc_assets.pipeline.shared.small_work import SMALL_WORK_ROWS

COMPRESSED_CONF = "spark.sql.inMemoryColumnarStorage.compressed"
# The 1M-event benchmark (1.06M records with tombstones) ran uncompressed in a 2g driver with
# room to spare; 2M events did not.
UNCOMPRESSED_MAX_RECORDS = 1_200_000
# From this many records a batch is large: it plans adaptively (`small_work`) and takes the
# driver's one large-batch slot while it is cached.
LARGE_BATCH_RECORDS = SMALL_WORK_ROWS
# Reentrant: a step that holds the slot may cache a second batch of its own inside the first.
_LARGE_BATCH_SLOT = threading.RLock()


def large_batch_slot(records: int | None) -> Any:
    """The driver's one slot for a large batch (held for the block), or nothing for a small one."""
    if records is not None and records < LARGE_BATCH_RECORDS:
        return nullcontext()
    return _LARGE_BATCH_SLOT


@contextmanager
def session_conf(spark: Any, conf: dict[str, str]) -> Iterator[None]:
    """Set Spark session settings inside the block and restore what was there before."""
    previous = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


@contextmanager
def cached_batch(spark: Any, frame: Any, records: int | None = None) -> Iterator[Any]:
    """``frame`` (about ``records`` rows, if known) cached for the block, deserialized and
    spilling to disk, then released; a large batch waits for the driver's large-batch slot
    first. Spark fixes the cache's compression when the cache is declared, so the setting only
    needs to hold around ``persist``."""
    from pyspark import StorageLevel

    compressed = records is not None and records > UNCOMPRESSED_MAX_RECORDS
    with large_batch_slot(records):
        with session_conf(spark, {COMPRESSED_CONF: "true" if compressed else "false"}):
            kept = frame.persist(StorageLevel.MEMORY_AND_DISK_DESER)
        try:
            yield kept
        finally:
            kept.unpersist()
