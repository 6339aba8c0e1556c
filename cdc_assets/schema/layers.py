"""The Iceberg tables each spec becomes (ledger, bucketed temp, base, dead letters) as plain data.

One spec renders every layer through these functions, for onboarding and, later, for evolution.
Layout notes:
- Data columns are nullable in every layer except the key columns of base: a CDC mirror must
  accept deletes, soft-deleted source columns and rows written before a column existed.
- The ledger keeps the source position as three longs (``_seq_major``, ``_seq_minor``,
  ``_seq_row``) so ordering is numeric, never a string comparison, with the Kafka partition and
  offset as the last tie-breakers.
- The ledger's ``dt``/``hr`` come from the Kafka record timestamp, not the wall clock, so an
  hour rebuilt from Kafka holds exactly the records it held before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cdc_assets.errors import ShardedSpecError
from cdc_assets.schema.types import SinkType
from cdc_assets.spec.models import TableSpec

LONG, INT, STRING = SinkType("long"), SinkType("int"), SinkType("string")
BOOLEAN = SinkType("boolean")
TIMESTAMPTZ = SinkType("timestamptz")

BASE_PROPERTIES = {
    "format-version": "2",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
    "write.distribution-mode": "hash",
}
LEDGER_PROPERTIES = {"format-version": "2", "write.distribution-mode": "hash"}
# How the ledger's source positions are ordered (binlog, gtid, lsn): fixed at creation, since
# positions of two orders never compare. Ledgers created before it existed hold binlog or lsn.
ORDER_PROPERTY = "cdc.source-order"


def source_order(spec: TableSpec) -> str:
    return "lsn" if spec.source.connector == "postgresql" else spec.source.order


def order_mismatch(ledger_properties: dict[str, str], spec: TableSpec) -> str | None:
    """Why the spec's order cannot write into a ledger created with another one, or None."""
    held = ledger_properties.get(
        ORDER_PROPERTY, "lsn" if spec.source.connector == "postgresql" else "binlog"
    )
    wanted = source_order(spec)
    if held == wanted:
        return None
    return (
        f"{spec.name}: the ledger orders changes by {held} positions and the spec says "
        f"source.order: {wanted}; positions of two orders never compare, so the order is fixed "
        "when the tables are created. Put the old order back, or mirror the table anew (new "
        "sink table, then `cdc-assets bootstrap`)"
    )


@dataclass(frozen=True)
class Column:
    """One Iceberg column; ``spec_id`` is the spec column id for data columns, else None."""

    name: str
    type: SinkType
    required: bool = False
    doc: str | None = None
    spec_id: int | None = None


@dataclass(frozen=True)
class TableLayout:
    """Everything needed to create one Iceberg table."""

    namespace: str
    name: str
    columns: tuple[Column, ...]
    partition_by: tuple[str, ...] = ()
    properties: dict[str, str] = field(default_factory=dict)
    identifier_fields: tuple[str, ...] = ()
    comment: str | None = None
    # Columns each written file is sorted by, within its partition (Iceberg's sort order). Key
    # order makes a file's min/max statistics bound a key range that a MERGE can prune by.
    write_order: tuple[str, ...] = ()

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]


SEQUENCE_COLUMNS = (
    Column("_op", STRING, required=True, doc="Debezium op: c, u, d, r or t"),
    Column("_source_ts", TIMESTAMPTZ, doc="time of the change in the source (ts_ms)"),
    Column("_seq_major", LONG, doc="source position, major part (binlog file number, LSN, ...)"),
    Column("_seq_minor", LONG, doc="source position, minor part (binlog position, ...)"),
    Column("_seq_row", LONG, doc="row within the source event"),
    Column("_kafka_partition", INT, required=True),
    Column("_kafka_offset", LONG, required=True),
)
UNAVAILABLE_COLUMN = Column(
    "_unavailable",
    STRING,
    doc="comma-separated columns whose value the source did not send (TOAST placeholder)",
)
TOMBSTONE_COLUMNS = (
    Column("_seq_major", LONG),
    Column("_seq_minor", LONG),
    Column("_seq_row", LONG),
    Column("_kafka_partition", INT, required=True),
    Column("_kafka_offset", LONG, required=True),
    Column("_deleted_at", TIMESTAMPTZ, doc="time of the delete in the source"),
    Column("_recorded_at", TIMESTAMPTZ, required=True, doc="when the upsert saw the delete"),
)
LEDGER_ONLY_COLUMNS = (
    Column("_kafka_ts", TIMESTAMPTZ, required=True, doc="Kafka record timestamp"),
    Column(
        "_row_json",
        STRING,
        doc="row image as the source wrote it (JSON text): after, or before for deletes",
    ),
    Column("_before_json", STRING, doc="before image as the source wrote it (JSON text)"),
    UNAVAILABLE_COLUMN,
    Column("_processed_at", TIMESTAMPTZ, required=True, doc="when the ingest wrote the row"),
    Column("dt", STRING, required=True, doc="date of the Kafka timestamp, yyyy-MM-dd (UTC)"),
    Column("hr", INT, required=True, doc="hour of the Kafka timestamp, 0-23 (UTC)"),
)
# Of a change in a source transaction (Debezium's transaction block): ledgers and histories of
# tables in a consistency group keep them, to tell when a transaction is applied in full.
TXN_COLUMNS = (
    Column("_txn_id", STRING, doc="source transaction id (Debezium transaction.id)"),
    Column(
        "_txn_order",
        LONG,
        doc="the change's number among its transaction's changes of this table (1..n)",
    ),
)


def txn_columns(spec: TableSpec) -> tuple[Column, ...]:
    return TXN_COLUMNS if spec.consistency is not None else ()


# What a history row adds to the change that opened the version (SEQUENCE_COLUMNS, whose _op,
# _source_ts and position say where the version starts): where it ends and how.
HISTORY_COLUMNS = (
    Column("_valid_from", TIMESTAMPTZ, doc="source time the version starts (its change's ts_ms)"),
    Column("_valid_to", TIMESTAMPTZ, doc="source time of the change that closed it; null if open"),
    Column("_valid_to_seq_major", LONG, doc="source position of the closing change, major part"),
    Column("_valid_to_seq_minor", LONG, doc="source position of the closing change, minor part"),
    Column("_valid_to_seq_row", LONG, doc="source position of the closing change, row"),
    Column("_closed_by", STRING, doc="op of the closing change: u, d, t or c; null if open"),
    Column("_is_current", BOOLEAN, required=True, doc="no later change of the key is known"),
    Column(
        "_is_deleted",
        BOOLEAN,
        required=True,
        doc="the key is absent in this version: opened by a delete (d) or a truncate (t)",
    ),
)
DEAD_LETTER_COLUMNS = (
    Column("topic", STRING, required=True),
    Column("partition", INT, required=True),
    Column("offset", LONG, required=True),
    Column("key_b64", STRING, doc="Kafka record key, base64"),
    Column("kafka_ts", TIMESTAMPTZ, doc="Kafka record timestamp"),
    Column("payload_b64", STRING, doc="Kafka record value as received, base64"),
    Column("stage", STRING, required=True, doc="where it failed: decode, envelope, convert, ..."),
    Column("reason", STRING, required=True),
    Column("failed_at", TIMESTAMPTZ, required=True),
)


def data_columns(spec: TableSpec, *, keys_required: bool) -> tuple[Column, ...]:
    """The spec's columns under their sink names and types, in spec order; a sharded table's
    shard column first (a key column: the same key on two shards is two rows)."""
    keys = set(spec.primary_key)
    connector = spec.source.connector
    shard = (
        (Column(spec.shard_column, STRING, required=keys_required, doc="the shard of the row"),)
        if spec.shard_column
        else ()
    )
    return shard + tuple(
        Column(
            name=c.sink_name,
            type=c.sink_type(connector),
            required=keys_required and c.name in keys,
            doc=c.comment,
            spec_id=c.id,
        )
        for c in spec.columns
    )


def _sink_table(spec: TableSpec) -> str:
    return spec.sink.table or spec.name


def _bucket_partition(spec: TableSpec) -> str:
    return f"bucket({spec.base.buckets}, {spec.bucket_column.sink_name})"


def base_layout(spec: TableSpec) -> TableLayout:
    """The mirror of the source table: bucketed by key, merge-on-read, key as identifier fields."""
    key_sink_names = tuple(spec.key_sink_names)
    return TableLayout(
        namespace=spec.sink.namespace,
        name=_sink_table(spec),
        columns=data_columns(spec, keys_required=True) + SEQUENCE_COLUMNS,
        partition_by=(_bucket_partition(spec),),
        properties={**BASE_PROPERTIES, **spec.base.properties},
        identifier_fields=key_sink_names,
        comment=spec.description,
        write_order=key_sink_names,
    )


def _source_table(spec: TableSpec, what: str) -> str:
    """The name prefix of a per-source table: the sink table, and the shard's name for one
    shard of a sharded spec (each shard has its own ledger, bucketed table and dead letters;
    base and tombstones are the table's)."""
    if spec.source.shards:
        raise ShardedSpecError(
            f"{spec.name} has {len(spec.source.shards)} shards, each with its own {what}: "
            "take one shard's view (TableSpec.shard_specs)"
        )
    shard = spec.shard
    return _sink_table(spec) if shard is None else f"{_sink_table(spec)}_{shard.shard_name}"


def ledger_layout(spec: TableSpec) -> TableLayout:
    """The append-only CDC ledger: one row per change event, partitioned by processing dt/hr."""
    return TableLayout(
        namespace=spec.sink.namespace,
        name=f"{_source_table(spec, 'ledger')}_cdc",
        columns=data_columns(spec, keys_required=False)
        + SEQUENCE_COLUMNS
        + LEDGER_ONLY_COLUMNS
        + txn_columns(spec),
        partition_by=("dt", "hr"),
        properties={**LEDGER_PROPERTIES, ORDER_PROPERTY: source_order(spec)},
        comment=f"CDC ledger of {spec.source.database}.{spec.source.table}",
    )


def bucketed_layout(spec: TableSpec) -> TableLayout:
    """The per-run temp table: newest change per key, bucketed exactly like base."""
    return TableLayout(
        namespace=spec.sink.namespace,
        name=f"{_source_table(spec, 'bucketed table')}_bucketed",
        columns=data_columns(spec, keys_required=False) + SEQUENCE_COLUMNS + (UNAVAILABLE_COLUMN,),
        partition_by=(_bucket_partition(spec),),
        properties=dict(LEDGER_PROPERTIES),
        comment=f"changes of one upsert run for {_sink_table(spec)}, bucketed like base",
    )


def tombstones_layout(spec: TableSpec) -> TableLayout:
    """Deleted keys with the position of their delete, bucketed like base.

    Base drops a deleted row; this table remembers the delete for a retention period so that an
    older change delivered late is recognised as older and not applied.
    """
    keys = tuple(c for c in data_columns(spec, keys_required=True) if c.required)
    return TableLayout(
        namespace=spec.sink.namespace,
        name=f"{_sink_table(spec)}_tombstones",
        columns=keys + TOMBSTONE_COLUMNS,
        partition_by=(_bucket_partition(spec),),
        properties={**BASE_PROPERTIES},
        identifier_fields=tuple(c.name for c in keys),
        comment=f"recent deletes of {_sink_table(spec)}",
        write_order=tuple(c.name for c in keys),
    )


def history_layout(spec: TableSpec) -> TableLayout:
    """Every version of every key (SCD type 2), bucketed like base and sorted by key and
    position: a version is a change of the ledger (deletes and truncates too, as versions in
    which the key is absent), valid until the key's next change."""
    keys = tuple(spec.key_sink_names)
    return TableLayout(
        namespace=spec.sink.namespace,
        name=f"{_sink_table(spec)}_history",
        columns=data_columns(spec, keys_required=True)
        + SEQUENCE_COLUMNS
        + (UNAVAILABLE_COLUMN,)
        + HISTORY_COLUMNS
        + txn_columns(spec),
        partition_by=(_bucket_partition(spec),),
        properties={**BASE_PROPERTIES},
        comment=f"versions of the rows of {_sink_table(spec)} (SCD type 2)",
        write_order=(*keys, "_seq_major", "_seq_minor", "_seq_row"),
    )


def dead_letter_layout(spec: TableSpec) -> TableLayout:
    """Records of this table that could not be written, with their Kafka coordinates and reason."""
    return TableLayout(
        namespace=spec.sink.namespace,
        name=f"{_source_table(spec, 'dead-letter table')}{spec.sink.dead_letter_suffix}",
        columns=DEAD_LETTER_COLUMNS,
        properties=dict(LEDGER_PROPERTIES),
        comment=f"dead letters of {spec.source.topic}",
    )


def all_layouts(spec: TableSpec) -> dict[str, TableLayout]:
    """Every table of one spec, by layer name; a sharded spec's ledgers and dead-letter tables
    as ``cdc:<shard>``, ``bucketed:<shard>`` and ``dead_letter:<shard>``."""
    history = {"history": history_layout(spec)} if spec.history.enabled else {}
    if not spec.source.shards:
        return {
            "cdc": ledger_layout(spec),
            "bucketed": bucketed_layout(spec),
            "base": base_layout(spec),
            "dead_letter": dead_letter_layout(spec),
            "tombstones": tombstones_layout(spec),
            **history,
        }
    per_shard: dict[str, TableLayout] = {}
    for view in spec.shard_specs():
        name = view.shard.shard_name if view.shard else ""
        per_shard[f"cdc:{name}"] = ledger_layout(view)
        per_shard[f"bucketed:{name}"] = bucketed_layout(view)
        per_shard[f"dead_letter:{name}"] = dead_letter_layout(view)
    return {
        **per_shard,
        "base": base_layout(spec),
        "tombstones": tombstones_layout(spec),
        **history,
    }


# --- consistency groups (cdc_assets.pipeline.upsert.consistency)
# -----------------------------------


def group_namespace(specs: list[TableSpec]) -> str:
    """Where a group's own tables live: the namespace of its first table by name."""
    return sorted(specs, key=lambda s: s.name)[0].sink.namespace


def transactions_layout(group: str, namespace: str) -> TableLayout:
    """The group's source transactions, from Debezium's END records: one row per transaction
    and table it wrote (``data_collection``), with how many changes it made there."""
    return TableLayout(
        namespace=namespace,
        name=f"{group}_transactions",
        columns=(
            Column("txn_id", STRING, required=True, doc="source transaction id"),
            Column("data_collection", STRING, doc="a table it wrote (db.table, schema.table)"),
            Column("event_count", LONG, doc="its changes of that table"),
            Column("txn_events", LONG, doc="its changes of every table"),
            Column("_source_ts", TIMESTAMPTZ, doc="time of the END record in the source"),
            Column("_kafka_partition", INT, required=True),
            Column(
                "_kafka_offset",
                LONG,
                required=True,
                doc="offset of the END record: the transaction's place in commit order",
            ),
            Column("_processed_at", TIMESTAMPTZ, required=True),
        ),
        properties=dict(LEDGER_PROPERTIES),
        comment=f"source transactions of consistency group {group}",
    )


def cuts_layout(group: str, namespace: str) -> TableLayout:
    """Every cut the group published: the newest transaction applied in all of its tables."""
    return TableLayout(
        namespace=namespace,
        name=f"{group}_cuts",
        columns=(
            Column(
                "cut_offset",
                LONG,
                required=True,
                doc="offset of the cut transaction's END record: the views show every "
                "transaction at or before it, none after",
            ),
            Column("txn_id", STRING, doc="the cut transaction"),
            Column("cut_source_ts", TIMESTAMPTZ, doc="its time in the source"),
            Column("lag_ms", LONG, doc="newest applied change's source time minus the cut's"),
            Column("pending", LONG, doc="transactions after the cut, not yet in every table"),
            Column("snapshots", STRING, doc="history snapshot per table (JSON) the cut holds in"),
            Column("published_at", TIMESTAMPTZ, required=True),
        ),
        properties=dict(LEDGER_PROPERTIES),
        comment=f"consistent cuts of consistency group {group}",
    )
