"""The ledger commit of an ingest, exactly once without relying on Dagster's pools.

Two ingests of one table can start outside one Dagster instance (two deployments, the CLI beside
the UI, a retried run racing its original): both read the same committed offsets and would both
append the same Kafka records. So the ledger commit itself refuses a stale start, with Iceberg's
optimistic concurrency:

1. the run notes the ledger's main snapshot it read its offsets from;
2. it writes its rows to a branch of its own created at that snapshot (Spark's
   ``<table>.branch_<name>``), so nothing is visible yet;
3. one catalog commit moves ``main`` to the branch's snapshot, with the requirement that ``main``
   is still the noted snapshot (``AssertRefSnapshotId``), and drops the branch.

If anything committed to the ledger in between (another ingest, a backfill, a redrive, a
compaction), step 3 is refused and nothing of this run is visible: the ingest starts over from
the offsets committed now (`LedgerMovedError`), reading only what the winner did not take. A
branch left by a run that died is removed by a later ingest once it is an hour old.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from typing import Any

from cdc_assets.errors import CdcAssetsError
from cdc_assets.pipeline.shared.watermark import commit_properties_only

BRANCH_PREFIX = "cdc-ingest-"
STALE_BRANCH_MS = 3_600_000


class LedgerMovedError(CdcAssetsError):
    """Another commit reached the ledger after this run read its offsets; nothing was written."""


def start_snapshot(table: Any) -> int:
    """The main snapshot an ingest starts from; an empty ledger gets an empty one first (a
    branch needs a snapshot to start at)."""
    current = table.current_snapshot()
    if current is None:
        try:
            commit_properties_only(table, {})
        except Exception as exc:  # a concurrent first commit: read the winner's snapshot
            if "CommitFailed" not in type(exc).__name__:
                raise
        current = table.refresh().current_snapshot()
    return int(current.snapshot_id)


def remove_stale_branches(table: Any, now_ms: int | None = None) -> list[str]:
    """Drop ingest branches older than an hour (their run died before its commit)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    stale = [
        name
        for name, ref in table.metadata.refs.items()
        if name.startswith(BRANCH_PREFIX)
        and now_ms - table.snapshot_by_id(ref.snapshot_id).timestamp_ms > STALE_BRANCH_MS
    ]
    for name in stale:
        try:
            table.manage_snapshots().remove_branch(name).commit()
        except Exception:  # another run removed it first; it is gone either way
            table.refresh()
    return stale


# Creating the branch is a metadata commit of its own, which a concurrent writer's commit can
# make stale; it is retried on a fresh load this many times in all.
BRANCH_ATTEMPTS = 10


def append_if_unchanged(
    iceberg_catalog: Any,
    identifier: str,
    spark_identifier: str,
    expected_snapshot: int,
    write: Callable[[str], None],
) -> int:
    """Append through ``write`` (given the Spark identifier of a fresh branch) and publish it as
    the ledger's main snapshot only if main is still ``expected_snapshot``; returns the new
    snapshot id. Raises LedgerMovedError, with nothing visible, when main moved."""
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.table.update import (
        AssertRefSnapshotId,
        RemoveSnapshotRefUpdate,
        SetSnapshotRefUpdate,
    )

    branch = f"{BRANCH_PREFIX}{uuid.uuid4().hex[:12]}"
    for attempt in range(BRANCH_ATTEMPTS):
        table = iceberg_catalog.load_table(identifier)
        try:
            table.manage_snapshots().create_branch(expected_snapshot, branch).commit()
            break
        except CommitFailedException:
            # Another writer changed the table's metadata (its own branch, its publication)
            # between our load and this commit. A branch at the expected snapshot is still
            # right: whether main moved is decided by the publication below, not here.
            if attempt == BRANCH_ATTEMPTS - 1:
                raise
            time.sleep(0.05 * (attempt + 1))
    published = False
    try:
        write(f"{spark_identifier}.`branch_{branch}`")
        table = iceberg_catalog.load_table(identifier)
        written = int(table.metadata.refs[branch].snapshot_id)
        try:
            table.catalog.commit_table(
                table,
                (AssertRefSnapshotId(snapshot_id=expected_snapshot, ref="main"),),
                (
                    SetSnapshotRefUpdate(
                        ref_name="main",
                        type="branch",
                        snapshot_id=written,
                        max_ref_age_ms=None,
                        max_snapshot_age_ms=None,
                        min_snapshots_to_keep=None,
                    ),
                    RemoveSnapshotRefUpdate(ref_name=branch),
                ),
            )
        except CommitFailedException as exc:
            raise LedgerMovedError(
                f"{identifier}: the ledger moved past snapshot {expected_snapshot} while this "
                f"ingest ran ({exc}); nothing of it was published"
            ) from None
        published = True
        return written
    finally:
        if not published:
            # Best effort: remove_stale_branches takes a branch left here later.
            with contextlib.suppress(Exception):
                table = iceberg_catalog.load_table(identifier)
                table.manage_snapshots().remove_branch(branch).commit()
