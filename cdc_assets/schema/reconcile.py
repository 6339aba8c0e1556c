"""Reconciliation of one table's schema: whether to request an evolution now (pure).

The `schema_changes` sensor keeps, per table, the newest shape the stream has shown (the desired
schema) and compares it with the spec on every tick, not only when a record arrives: while they
differ and the difference holds an applicable change, an evolution is requested. Its runs carry
the desired shape's key as a tag, so the history of attempts is data the next tick reads: a run
in flight is waited for, a failed one is retried after a backoff that doubles per failure, and
the run key names the attempt (Dagster starts a run key once).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Seconds before the first retry; each further failure doubles it, up to the cap.
FIRST_BACKOFF_SECONDS = 30.0
MAX_BACKOFF_SECONDS = 1800.0
# A run key names its attempt after this separator ('#' never occurs in a Kafka topic's name).
ATTEMPT_SEPARATOR = "#attempt-"
# Evolutions of one shape that may succeed without converging before the sensor stops asking.
MAX_SUCCESSES = 3


@dataclass(frozen=True)
class Attempt:
    """One earlier evolution run for the same desired shape."""

    finished: bool  # success, failure or canceled
    succeeded: bool
    ended_at: float | None  # epoch seconds; None while it runs


@dataclass(frozen=True)
class Decision:
    request: bool
    run_key: str | None
    why: str  # for the sensor's log and the operator


def backoff_seconds(failures: int) -> float:
    """Seconds to wait after the ``failures``-th failed attempt in a row (1-based)."""
    if failures <= 0:
        return 0.0
    return float(min(FIRST_BACKOFF_SECONDS * 2 ** (failures - 1), MAX_BACKOFF_SECONDS))


def decide(key: str, attempts: Sequence[Attempt], now: float) -> Decision:
    """Whether to request an evolution for the desired shape ``key`` that still differs from the
    spec, given the earlier runs for it (any order) and the time ``now``."""
    if not attempts:
        return Decision(True, key, "the stream shows a shape the spec lacks")
    if any(not a.finished for a in attempts):
        return Decision(False, None, "an evolution for this shape is queued or running")
    failures = sum(1 for a in attempts if not a.succeeded)
    successes = len(attempts) - failures
    if successes >= MAX_SUCCESSES:
        return Decision(
            False,
            None,
            f"{successes} evolutions for this shape succeeded and it still differs from the "
            "spec; see the table's schema history (cdc_meta.schema_history)",
        )
    ended = max((a.ended_at or 0.0) for a in attempts)
    # A run that succeeded while the shape still differs applied part of it (or another
    # change came first): ask again at once. After failures, back off.
    wait = backoff_seconds(failures) if not attempts_ended_in_success(attempts) else 0.0
    if now < ended + wait:
        return Decision(
            False,
            None,
            f"{failures} attempt(s) failed; the next in {ended + wait - now:.0f} s",
        )
    return Decision(
        True,
        f"{key}{ATTEMPT_SEPARATOR}{len(attempts) + 1}",
        f"attempt {len(attempts) + 1}: {failures} earlier attempt(s) failed",
    )


def attempts_ended_in_success(attempts: Sequence[Attempt]) -> bool:
    """Whether the newest finished attempt succeeded."""
    newest = max(attempts, key=lambda a: a.ended_at or 0.0)
    return newest.succeeded
