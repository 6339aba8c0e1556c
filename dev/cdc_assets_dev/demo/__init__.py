"""Demo data: realistic Debezium change events for a table spec, and a producer to send them."""

from cdc_assets_dev.demo.events import (
    TOAST,
    DebeziumEventFactory,
    KafkaRecord,
    encode_value,
    make_key,
    produce,
    random_row,
    workload,
)

__all__ = [
    "TOAST",
    "DebeziumEventFactory",
    "KafkaRecord",
    "encode_value",
    "make_key",
    "produce",
    "random_row",
    "workload",
]
