"""Which ledger hours an incremental run records as empty."""

from datetime import UTC, datetime, timedelta

import pytest

from cdc_assets.assets.ledger import empty_hours

pytestmark = pytest.mark.unit


def _keys(first: datetime, n: int) -> list[str]:
    return [(first + timedelta(hours=h)).strftime("%Y-%m-%d-%H:00") for h in range(n)]


def test_only_hours_that_ended_unread_within_the_week() -> None:
    read_at = datetime(2026, 3, 10, 12, 30, tzinfo=UTC)
    keys = _keys(datetime(2026, 3, 1, 0, tzinfo=UTC), 24 * 10 + 1)  # to 2026-03-11-00:00
    hours = empty_hours(keys, {"2026-03-09-05:00"}, ["2026-03-10-03:00"], read_at)
    assert hours[0] == "2026-03-02-12:00"  # a week and a day back, no further
    assert hours[-1] == "2026-03-10-11:00"  # ended before the read; 12:00 is still open
    assert "2026-03-09-05:00" not in hours  # materialized by a run
    assert "2026-03-10-03:00" not in hours  # written by this run
    assert len(hours) == 8 * 24 - 2


def test_an_hour_that_just_ended_waits_for_late_records() -> None:
    keys = _keys(datetime(2026, 3, 10, 10, tzinfo=UTC), 3)
    read_at = datetime(2026, 3, 10, 12, 3, tzinfo=UTC)
    assert empty_hours(keys, set(), [], read_at) == ["2026-03-10-10:00"]
    assert empty_hours(keys, set(), [], read_at + timedelta(minutes=5)) == keys[:2]
