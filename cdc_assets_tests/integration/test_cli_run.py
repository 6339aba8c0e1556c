"""The main command (`cdc-assets run`, behind `make run`) on the test session's stack."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_assets.cli import main
from cdc_assets.resources.local_stack import StackState
from cdc_assets.settings import Settings


def test_run_onboards_and_reports_every_table(
    it_settings: Settings,
    stack: StackState,
    spark: object,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("CDC_ASSETS_HOME", str(it_settings.home))
    monkeypatch.setenv("CDC_ASSETS_SPECS", str(it_settings.specs_dir))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    assert main(["run"]) == 0
    out = capsys.readouterr().out
    assert "[4/4]" in out
    for ident in ("lake.app.users_cdc", "lake.app.users", "lake.shop.orders_dlt"):
        assert ident in out
    assert "missing" not in out
    assert "bucket[8](order_id)" in out

    assert main(["stack", "status"]) == 0
    assert "healthy" in capsys.readouterr().out
