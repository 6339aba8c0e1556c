"""The main command (`cdc-assets run`, behind `make run`) on the test session's stack: tables,
demo stream, ingest, upsert into base, report."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_assets.cli import main
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.resources.local_stack import StackState
from cdc_assets.settings import Settings
from cdc_assets.spec import load_specs
from cdc_assets_tests.integration.test_upsert import assert_base_matches, expected_base


def test_run_onboards_and_reports_every_table(
    it_settings: Settings,
    stack: StackState,
    spark: object,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("CDC_ASSETS_HOME", str(it_settings.home))
    monkeypatch.setenv("CDC_ASSETS_SPECS", str(it_settings.specs_dir))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    assert main(["run", "--events", "300"]) == 0
    out = capsys.readouterr().out
    assert "[7/7]" in out
    # the demo stream's four bad records per table are dead letters with their reasons
    dead = iceberg.load_catalog().load_table("app.users_dlt").scan().to_arrow().to_pylist()
    reasons = {r["reason"] for r in dead}
    assert {"value is not a JSON object", "unknown op code 'x'"} <= reasons
    assert "primary key column 'id' is null" in reasons
    for ident in ("lake.app.users_cdc", "lake.app.users", "lake.shop.orders_dlt"):
        assert ident in out
    assert "missing" not in out
    assert "bucket[8](order_id)" in out
    # the demo reached base, and base is what replaying the topic says
    for spec in load_specs(it_settings.specs_dir):
        assert f"lake.{spec.sink.namespace}.{spec.sink.table or spec.name}" in out
        assert_base_matches(spec, iceberg, expected_base(spec, kafka))

    assert main(["stack", "status"]) == 0
    assert "healthy" in capsys.readouterr().out
