"""`TransactionLog`: changes of several tables' factories in shared source transactions, with
the BEGIN/END records Debezium writes to its transaction topic (``provide.transaction.metadata``).

Inside ``with log.transaction():`` every change a member factory builds carries the transaction
block (id, total order, order within its table); on exit the END record lists each table's
change count. The records for the transaction topic collect in ``log.records``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from cdc_assets_dev.demo.events.factory import DebeziumEventFactory
from cdc_assets_dev.demo.events.values import KafkaRecord


class TransactionLog:
    """Source transactions over the tables of one server (one factory per table)."""

    def __init__(self, factories: list[DebeziumEventFactory], server_name: str = "dbserver1"):
        self.factories = factories
        self.server_name = server_name
        self.records: list[KafkaRecord] = []
        self._number = 0
        self._total = 0
        self._per_table: dict[str, int] = {}

    def _block(self, factory: DebeziumEventFactory) -> dict[str, object]:
        self._total += 1
        order = self._per_table.get(factory.data_collection, 0) + 1
        self._per_table[factory.data_collection] = order
        return {
            "id": self.current_id,
            "total_order": self._total,
            "data_collection_order": order,
        }

    @property
    def current_id(self) -> str:
        return f"{self.server_name}-tx-{self._number}"

    def _record(self, value: dict[str, object]) -> KafkaRecord:
        key = json.dumps({"id": self.current_id}).encode()
        return KafkaRecord(key, json.dumps(value).encode())

    @contextmanager
    def transaction(self) -> Iterator[str]:
        """One source transaction: the member factories' changes inside it are its changes."""
        self._number += 1
        self._total = 0
        self._per_table = {}
        ts = max(f.source_ts_ms for f in self.factories)
        self.records.append(self._record({"status": "BEGIN", "id": self.current_id, "ts_ms": ts}))
        with ExitStack() as stack:
            for factory in self.factories:
                stack.enter_context(factory.statement())
                factory.transaction_hook = self._block
            try:
                yield self.current_id
            finally:
                for factory in self.factories:
                    factory.transaction_hook = None
        end_ts = max(f.source_ts_ms for f in self.factories)
        self.records.append(
            self._record(
                {
                    "status": "END",
                    "id": self.current_id,
                    "event_count": self._total,
                    "data_collections": [
                        {"data_collection": name, "event_count": n}
                        for name, n in sorted(self._per_table.items())
                    ],
                    "ts_ms": end_ts,
                }
            )
        )
