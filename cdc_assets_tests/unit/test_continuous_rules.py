"""A table's pause is a lease in its properties: held until it ends, never read from anything
else than the two properties, and never a reason to stop a table when it cannot be read. And
when a continuous worker compacts base: over its files per bucket, never with a bound of 0."""

import pytest

from cdc_assets.pipeline.maintenance.maintenance import needs_compaction, summary_count
from cdc_assets.pipeline.shared.pause import PAUSED_BY, PAUSED_UNTIL, Pause, pause_of

pytestmark = pytest.mark.unit


def test_a_lease_that_has_not_ended_pauses() -> None:
    props = {PAUSED_BY: "maintenance 1a2b3c4d", PAUSED_UNTIL: "1000"}
    assert pause_of(props, now=999.0) == Pause("maintenance 1a2b3c4d", 1000.0)


@pytest.mark.parametrize(
    "props",
    [
        {},
        {PAUSED_BY: "evolution 1a2b3c4d"},  # half written by hand: no end, no pause
        {PAUSED_UNTIL: "5000"},
        {PAUSED_BY: "evolution 1a2b3c4d", PAUSED_UNTIL: "1000"},  # ended at now
        {PAUSED_BY: "evolution 1a2b3c4d", PAUSED_UNTIL: "soon"},
        {PAUSED_BY: "", PAUSED_UNTIL: "5000"},
    ],
)
def test_no_pause_without_a_holder_and_an_end_to_come(props: dict[str, str]) -> None:
    assert pause_of(props, now=1000.0) is None


def test_it_says_who_holds_it_and_for_how_long() -> None:
    pause = Pause("maintenance 1a2b3c4d", 1060.0)
    assert pause.describe(1000.0) == "paused by maintenance 1a2b3c4d for at most 60 s more"
    assert pause.describe(2000.0).endswith("for at most 0 s more")


@pytest.mark.parametrize(
    ("summary", "due"),
    [
        ({"total-data-files": "40", "total-delete-files": "24"}, False),  # 64 = 4 x 16: at it
        ({"total-data-files": "40", "total-delete-files": "25"}, True),  # over it
        ({"total-data-files": "65"}, True),  # a summary without deletes counts none
        ({}, False),
    ],
)
def test_a_worker_compacts_base_over_its_files_per_bucket(
    summary: dict[str, str], due: bool
) -> None:
    assert needs_compaction(summary, buckets=16, files_per_bucket=4) is due


def test_a_bound_of_zero_leaves_compaction_to_the_schedule() -> None:
    assert not needs_compaction({"total-data-files": "100000"}, buckets=1, files_per_bucket=0)


def test_an_absent_count_is_zero_whatever_the_summary_s_get_does() -> None:
    class NoDefault(dict[str, str]):
        def get(self, key: str, default: object = None) -> str | None:  # type: ignore[override]
            return super().get(key)  # pyiceberg's Summary.get ignores the default

    assert summary_count(NoDefault(), "total-delete-files") == 0
    assert summary_count(NoDefault({"total-data-files": "7"}), "total-data-files") == 7
