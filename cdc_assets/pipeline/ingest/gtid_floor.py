"""Positions for row events without a GTID, for specs ordered by GTID (``source.order: gtid``).

Debezium's snapshot reads (op ``r``) carry the binlog file and position the snapshot started at,
but no GTID, and that position is one server's: after a failover it does not compare with
anything. What does compare is where the record sits in its Kafka partition: a snapshot shows
the table as of a moment after every change the connector wrote before it, and before every
change it writes after it. So such a row is stamped (the highest GTID sequence number at a lower
offset of its partition, whether in the ledger or earlier in the same batch, else 0; the largest
long; its row number): newer than every change it already contains, older than every later
transaction, whose sequence number is higher. Rows of one snapshot share the major part and are
told apart by key (a key appears once in a snapshot); ties fall to the Kafka offset as always.
"""

from __future__ import annotations

from typing import Any

from cdc_assets.spec.models import TableSpec

SNAPSHOT_MINOR = 2**63 - 1


def needs_floor(spec: TableSpec) -> bool:
    return spec.source.connector != "postgresql" and spec.source.order == "gtid"


def fill_gtid_floor(spark: Any, spec: TableSpec, rows: Any, ledger: str) -> Any:
    """``rows`` (ledger columns) with every NULL ``_seq_major`` stamped as the module says;
    ``ledger`` is the Spark identifier of the spec's ledger table. Rows of other specs, and
    batches without such rows, come back as they are."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if not needs_floor(spec):
        return rows
    missing = rows.filter(F.col("_seq_major").isNull())
    bounds = {
        int(r["p"]): (int(r["lo"]), int(r["hi"]))
        for r in missing.groupBy(F.col("_kafka_partition").alias("p"))
        .agg(F.min("_kafka_offset").alias("lo"), F.max("_kafka_offset").alias("hi"))
        .collect()
    }
    if not bounds:
        return rows

    def ledger_where(below: bool) -> str:
        parts = [
            f"(_kafka_partition = {p} AND _kafka_offset < {lo})"
            if below
            else f"(_kafka_partition = {p} AND _kafka_offset BETWEEN {lo} AND {hi})"
            for p, (lo, hi) in bounds.items()
        ]
        return " OR ".join(parts)

    # The highest sequence number below each partition's first unstamped row: one aggregate.
    floors = (
        spark.table(ledger)
        .where(ledger_where(below=True))
        .groupBy("_kafka_partition")
        .agg(F.max("_seq_major").alias("_floor"))
    )
    # Between the first and the last unstamped row, a running maximum in offset order over the
    # ledger's rows and the batch's (a redrive or a rebuilt hour interleaves with the ledger).
    positions = ["_kafka_partition", "_kafka_offset", "_seq_major"]
    in_range = F.lit(False)
    for p, (_lo, hi) in bounds.items():
        in_range = in_range | ((F.col("_kafka_partition") == p) & (F.col("_kafka_offset") <= hi))
    around = (
        spark.table(ledger)
        .where(ledger_where(below=False))
        .select(*positions)
        .unionByName(rows.filter(in_range).select(*positions))
    )
    order = Window.partitionBy("_kafka_partition").orderBy("_kafka_offset")
    running = around.withColumn(
        "_running", F.max("_seq_major").over(order.rowsBetween(Window.unboundedPreceding, 0))
    )
    stamps = (
        running.filter(F.col("_seq_major").isNull())
        .join(floors, "_kafka_partition", "left")
        .select(
            "_kafka_partition",
            "_kafka_offset",
            F.greatest(F.coalesce("_running", F.lit(0)), F.coalesce("_floor", F.lit(0)))
            .cast("bigint")
            .alias("_stamp"),
        )
        .dropDuplicates(["_kafka_partition", "_kafka_offset"])
    )
    columns = [
        F.coalesce(F.col("_seq_major"), F.col("_stamp")).alias(c)
        if c == "_seq_major"
        else F.when(F.col("_seq_major").isNull(), F.lit(SNAPSHOT_MINOR))
        .otherwise(F.col(c))
        .alias(c)
        if c == "_seq_minor"
        else F.col(c)
        for c in rows.columns
    ]
    return rows.join(stamps, ["_kafka_partition", "_kafka_offset"], "left").select(*columns)
