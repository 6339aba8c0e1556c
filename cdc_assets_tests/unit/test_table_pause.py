"""A table's pause is a lease in its properties: held until it ends, never read from anything
else than the two properties, and never a reason to stop a table when it cannot be read."""

import pytest

from cdc_assets.pipeline.pause import PAUSED_BY, PAUSED_UNTIL, Pause, pause_of

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
