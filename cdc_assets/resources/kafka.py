"""Dagster resource for Kafka: bootstrap servers, an admin client and topic offsets."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from dagster import ConfigurableResource
from pydantic import Field

from cdc_assets.errors import StackError
from cdc_assets.kafka_security import KafkaSecurity
from cdc_assets.local_servers.endpoints import require_bootstrap, running_registry
from cdc_assets.resources.kafka_client import PartitionOffsets
from cdc_assets.resources.schema_registry import TopicSchemas, topic_schemas
from cdc_assets.settings import load_settings


class KafkaResource(ConfigurableResource):  # type: ignore[type-arg]
    """A Kafka cluster. Without ``bootstrap_servers`` it uses the running local stack's broker."""

    bootstrap_servers: str | None = Field(
        default=None, description="host:port list; unset means the local stack's broker"
    )
    home: str = Field(description="CDC_ASSETS_HOME, where the local stack records its broker")
    client_config: dict[str, str] = Field(
        default_factory=dict,
        description="extra librdkafka settings (timeouts, ...); security comes from the "
        "CDC_ASSETS_KAFKA_* settings, never from here (resource config shows in the UI)",
    )
    spark_options: dict[str, str] = Field(
        default_factory=dict,
        description="extra options of Spark's Kafka source (kafka.<Java client setting>, ...)",
    )
    timeout_s: float = 15.0
    schema_registry_url: str | None = Field(
        default=None,
        description="Confluent-compatible schema registry (Avro records); unset means the local "
        "stack's registry when it runs one, else none",
    )

    def resolved_bootstrap(self) -> str:
        if self.bootstrap_servers:
            return self.bootstrap_servers
        return require_bootstrap(replace(load_settings(), home=Path(self.home)))

    secured: bool = Field(
        default=True,
        description="apply the CDC_ASSETS_KAFKA_* security settings; False: plaintext (a "
        "second, unsecured listener of the same cluster)",
    )

    def security(self) -> KafkaSecurity:
        """How this process's clients authenticate and encrypt: read from the settings at use,
        so secrets never sit in the resource's config (which the Dagster UI shows)."""
        return load_settings().kafka_security if self.secured else KafkaSecurity()

    def client_conf(self) -> dict[str, str | int | float | bool]:
        """librdkafka settings: bootstrap, security, extras. With security on, the first use
        in a process checks the credentials and certificates (resources/preflight), so a wrong
        one fails here naming its setting, before a run reads or writes anything."""
        bootstrap = self.resolved_bootstrap()
        security = self.security()
        conf: dict[str, str | int | float | bool] = {
            "bootstrap.servers": bootstrap,
            **security.librdkafka(),
            **self.client_config,
        }
        if security.enabled:
            from cdc_assets.resources.preflight import check_kafka

            check_kafka(bootstrap, security, conf, timeout_s=self.timeout_s)
        return conf

    def reader_options(self) -> dict[str, str]:
        """Options of Spark's Kafka source: bootstrap, the Java client's security, extras."""
        return {
            "kafka.bootstrap.servers": self.resolved_bootstrap(),
            **self.security().spark_options(),
            **self.spark_options,
        }

    def resolved_registry(self) -> str | None:
        """The schema registry's URL: the configured one, else the local stack's, else None."""
        if self.schema_registry_url:
            return self.schema_registry_url
        registry = running_registry(replace(load_settings(), home=Path(self.home)))
        return registry.url if registry is not None else None

    def topic_schemas(self, topic: str) -> TopicSchemas:
        """The writer schemas of the topic's value subject (see `schema_registry`)."""
        return topic_schemas(self.resolved_registry(), topic)

    def admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient(self.client_conf())

    def latest_offsets(self, topics: list[str]) -> dict[str, dict[int, int]]:
        """End offsets of many topics in one batched request (sensors poll thousands)."""
        from confluent_kafka import TopicPartition

        # Imported from where it is defined: the package re-exports it from
        # confluent_kafka.admin, but its type stubs do not declare the re-export.
        from confluent_kafka.admin._listoffsets import OffsetSpec

        admin = self.admin()
        meta = admin.list_topics(timeout=self.timeout_s)
        wanted = {
            TopicPartition(t, p): OffsetSpec.latest()  # type: ignore[no-untyped-call]
            for t in topics
            if t in meta.topics and meta.topics[t].error is None
            for p in meta.topics[t].partitions
        }
        out: dict[str, dict[int, int]] = {t: {} for t in topics if t in meta.topics}
        if not wanted:
            return out
        for tp, future in admin.list_offsets(wanted, request_timeout=self.timeout_s).items():
            out[tp.topic][tp.partition] = future.result().offset
        return out

    def retention_ms(self, topic: str) -> int | None:
        """The topic's retention.ms (None for infinite retention)."""
        from confluent_kafka.admin._config import ConfigResource  # see OffsetSpec above

        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        admin = self.admin()  # keep the client alive until the future resolves
        future = admin.describe_configs([resource], request_timeout=self.timeout_s)
        configs = future[resource].result()
        value = int(configs["retention.ms"].value)
        return None if value < 0 else value

    def record_timestamps(self, topic: str, offsets: dict[int, int]) -> dict[int, int]:
        """Timestamp (ms) of the record at each partition's offset, where one exists."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(
            {**self.client_conf(), "group.id": "cdc-assets-probe", "enable.auto.commit": False}
        )
        out: dict[int, int] = {}
        try:
            for partition, offset in offsets.items():
                consumer.assign([TopicPartition(topic, partition, offset)])
                msg = consumer.poll(self.timeout_s)
                if msg is not None and msg.error() is None:
                    out[partition] = msg.timestamp()[1]
        finally:
            consumer.close()
        return out

    def offsets_for_time(self, topic: str, partitions: list[int], ts_ms: int) -> dict[int, int]:
        """Per partition, the first offset whose timestamp is >= ts_ms (the end if none is)."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({**self.client_conf(), "group.id": "cdc-assets-probe"})
        try:
            found = consumer.offsets_for_times(
                [TopicPartition(topic, p, ts_ms) for p in partitions], timeout=self.timeout_s
            )
            out = {}
            for tp in found:
                if tp.offset < 0:
                    _, high = consumer.get_watermark_offsets(tp, timeout=self.timeout_s)
                    out[tp.partition] = high
                else:
                    out[tp.partition] = tp.offset
            return out
        finally:
            consumer.close()

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
