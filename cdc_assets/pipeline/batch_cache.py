"""Keeping one classified batch in Spark's cache while it is counted and written.

The ingest, a rebuild and a redrive read their classified batch several times (summary,
dead letters, ledger rows), so it is cached once. Spark compresses cached columns by default;
for a batch that lives a few seconds and is read two or three times that compression costs more
CPU than it saves: on 1M `users` events it took about a quarter of the ingest's CPU time (see
the README's ingest benchmark). The batch is therefore cached uncompressed and as objects,
spilling to disk when memory runs short.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

COMPRESSED_CONF = "spark.sql.inMemoryColumnarStorage.compressed"


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
def cached_batch(spark: Any, frame: Any) -> Iterator[Any]:
    """``frame`` cached for the block (uncompressed, deserialized, spilling to disk), released
    afterwards. Spark fixes the cache's compression when the cache is declared, so the setting
    only needs to hold around ``persist``."""
    from pyspark import StorageLevel

    with session_conf(spark, {COMPRESSED_CONF: "false"}):
        kept = frame.persist(StorageLevel.MEMORY_AND_DISK_DESER)
    try:
        yield kept
    finally:
        kept.unpersist()
