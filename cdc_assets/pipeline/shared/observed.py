"""Aggregates of what a write wrote, taken by the write's own Spark job.

A count after a write is one more Spark job that reads the table again; for a small table that
job costs about as much as the write. Spark's ``DataFrame.observe`` computes named aggregates
while the rows pass through a query, and a temp view of the observed frame carries them into a
SQL statement (an ``INSERT OVERWRITE ... SELECT * FROM view``). The metrics arrive from Spark's
listener bus shortly after the statement returns.

A Spark Connect client's observations do not reach a plain view this way, and a listener event
may in principle be dropped: then the caller gets None and counts with a query, as before.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

from cdc_assets.pipeline.shared.session_kind import is_connect

# How long to wait for a finished statement's metrics before counting with a query instead.
METRICS_WAIT_S = 10.0


class ObservedView:
    """A temp view ``name`` of ``select`` whose rows are aggregated by ``metrics`` (name -> SQL
    aggregate) when a statement reads it; `metrics` returns them once that statement ran."""

    def __init__(self, spark: Any, select: str, name: str, metrics: Mapping[str, str]) -> None:
        self.spark, self.name = spark, name
        frame = spark.sql(select)
        self._observation = None
        if not is_connect(spark):
            from pyspark.sql import Observation
            from pyspark.sql import functions as F

            self._observation = Observation(f"{name}_{uuid.uuid4().hex}")
            frame = frame.observe(
                self._observation, *[F.expr(e).alias(n) for n, e in metrics.items()]
            )
        frame.createOrReplaceTempView(name)

    def metrics(self, wait_s: float = METRICS_WAIT_S) -> dict[str, Any] | None:
        """The aggregates of the rows the statement read, or None (not observed, or not in
        time). Call only after a statement that reads the view has finished."""
        if self._observation is None:
            return None
        # Observation.get blocks until the metrics arrive, with no time limit; the JVM object's
        # getRowOrEmpty waits at most 100 ms.
        java: Any = self._observation._jo
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if java.getRowOrEmpty().isDefined():
                return dict(self._observation.get)
        return None

    def drop(self) -> None:
        self.spark.catalog.dropTempView(self.name)
