"""When the schema_changes sensor asks for an evolution of a shape the spec lacks: first at once,
never beside a run in flight, again after a failure with a doubling backoff (issue 53)."""

from __future__ import annotations

from cdc_assets.schema.reconcile import (
    ATTEMPT_SEPARATOR,
    FIRST_BACKOFF_SECONDS,
    MAX_BACKOFF_SECONDS,
    Attempt,
    backoff_seconds,
    decide,
)

FAILED = Attempt(finished=True, succeeded=False, ended_at=1000.0)


def test_the_first_request_uses_the_records_own_key() -> None:
    decision = decide("mariadb:0:7", [], now=0.0)
    assert (decision.request, decision.run_key) == (True, "mariadb:0:7")


def test_a_run_in_flight_is_waited_for() -> None:
    running = Attempt(finished=False, succeeded=False, ended_at=None)
    assert not decide("k", [FAILED, running], now=10_000.0).request


def test_a_failed_run_is_retried_after_the_backoff_with_a_new_key() -> None:
    assert not decide("k", [FAILED], now=1000.0 + FIRST_BACKOFF_SECONDS - 1).request
    decision = decide("k", [FAILED], now=1000.0 + FIRST_BACKOFF_SECONDS)
    assert decision.request
    assert decision.run_key == f"k{ATTEMPT_SEPARATOR}2"
    # two failures: twice the wait
    second = Attempt(finished=True, succeeded=False, ended_at=2000.0)
    assert not decide("k", [FAILED, second], now=2000.0 + FIRST_BACKOFF_SECONDS).request
    assert decide("k", [FAILED, second], now=2000.0 + 2 * FIRST_BACKOFF_SECONDS).run_key == (
        f"k{ATTEMPT_SEPARATOR}3"
    )


def test_the_backoff_doubles_up_to_a_cap() -> None:
    assert [backoff_seconds(n) for n in range(4)] == [0.0, 30.0, 60.0, 120.0]
    assert backoff_seconds(50) == MAX_BACKOFF_SECONDS


def test_a_success_that_left_a_difference_asks_again_at_once_but_not_forever() -> None:
    done = Attempt(finished=True, succeeded=True, ended_at=1000.0)
    assert decide("k", [done], now=1000.0).request
    assert not decide("k", [done, done, done], now=1e9).request
