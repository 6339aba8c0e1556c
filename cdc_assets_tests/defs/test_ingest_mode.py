"""How a ledger run picks incremental ingest or an hour rebuild from its partition key."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cdc_assets.assets.ledger import choose_mode
from cdc_assets.pipeline.ingest.ingest import hour_bounds
from cdc_assets.sensors.new_offsets import current_hour_key

NOW = datetime(2026, 3, 4, 10, 25, tzinfo=UTC)


@pytest.mark.parametrize(
    ("key", "mode"),
    [
        ("2026-03-04-10:00", "incremental"),  # the current hour
        ("2026-03-04-09:00", "incremental"),  # the hour that just closed
        ("2026-03-04-08:00", "rebuild"),
        ("2026-01-01-00:00", "rebuild"),
    ],
)
def test_auto_mode(key: str, mode: str) -> None:
    assert choose_mode("auto", key, NOW) == mode


def test_explicit_mode_wins() -> None:
    assert choose_mode("rebuild", "2026-03-04-10:00", NOW) == "rebuild"
    assert choose_mode("incremental", "2026-01-01-00:00", NOW) == "incremental"


def test_hour_bounds_and_current_key() -> None:
    start, end = hour_bounds("2026-03-04-10:00")
    assert start == datetime(2026, 3, 4, 10, tzinfo=UTC)
    assert (end - start).total_seconds() == 3600
    assert current_hour_key(NOW) == "2026-03-04-10:00"
