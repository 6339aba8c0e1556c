"""`cdc-assets specs validate`: exit 0 with a summary, or 2 with the spec error."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_assets.cli import main
from cdc_assets_tests.conftest import PROJECT_ROOT


def test_validate_example_specs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["specs", "validate", str(PROJECT_ROOT / "table_specs")]) == 0
    out = capsys.readouterr().out
    assert "3 valid spec(s)" in out
    assert "order_id, line_no" in out


def test_validate_reports_the_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (PROJECT_ROOT / "table_specs" / "users.yaml").read_text()
    (tmp_path / "users.yaml").write_text(text.replace("buckets: 16", "buckets: -1"))
    assert main(["specs", "validate", str(tmp_path)]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "users.yaml: base.buckets: Input should be greater than or equal to 1 (got -1)" in out
