"""Writing generated records to a Kafka topic (created when missing), with delivery checked."""

from __future__ import annotations

from collections.abc import Iterable

from cdc_assets.errors import ProduceError
from cdc_assets_dev.demo.events.values import KafkaRecord


def produce(
    records: Iterable[KafkaRecord],
    topic: str,
    bootstrap_servers: str,
    *,
    partitions_by_key: bool = True,
    timeout_s: float = 60.0,
) -> None:
    """Write records in order; raise ProduceError unless every one was acknowledged.

    By key, records are spread with Kafka Connect's (Java client's) murmur2 partitioner, so a key
    lands where Debezium would put it; otherwise everything goes to partition 0.
    """
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "partitioner": "murmur2_random",
        }
    )
    failures: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    sent = 0
    for record in records:
        while True:
            try:
                producer.produce(
                    topic,
                    value=record.value,
                    key=record.key,
                    partition=-1 if partitions_by_key else 0,  # -1: let the partitioner choose
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                producer.poll(0.5)  # local queue full: let deliveries drain
        sent += 1
        producer.poll(0)
    remaining = producer.flush(timeout_s)
    if remaining or failures:
        detail = "; ".join(failures[:5]) or f"{remaining} still queued after {timeout_s}s"
        raise ProduceError(
            f"{len(failures) + remaining} of {sent} records to {topic!r} were not delivered: "
            f"{detail}"
        )
