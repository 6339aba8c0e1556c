"""What the engine asks of a Kafka cluster: the ``KafkaClient`` protocol, and a partition's
offsets. The engine's stages (``pipeline/``) take any object with these methods; the Dagster
resource (``resources.kafka.KafkaResource``) is one, so the engine imports no Dagster through
it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from cdc_assets.resources.schema_registry import TopicSchemas


@dataclass(frozen=True)
class PartitionOffsets:
    """Low and high watermarks of one topic partition (high = next offset to be written)."""

    partition: int
    earliest: int
    latest: int

    @property
    def retained(self) -> int:
        return self.latest - self.earliest


class KafkaClient(Protocol):
    """A Kafka cluster as the engine's stages use it."""

    @property
    def timeout_s(self) -> float:
        """How long one request to the cluster may take."""

    def resolved_bootstrap(self) -> str:
        """The bootstrap servers."""

    def client_conf(self) -> dict[str, str | int | float | bool]:
        """Settings of a confluent-kafka client (bootstrap, security)."""

    def reader_options(self) -> dict[str, str]:
        """Options of Spark's Kafka source (bootstrap, security, extras)."""

    def topic_schemas(self, topic: str) -> TopicSchemas:
        """The writer schemas of the topic's value subject in the schema registry."""

    def topic_offsets(self, topic: str) -> list[PartitionOffsets]:
        """Each partition's low and high watermarks."""

    def retention_ms(self, topic: str) -> int | None:
        """The topic's retention.ms, None when it keeps everything."""

    def record_timestamps(self, topic: str, offsets: dict[int, int]) -> dict[int, int]:
        """The timestamp of the record at each partition's offset."""

    def offsets_for_time(self, topic: str, partitions: list[int], ts_ms: int) -> dict[int, int]:
        """Each partition's first offset at or after ``ts_ms``."""
