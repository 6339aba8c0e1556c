"""The pure parts of maintenance: which snapshots expiry must keep, the SQL it runs, conflicts."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cdc_assets.pipeline.maintenance.maintenance import (
    COMMIT_ATTEMPTS,
    Expiry,
    MaintenanceResult,
    SnapshotPoint,
    StepResult,
    StepRunner,
    plan_expiry,
    protected_depth,
    render_expire_snapshots,
    render_remove_orphan_files,
    render_rewrite_data_files,
    render_tombstone_purge,
    timestamp_literal,
)
from cdc_assets.pipeline.shared.offsets import KIND_PROPERTY, OFFSETS_PROPERTY, REPROTECT_KIND
from cdc_assets.pipeline.shared.watermark import WATERMARK, is_commit_conflict


def lineage(*points: tuple[int, dict[str, str]]) -> list[SnapshotPoint]:
    """Newest first; snapshot i has sequence number len - i."""
    n = len(points)
    return [
        SnapshotPoint(snapshot_id=100 + i, timestamp_ms=ts, sequence_number=n - i, properties=p)
        for i, (ts, p) in enumerate(points)
    ]


STATE = {WATERMARK: '{"0":5}'}
OFFSETS = {OFFSETS_PROPERTY: '{"0":5}'}


def test_base_keeps_everything_down_to_the_newest_state_snapshot() -> None:
    # two compactions on top of the newest upsert, older upserts below it
    snaps = lineage((5000, {}), (4000, {}), (3000, STATE), (2000, STATE), (1000, STATE))
    depth = protected_depth(snaps, WATERMARK)
    assert depth == 3
    expiry = plan_expiry(snaps, depth, older_than_ms=4500, retain_last=1)
    assert expiry == Expiry(older_than_ms=3000, retain_last=3, protected=3)


def test_retention_older_than_the_state_is_left_alone() -> None:
    snaps = lineage((5000, STATE), (4000, STATE))
    expiry = plan_expiry(snaps, protected_depth(snaps, WATERMARK), 1000, retain_last=10)
    assert expiry == Expiry(1000, 10, 1)


def test_cutoff_covers_out_of_order_timestamps_of_the_kept_snapshots() -> None:
    # a writer with a slow clock committed on top of the state snapshot
    snaps = lineage((5000, {}), (2500, {}), (3000, STATE), (1000, STATE))
    expiry = plan_expiry(snaps, protected_depth(snaps, WATERMARK), 4000, retain_last=1)
    assert expiry.older_than_ms == 2500
    assert expiry.retain_last == 3


def test_no_state_means_only_the_retention_applies() -> None:
    snaps = lineage((5000, {}), (4000, {}))
    assert protected_depth(snaps, WATERMARK) == 0
    assert plan_expiry(snaps, 0, 4500, 2) == Expiry(4500, 2, 0)
    assert plan_expiry([], 0, 4500, 2) == Expiry(4500, 2, 0)


def test_ledger_keeps_the_offsets_and_every_snapshot_base_has_not_read() -> None:
    # newest first: a redrive (no offsets), an ingest, another redrive, the ingest base read
    snaps = lineage((4000, {}), (3000, OFFSETS), (2000, {}), (1000, OFFSETS))
    sequences = [s.sequence_number for s in snaps]
    assert sequences == [4, 3, 2, 1]
    assert protected_depth(snaps, OFFSETS_PROPERTY, unread_after=4) == 2
    assert protected_depth(snaps, OFFSETS_PROPERTY, unread_after=1) == 3
    # base never applied anything: the whole ledger lineage stays
    assert protected_depth(snaps, OFFSETS_PROPERTY, unread_after=0) == 4


def test_a_protection_rewrites_own_snapshots_keep_nothing_older() -> None:
    # newest first: the rewrite's offsets stamp, its manifests, its UPDATE, the ingest base read
    own = {KIND_PROPERTY: REPROTECT_KIND}
    snaps = lineage((4000, {**OFFSETS, **own}), (3000, own), (2000, own), (1000, OFFSETS))
    assert protected_depth(snaps, OFFSETS_PROPERTY, unread_after=1) == 1
    # an ingest base has not read, under the rewrite, is still kept
    snaps = lineage((4000, {**OFFSETS, **own}), (3000, own), (2000, OFFSETS), (1000, OFFSETS))
    assert protected_depth(snaps, OFFSETS_PROPERTY, unread_after=1) == 3


def test_timestamp_literal_is_exact_to_the_millisecond() -> None:
    moment = datetime(2026, 3, 4, 5, 6, 7, 89_000, tzinfo=UTC)
    ms = int(moment.timestamp() * 1000)
    assert timestamp_literal(ms) == "TIMESTAMP '2026-03-04 05:06:07.089+00:00'"


def test_procedures_name_the_table_with_its_catalog() -> None:
    table = "`lake`.`app`.`users`"
    rewrite = render_rewrite_data_files("lake", table)
    assert rewrite.startswith("CALL `lake`.system.rewrite_data_files(table => '`lake`.`app`")
    assert "'partial-progress.enabled', 'true'" in rewrite
    assert "'min-input-files', '2'" in rewrite
    assert "strategy" not in rewrite
    # Base and tombstones: sorted by their sort order (the key), so the MERGEs can still prune.
    sorted_rewrite = render_rewrite_data_files("lake", table, sort=True)
    assert "'`lake`.`app`.`users`', strategy => 'sort', options => map(" in sorted_rewrite
    expire = render_expire_snapshots("lake", table, Expiry(0, 4, 1))
    assert expire.endswith(
        "older_than => TIMESTAMP '1970-01-01 00:00:00.000+00:00', retain_last => 4)"
    )
    assert "remove_orphan_files(table => " in render_remove_orphan_files("lake", table, 0)
    # an object store's table is listed by its FileIO (no Hadoop connector for s3:// in Spark)
    on_s3 = render_remove_orphan_files("lake", table, 0, "s3://warehouse/shop/orders")
    assert on_s3.endswith("prefix_listing => true)")
    on_disk = render_remove_orphan_files("lake", table, 0, "file:/tmp/warehouse/shop/orders")
    assert "prefix_listing" not in on_disk
    assert render_tombstone_purge(table, 0) == (
        f"DELETE FROM {table} WHERE _recorded_at < TIMESTAMP '1970-01-01 00:00:00.000+00:00'"
    )


@pytest.mark.parametrize(
    ("text", "conflict"),
    [
        ("org.apache.iceberg.exceptions.CommitFailedException: Cannot commit x: metadata", True),
        ("org.apache.iceberg.exceptions.ValidationException: Found conflicting files", True),
        ("java.io.FileNotFoundException: file:/w/data/x.parquet", False),
        ("[TABLE_OR_VIEW_NOT_FOUND] The table `lake`.`a`.`b` cannot be found", False),
    ],
)
def test_commit_conflicts_are_told_from_other_errors(text: str, conflict: bool) -> None:
    assert is_commit_conflict(RuntimeError(text)) is conflict


def test_totals_sum_the_steps() -> None:
    result = MaintenanceResult(
        "users",
        [
            StepResult("rewrite_data_files", "base", "b", {"rewritten_data_files_count": 5}, 2),
            StepResult("rewrite_data_files", "tombstones", "t", {"rewritten_data_files_count": 1}),
            StepResult("expire_snapshots", "base", "b", {"snapshots_expired": 3}, 1),
            StepResult("remove_orphan_files", "cdc", "c", {}, 4, error="still conflicting"),
        ],
    )
    totals = result.totals()
    assert totals["data_files_rewritten"] == 6
    assert totals["snapshots_expired"] == 3
    assert totals["commit_retries"] == 1 + 3
    assert [s.layer for s in result.failed] == ["cdc"]


class Flaky:
    """An action that loses ``losses`` commit races, then succeeds."""

    def __init__(self, losses: int, error: str = "CommitFailedException: metadata changed") -> None:
        self.losses = losses
        self.error = error
        self.calls = 0

    def __call__(self, out: StepResult) -> None:
        self.calls += 1
        if self.calls <= self.losses:
            raise RuntimeError(f"org.apache.iceberg.exceptions.{self.error}")
        out.counts = {"rewritten_data_files_count": 3}


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> tuple[StepRunner, list[str]]:
    monkeypatch.setattr("cdc_assets.pipeline.maintenance.maintenance.RETRY_BASE_SECONDS", 0.0)
    messages: list[str] = []
    return StepRunner(MaintenanceResult("users"), messages.append), messages


def test_a_lost_commit_race_is_retried(runner: tuple[StepRunner, list[str]]) -> None:
    steps, messages = runner
    action = Flaky(losses=2)
    outcome = steps.step("rewrite_data_files", "base", "b", action)
    assert action.calls == 3
    assert outcome.attempts == 3
    assert not outcome.error
    assert outcome.counts == {"rewritten_data_files_count": 3}
    assert sum("lost a commit race" in m for m in messages) == 2
    assert steps.result.steps == [outcome]


def test_a_step_that_keeps_losing_is_reported_and_the_others_go_on(
    runner: tuple[StepRunner, list[str]],
) -> None:
    steps, messages = runner
    action = Flaky(losses=COMMIT_ATTEMPTS)
    outcome = steps.step("rewrite_data_files", "base", "b", action)
    assert action.calls == COMMIT_ATTEMPTS
    assert outcome.error.startswith(
        f"still conflicting with concurrent commits after {COMMIT_ATTEMPTS}"
    )
    assert "FAILED" in messages[-1]
    assert steps.step("expire_snapshots", "base", "b", Flaky(losses=0)).attempts == 1
    assert [s.step for s in steps.result.failed] == ["rewrite_data_files"]


def test_other_errors_are_not_retried(runner: tuple[StepRunner, list[str]]) -> None:
    steps, _ = runner
    action = Flaky(losses=1, error="NotFoundException: no such table")
    with pytest.raises(RuntimeError, match="NotFoundException"):
        steps.step("expire_snapshots", "base", "b", action)
    assert action.calls == 1
