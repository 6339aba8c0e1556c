"""`cdc-assets sync`: the pipeline over a spec directory of your own, without the demo (issue
27): a table whose Iceberg tables do not exist yet is onboarded, its topic ingested and upserted
until caught up, and base equals the replay of the topic."""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import pytest

from cdc_assets.cli import console, main
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.settings import Settings
from cdc_assets.spec.versions import write_spec
from cdc_assets_dev.demo.events import produce, workload
from cdc_assets_tests.integration.test_ingest import isolated
from cdc_assets_tests.integration.test_upsert import (
    assert_base_matches,
    example_spec,
    expected_base,
)


def test_sync_runs_your_own_specs_until_caught_up(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = isolated(example_spec(it_settings, "order_items"), partitions=2, kafka=kafka)
    specs_dir = tmp_path / "specs"
    specs_dir.mkdir()
    write_spec(spec, specs_dir / f"{spec.name}.yaml")
    produce(
        workload(spec, random.Random(17), keys=30, events=150),
        spec.source.topic,
        kafka.resolved_bootstrap(),
    )
    monkeypatch.setenv("CDC_ASSETS_HOME", str(it_settings.home))
    monkeypatch.setenv("CDC_ASSETS_SPECS", str(specs_dir))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    (tmp_path / "dagster").mkdir()
    captured = console.capture()
    with captured:
        code = main(["sync", "--until-caught-up"])
    out = captured.get()
    assert code == 0, out
    assert "created tables:" in out
    assert "caught up" in out
    assert "elapsed" in out
    assert_base_matches(spec, iceberg, expected_base(spec, kafka))
    # Once more: nothing new, nothing created; the cycles ran only the ingest's accounting
    # check (as the sensors' runs do), --checks then runs every check once.
    with captured:
        code = main(["sync", "--checks"])
    out = captured.get()
    assert code == 0, out
    assert "created tables:" not in out
    assert re.search(r"checks: [1-9]\d* passed, 0 failed", out), out
