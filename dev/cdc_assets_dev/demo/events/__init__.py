"""Realistic Debezium JSON events for a table spec, each value encoded as the wire plan says: an
event factory (`factory`), random rows (`rows`), a mixed CDC workload (`changes`) and a Kafka
producer (`produce`) for demos and tests, over the value encoding (`values`) and the embedded
Kafka Connect schemas (`connect_schemas`)."""

from cdc_assets_dev.demo.events.changes import workload
from cdc_assets_dev.demo.events.factory import DebeziumEventFactory
from cdc_assets_dev.demo.events.produce import produce
from cdc_assets_dev.demo.events.rows import make_key, random_row
from cdc_assets_dev.demo.events.values import (
    BINLOG_FILE_BYTES,
    DEBEZIUM_VERSION,
    DEFAULT_START_TS_MS,
    MYSQL_FAMILY,
    TOAST,
    KafkaRecord,
    encode_value,
    toast_wire_value,
)

__all__ = [
    "BINLOG_FILE_BYTES",
    "DEBEZIUM_VERSION",
    "DEFAULT_START_TS_MS",
    "MYSQL_FAMILY",
    "TOAST",
    "DebeziumEventFactory",
    "KafkaRecord",
    "encode_value",
    "make_key",
    "produce",
    "random_row",
    "toast_wire_value",
    "workload",
]
