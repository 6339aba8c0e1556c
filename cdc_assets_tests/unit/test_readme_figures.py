"""Figures the docs (README and docs/) state about the code, read from the code: test table
sizes and retry counts. A change to either side without the other fails here."""

from __future__ import annotations

import re

import pytest

from cdc_assets.pipeline.ingest import ingest
from cdc_assets.pipeline.maintenance import maintenance
from cdc_assets.pipeline.upsert import upsert
from cdc_assets_tests.conftest import PROJECT_ROOT
from cdc_assets_tests.unit import test_evolution_classifier, test_invalid_specs, test_wire_plan

README = "\n".join(
    p.read_text(encoding="utf-8")
    for p in [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").glob("*.md"))]
)


def _stated(pattern: str) -> list[int]:
    found = [int(n) for n in re.findall(pattern, README)]
    assert found, f"the README no longer says {pattern!r}"
    return found


@pytest.mark.parametrize(
    ("pattern", "actual"),
    [
        (r"table-driven tests with (\d+)\s+rows", len(test_evolution_classifier.ROWS)),
        (r"classifier \((\d+) table rows\)", len(test_evolution_classifier.ROWS)),
        (r"source type \((\d+) rows against", len(test_wire_plan.ROWS)),
        (r"spec parsing with (\d+) invalid specs", len(test_invalid_specs.CASES)),
        (r"`ValidationException`\) is tried (\d+) times in all", maintenance.COMMIT_ATTEMPTS),
        (r"upsert commit conflict .*? tried up to (\d+) times in all", upsert.COMMIT_RETRIES),
        (
            r"at most (\d+) attempts in all; `pipeline/ingest/ledger_commit.py`",
            ingest.MOVED_RETRIES,
        ),
    ],
)
def test_the_readme_states_the_code_figures(pattern: str, actual: int) -> None:
    assert set(_stated(pattern)) == {actual}


def test_the_docs_state_the_small_batch_threshold() -> None:
    from cdc_assets.pipeline.shared.small_work import SMALL_WORK_ROWS

    stated = re.findall(r"fewer than ([\d,]+) records \(`SMALL_WORK_ROWS`", README)
    assert stated, "docs/pipeline.md no longer states SMALL_WORK_ROWS"
    assert {int(n.replace(",", "")) for n in stated} == {SMALL_WORK_ROWS}


def test_the_docs_state_the_interpreted_batch_threshold() -> None:
    from cdc_assets.pipeline.shared.small_work import INTERPRETED_ROWS

    stated = re.findall(r"fewer than ([\d,]+) records \(`INTERPRETED_ROWS`", README)
    assert stated, "docs/pipeline.md no longer states INTERPRETED_ROWS"
    assert {int(n.replace(",", "")) for n in stated} == {INTERPRETED_ROWS}
