"""The onboard_tables job creates every spec table on real Spark + Iceberg; the raw asset reads
real topic offsets from the broker."""

from __future__ import annotations

import uuid
from typing import Any

import dagster as dg
from confluent_kafka import Producer

from cdc_assets.assets.keys import asset_key
from cdc_assets.cli.common import materializations
from cdc_assets.definitions import build_defs
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.layers import all_layouts
from cdc_assets.settings import Settings
from cdc_assets.spec import load_specs
from cdc_assets.spec.models import TableSpec


def test_onboard_job_creates_tables_idempotently(
    it_settings: Settings, resources: dict[str, Any], spark: Any, iceberg: IcebergCatalogResource
) -> None:
    # A namespace of its own, so other tests that onboard the example specs do not interfere.
    specs = [
        s.model_copy(update={"sink": s.sink.model_copy(update={"namespace": "onboard_it"})})
        for s in load_specs(it_settings.specs_dir)
    ]
    defs = build_defs(specs=specs, settings=it_settings, resource_overrides=resources)
    job = defs.resolve_job_def("onboard_tables")
    first = job.execute_in_process()
    assert first.success
    created = first.output_for_node("create_spec_tables")
    # 3 specs x (cdc, bucketed, base, dead letter, tombstones), and order_items' history
    assert len(created) == 16

    catalog = iceberg.load_catalog()
    for spec in specs:
        layouts = all_layouts(spec)
        for layout in layouts.values():
            table = catalog.load_table(f"{layout.namespace}.{layout.name}")
            assert [f.name for f in table.schema().fields] == layout.column_names
            required = {f.name for f in table.schema().fields if f.required}
            assert required == {c.name for c in layout.columns if c.required}
        base = catalog.load_table(f"{spec.sink.namespace}.{layouts['base'].name}")
        key_ids = {base.schema().find_field(c.sink_name).field_id for c in spec.key_columns}
        assert set(base.schema().identifier_field_ids) == key_ids
        assert base.properties["write.merge.mode"] == "merge-on-read"
        assert base.spec().fields[0].transform.num_buckets == spec.base.buckets  # type: ignore[attr-defined]
        ledger = catalog.load_table(f"{spec.sink.namespace}.{layouts['cdc'].name}")
        assert [f.name for f in ledger.spec().fields] == ["dt", "hr"]

    second = job.execute_in_process()
    assert second.success
    assert second.output_for_node("create_spec_tables") == []  # nothing new, nothing replaced


def on_topic(spec: TableSpec, topic: str) -> TableSpec:
    return spec.model_copy(update={"source": spec.source.model_copy(update={"topic_": topic})})


def test_raw_asset_reports_topic_offsets(
    it_settings: Settings, resources: dict[str, Any], kafka: KafkaResource
) -> None:
    users = next(s for s in load_specs(it_settings.specs_dir) if s.name == "users")
    spec = on_topic(users, f"raw-it-{uuid.uuid4().hex[:8]}")
    producer = Producer(kafka.client_conf())
    for i in range(25):
        producer.produce(spec.source.topic, key=str(i).encode(), value=b"{}")
    assert producer.flush(30) == 0

    defs = build_defs(specs=[spec], settings=it_settings, resource_overrides=resources)
    result = dg.materialize(
        [a for a in defs.assets or [] if isinstance(a, dg.AssetsDefinition)],
        selection=[asset_key("raw", "users")],
        resources=resources,
    )
    assert result.success
    meta = materializations(result, asset_key("raw", "users"))[0].metadata
    assert meta["partitions"].value == 1
    assert meta["retained_messages"].value == 25
    assert meta["latest_offsets"].value == {"0": 25}
    assert meta["ledger_lag"].value == 25  # nothing ingested from this topic yet
    assert meta["retention_ms"].value == 7 * 24 * 3600 * 1000  # the broker default
    assert meta["retention_headroom_s"].value > 6 * 24 * 3600


def test_raw_asset_fails_clearly_for_a_missing_topic(
    it_settings: Settings, resources: dict[str, Any]
) -> None:
    orders = next(s for s in load_specs(it_settings.specs_dir) if s.name == "orders")
    spec = on_topic(orders, f"never-created-{uuid.uuid4().hex[:8]}")
    kafka = resources["kafka"].model_copy(update={"timeout_s": 5.0})
    defs = build_defs(
        specs=[spec], settings=it_settings, resource_overrides={**resources, "kafka": kafka}
    )
    result = dg.materialize(
        [a for a in defs.assets or [] if isinstance(a, dg.AssetsDefinition)],
        selection=[asset_key("raw", "orders")],
        resources={**resources, "kafka": kafka},
        raise_on_error=False,
    )
    assert not result.success
    error = result.get_step_failure_events()[0].event_specific_data.error  # type: ignore[union-attr]
    text = error.cause.message if error.cause else error.message
    assert f"Kafka topic {spec.source.topic!r} is not available" in text
