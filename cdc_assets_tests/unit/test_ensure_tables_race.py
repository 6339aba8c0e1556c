"""Onboarding that loses a commit race on a new table (found through the daemon, seed 20 of
test_daemon_scenarios: "new spec, rename, at once, fails once at ingest_before_commit"). Two runs
create the same new tables; the second's ALTER for identifier fields lost its commit to the
first's ("metadata location ... has changed") and failed the run. The ALTERs are idempotent, so
`ensure_tables` applies them again on the newer metadata; other errors still fail."""

from __future__ import annotations

from typing import Any

import pytest

from cdc_assets.pipeline.shared import tables
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.spec import load_specs
from cdc_assets_tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.unit

CONFLICT = (
    "org.apache.iceberg.exceptions.CommitFailedException: Cannot commit ns.users: metadata "
    "location file:/w/ns/users/metadata/00000-a.metadata.json has changed"
)


class _Catalog:
    def tableExists(self, identifier: str) -> bool:  # noqa: N802 (Spark's name)
        return False


class RacingSpark:
    """Records the SQL it runs; the first ``losses`` ALTERs raise ``error``."""

    def __init__(self, losses: int, error: str = CONFLICT) -> None:
        self.catalog = _Catalog()
        self.ran: list[str] = []
        self.losses = losses
        self.error = error

    def sql(self, text: str) -> Any:
        if text.lstrip().upper().startswith("ALTER") and self.losses > 0:
            self.losses -= 1
            raise RuntimeError(self.error)
        self.ran.append(text)
        return None


@pytest.fixture(autouse=True)
def _no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tables, "PROPERTY_RETRY_PAUSE_S", 0.0)


def _spec() -> Any:
    return next(s for s in load_specs(PROJECT_ROOT / "table_specs") if s.name == "users")


def test_an_alter_that_lost_a_commit_race_is_applied_again() -> None:
    spec = _spec()
    calm = RacingSpark(losses=0)
    ensure_tables(calm, "lake", spec)
    racing = RacingSpark(losses=2)
    outcomes = ensure_tables(racing, "lake", spec)
    assert racing.ran == calm.ran  # every statement ran once it won
    assert all(o.created for o in outcomes)
    assert any(t.lstrip().upper().startswith("ALTER") for t in racing.ran)


def test_other_errors_and_endless_conflicts_still_fail() -> None:
    with pytest.raises(RuntimeError, match="cannot find field"):
        ensure_tables(RacingSpark(losses=1, error="cannot find field 'id'"), "lake", _spec())
    with pytest.raises(RuntimeError, match="CommitFailedException"):
        ensure_tables(RacingSpark(losses=tables.PROPERTY_ATTEMPTS), "lake", _spec())
