"""What a run of the ingest and upsert jobs records in Dagster: materialization metadata (counts,
offsets, watermark, files and bytes, snapshot, the live schema, a markdown summary) and the
results of the checks that run with each asset."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import dagster as dg

from cdc_assets.assets.keys import asset_key
from cdc_assets.cli.common import materializations
from cdc_assets.definitions import build_defs
from cdc_assets.pipeline.shared.offsets import encode_offsets
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.resources import KafkaResource
from cdc_assets.sensors.new_offsets import current_hour_key
from cdc_assets.settings import Settings
from cdc_assets_dev.demo.events import produce, workload
from cdc_assets_tests.integration.test_ingest import isolated
from cdc_assets_tests.integration.test_upsert import example_spec


def _meta(result: Any, node: dg.AssetKey) -> dict[str, Any]:
    mats = materializations(result, node)
    assert mats, f"no materialization of {node}"
    return {k: v.value for k, v in mats[-1].metadata.items()}


def test_jobs_record_metadata_and_run_the_checks_of_their_assets(
    it_settings: Settings, spark: Any, kafka: KafkaResource, resources: dict[str, Any]
) -> None:
    spec = isolated(example_spec(it_settings, "orders"), partitions=2, kafka=kafka)
    ensure_tables(spark, "lake", spec)
    records = workload(spec, random.Random(21), keys=25, events=120)
    produce(records, spec.source.topic, kafka.resolved_bootstrap())
    defs = build_defs(specs=[spec], settings=it_settings, resource_overrides=resources)
    instance = dg.DagsterInstance.ephemeral()

    ingest = defs.resolve_job_def("ingest_ledgers").execute_in_process(
        instance=instance, partition_key=current_hour_key(datetime.now(UTC))
    )
    cdc = _meta(ingest, asset_key("cdc", "orders"))
    assert cdc["records_read"] == len(records)
    assert cdc["rows_written"] == cdc["ledger_rows"] > 0
    assert cdc["data_files_added"] > 0
    assert cdc["bytes_added"] > 0
    assert cdc["dagster/row_count"] == cdc["ledger_rows"]
    assert cdc["end_offsets"] == {"0": cdc["end_offsets"]["0"], "1": cdc["end_offsets"]["1"]}
    assert sum(cdc["end_offsets"].values()) == len(records)
    assert "_row_json" in [c.name for c in cdc["dagster/column_schema"].columns]
    assert "ledger rows / dead letters / skipped" in cdc["summary"]
    assert cdc["snapshot_id"]
    # The partition view is truthful: the hours of the last week that no record fell into are
    # recorded empty (the definitions start a week back), the run's own hour is materialized.
    hourly = defs.resolve_asset_graph().get(asset_key("cdc", spec.name)).partitions_def
    assert hourly is not None
    read_at = datetime.now(UTC)
    keys = hourly.get_partition_keys(current_time=read_at)
    materialized = instance.get_materialized_partitions(asset_key("cdc", spec.name))
    assert current_hour_key(read_at) in materialized
    assert len(keys) - 3 <= len(materialized) <= len(keys)
    first = min(materialized)
    assert first in keys[:2]
    empty = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key("cdc", spec.name), asset_partitions=[first]), limit=1
    ).records[0]
    assert empty.asset_materialization is not None
    assert empty.asset_materialization.metadata["ledger_rows"].value == 0

    upsert = defs.resolve_job_def("upsert_bases").execute_in_process(instance=instance)
    bucketed = _meta(upsert, asset_key("bucketed", "orders"))
    assert bucketed["dagster/row_count"] == bucketed["changed_keys"] > 0
    base = _meta(upsert, asset_key("base", "orders"))
    assert base["applied"] is True
    assert base["dagster/row_count"] == base["base_rows"] > 0
    assert base["rows_inserted"] > 0
    assert base["watermark_after"]["offsets"] == encode_offsets(
        {int(p): o for p, o in cdc["end_offsets"].items()}
    )
    assert base["storage_partitioned_join"] is False  # base was empty: nothing to line up with
    assert base["snapshot_id"]
    schema = {c.name: c.type for c in base["dagster/column_schema"].columns}
    assert schema["amount"] == "decimal(12, 2)"
    assert "storage-partitioned join" in base["summary"]

    # the checks of each materialized asset ran in the same job, and passed
    evaluations = {
        f"{e.asset_key.to_user_string()}:{e.check_name}": e
        for r in (ingest, upsert)
        for e in r.get_asset_check_evaluations()
    }
    assert set(evaluations) == {
        "cdc/orders_cdc:offsets_accounted",
        "cdc/orders_cdc:dead_letter_rate",
        "cdc/orders_cdc:ledger_null_counts",
        "cdc/orders_cdc:schema_converged",
        "base/orders:null_counts",
        "base/orders:image_values",
        "base/orders:sample_conforms",
        "base/orders:primary_key_unique",
        "base/orders:watermark_lag",
        "base/orders:schema_drift",
    }
    failed = {k: e.description for k, e in evaluations.items() if not e.passed}
    assert not failed
