"""A check that cannot run fails itself instead of the run that carries every table's checks."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import dagster as dg

F = TypeVar("F", bound=Callable[..., dg.AssetCheckResult])


def failsafe(check: F) -> F:
    """A check that cannot run (a topic not created yet, a table not onboarded, a source out of
    reach) fails itself with the error, as an ERROR result; it does not fail the run, so the
    other tables' checks in the same run still report."""

    @functools.wraps(check)
    def run(*args: Any, **kwargs: Any) -> dg.AssetCheckResult:
        try:
            return check(*args, **kwargs)
        except Exception as exc:  # reported as the check's outcome, with the error
            text = f"{type(exc).__name__}: {exc}"
            return dg.AssetCheckResult(
                passed=False,
                severity=dg.AssetCheckSeverity.ERROR,
                description=f"the check could not run: {text[:500]}",
                metadata={"error": text[:4000]},
            )

    return run  # type: ignore[return-value]
