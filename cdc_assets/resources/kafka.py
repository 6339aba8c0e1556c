"""Dagster resource for Kafka: bootstrap servers, an admin client and topic offsets."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dagster import ConfigurableResource
from pydantic import Field

from cdc_assets.errors import StackError
from cdc_assets.settings import load_settings


@dataclass(frozen=True)
class PartitionOffsets:
    """Low and high watermarks of one topic partition (high = next offset to be written)."""

    partition: int
    earliest: int
    latest: int

    @property
    def retained(self) -> int:
        return self.latest - self.earliest


class KafkaResource(ConfigurableResource):  # type: ignore[type-arg]
    """A Kafka cluster. Without ``bootstrap_servers`` it uses the running local stack's broker."""

    bootstrap_servers: str | None = Field(
        default=None, description="host:port list; unset means the local stack's broker"
    )
    home: str = Field(description="CDC_ASSETS_HOME, where the local stack records its broker")
    client_config: dict[str, str] = Field(
        default_factory=dict, description="extra librdkafka settings (security, timeouts, ...)"
    )
    timeout_s: float = 15.0

    def resolved_bootstrap(self) -> str:
        if self.bootstrap_servers:
            return self.bootstrap_servers
        from cdc_assets.resources.local_stack import require_bootstrap

        return require_bootstrap(replace(load_settings(), home=Path(self.home)))

    def client_conf(self) -> dict[str, str | int | float | bool]:
        return {"bootstrap.servers": self.resolved_bootstrap(), **self.client_config}

    def admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient(self.client_conf())

    def topic_offsets(self, topic: str) -> list[PartitionOffsets]:
        """Earliest and latest offsets of every partition; StackError if the topic is missing."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({**self.client_conf(), "group.id": "cdc-assets-offsets"})
        try:
            meta = consumer.list_topics(topic, timeout=self.timeout_s)
            info = meta.topics.get(topic)
            if info is None or info.error is not None or not info.partitions:
                reason = info.error if info is not None else "not found"
                raise StackError(
                    f"Kafka topic {topic!r} is not available on {self.resolved_bootstrap()}: "
                    f"{reason}"
                )
            out = []
            for pid in sorted(info.partitions):
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, pid), timeout=self.timeout_s, cached=False
                )
                out.append(PartitionOffsets(pid, low, high))
            return out
        finally:
            consumer.close()
