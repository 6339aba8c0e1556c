"""Spark SQL of consistency groups (pure): Debezium's transaction records as rows, which
transactions every table of a group holds in full, and the ``consistent`` view of one table.

A transaction's END record names, per table it wrote (``data_collection``), how many changes it
made there; each change carries its number among them (``transaction.data_collection_order``,
the ledger's ``_txn_order``). A transaction is applied in a table when the table's ledger, at the
snapshot its history reflects, holds every number from 1 to that count (redeliveries count
once). The cut is the newest transaction, in commit order (the END records' offsets), such that
it and every transaction before it is applied in every table of the group.
"""

from __future__ import annotations

from collections.abc import Sequence

from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.ddl import literal, quote
from cdc_assets.sql.upsert import data_names, key_names, order_struct

COLLECTIONS = "array<struct<data_collection:string,event_count:bigint>>"
TXN_RECORD = (
    f"struct<status:string,id:string,event_count:bigint,data_collections:{COLLECTIONS},"
    "ts_ms:bigint>"
)
# What a transaction-topic record is (a column ``_kind`` of `render_transaction_records`).
BEGIN, END, TOMBSTONE, AVRO, BAD = "begin", "end", "tombstone", "avro", "bad"


def data_collection(spec: TableSpec) -> str:
    """How Debezium names the spec's source table in transaction records."""
    if spec.source.connector == "postgresql":
        return f"{spec.source.schema_ or 'public'}.{spec.source.table}"
    return f"{spec.source.database}.{spec.source.table}"


def render_transaction_records(raw: str) -> str:
    """SELECT over ``raw`` (Spark's Kafka source columns) of each record's kind, its parsed
    fields and Kafka coordinates. JSON with or without an embedded schema is read; a registry
    framed (Avro) value is recognised, not read."""
    text = "CAST(value AS STRING)"
    parsed = (
        f"coalesce(from_json({text}, 'struct<payload:{TXN_RECORD}>').payload, "
        f"from_json({text}, {literal(TXN_RECORD)}))"
    )
    kind = (
        f"CASE WHEN value IS NULL THEN {literal(TOMBSTONE)} "
        f"WHEN substring(value, 1, 1) = X'00' THEN {literal(AVRO)} "
        f"WHEN t.status = 'BEGIN' AND t.id IS NOT NULL THEN {literal(BEGIN)} "
        f"WHEN t.status = 'END' AND t.id IS NOT NULL AND t.event_count IS NOT NULL "
        f"AND t.data_collections IS NOT NULL THEN {literal(END)} "
        f"ELSE {literal(BAD)} END"
    )
    return (
        f"SELECT {kind} AS _kind, t, partition AS _kafka_partition, offset AS _kafka_offset "
        f"FROM (SELECT *, {parsed} AS t FROM {raw})"
    )


def render_transaction_rows(records: str) -> str:
    """The transactions layout's rows of the END records in ``records``
    (`render_transaction_records`): one per table the transaction wrote."""
    return (
        "SELECT t.id AS txn_id, c.data_collection, c.event_count, t.event_count AS txn_events, "
        "timestamp_millis(t.ts_ms) AS _source_ts, _kafka_partition, _kafka_offset, "
        "current_timestamp() AS _processed_at "
        f"FROM {records} LATERAL VIEW explode(t.data_collections) x AS c "
        f"WHERE _kind = {literal(END)}"
    )


def render_applied(collection: str, ledger: str, pending: str) -> str:
    """Per transaction in ``pending`` (a view with ``txn_id``), how many of its changes of one
    table ``ledger`` (a view with the ledger's columns) holds, each counted once."""
    return (
        f"SELECT {literal(collection)} AS data_collection, l._txn_id AS txn_id, "
        "count(DISTINCT l._txn_order) AS applied "
        f"FROM {ledger} l LEFT SEMI JOIN {pending} p ON l._txn_id = p.txn_id "
        "WHERE l._txn_id IS NOT NULL GROUP BY l._txn_id"
    )


def render_pending(transactions: str, after: int) -> str:
    """The transactions whose END record comes after offset ``after``: per transaction and
    table, its place in commit order (``ord``: the first such delivery), source time and change
    count. Only rows after the cut are read (files are pruned by their offset bounds); an END
    delivered again after the cut is checked again, which changes nothing."""
    return (
        "SELECT txn_id, data_collection, max(event_count) AS expected, "
        "max(_source_ts) AS ts, min(min(_kafka_offset)) OVER (PARTITION BY txn_id) AS ord "
        f"FROM {transactions} WHERE _kafka_offset > {int(after)} "
        "GROUP BY txn_id, data_collection"
    )


def render_status(
    pending: str, applied: Sequence[str], collections: Sequence[str], floor: int = -1
) -> str:
    """Per pending transaction: its order, source time, and whether a table of the group
    (``collections``) lacks some of its changes (``incomplete``). Transactions before
    ``floor`` (an END offset) are not checked: they ended before the group was declared on
    tables that already held changes, which carry no transaction ids."""
    union = " UNION ALL ".join(f"SELECT * FROM {a}" for a in applied)
    group = ", ".join(literal(c) for c in collections)
    missing = (
        f"p.ord >= {int(floor)} AND p.data_collection IN ({group}) "
        "AND coalesce(a.applied, 0) < p.expected"
    )
    return (
        f"SELECT p.txn_id, p.ord, max(p.ts) AS ts, "
        f"max(CASE WHEN {missing} THEN 1 ELSE 0 END) = 1 AS incomplete "
        f"FROM {pending} p LEFT JOIN ({union}) a "
        "ON a.txn_id = p.txn_id AND a.data_collection = p.data_collection "
        "GROUP BY p.txn_id, p.ord"
    )


def render_cut(status: str) -> str:
    """The newest transaction before the first incomplete one (no row: none), with the first
    incomplete one's order and the number of pending transactions after the cut."""
    return (
        f"WITH blocked AS (SELECT min(CASE WHEN incomplete THEN ord END) AS b FROM {status}), "
        f"ready AS (SELECT s.* FROM {status} s, blocked "
        "WHERE blocked.b IS NULL OR s.ord < blocked.b) "
        "SELECT r.txn_id, r.ord, unix_millis(r.ts) AS ts_ms, "
        f"(SELECT b FROM blocked) AS blocked_at, "
        f"(SELECT count(1) FROM {status}) - (SELECT count(1) FROM ready) AS pending, "
        f"(SELECT unix_millis(max(ts)) FROM {status}) AS newest_ms "
        "FROM ready r ORDER BY r.ord DESC LIMIT 1"
    )


def render_consistent_view(spec: TableSpec, history: str, transactions: str, cut: int) -> str:
    """SELECT of the table at the cut: per key, its newest version whose change is of a
    transaction at or before the cut (or of none: snapshot reads), deleted keys left out, in
    base's data columns."""
    keys = ", ".join(f"h.{quote(k)}" for k in key_names(spec))
    columns = ", ".join(quote(c) for c in data_names(spec))
    visible = (
        f"h._txn_id IS NULL OR h._txn_id IN "
        f"(SELECT txn_id FROM {transactions} WHERE _kafka_offset <= {int(cut)})"
    )
    return (
        f"SELECT {columns} FROM (SELECT h.*, row_number() OVER (PARTITION BY {keys} "
        f"ORDER BY {order_struct('h')} DESC) AS _cdc_rank FROM {history} h WHERE {visible}) "
        "WHERE _cdc_rank = 1 AND NOT _is_deleted"
    )
