"""Consistency groups: read the tables of one source transaction stream at one transaction.

One run of a group (level-triggered, any order with the other steps):

1. appends the END records of Debezium's transaction topic that are new since the last run to
   ``<ns>.<group>_transactions`` (offsets committed in the same Iceberg commit, as the ledger's);
2. finds the cut: the newest transaction such that it and every transaction before it (in
   commit order: the END records' offsets) is applied in every table of the group, where
   applied means the ledger snapshot the table's history reflects holds all of its changes of
   that table (`cdc_assets.sql.consistency`);
3. when the cut moved: tags each history snapshot it was checked against ``consistent``,
   points each table's ``<table>_consistent`` view at it and appends it to ``<group>_cuts``.

A history only gains versions, so a cut found complete against one history snapshot holds for
every later one: the views read the current history, filtered to the cut's transactions. The
tags pin the snapshots for readers that go through Iceberg directly (pyiceberg, DuckDB).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cdc_assets.errors import CdcAssetsError, StackError
from cdc_assets.pipeline.ingest.ingest import plan_offsets, read_kafka
from cdc_assets.pipeline.ingest.ledger_commit import append_if_unchanged, start_snapshot
from cdc_assets.pipeline.shared.offsets import (
    KIND_PROPERTY,
    OFFSETS_PROPERTY,
    TOPIC_PROPERTY,
    committed_offsets,
    encode_offsets,
)
from cdc_assets.pipeline.upsert.history import history_state, pinned_ledger_view, shard_name
from cdc_assets.pipeline.upsert.upsert import load_table, spark_identifier
from cdc_assets.resources.kafka_client import KafkaClient
from cdc_assets.schema.layers import (
    TableLayout,
    cuts_layout,
    group_namespace,
    history_layout,
    ledger_layout,
    transactions_layout,
)
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.consistency import (
    AVRO,
    BAD,
    data_collection,
    render_applied,
    render_consistent_view,
    render_cut,
    render_pending,
    render_status,
    render_transaction_records,
    render_transaction_rows,
)
from cdc_assets.sql.ddl import (
    literal,
    quote,
    render_create_namespace,
    render_create_table,
    temp_view_name,
)

TAG = "consistent"
TAG_ATTEMPTS = 5
VIEW_SUFFIX = "_consistent"
# The END offset from which transactions are checked (-1: all); set by the first read.
FLOOR_PROPERTY = "cdc.consistent.floor"


class ConsistencyError(CdcAssetsError):
    """A consistency group's transaction topic cannot be used (records that are not Debezium
    transaction records, several partitions); the message says which and what to do."""


@dataclass
class CutResult:
    """What one run of a group did."""

    group: str
    transactions_read: int = 0  # END records appended to the transactions table
    cut_offset: int | None = None  # the published cut after this run (None: none yet)
    txn_id: str | None = None
    cut_source_ms: int | None = None  # the cut transaction's source time (epoch ms)
    moved: bool = False
    pending: int = 0  # transactions after the cut
    blocked_at: int | None = None  # END offset of the oldest transaction not applied in full
    lag_ms: int = 0
    reason: str = ""
    snapshots: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def cut_source_ts(self) -> datetime | None:
        if self.cut_source_ms is None:
            return None
        return datetime.fromtimestamp(self.cut_source_ms / 1000, UTC)


def transaction_topic(specs: list[TableSpec]) -> str:
    assert specs[0].consistency is not None
    return specs[0].consistency.transaction_topic


def view_name(spec: TableSpec) -> str:
    return f"{history_layout(spec).name.removesuffix('_history')}{VIEW_SUFFIX}"


def _ensure(spark: Any, catalog: str, layout: TableLayout) -> None:
    if not spark.catalog.tableExists(f"{catalog}.{layout.namespace}.{layout.name}"):
        spark.sql(render_create_namespace(catalog, layout.namespace))
        spark.sql(render_create_table(catalog, layout))


def _changes_without_txn(
    spark: Any, catalog: str, iceberg_catalog: Any, specs: list[TableSpec]
) -> bool:
    """Whether a group table's ledger already holds changes ingested without a transaction id
    (the table joined the group after it started): old transactions cannot be checked."""
    for spec in specs:
        layout = ledger_layout(spec)
        if not iceberg_catalog.table_exists(f"{layout.namespace}.{layout.name}"):
            continue
        table = load_table(iceberg_catalog, layout)
        current = table.current_snapshot()
        summary = current.summary.additional_properties if current and current.summary else {}
        if current is None or summary.get("total-records") == "0":
            continue
        if "_txn_id" not in {f.name for f in table.schema().fields}:
            return True  # rows, none with transaction ids: written before the group
        if spark.sql(
            f"SELECT 1 FROM {spark_identifier(catalog, layout)} "
            "WHERE _txn_id IS NULL AND _op IN ('c', 'u', 'd') LIMIT 1"
        ).collect():
            return True
    return False


def ingest_transactions(
    spark: Any,
    catalog: str,
    iceberg_catalog: Any,
    kafka: KafkaClient,
    group: str,
    specs: list[TableSpec],
) -> int:
    """Append the group's new END records to its transactions table; returns how many. A record
    that is neither a BEGIN nor an END (or is Avro) stops the run with nothing written: without
    it a transaction's size is unknown and the cut could not pass it."""
    topic = transaction_topic(specs)
    layout = transactions_layout(group, group_namespace(specs))
    _ensure(spark, catalog, layout)
    identifier = f"{layout.namespace}.{layout.name}"
    table = iceberg_catalog.load_table(identifier)
    expected = start_snapshot(table)
    committed = committed_offsets(table, topic)
    partitions = kafka.topic_offsets(topic)
    if len(partitions) > 1:
        raise ConsistencyError(
            f"transaction topic {topic!r} has {len(partitions)} partitions: commit order is only "
            "known within one; recreate it with one partition (Debezium's default)"
        )
    if FLOOR_PROPERTY not in table.properties:
        # The first read. Tables that already hold changes without transaction ids (the group
        # was declared later) cannot tell whether the transactions that ended until now are
        # complete: those are taken as they are, from the topic's start, and checked from its
        # present end on.
        joined_late = _changes_without_txn(spark, catalog, iceberg_catalog, specs)
        floor = max((p.latest for p in partitions), default=0) if joined_late else -1
        with table.transaction() as tx:
            tx.set_properties({FLOOR_PROPERTY: str(floor)})
        table = iceberg_catalog.load_table(identifier)
        expected = start_snapshot(table)
    start, end = plan_offsets(partitions, committed, topic)
    if all(start[p] >= end[p] for p in end) and committed:
        return 0
    records = temp_view_name("txn_records", layout.namespace, layout.name)
    raw = records + "_raw"
    read_kafka(spark, kafka, topic, start, end).createOrReplaceTempView(raw)
    try:
        frame = spark.sql(render_transaction_records(raw)).localCheckpoint()
        frame.createOrReplaceTempView(records)
        bad = spark.sql(
            f"SELECT _kind, count(1) AS n, min(_kafka_offset) AS first FROM {records} "
            f"WHERE _kind IN ({literal(AVRO)}, {literal(BAD)}) GROUP BY _kind"
        ).collect()
        for row in bad:
            what = (
                "registry-framed (Avro) values; read the transaction topic with the JSON converter"
                if row["_kind"] == AVRO
                else "records that are not Debezium BEGIN/END transaction records"
            )
            raise ConsistencyError(
                f"transaction topic {topic!r} holds {row['n']} {what}, the first at offset "
                f"{row['first']}; nothing of the group was written"
            )
        rows = spark.sql(render_transaction_rows(records))
        count = int(rows.count())

        def write(target: str) -> None:
            (
                rows.writeTo(target)
                .option(f"snapshot-property.{OFFSETS_PROPERTY}", encode_offsets(end))
                .option(f"snapshot-property.{TOPIC_PROPERTY}", topic)
                .option(f"snapshot-property.{KIND_PROPERTY}", "transactions")
                .append()
            )

        append_if_unchanged(
            iceberg_catalog, identifier, spark_identifier(catalog, layout), expected, write
        )
        return count
    finally:
        spark.catalog.dropTempView(records)
        spark.catalog.dropTempView(raw)


def published_cut(spark: Any, catalog: str, group: str, specs: list[TableSpec]) -> Any | None:
    """The newest published cut (a Row of the cuts table), None before the first."""
    layout = cuts_layout(group, group_namespace(specs))
    _ensure(spark, catalog, layout)
    rows = spark.sql(
        f"SELECT *, unix_millis(cut_source_ts) AS cut_source_ms "
        f"FROM {spark_identifier(catalog, layout)} "
        "ORDER BY cut_offset DESC, published_at DESC LIMIT 1"
    ).collect()
    return rows[0] if rows else None


def update_cut(
    spark: Any,
    catalog: str,
    iceberg_catalog: Any,
    kafka: KafkaClient,
    group: str,
    specs: list[TableSpec],
) -> CutResult:
    """One run of the group: new transactions in, the cut moved as far as every table allows,
    published when it moved (or when a view is missing)."""
    started = time.monotonic()
    result = CutResult(group)
    try:
        result.transactions_read = ingest_transactions(
            spark, catalog, iceberg_catalog, kafka, group, specs
        )
    except StackError as exc:
        if "is not available" not in str(exc):
            raise
        result.reason = f"no transaction topic yet ({exc})"
    namespace = group_namespace(specs)
    transactions = spark_identifier(catalog, transactions_layout(group, namespace))
    before = published_cut(spark, catalog, group, specs)
    after = int(before["cut_offset"]) if before is not None else -1
    if before is not None:
        result.cut_offset, result.txn_id = after, before["txn_id"]
        result.cut_source_ms = before["cut_source_ms"]
    views: list[str] = []
    histories: dict[str, int] = {}
    try:
        pending = temp_view_name("txn_pending", namespace, group)
        spark.sql(render_pending(transactions, after)).localCheckpoint().createOrReplaceTempView(
            pending
        )
        views.append(pending)
        applied = []
        for spec in specs:
            layout = history_layout(spec)
            if not iceberg_catalog.table_exists(f"{layout.namespace}.{layout.name}"):
                result.reason = f"{spec.name} has no history table yet (not onboarded)"
                break
            history_t = load_table(iceberg_catalog, layout)
            snapshot = history_t.current_snapshot()
            reflected = history_state(history_t).get(shard_name(spec))
            if snapshot is None or reflected is None:
                result.reason = f"the history of {spec.name} is not built yet"
                break
            histories[spec.name] = int(snapshot.snapshot_id)
            ledger = load_table(iceberg_catalog, ledger_layout(spec))
            pinned = pinned_ledger_view(spark, catalog, ledger, spec, reflected)
            views.append(pinned)
            view = temp_view_name("txn_applied", namespace, spec.name)
            spark.sql(
                f"CREATE OR REPLACE TEMP VIEW {view} AS "
                f"{render_applied(data_collection(spec), pinned, pending)}"
            )
            views.append(view)
            applied.append(view)
        else:
            status = temp_view_name("txn_status", namespace, group)
            collections = [data_collection(s) for s in specs]
            transactions_t = load_table(iceberg_catalog, transactions_layout(group, namespace))
            floor = int(transactions_t.properties.get(FLOOR_PROPERTY, "-1"))
            spark.sql(
                render_status(pending, applied, collections, floor)
            ).localCheckpoint().createOrReplaceTempView(status)
            views.append(status)
            found = spark.sql(render_cut(status)).collect()
            totals = spark.sql(
                f"SELECT count(1) AS n, min(CASE WHEN incomplete THEN ord END) AS blocked, "
                f"unix_millis(max(ts)) AS newest FROM {status}"
            ).collect()[0]
            result.blocked_at = totals["blocked"]
            result.pending = int(totals["n"])
            newest = totals["newest"]
            if found:
                cut = found[0]
                result.moved = True
                result.cut_offset, result.txn_id = int(cut["ord"]), cut["txn_id"]
                result.cut_source_ms = cut["ts_ms"]
                result.pending = int(cut["pending"])
            if newest is not None and result.cut_source_ms is not None and result.pending:
                result.lag_ms = max(0, int(newest) - int(result.cut_source_ms))
            result.snapshots = histories
            if result.cut_offset is not None and (
                result.moved or not _views_exist(spark, catalog, specs)
            ):
                _publish(spark, catalog, iceberg_catalog, group, specs, result)
            elif not result.reason:
                result.reason = (
                    "no transaction yet"
                    if result.cut_offset is None and result.blocked_at is None
                    else "the oldest pending transaction is not applied in every table"
                    if result.blocked_at is not None
                    else "no new transaction"
                )
    finally:
        for view in reversed(views):  # newest first, as history.py drops its views
            spark.catalog.dropTempView(view)
    result.seconds = time.monotonic() - started
    return result


def _views_exist(spark: Any, catalog: str, specs: list[TableSpec]) -> bool:
    return all(
        spark.catalog.tableExists(f"{catalog}.{s.sink.namespace}.{view_name(s)}") for s in specs
    )


def _tag(iceberg_catalog: Any, spec: TableSpec, snapshot_id: int) -> None:
    """Point the history's ``consistent`` tag at ``snapshot_id``; retried when a history run
    commits to the table in between (the tag's commit swaps the table's metadata too)."""
    from pyiceberg.exceptions import CommitFailedException

    for attempt in range(1, TAG_ATTEMPTS + 1):
        history_t = load_table(iceberg_catalog, history_layout(spec))
        try:
            history_t.manage_snapshots().create_tag(snapshot_id, TAG).commit()
            return
        except CommitFailedException:
            if attempt == TAG_ATTEMPTS:
                raise
            time.sleep(0.2 * attempt)


def _publish(
    spark: Any,
    catalog: str,
    iceberg_catalog: Any,
    group: str,
    specs: list[TableSpec],
    result: CutResult,
) -> None:
    """Tags, then views, then the cut's row: a reader of a view sees the new cut only once
    every history it reads is tagged at a snapshot that holds it."""
    assert result.cut_offset is not None
    for spec in specs:
        _tag(iceberg_catalog, spec, result.snapshots[spec.name])
    transactions = spark_identifier(catalog, transactions_layout(group, group_namespace(specs)))
    for spec in specs:
        history = spark_identifier(catalog, history_layout(spec))
        target = ".".join(quote(p) for p in (catalog, spec.sink.namespace, view_name(spec)))
        comment = (
            f"{spec.name} at the newest source transaction applied in every table of "
            f"consistency group {group} (docs/history.md)"
        )
        spark.sql(
            f"CREATE OR REPLACE VIEW {target} COMMENT {literal(comment)} AS "
            f"{render_consistent_view(spec, history, transactions, result.cut_offset)}"
        )
    cuts = spark_identifier(catalog, cuts_layout(group, group_namespace(specs)))
    ts = (
        f"timestamp_millis({int(result.cut_source_ms)})"
        if result.cut_source_ms is not None
        else "CAST(NULL AS TIMESTAMP)"
    )
    spark.sql(
        f"INSERT INTO {cuts} VALUES ({int(result.cut_offset)}, {literal(result.txn_id or '')}, "
        f"{ts}, {int(result.lag_ms)}, {int(result.pending)}, "
        f"{literal(json.dumps(result.snapshots, sort_keys=True))}, current_timestamp())"
    )


def cut_history(spark: Any, catalog: str, group: str, specs: list[TableSpec]) -> list[Any]:
    """Every published cut in publication order (Rows of the cuts table)."""
    layout = cuts_layout(group, group_namespace(specs))
    _ensure(spark, catalog, layout)
    return list(
        spark.sql(
            f"SELECT * FROM {spark_identifier(catalog, layout)} ORDER BY published_at, cut_offset"
        ).collect()
    )


def current_lag(spark: Any, catalog: str, group: str, specs: list[TableSpec]) -> tuple[int, int]:
    """How far the published cut trails now: the newest known transaction's source time minus
    the cut's (ms; 0 when none is pending), and how many transactions are after the cut."""
    cut = published_cut(spark, catalog, group, specs)
    layout = transactions_layout(group, group_namespace(specs))
    _ensure(spark, catalog, layout)
    after = int(cut["cut_offset"]) if cut is not None else -1
    row = spark.sql(
        "SELECT count(DISTINCT txn_id) AS n, unix_millis(max(_source_ts)) AS newest, "
        "unix_millis(min(_source_ts)) AS oldest "
        f"FROM {spark_identifier(catalog, layout)} WHERE _kafka_offset > {after}"
    ).collect()[0]
    if not row["n"]:
        return 0, 0
    since = cut["cut_source_ms"] if cut is not None else row["oldest"]
    return max(0, int(row["newest"]) - int(since or row["oldest"])), int(row["n"])
