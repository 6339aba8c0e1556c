"""The bucketed and base assets of a table: the two steps of an upsert run.

Both share the pool ``cdc_upsert/<table>`` so two upserts of one table never interleave; base
refuses a bucketed table built from another base state instead of applying it out of order.
"""

from typing import Any

import dagster as dg

from cdc_assets.pipeline.offsets import encode_offsets
from cdc_assets.pipeline.upsert import BucketedResult, MergeResult, build_bucketed, merge_base
from cdc_assets.pipeline.watermark import UpsertState
from cdc_assets.resources.iceberg import IcebergCatalogResource
from cdc_assets.resources.spark import SparkResource
from cdc_assets.spec.models import TableSpec

# Snapshot summary fields of a MERGE commit reported as run metadata, under our names.
SUMMARY_FIELDS = {
    "added-records": "rows_written",
    "added-data-files": "data_files_added",
    "added-files-size": "bytes_added",
    "added-position-deletes": "position_deletes_added",
    "added-delete-files": "delete_files_added",
    "total-records": "total_data_rows",
    "spark.merge-into.num-target-rows-inserted": "rows_inserted",
    "spark.merge-into.num-target-rows-updated": "rows_updated",
    "spark.merge-into.num-target-rows-deleted": "rows_deleted",
}


def _state(state: UpsertState) -> dict[str, Any]:
    return {
        "offsets": encode_offsets(state.watermark),
        "kafka_ts": state.watermark_ts.isoformat() if state.watermark_ts else "",
        "floor": state.floor.text() if state.floor else "",
    }


def bucketed_metadata(result: BucketedResult) -> dict[str, Any]:
    return {
        "up_to_date": result.up_to_date,
        "changed_keys": result.rows,
        "deletes": result.deletes,
        "truncate_at": result.truncate.text() if result.truncate else "",
        "redriven_files": result.redriven_files,
        "watermark_before": _state(result.from_state),
        "watermark_after": _state(result.to_state),
        "ledger_snapshot": str(result.to_state.ledger_snapshot or ""),
        "seconds": round(result.seconds, 2),
    }


def merge_metadata(result: MergeResult) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "applied": result.applied,
        "up_to_date": result.up_to_date,
        "storage_partitioned_join": (
            "n/a" if result.storage_partitioned is None else result.storage_partitioned
        ),
        "snapshot_id": str(result.snapshot_id or ""),
        "commit_attempts": result.attempts,
        "watermark_before": _state(result.from_state),
        "watermark_after": _state(result.to_state),
        "seconds": round(result.seconds, 2),
    }
    for source, name in SUMMARY_FIELDS.items():
        if source in result.summary:
            meta[name] = int(result.summary[source])
    rows = base_rows(result.summary)
    if rows is not None:
        meta["base_rows"] = rows
    return meta


def base_rows(summary: dict[str, str]) -> int | None:
    """Live rows of a merge-on-read table: rows in data files minus the deletes against them."""
    if "total-records" not in summary:
        return None
    deleted = sum(
        int(summary.get(k, "0")) for k in ("total-position-deletes", "total-equality-deletes")
    )
    return int(summary["total-records"]) - deleted


def build_upsert_assets(
    spec: TableSpec, bucketed_args: dict[str, Any], base_args: dict[str, Any]
) -> list[dg.AssetsDefinition]:
    pool = f"cdc_upsert/{spec.name}"

    @dg.asset(**bucketed_args, pool=pool)  # type: ignore[untyped-decorator]
    def bucketed(
        context: dg.AssetExecutionContext, spark: SparkResource, iceberg: IcebergCatalogResource
    ) -> dg.MaterializeResult:  # type: ignore[type-arg]
        result = build_bucketed(
            spark.get_session(), spark.catalog.name, iceberg.load_catalog(), spec
        )
        if result.up_to_date:
            context.log.info(f"{spec.name}: base has applied everything in the ledger")
        return dg.MaterializeResult(metadata=bucketed_metadata(result))

    @dg.asset(**base_args, pool=pool)  # type: ignore[untyped-decorator]
    def base(
        context: dg.AssetExecutionContext, spark: SparkResource, iceberg: IcebergCatalogResource
    ) -> dg.MaterializeResult:  # type: ignore[type-arg]
        result = merge_base(spark.get_session(), spark.catalog.name, iceberg.load_catalog(), spec)
        if result.applied and result.storage_partitioned is False:
            context.log.warning(
                f"{spec.name}: the MERGE shuffled base (no storage-partitioned join); "
                "expected only while base is empty"
            )
        return dg.MaterializeResult(metadata=merge_metadata(result))

    return [bucketed, base]
