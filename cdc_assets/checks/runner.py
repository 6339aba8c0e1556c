"""Run the asset checks of some tables through the `check_tables` job and collect the verdicts.

Used by `cdc-assets checks` (and CI): results are recorded in the Dagster instance like any run,
so the UI shows them. A check that raised instead of reporting counts as an error-severity
failure: a check that cannot run says nothing about the data.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from cdc_assets.assets.keys import table_or_name
from cdc_assets.jobs.checks import CHECK_JOB


@dataclass(frozen=True)
class CheckOutcome:
    table: str
    asset: str
    check: str
    passed: bool
    severity: str  # ERROR or WARN: what a failure means
    description: str
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def is_error(self) -> bool:
        return not self.passed and self.severity == "ERROR"


def run_checks(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    tables: Iterable[str] | None = None,
    checks: Iterable[str] | None = None,
) -> tuple[list[CheckOutcome], str]:
    """Run the checks of ``tables`` (default all), optionally only those named in ``checks``;
    return their outcomes (sorted by table, asset, check) and the run id."""
    wanted_tables = set(tables) if tables is not None else None
    wanted_checks = set(checks) if checks is not None else None
    keys = {
        key
        for key in defs.resolve_asset_graph().asset_check_keys
        if (wanted_tables is None or table_or_name(key.asset_key) in wanted_tables)
        and (wanted_checks is None or key.name in wanted_checks)
    }
    if not keys:
        return [], ""
    job = defs.resolve_job_def(CHECK_JOB).get_subset(
        asset_selection=set(), asset_check_selection=keys
    )
    result = job.execute_in_process(instance=instance, raise_on_error=False)
    outcomes = {}
    for ev in result.get_asset_check_evaluations():
        key = ev.asset_check_key
        outcomes[key] = CheckOutcome(
            table=table_or_name(key.asset_key),
            asset=key.asset_key.to_user_string(),
            check=key.name,
            passed=ev.passed,
            severity=ev.severity.value,
            description=ev.description or "",
            metadata={k: v.value for k, v in ev.metadata.items()},
        )
    errors = [
        ev.message or ""
        for ev in result.all_events
        if ev.event_type == dg.DagsterEventType.STEP_FAILURE
    ]
    for key in keys - set(outcomes):
        outcomes[key] = CheckOutcome(
            table=table_or_name(key.asset_key),
            asset=key.asset_key.to_user_string(),
            check=key.name,
            passed=False,
            severity="ERROR",
            description="the check did not run: " + (" | ".join(errors)[:500] or "no result"),
        )
    ordered = sorted(outcomes.values(), key=lambda o: (o.table, o.asset, o.check))
    return ordered, result.run_id
