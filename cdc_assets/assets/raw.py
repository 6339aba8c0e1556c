"""The raw asset of a table: its Kafka topic, observed (offsets, ledger lag, retention)."""

from collections.abc import Iterator, Sequence
from typing import Any

import dagster as dg

from cdc_assets.assets.keys import asset_key
from cdc_assets.pipeline.shared.topic import observe_topic
from cdc_assets.resources.iceberg import IcebergCatalogResource
from cdc_assets.resources.kafka import KafkaResource
from cdc_assets.spec.models import TableSpec


def observation_metadata(
    kafka: KafkaResource, iceberg: IcebergCatalogResource, spec: TableSpec
) -> dict[str, Any]:
    """What the topic holds and how far the ledger lags; per shard for a sharded table."""
    if not spec.source.shards:
        return _observed(kafka, iceberg, spec)
    shards = {view.source.topic: _observed(kafka, iceberg, view) for view in spec.shard_specs()}
    headrooms = [
        m["retention_headroom_s"] for m in shards.values() if m["retention_headroom_s"] >= 0
    ]
    return {
        "topics": len(shards),
        "partitions": sum(m["partitions"] for m in shards.values()),
        "retained_messages": sum(m["retained_messages"] for m in shards.values()),
        "ledger_lag": sum(m["ledger_lag"] for m in shards.values()),
        "retention_headroom_s": min(headrooms) if headrooms else -1.0,
        "shards": dg.MetadataValue.json(shards),
    }


def _observed(
    kafka: KafkaResource, iceberg: IcebergCatalogResource, spec: TableSpec
) -> dict[str, Any]:
    obs = observe_topic(kafka, iceberg.load_catalog(), spec)
    headroom = obs.retention_headroom_s
    return {
        "partitions": len(obs.partitions),
        "retained_messages": sum(p.retained for p in obs.partitions),
        "earliest_offsets": {str(p.partition): p.earliest for p in obs.partitions},
        "latest_offsets": {str(p.partition): p.latest for p in obs.partitions},
        "ledger_offsets": {str(p): o for p, o in sorted(obs.committed.items())},
        "ledger_lag": sum(obs.lag.values()),
        "retention_ms": obs.retention_ms if obs.retention_ms is not None else -1,
        "retention_headroom_s": round(headroom, 1) if headroom is not None else -1.0,
    }


TOPICS_OP = "topics"


def build_topics_asset(
    specs: Sequence[TableSpec], asset_specs: Sequence[dg.AssetSpec]
) -> dg.AssetsDefinition:
    """Every table's raw asset as one subsettable multi-asset: materializing a table's raw
    records what its topic holds and how far the ledger lags behind it."""
    by_key = {asset_key("raw", s.name): s for s in specs}

    @dg.multi_asset(
        name=TOPICS_OP,
        specs=list(asset_specs),
        can_subset=True,
        description="Observe the selected tables' Kafka topics: offsets, ledger lag, retention.",
    )
    def topics(
        context: dg.AssetExecutionContext, kafka: KafkaResource, iceberg: IcebergCatalogResource
    ) -> Iterator[dg.MaterializeResult]:  # type: ignore[type-arg]
        for key in sorted(context.selected_asset_keys, key=lambda k: k.to_user_string()):
            yield dg.MaterializeResult(
                asset_key=key, metadata=observation_metadata(kafka, iceberg, by_key[key])
            )

    return topics
