"""Push detection: one sensor reads Debezium's schema-change topics (MySQL/MariaDB) and starts an
evolution of each table whose new shape differs from its current spec.

The spec is re-read from the spec directory on every tick, so a change that an evolution already
applied (or the initial CREATE TABLE of a snapshot) starts nothing.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
from dagster._core.definitions.unresolved_asset_job_definition import (
    UnresolvedAssetJobDefinition,
)

from cdc_assets.assets.schema import evolve_run_config
from cdc_assets.errors import CdcAssetsError
from cdc_assets.pipeline.converge import proposal, spec_path
from cdc_assets.pipeline.schema_topic import matches, read_schema_changes
from cdc_assets.resources.kafka import KafkaResource
from cdc_assets.spec.load import load_spec
from cdc_assets.spec.models import TableSpec


def build_schema_change_sensor(
    specs: list[TableSpec], specs_dir: Path, job: UnresolvedAssetJobDefinition
) -> dg.SensorDefinition:
    watched = [s for s in specs if s.source.schema_changes]
    topics = sorted({t for s in watched if (t := s.source.schema_changes)})

    @dg.sensor(
        name="schema_changes",
        job=job,
        minimum_interval_seconds=30,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Reads Debezium schema-change topics and starts the evolution of each table "
        "whose source changed shape (push detection).",
    )
    def schema_changes(
        context: dg.SensorEvaluationContext, kafka: KafkaResource
    ) -> dg.SensorResult | dg.SkipReason:
        if not topics:
            return dg.SkipReason("no MySQL/MariaDB table: no schema-change topic to read")
        cursor: dict[str, dict[str, int]] = json.loads(context.cursor or "{}")
        requests = []
        for topic in topics:
            start = {int(p): o for p, o in cursor.get(topic, {}).items()}
            seen, next_offsets = read_schema_changes(kafka, topic, start)
            for item in seen:
                spec = next((s for s in watched if matches(s, item.change)), None)
                if spec is None or spec.source.schema_changes != topic:
                    continue
                ddl, create = item.change.ddl, item.change.create_table
                try:
                    current = load_spec(spec_path(specs_dir, spec.name))
                    plan = proposal(current, source_ddl=create, audit_ddl=[ddl])
                    if plan.supported and not plan.changes:
                        continue  # already the spec's shape
                except CdcAssetsError as err:
                    context.log.warning(f"{spec.name}: {err}; the evolution run will report it")
                detected = (
                    datetime.fromtimestamp(item.change.ts_ms / 1000, UTC).isoformat()
                    if item.change.ts_ms
                    else datetime.now(UTC).isoformat()
                )
                requests.append(
                    dg.RunRequest(
                        run_key=item.run_key,
                        asset_selection=[dg.AssetKey(["schema", spec.name])],
                        run_config=evolve_run_config(
                            spec.name,
                            source_ddl=create,
                            audit_ddl=[ddl],
                            trigger="push",
                            detected_at=detected,
                        ),
                        tags={"cdc/table": spec.name, "cdc/trigger": "schema_changes"},
                    )
                )
            cursor[topic] = {str(p): o for p, o in sorted(next_offsets.items())}
        return dg.SensorResult(run_requests=requests, cursor=json.dumps(cursor, sort_keys=True))

    return schema_changes
