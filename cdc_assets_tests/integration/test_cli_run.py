"""The main command (`cdc-assets run`, behind `make run`) on the test session's stack: tables,
demo stream, ingest, upsert into base, report. The demo itself runs once, in `demo_home`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cdc_assets.cli import main
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.settings import Settings
from cdc_assets.spec import load_specs
from cdc_assets_tests.integration.conftest import DemoRun
from cdc_assets_tests.integration.test_upsert import assert_base_matches, expected_base


def test_run_onboards_and_reports_every_table(
    it_settings: Settings,
    demo_home: DemoRun,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = demo_home.output
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

    monkeypatch.setenv("CDC_ASSETS_HOME", str(it_settings.home))
    monkeypatch.setenv("CDC_ASSETS_SPECS", str(it_settings.specs_dir))
    capsys.readouterr()
    assert main(["stack", "status"]) == 0
    assert "healthy" in capsys.readouterr().out


def test_check_command_runs_every_check_on_the_demo(
    it_settings: Settings, demo_home: DemoRun
) -> None:
    outcomes = {(o["table"], o["asset"].split("/")[0], o["check"]): o for o in demo_home.checks}
    specs = load_specs(it_settings.specs_dir)
    history = [s.name for s in specs if s.history.enabled]
    # and the example view's, and one per history (order_items keeps one)
    assert len(outcomes) == 11 * len(specs) + 1 + len(history)
    assert history
    for name in history:
        check = outcomes[(name, "history", "history_matches_ledger")]
        assert check["passed"], check["description"]
        assert check["metadata"]["keys_compared"] > 0
        assert check["metadata"]["versions_compared"] > check["metadata"]["keys_compared"]
    assert outcomes[("user_orders", "view", "view_schema")]["passed"]
    errors = {
        k: o["description"]
        for k, o in outcomes.items()
        if o["severity"] == "ERROR" and not o["passed"]
    }
    assert not errors
    for spec in specs:
        base = outcomes[(spec.name, "base", "null_counts")]["metadata"]
        assert base["rows"] > 0
        assert (
            outcomes[(spec.name, "base", "watermark_lag")]["metadata"]["pending_ledger_rows"] == 0
        )
        assert (
            outcomes[(spec.name, "raw", "kafka_lag_retention")]["metadata"]["ledger_lag_records"]
            == 0
        )
        # four bad records in ~350 are more than the 1% a spec tolerates by default: a warning
        rate = outcomes[(spec.name, "cdc", "dead_letter_rate")]
        assert rate["metadata"]["dead_letters"] == 4
        assert not rate["passed"]
        assert rate["severity"] == "WARN"
    assert "asset checks, run" in demo_home.output
    assert " 0 errors" in demo_home.output


def test_check_command_exits_1_on_an_error(
    it_settings: Settings,
    demo_home: DemoRun,
    spark: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    report = tmp_path / "checks.json"
    monkeypatch.setenv("CDC_ASSETS_HOME", str(it_settings.home))
    monkeypatch.setenv("CDC_ASSETS_SPECS", str(it_settings.specs_dir))
    monkeypatch.setenv("DAGSTER_HOME", str(demo_home.dagster_home))
    current = spark.sql(
        "SELECT snapshot_id FROM lake.app.users.history ORDER BY made_current_at DESC LIMIT 1"
    ).collect()[0]["snapshot_id"]
    spark.sql("INSERT INTO lake.app.users SELECT * FROM lake.app.users LIMIT 1")
    try:
        capsys.readouterr()
        code = main(
            ["checks", "--table", "users", "--check", "primary_key_unique", "--json", str(report)]
        )
        out = capsys.readouterr().out
    finally:
        spark.sql(f"CALL lake.system.set_current_snapshot('app.users', {current})")
    assert code == 1, out
    (outcome,) = json.loads(report.read_text(encoding="utf-8"))
    assert outcome["check"] == "primary_key_unique"
    assert outcome["metadata"]["duplicated_keys"] == 1
    assert "1 checks: 0 passed, 0 warnings, 1 errors" in out
    assert main(["checks", "--table", "users", "--check", "primary_key_unique"]) == 0
    assert main(["checks", "--table", "nope"]) == 2
