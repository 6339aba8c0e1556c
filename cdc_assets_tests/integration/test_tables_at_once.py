"""Several tables of a run at once (assets/tables.py, issue 20): `cdc-assets sync` with
CDC_ASSETS_TABLES_AT_ONCE=3 over three tables of three shapes. The layers of different tables
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

from cdc_assets.assets.keys import table_of
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
    """How many pairs of layers of two different tables ran at the same time in any run, for
    at least half of the shorter one: a layer's span ends when its materialization was reported
    and lasted its ``seconds`` (which leave out the metadata the layer reads after its commit:
    one after another, consecutive spans overlap by a fraction of a second)."""
    pairs = 0
    for record in instance.get_run_records():
        spans = []
        for entry in instance.all_logs(
            record.dagster_run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
        ):
            materialization = entry.asset_materialization
            assert materialization is not None
            seconds = materialization.metadata.get("seconds")
            table = table_of(materialization.asset_key)
            if (
                seconds is None
                or table is None
                or materialization.partition
                not in (
                    None,
                    record.dagster_run.tags.get("dagster/partition"),
                )
            ):
                continue
            spans.append((table, entry.timestamp - float(seconds.value), entry.timestamp))
        for i, (t1, a0, a1) in enumerate(spans):
            for t2, b0, b1 in spans[i + 1 :]:
                shared = min(a1, b1) - max(a0, b0)
                if t1 != t2 and shared > 0.5 * min(a1 - a0, b1 - b0):
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
