"""Several tables of a run at once (jobs/executor.py, issue 20): `cdc-assets sync` with
CDC_ASSETS_TABLES_AT_ONCE=3 over three tables of three shapes. The steps of different tables
overlap in time, each on its own Spark session of the one driver, and every base equals the
plain-Python replay of its topic (a commit's snapshot properties are session settings: were they
shared, one table's offsets would land on another's commit and the next cycle would lose or
repeat events)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from cdc_assets.cli import console, main
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.settings import ENV_TABLES_AT_ONCE, Settings
from cdc_assets.spec.versions import write_spec
from cdc_assets_dev.demo.events import produce, workload
from cdc_assets_tests.integration.test_ingest import isolated
from cdc_assets_tests.integration.test_upsert import (
    assert_base_matches,
    example_spec,
    expected_base,
)


def _overlapping_tables(instance: dg.DagsterInstance) -> int:
    """How many pairs of steps of two different tables ran at the same time in any run."""
    pairs = 0
    for record in instance.get_run_records():
        stats = [
            s
            for s in instance.get_run_step_stats(record.dagster_run.run_id)
            if s.start_time is not None and s.end_time is not None
        ]
        for i, a in enumerate(stats):
            for b in stats[i + 1 :]:
                other_table = a.step_key.split("__", 1)[-1] != b.step_key.split("__", 1)[-1]
                if other_table and a.start_time < b.end_time and b.start_time < a.end_time:
                    pairs += 1
    return pairs


def test_three_tables_at_once_converge_to_the_replay(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bootstrap = kafka.resolved_bootstrap()
    specs = [
        isolated(example_spec(it_settings, name), partitions=2, kafka=kafka)
        for name in ("users", "orders", "order_items")
    ]
    specs_dir = tmp_path / "specs"
    specs_dir.mkdir()
    for n, spec in enumerate(specs):
        write_spec(spec, specs_dir / f"{spec.name}.yaml")
        records = workload(spec, random.Random(40 + n), keys=25, events=150)
        produce(records, spec.source.topic, bootstrap)
    monkeypatch.setenv("CDC_ASSETS_HOME", str(it_settings.home))
    monkeypatch.setenv("CDC_ASSETS_SPECS", str(specs_dir))
    monkeypatch.setenv(ENV_TABLES_AT_ONCE, "3")
    dagster_home = tmp_path / "dagster"
    dagster_home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))

    captured = console.capture()
    with captured:
        code = main(["sync", "--until-caught-up"])
    assert code == 0, captured.get()
    for spec in specs:
        assert_base_matches(spec, iceberg, expected_base(spec, kafka))

    with dg.DagsterInstance.get() as instance:
        assert _overlapping_tables(instance) > 0
