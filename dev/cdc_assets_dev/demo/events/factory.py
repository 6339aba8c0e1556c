"""`DebeziumEventFactory`: change, snapshot, schema-change, heartbeat and transaction records of
one table spec, as the MySQL-family and PostgreSQL connectors write them.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Literal

from cdc_assets.schema.wire import plan_fields
from cdc_assets.spec.models import TableSpec
from cdc_assets_dev.demo.events.connect_schemas import (
    enum_values,
    field_schema,
    simple_field,
    source_schema,
    struct_schema,
    transaction_block_schema,
    type_name,
)
from cdc_assets_dev.demo.events.values import (
    BINLOG_FILE_BYTES,
    DEBEZIUM_VERSION,
    DEFAULT_START_TS_MS,
    FIRST_BINLOG_POS,
    MYSQL_FAMILY,
    MYSQL_SERVER_ID,
    KafkaRecord,
    Row,
    b64,
    encode_value,
)


def _dumps(obj: object) -> bytes:
    # Kafka Connect's JsonConverter writes compact JSON with non-ASCII characters as UTF-8.
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class DebeziumEventFactory:
    """Builds the Kafka records a Debezium connector would write for one table.

    Source positions, ``source.ts_ms`` and the payload ``ts_ms`` advance monotonically per event;
    every change made outside ``statement()`` is its own transaction. Deterministic for equal
    arguments and call sequences.
    """

    def __init__(
        self,
        spec: TableSpec,
        *,
        embed_schema: bool = False,
        server_name: str = "dbserver1",
        start_ts_ms: int = DEFAULT_START_TS_MS,
    ) -> None:
        self.spec = spec
        self.plans = plan_fields(spec)
        self.embed_schema = embed_schema
        self.server_name = server_name
        self._connector = spec.source.connector
        self._mysql = self._connector in MYSQL_FAMILY
        by_name = {p.name: p for p in self.plans}
        self._key_plans = [by_name[k] for k in spec.primary_key]
        self._rng = random.Random(start_ts_ms)
        self._ts = start_ts_ms
        self._processed = start_ts_ms
        self._file, self._pos, self._row = 3, FIRST_BINLOG_POS, 0
        self._gtid_seq = 1
        self._thread = 7
        self._server_uuid = str(uuid.uuid5(uuid.NAMESPACE_DNS, server_name))
        self._lsn, self._txid = 24_023_128, 760
        self._last_commit: int | None = None
        self._in_statement = False
        self._statement_rows = 0
        self._tx_label = self._label()
        prefix_schema = spec.source.schema_ or "public"
        middle = spec.source.database if self._mysql else prefix_schema
        self._prefix = f"{server_name}.{middle}.{spec.source.table}"
        self._data_collection = f"{middle}.{spec.source.table}"
        # Set by a TransactionLog: the transaction block of each change (None: no metadata).
        self.transaction_hook: Callable[[DebeziumEventFactory], dict[str, object]] | None = None

    # positions

    def _label(self) -> str:
        if not self._mysql:
            return f"{self._txid}:{self._lsn}"
        if self._connector == "mariadb":
            return f"0-1-{self._gtid_seq}"
        return f"{self._server_uuid}:{self._gtid_seq}"

    def _new_transaction(self, size: int) -> None:
        self._ts += self._rng.randint(1, 1500)
        if self._mysql:
            step = size + self._rng.randint(120, 360)
            if self._pos + step > BINLOG_FILE_BYTES:
                self._file, self._pos = self._file + 1, FIRST_BINLOG_POS
            else:
                self._pos += step
            self._row = 0
            self._gtid_seq += 1
            self._thread = self._rng.choice((7, 12, 31, 44))
        else:
            self._last_commit = self._lsn + 8
            self._lsn = self._last_commit + size + self._rng.randint(40, 240)
            self._txid += self._rng.randint(1, 3)
        self._tx_label = self._label()

    def _advance_for_change(self, size: int) -> None:
        if self._in_statement and self._statement_rows > 0:
            # Later rows of one statement: same binlog event (next row), or the next WAL record.
            if self._mysql:
                self._row += 1
            else:
                self._lsn += size + self._rng.randint(24, 64)
        elif not self._in_statement:
            self._new_transaction(size)
        if self._in_statement:
            self._statement_rows += 1

    def _processing_ts(self) -> int:
        self._processed = max(self._processed, self._ts + self._rng.randint(5, 180))
        return self._processed

    def _transaction_block(self) -> dict[str, object] | None:
        """Debezium's transaction block of the next change: set while a `TransactionLog`
        transaction is open over this factory, else none (transaction metadata off)."""
        return None if self.transaction_hook is None else self.transaction_hook(self)

    @property
    def source_ts_ms(self) -> int:
        """The source time of the newest change built (epoch milliseconds)."""
        return self._ts

    @property
    def data_collection(self) -> str:
        """The table's name in transaction records (db.table, or schema.table on PostgreSQL)."""
        return self._data_collection

    @property
    def transaction_id(self) -> str:
        """The id of the current source transaction (GTID, or ``txId:lsn`` on PostgreSQL)."""
        return self._tx_label

    @contextmanager
    def statement(self) -> Iterator[None]:
        """Make the change events built inside one multi-row statement of one transaction."""
        if self._in_statement:
            raise RuntimeError("statements do not nest")
        self._new_transaction(256)
        self._in_statement, self._statement_rows = True, 0
        try:
            yield
        finally:
            self._in_statement = False

    def _source(self, *, snapshot: bool, table: str | None = None) -> dict[str, object]:
        src = self.spec.source
        table_name = src.table if table is None else table
        common: dict[str, object] = {
            "version": DEBEZIUM_VERSION,
            # TiDB is captured with the MySQL connector.
            "connector": "mysql" if self._connector == "tidb" else self._connector,
            "name": self.server_name,
            "ts_ms": self._ts,
            "snapshot": "true" if snapshot else "false",
            "db": src.database,
        }
        if self._mysql:
            return {
                **common,
                "table": table_name,
                "server_id": 0 if snapshot else MYSQL_SERVER_ID,
                "gtid": None if snapshot else self._tx_label,
                "file": f"mysql-bin.{self._file:06d}",
                "pos": self._pos,
                "row": 0 if snapshot else self._row,
                "thread": None if snapshot else self._thread,
                "query": None,
            }
        previous = None if self._last_commit is None else str(self._last_commit)
        sequence = json.dumps([previous, str(self._lsn)], separators=(",", ":"))
        return {
            **common,
            "sequence": sequence,
            "schema": "" if table == "" else (src.schema_ or "public"),
            "table": table_name,
            "txId": self._txid,
            "lsn": self._lsn,
            "xmin": None,
        }

    # schemas

    def _value_struct(self, field_name: str) -> dict[str, object]:
        fields = [field_schema(self.spec, p) for p in self.plans]
        return struct_schema(f"{self._prefix}.Value", fields, optional=True, field=field_name)

    def _envelope_schema(self) -> dict[str, object]:
        fields = [
            self._value_struct("before"),
            self._value_struct("after"),
            {**source_schema(self._connector), "field": "source"},
            simple_field("op", "string"),
            simple_field("ts_ms", "int64", optional=True),
            transaction_block_schema(),
        ]
        return struct_schema(f"{self._prefix}.Envelope", fields, version=1)

    def _wrap(self, schema: Callable[[], dict[str, object]], payload: object) -> bytes:
        if self.embed_schema:
            return _dumps({"schema": schema(), "payload": payload})
        return _dumps(payload)

    # images and keys

    def _image(self, row: Row | None) -> dict[str, object] | None:
        if row is None:
            return None
        known = {p.name for p in self.plans}
        image = {
            p.name: encode_value(p, row[p.name], connector=self._connector)
            for p in self.plans
            if p.name in row
        }
        # Fields the spec does not know pass through untouched (a newer source column).
        image.update({k: v for k, v in row.items() if k not in known})
        return image

    def key_bytes(self, row: Row) -> bytes:
        """The Kafka key of a row: its primary key columns, encoded like the value."""
        payload = {
            p.name: encode_value(p, row.get(p.name), connector=self._connector)
            for p in self._key_plans
        }
        if not self.embed_schema:
            return _dumps(payload)
        fields = [{**field_schema(self.spec, p), "optional": False} for p in self._key_plans]
        return _dumps({"schema": struct_schema(f"{self._prefix}.Key", fields), "payload": payload})

    def _change(
        self, op: str, before: Row | None, after: Row | None, *, snapshot: bool = False
    ) -> KafkaRecord:
        images = (self._image(before), self._image(after))
        if snapshot:
            self._ts += self._rng.randint(0, 2)
        else:
            self._advance_for_change(len(_dumps(images)))
        payload = {
            "before": images[0],
            "after": images[1],
            "source": self._source(snapshot=snapshot),
            "op": op,
            "ts_ms": self._processing_ts(),
            "transaction": self._transaction_block(),
        }
        keyed = after if after is not None else before
        natural = after if op != "d" else before
        return KafkaRecord(
            key=None if keyed is None else self.key_bytes(keyed),
            value=self._wrap(self._envelope_schema, payload),
            row=None if natural is None else dict(natural),
        )

    # change events

    def create(self, row: Row) -> KafkaRecord:
        """An insert (op ``c``)."""
        return self._change("c", None, row)

    def update(self, before: Row | None, after: Row) -> KafkaRecord:
        """An update (op ``u``); ``before`` may be None, as PostgreSQL sends by default."""
        return self._change("u", before, after)

    def delete(self, before: Row) -> KafkaRecord:
        """A delete (op ``d``); PostgreSQL sends only the key columns in ``before`` by default."""
        return self._change("d", before, None)

    def read(self, row: Row) -> KafkaRecord:
        """A snapshot read (op ``r``): the position stays at the snapshot's position."""
        return self._change("r", None, row, snapshot=True)

    def truncate(self) -> KafkaRecord:
        """A truncate (op ``t``): no images and no key."""
        self._new_transaction(64)
        payload = {
            "before": None,
            "after": None,
            "source": self._source(snapshot=False),
            "op": "t",
            "ts_ms": self._processing_ts(),
            "transaction": self._transaction_block(),
        }
        return KafkaRecord(key=None, value=self._wrap(self._envelope_schema, payload))

    def tombstone(self, key_row: Row) -> KafkaRecord:
        """The tombstone Debezium writes after a delete so compaction can drop the key."""
        return KafkaRecord(key=self.key_bytes(key_row), value=None)

    # other records a topic may carry

    def heartbeat(self) -> KafkaRecord:
        """A heartbeat record: only a timestamp."""
        self._processed = max(self._processed, self._ts) + self._rng.randint(1, 20)
        key = {"serverName": self.server_name}
        value = {"ts_ms": self._processed}
        if not self.embed_schema:
            return KafkaRecord(_dumps(key), _dumps(value))
        key_schema = struct_schema(
            "io.debezium.connector.common.ServerNameKey", [simple_field("serverName", "string")]
        )
        value_schema = struct_schema(
            "io.debezium.connector.common.Heartbeat", [simple_field("ts_ms", "int64")]
        )
        return KafkaRecord(
            _dumps({"schema": key_schema, "payload": key}),
            _dumps({"schema": value_schema, "payload": value}),
        )

    def transaction(
        self,
        status: Literal["BEGIN", "END"],
        txid: str | None = None,
        *,
        event_count: int | None = None,
    ) -> KafkaRecord:
        """A transaction metadata record; ``txid`` defaults to the current transaction."""
        tx = self._tx_label if txid is None else txid
        count = (event_count or 0) if status == "END" else None
        collections = (
            [{"data_collection": self._data_collection, "event_count": count}]
            if status == "END"
            else None
        )
        value = {
            "status": status,
            "id": tx,
            "event_count": count,
            "data_collections": collections,
            "ts_ms": self._ts,
        }
        key = {"id": tx}
        if not self.embed_schema:
            return KafkaRecord(_dumps(key), _dumps(value))
        collection_schema = struct_schema(
            None,
            [simple_field("data_collection", "string"), simple_field("event_count", "int64")],
        )
        value_schema = struct_schema(
            "io.debezium.connector.common.TransactionMetadataValue",
            [
                simple_field("status", "string"),
                simple_field("id", "string"),
                simple_field("event_count", "int64", optional=True),
                {
                    "type": "array",
                    "items": collection_schema,
                    "optional": True,
                    "field": "data_collections",
                },
                simple_field("ts_ms", "int64"),
            ],
        )
        key_schema = struct_schema(
            "io.debezium.connector.common.TransactionMetadataKey", [simple_field("id", "string")]
        )
        return KafkaRecord(
            _dumps({"schema": key_schema, "payload": key}),
            _dumps({"schema": value_schema, "payload": value}),
        )

    def schema_change(self, ddl: str) -> KafkaRecord:
        """A record of the schema change topic (MySQL shape) describing the spec's table."""
        self._new_transaction(len(ddl))
        src = self.spec.source
        table_id = f'"{src.database}"."{src.table}"'
        value = {
            "source": self._source(snapshot=False),
            "ts_ms": self._processing_ts(),
            "databaseName": src.database,
            "schemaName": src.schema_,
            "ddl": ddl,
            "tableChanges": [
                {
                    "type": "ALTER",
                    "id": table_id,
                    "table": {
                        "defaultCharsetName": "utf8mb4",
                        "primaryKeyColumnNames": list(self.spec.primary_key),
                        "columns": self._table_columns(),
                        "attributes": [],
                    },
                    "comment": self.spec.description,
                }
            ],
        }
        key = {"databaseName": src.database}
        if not self.embed_schema:
            return KafkaRecord(_dumps(key), _dumps(value))
        key_schema = struct_schema(
            "io.debezium.connector.mysql.SchemaChangeKey", [simple_field("databaseName", "string")]
        )
        return KafkaRecord(
            _dumps({"schema": key_schema, "payload": key}),
            _dumps({"schema": self._schema_change_schema(), "payload": value}),
        )

    def _table_columns(self) -> list[dict[str, object]]:
        columns: list[dict[str, object]] = []
        for position, (col, plan) in enumerate(zip(self.spec.columns, self.plans, strict=True)):
            columns.append(
                {
                    "name": col.name,
                    "jdbcType": _JDBC_TYPES.get(plan.source.kind, 1111),
                    "nativeType": None,
                    # As the MySQL connector reports it: the type name without its size.
                    "typeName": type_name(col.type),
                    "typeExpression": type_name(col.type),
                    "charsetName": "utf8mb4" if plan.natural.name == "string" else None,
                    "length": plan.source.length or plan.source.precision,
                    "scale": plan.source.scale,
                    "position": position + 1,
                    "optional": col.nullable,
                    "autoIncremented": False,
                    "generated": False,
                    "comment": col.comment,
                    "hasDefaultValue": col.default is not None,
                    "defaultValueExpression": col.default,
                    # As Debezium's DDL parser keeps them: each label a quoted literal.
                    "enumValues": [
                        "'" + v.replace("'", "''") + "'"
                        for v in enum_values(plan.source.text) or ()
                    ]
                    or None,
                }
            )
        return columns

    def _schema_change_schema(self) -> dict[str, object]:
        column_fields = [
            simple_field("name", "string"),
            simple_field("jdbcType", "int32"),
            simple_field("nativeType", "int32", optional=True),
            simple_field("typeName", "string"),
            simple_field("typeExpression", "string", optional=True),
            simple_field("charsetName", "string", optional=True),
            simple_field("length", "int32", optional=True),
            simple_field("scale", "int32", optional=True),
            simple_field("position", "int32"),
            simple_field("optional", "boolean", optional=True),
            simple_field("autoIncremented", "boolean", optional=True),
            simple_field("generated", "boolean", optional=True),
            simple_field("comment", "string", optional=True),
            simple_field("hasDefaultValue", "boolean", optional=True),
            simple_field("defaultValueExpression", "string", optional=True),
            {
                "type": "array",
                "items": {"type": "string", "optional": False},
                "optional": True,
                "field": "enumValues",
            },
        ]
        column = struct_schema("io.debezium.connector.schema.Column", column_fields)
        attribute = struct_schema(
            "io.debezium.connector.schema.Attribute",
            [simple_field("name", "string"), simple_field("value", "string")],
        )
        table_fields = [
            simple_field("defaultCharsetName", "string", optional=True),
            {
                "type": "array",
                "items": {"type": "string", "optional": False},
                "optional": True,
                "field": "primaryKeyColumnNames",
            },
            {"type": "array", "items": column, "optional": False, "field": "columns"},
            {"type": "array", "items": attribute, "optional": True, "field": "attributes"},
        ]
        change_fields = [
            simple_field("type", "string"),
            simple_field("id", "string"),
            {
                **struct_schema("io.debezium.connector.schema.Table", table_fields),
                "optional": True,
                "field": "table",
            },
            simple_field("comment", "string", optional=True),
        ]
        change = struct_schema("io.debezium.connector.schema.Change", change_fields)
        fields = [
            {**source_schema(self._connector), "field": "source"},
            simple_field("ts_ms", "int64"),
            simple_field("databaseName", "string", optional=True),
            simple_field("schemaName", "string", optional=True),
            simple_field("ddl", "string", optional=True),
            {"type": "array", "items": change, "optional": False, "field": "tableChanges"},
        ]
        return struct_schema("io.debezium.connector.mysql.SchemaChangeValue", fields)

    def message(self, prefix: str = "audit", content: bytes = b"checkpoint") -> KafkaRecord:
        """A PostgreSQL logical decoding message (op ``m``, from ``pg_logical_emit_message``)."""
        self._new_transaction(len(content))
        payload = {
            "op": "m",
            "ts_ms": self._processing_ts(),
            "source": self._source(snapshot=False, table=""),
            "message": {"prefix": prefix, "content": b64(content)},
        }
        key = {"prefix": prefix}
        if not self.embed_schema:
            return KafkaRecord(_dumps(key), _dumps(payload))
        message_schema = struct_schema(
            "io.debezium.connector.postgresql.Message",
            [simple_field("prefix", "string"), simple_field("content", "bytes")],
            optional=True,
            field="message",
        )
        value_schema = struct_schema(
            "io.debezium.connector.postgresql.MessageValue",
            [
                simple_field("op", "string"),
                simple_field("ts_ms", "int64", optional=True),
                {**source_schema(self._connector), "field": "source"},
                message_schema,
            ],
        )
        key_schema = struct_schema(
            "io.debezium.connector.postgresql.MessageKey", [simple_field("prefix", "string")]
        )
        return KafkaRecord(
            _dumps({"schema": key_schema, "payload": key}),
            _dumps({"schema": value_schema, "payload": payload}),
        )


_JDBC_TYPES = {
    "BIGINT": -5,
    "UBIGINT": -5,
    "BIGSERIAL": -5,
    "INT": 4,
    "UINT": 4,
    "SERIAL": 4,
    "MEDIUMINT": 4,
    "UMEDIUMINT": 4,
    "SMALLINT": 5,
    "USMALLINT": 5,
    "SMALLSERIAL": 5,
    "TINYINT": -6,
    "UTINYINT": -6,
    "BOOLEAN": 16,
    "BIT": -7,
    "FLOAT": 7,
    "DOUBLE": 8,
    "DECIMAL": 3,
    "CHAR": 1,
    "NCHAR": -15,
    "VARCHAR": 12,
    "NVARCHAR": -9,
    "TEXT": -1,
    "TINYTEXT": -1,
    "MEDIUMTEXT": -1,
    "LONGTEXT": -1,
    "DATE": 91,
    "TIME": 92,
    "TIMETZ": 2013,
    "DATETIME": 93,
    "TIMESTAMP": 93,
    "TIMESTAMPTZ": 2014,
    "TIMESTAMPLTZ": 2014,
    "BINARY": -2,
    "VARBINARY": -3,
    "BLOB": 2004,
    "TINYBLOB": 2004,
    "MEDIUMBLOB": 2004,
    "LONGBLOB": 2004,
}
