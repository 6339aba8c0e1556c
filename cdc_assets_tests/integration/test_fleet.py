"""`cdc-assets fleet` on the real stack (issue 20): two tables, one caught up and one with
records the ledger has not read and dead letters waiting; the Prometheus exposition it writes
states the lag records, the dead letters by reason and the watermark delay, measured without
Spark, and the summary lists the lagging table first."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cdc_assets.cli import console, main
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.settings import Settings
from cdc_assets.spec.versions import write_spec
from cdc_assets_dev.demo.events import DebeziumEventFactory, produce, workload
from cdc_assets_tests.integration.test_ingest import isolated
from cdc_assets_tests.integration.test_upsert import example_spec, ingest, upsert
from cdc_assets_tests.support.bad_records import base_row


def test_fleet_reports_each_table_worst_first(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bootstrap = kafka.resolved_bootstrap()
    calm = isolated(example_spec(it_settings, "orders"), kafka=kafka)
    busy = isolated(example_spec(it_settings, "users"), kafka=kafka)
    specs_dir = tmp_path / "specs"
    specs_dir.mkdir()
    for spec in (calm, busy):
        ensure_tables(spark, "lake", spec)
        write_spec(spec, specs_dir / f"{spec.name}.yaml")
    produce(workload(calm, random.Random(3), keys=10, events=40), calm.source.topic, bootstrap)
    ingest(spark, iceberg, kafka, calm)
    upsert(spark, iceberg, calm)
    # busy: two bad records (dead letters), ingested but not upserted; then 25 unread records
    factory = DebeziumEventFactory(busy)
    good = [factory.create(base_row(id=i)) for i in range(1, 6)]
    bad = [factory.create(base_row(id=i, country="GBR")) for i in range(6, 8)]
    produce(good + bad, busy.source.topic, bootstrap)
    ingest(spark, iceberg, kafka, busy)
    produce([factory.create(base_row(id=i)) for i in range(10, 35)], busy.source.topic, bootstrap)

    monkeypatch.setenv("CDC_ASSETS_HOME", str(it_settings.home))
    monkeypatch.setenv("CDC_ASSETS_SPECS", str(specs_dir))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    (tmp_path / "dagster").mkdir()
    out = tmp_path / "fleet.prom"
    captured = console.capture()
    with captured:
        assert main(["fleet", "--prometheus", str(out)]) == 0
    summary = captured.get()
    assert summary.index("users") < summary.index("orders"), summary  # the lagging one first

    samples = {
        (s.name, s.labels.get("table"), s.labels.get("reason")): s.value
        for family in text_string_to_metric_families(out.read_text())
        for s in family.samples
    }
    assert samples[("cdc_assets_ledger_lag_records", "users", None)] == 25
    assert samples[("cdc_assets_ledger_lag_records", "orders", None)] == 0
    assert samples[("cdc_assets_ledger_lag_seconds", "users", None)] >= 0
    dead = {
        r: v for (n, t, r), v in samples.items() if n == "cdc_assets_dead_letters" and t == "users"
    }
    assert sum(dead.values()) == 2, dead
    assert all("country" in r for r in dead), dead
    # users' ledger holds a commit base has not applied; orders' base is caught up
    assert samples[("cdc_assets_base_watermark_delay_seconds", "users", None)] > 0
    assert samples[("cdc_assets_base_watermark_delay_seconds", "orders", None)] == 0
    assert samples[("cdc_assets_measured", "users", None)] == 1
