"""The cdc asset of a table: the Iceberg ledger, one hourly Dagster partition per dt/hr.

A run for the current hour (or later) is incremental: it consumes everything new on the topic,
wherever the records' hours fall, and reports each hour it wrote. A run for an earlier hour is a
backfill: it rebuilds exactly that hour from Kafka. ``mode`` in the run config overrides this.
"""

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import dagster as dg
from pydantic import Field

from cdc_assets.assets.metadata import commit_metadata, markdown_summary
from cdc_assets.pipeline import catch_up
from cdc_assets.pipeline.ingest import IngestResult, hour_bounds, ingest_incremental, rebuild_hour
from cdc_assets.pipeline.tables import ensure_tables
from cdc_assets.resources.iceberg import IcebergCatalogResource
from cdc_assets.resources.kafka import KafkaResource
from cdc_assets.resources.spark import SparkResource
from cdc_assets.schema.layers import ledger_layout
from cdc_assets.spec.models import TableSpec


class IngestConfig(dg.Config):
    mode: Literal["auto", "incremental", "rebuild"] = Field(
        default="auto",
        description="auto: incremental for the current hour, rebuild for earlier hours",
    )


def choose_mode(config_mode: str, partition_key: str, now: datetime) -> str:
    if config_mode != "auto":
        return config_mode
    start, _ = hour_bounds(partition_key)
    current = now.replace(minute=0, second=0, microsecond=0)
    return "incremental" if start >= current - timedelta(hours=1) else "rebuild"


def result_metadata(result: IngestResult) -> dict[str, Any]:
    return {
        "mode": result.mode,
        "records_read": result.read,
        "ledger_rows": result.ledger,
        "dead_letters": result.dead,
        "skipped": result.skipped,
        "accounted": result.balanced,
        "skip_reasons": result.skip_reasons,
        "dead_letter_reasons": result.dead_reasons,
        "unknown_fields": result.unknown_fields,
        "start_offsets": {str(p): o for p, o in result.start_offsets.items()},
        "end_offsets": {str(p): o for p, o in result.end_offsets.items()},
        "hours_written": result.hours,
        "snapshot_id": str(result.snapshot_id) if result.snapshot_id else "",
        "seconds": round(result.seconds, 2),
    }


def build_ledger_asset(
    spec: TableSpec, specs_dir: Path, asset_args: dict[str, Any]
) -> dg.AssetsDefinition:
    @dg.asset(**asset_args)  # type: ignore[untyped-decorator]
    def cdc(
        context: dg.AssetExecutionContext,
        config: IngestConfig,
        spark: SparkResource,
        iceberg: IcebergCatalogResource,
        kafka: KafkaResource,
    ) -> dg.MaterializeResult:  # type: ignore[type-arg]
        key = context.partition_key
        started_at = datetime.now(UTC)
        mode = choose_mode(config.mode, key, started_at)
        session = spark.get_session()
        catalog = iceberg.load_catalog()
        layout = ledger_layout(spec)
        if not catalog.table_exists(f"{layout.namespace}.{layout.name}"):
            # A spec added to a running deployment: its first ingest onboards it (the same
            # code as onboard_tables: evolution from an empty schema).
            created = ensure_tables(session, spark.catalog.name, spec)
            made = [o.identifier for o in created if o.created]
            context.log.info(f"{spec.name}: onboarded on its first ingest: created {made}")
        if mode == "rebuild":
            result = rebuild_hour(session, spark.catalog.name, catalog, kafka, spec, key)
        else:
            result = ingest_incremental(session, spark.catalog.name, catalog, kafka, spec)
        metadata = result_metadata(result)
        metadata["spec_version"] = spec.spec_version
        if result.read:
            # An evolution may have made a newer spec while this run decoded with `spec`: its
            # rows and dead letters get the newer version's values (pipeline.catch_up).
            caught = catch_up.after_ingest(
                session, spark.catalog.name, catalog, spec, specs_dir, started_at
            )
            if caught is not None:
                log = context.log.warning if caught.changed else context.log.info
                log(f"{spec.name}: {caught.reason}; caught up {caught.metadata()}")
                metadata.update(caught.metadata())
        ledger = catalog.load_table(f"{spec.sink.namespace}.{ledger_layout(spec).name}")
        metadata.update(commit_metadata(ledger, result.snapshot_id))
        metadata["summary"] = markdown_summary(
            f"{result.mode} ingest of {spec.source.topic}",
            {
                "records read": result.read,
                "ledger rows / dead letters / skipped": f"{result.ledger} / {result.dead} / "
                f"{result.skipped}",
                "offsets": ", ".join(
                    f"p{p}: {result.start_offsets.get(p, 0)}..{o}"
                    for p, o in sorted(result.end_offsets.items())
                )
                or "-",
                "hours written": ", ".join(result.hours) or "-",
                "snapshot": result.snapshot_id or "-",
                "seconds": round(result.seconds, 2),
            },
        )
        if result.unknown_fields:
            context.log.warning(
                f"{spec.name}: fields not in spec v{spec.spec_version} kept in _row_json: "
                f"{result.unknown_fields}"
            )
        for hour in result.hours:
            if hour != key:
                context.log_event(
                    dg.AssetMaterialization(
                        asset_key=context.asset_key, partition=hour, metadata=metadata
                    )
                )
        return dg.MaterializeResult(metadata=metadata)

    return cdc  # type: ignore[no-any-return]
