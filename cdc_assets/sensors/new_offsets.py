"""One sensor for all tables: request an ingest run for each table whose topic has new offsets."""

import json
from datetime import UTC, datetime

import dagster as dg
from dagster._core.definitions.unresolved_asset_job_definition import (
    UnresolvedAssetJobDefinition,
)

from cdc_assets.resources.kafka import KafkaResource
from cdc_assets.spec.models import TableSpec


def current_hour_key(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%d-%H:00")


# A run in one of these states has not finished reading yet.
IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


def ingest_in_flight(instance: dg.DagsterInstance, table: str) -> bool:
    """Whether an ingest run of ``table`` is queued or running."""
    records = instance.get_run_records(
        filters=dg.RunsFilter(
            job_name="ingest_ledgers", tags={"cdc/table": table}, statuses=IN_FLIGHT
        ),
        limit=1,
    )
    return bool(records)


def build_new_offsets_sensor(
    specs: list[TableSpec], job: UnresolvedAssetJobDefinition
) -> dg.SensorDefinition:
    by_topic = {s.source.topic: s for s in specs}

    @dg.sensor(
        name="new_kafka_offsets",
        job=job,
        # One batched offsets request per tick is cheap; the interval is most of the wait
        # between a commit at the source and its ingest.
        minimum_interval_seconds=10,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Starts an incremental ledger ingest for each table whose topic grew.",
    )
    def new_kafka_offsets(
        context: dg.SensorEvaluationContext, kafka: KafkaResource
    ) -> dg.SensorResult:
        seen: dict[str, dict[str, int]] = json.loads(context.cursor or "{}")
        latest = kafka.latest_offsets(list(by_topic))
        hour = current_hour_key(datetime.now(UTC))
        requests = []
        for topic, offsets in latest.items():
            current = {str(p): o for p, o in sorted(offsets.items())}
            if current == seen.get(topic) or not any(current.values()):
                continue
            spec = by_topic[topic]
            if ingest_in_flight(context.instance, spec.name):
                # That run reads to the end it finds when it starts; the cursor stays, so the next
                # tick after it asks again for what arrived since. No pile of queued runs.
                continue
            requests.append(
                dg.RunRequest(
                    run_key=f"{spec.name}:{json.dumps(current, sort_keys=True)}",
                    partition_key=hour,
                    asset_selection=[dg.AssetKey(["cdc", spec.name])],
                    tags={"cdc/table": spec.name, "cdc/trigger": "new_offsets"},
                )
            )
            seen[topic] = current
        return dg.SensorResult(run_requests=requests, cursor=json.dumps(seen, sort_keys=True))

    return new_kafka_offsets
