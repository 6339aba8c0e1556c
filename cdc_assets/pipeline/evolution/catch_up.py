"""Catch-up after a run that raced a schema evolution: no interleaving of runs loses a value.

Runs of one table start independently (the daemon's sensors start ingests, upserts and
evolutions; their pools are separate), so an ingest that loaded spec v1 can commit after an
evolution to v2 has backfilled the ledger: its rows lack v2's new columns, its dead letters
were refused by v1's narrower types, and nothing would revisit them. Likewise an upsert can
merge ledger rows into base after the evolution carried the backfilled values to base.

The rule, with the evolution's order of phases (Iceberg, then the spec file, then the backfill
of ledger, base and dead letters):

- every ledger commit that adds rows records the spec version they were decoded with
  (``cdc.spec-version`` in the snapshot summary), a redrive's too: an upsert merges a
  redrive's rows like any other, and one on an older spec must catch up after them;
- after an ingest commits, it reads the spec file: when it is newer than the version the ingest
  decoded with, the ingest runs the evolution's backfill itself for the columns that changed in
  between (ledger rows from the row images, base rows holding the same changes, dead letters
  redriven);
- after an upsert commits, it reads the spec file (and the catalog's stored versions when the
  ledger's Iceberg schema is not the file's): when it is newer than the version the upsert
  merged with, or than the one its bucketed rows were built with (a micro-batch that loaded its
  spec before an evolution, an upsert run queued before it, or one whose bucketed step another
  upsert's replaced), the upsert runs the backfill for every ledger commit it consumed, nulls
  included: its MERGE wrote only that version's columns;
- otherwise it reads the ledger commits it consumed: when any was decoded with a
  version older than the spec file's, it runs the same backfill, unless a backfill from that
  version to the file's ran to its end before the upsert read the ledger, having read every one
  of those commits and recovered every column they may hold wrong (its ``backfill-done`` ledger
  commit says so): the ledger rows the upsert merged held the recovered values already, and
  base's older rows were recovered by that backfill. This spares the second backfill that an
  evolution's first upsert used to run for the rows the evolution had just recovered.

Why that is enough: a value is lost only if a row decoded under an old version is written (into
the ledger, or into base) after every backfill that would fix it has read. An evolution writes
the spec file before its backfill reads the ledger; a run reads the spec file after it commits.
So either the run committed before the evolution's backfill read (which then sees the row), or
the run's check comes after the spec file write and sees the new version, and the run backfills
itself, after its own commit. The backfill is idempotent (it rewrites only values that differ),
so two of them racing (Iceberg retries the loser) or one more than needed changes nothing.
The ingest's catch-up commits before its run succeeds, and the ``ledger_updated`` sensor starts
an upsert after every successful ingest and evolution: redriven rows reach base.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cdc_assets.errors import SpecError
from cdc_assets.pipeline.evolution.evolve import (
    BACKFILL_DONE_KIND,
    BACKFILL_FROM_PROPERTY,
    BACKFILL_MIN_DT_PROPERTY,
    BACKFILL_THROUGH_PROPERTY,
    BACKFILL_VERSION_PROPERTY,
    BackfillResult,
    backfill_from_ledger,
)
from cdc_assets.pipeline.evolution.spec_store import current_of, stored_specs
from cdc_assets.pipeline.health.health import live_columns
from cdc_assets.pipeline.shared.offsets import (
    KIND_PROPERTY,
    REDRIVE_KIND,
    SPEC_VERSION_PROPERTY,
)
from cdc_assets.pipeline.upsert.upsert import load_table
from cdc_assets.schema.drift import layout_differences
from cdc_assets.schema.layers import ledger_layout
from cdc_assets.schema.recover import changed_columns, value_columns
from cdc_assets.spec.load import load_spec
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.backfill import backfill_min_dt


@dataclass(frozen=True)
class CatchUp:
    """One catch-up backfill: why, between which versions, which columns, what it changed."""

    table: str
    reason: str
    from_version: int
    to_version: int
    columns: tuple[str, ...]
    backfill: BackfillResult

    @property
    def changed(self) -> bool:
        """Whether the backfill found values to recover (else it only confirmed none were lost)."""
        b = self.backfill
        return bool(b.ledger_rows_updated or b.base_rows_updated or b.redriven)

    def metadata(self) -> dict[str, Any]:
        return {
            "catch_up_reason": self.reason,
            "catch_up_versions": f"{self.from_version} -> {self.to_version}",
            "catch_up_columns": list(self.columns),
            "catch_up_ledger_rows": self.backfill.ledger_rows_updated,
            "catch_up_base_rows": self.backfill.base_rows_updated,
            "catch_up_redriven": self.backfill.redriven,
        }


def spec_on_disk(specs_dir: Path, spec: TableSpec) -> TableSpec | None:
    """The spec's newest version as the spec directory holds it now (None: no such file, or a
    file of the same name that describes another table: definitions built from specs of their
    own, not the directory's)."""
    try:
        found = load_spec(specs_dir / f"{spec.name}.yaml")
    except (FileNotFoundError, SpecError):
        return None
    view = found.same_source_view(spec)  # a shard's view: the file's view of that shard
    if view is None:
        return None
    found = view
    same_table = (
        found.source.topic == spec.source.topic
        and found.sink.namespace == spec.sink.namespace
        and (found.sink.table or found.name) == (spec.sink.table or spec.name)
    )
    return found if same_table else None


def after_ingest(
    spark: Any,
    catalog: str,
    iceberg_catalog: Any,
    decoded_with: TableSpec,
    specs_dir: Path,
    started_at: datetime,
) -> CatchUp | None:
    """Run after an ingest committed rows decoded with ``decoded_with``."""
    current = spec_on_disk(specs_dir, decoded_with)
    if current is not None:  # an evolution run elsewhere stored a version this file lacks
        current = current_of(current, stored_specs(iceberg_catalog, {current.name}))
    if current is None or current.spec_version <= decoded_with.spec_version:
        return None
    columns = changed_columns(decoded_with, current)
    if not columns:
        return None
    result = backfill_from_ledger(
        spark, catalog, iceberg_catalog, current, columns, started_at, from_spec=decoded_with
    )
    return CatchUp(
        current.name,
        f"the ingest decoded with v{decoded_with.spec_version}; an evolution made "
        f"v{current.spec_version} while it ran",
        decoded_with.spec_version,
        current.spec_version,
        tuple(columns),
        result,
    )


@dataclass(frozen=True)
class LedgerCommit:
    """A ledger commit that added rows, and the spec version they were decoded with (None: a
    redrive of an older release, which did not record it)."""

    snapshot_id: int
    spec_version: int | None
    timestamp_ms: int
    sequence: int = 0


def recovered_before(
    ledger: Any, stale: list[LedgerCommit], version: int, min_dt: str | None, upto_sequence: int
) -> bool:
    """Whether the ``stale`` commits (all decoded with one older version) had their values
    recovered to ``version`` from ``min_dt`` on by a backfill that ran to its end at or before
    the ledger snapshot an upsert read (sequence ``upto_sequence``), after reading every one of
    them: a ``backfill-done`` commit from their version to ``version`` says so."""
    from pyiceberg.table.snapshots import ancestors_of

    decoded = {c.spec_version for c in stale}
    newest_stale = max(c.sequence for c in stale)
    current = ledger.current_snapshot()
    if len(decoded) != 1 or current is None:
        return False
    for snapshot in ancestors_of(current, ledger.metadata):
        sequence = snapshot.sequence_number or 0
        if sequence <= newest_stale:
            return False  # a backfill committed before a stale commit did not read it
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        if sequence > upto_sequence or props.get(KIND_PROPERTY) != BACKFILL_DONE_KIND:
            continue
        done_min_dt = props.get(BACKFILL_MIN_DT_PROPERTY, "")
        if (
            int(props.get(BACKFILL_THROUGH_PROPERTY, "-1")) >= newest_stale
            and {int(props.get(BACKFILL_FROM_PROPERTY, "-1"))} == decoded
            and int(props.get(BACKFILL_VERSION_PROPERTY, "-1")) == version
            and (not done_min_dt or (min_dt is not None and done_min_dt <= min_dt))
        ):
            return True
    return False


def decoded_versions(ledger: Any, after_sequence: int, upto_sequence: int) -> list[LedgerCommit]:
    """The ledger commits that added rows (those with a recorded spec version, and redrives)
    whose sequence number lies in (``after_sequence``, ``upto_sequence``]: what an upsert
    between those states consumed. A redrive's rows are behind base's watermark, but the upsert
    merges them all the same (``pipeline.upsert.upsert``)."""
    from pyiceberg.table.snapshots import ancestors_of

    current = ledger.current_snapshot()
    if current is None:
        return []
    out = []
    for snapshot in ancestors_of(current, ledger.metadata):
        sequence = snapshot.sequence_number or 0
        if sequence <= after_sequence:
            break
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        version = props.get(SPEC_VERSION_PROPERTY)
        added_rows = version is not None or props.get(KIND_PROPERTY) == REDRIVE_KIND
        if sequence <= upto_sequence and added_rows:
            decoded = int(version) if version is not None else None
            out.append(LedgerCommit(snapshot.snapshot_id, decoded, snapshot.timestamp_ms, sequence))
    return out


def after_upsert(
    spark: Any,
    catalog: str,
    iceberg_catalog: Any,
    spec: TableSpec,
    specs_dir: Path,
    after_sequence: int,
    upto_sequence: int,
    built_with: int | None = None,
) -> CatchUp | None:
    """Run after an upsert (with ``spec``) merged the ledger commits between two sequence
    numbers into base, from a bucketed table built with spec version ``built_with``."""
    current = spec_on_disk(specs_dir, spec) or spec
    ledger = load_table(iceberg_catalog, ledger_layout(current))
    if layout_differences(ledger_layout(current), live_columns(ledger)):
        # The ledger's schema is not the file's: an evolution changed it (it alters the Iceberg
        # tables before it stores its version), maybe from a host whose spec files this one
        # lacks. The catalog's stored versions then say which is current; reading them on
        # every upsert would cost a scan of the version table per table.
        current = current_of(current, stored_specs(iceberg_catalog, {current.name}))
    consumed = decoded_versions(ledger, after_sequence, upto_sequence)
    # An upsert that loaded its spec before an evolution merged only that spec's columns, and a
    # bucketed table built before one holds only that spec's: the rows the MERGE wrote lack the
    # newer columns' values (or keep an earlier change's) whatever the ledger rows held, and no
    # backfill before it can have covered them.
    merged = min(spec.spec_version, built_with if built_with is not None else spec.spec_version)
    behind = merged < current.spec_version
    # Behind, every row the MERGE wrote lacks the newer columns, whichever commit it came from
    # (a redrive's rows were decoded with the newest spec, and still merged with an older one).
    stale = (
        consumed
        if behind
        else [
            c
            for c in consumed
            if c.spec_version is not None and c.spec_version < current.spec_version
        ]
    )
    if not stale and not behind:
        return None
    versions = [c.spec_version for c in stale if c.spec_version is not None]
    oldest = min([merged, *versions])
    # The upsert's own spec is the only older version at hand; rows of an even older one get
    # every column checked (the backfill rewrites only values that differ).
    columns = changed_columns(spec, current) if oldest == spec.spec_version else []
    columns = columns or value_columns(current)
    # No commit found (a MERGE behind on rows of commits this release cannot place): the whole
    # ledger is read, rather than a value left behind.
    since = (
        datetime.fromtimestamp(min(c.timestamp_ms for c in stale) / 1000, UTC) if stale else None
    )
    min_dt = backfill_min_dt(since, current.base.lookback_hours)
    if not behind and recovered_before(ledger, stale, current.spec_version, min_dt, upto_sequence):
        return None
    result = backfill_from_ledger(
        spark,
        catalog,
        iceberg_catalog,
        current,
        columns,
        since,
        from_spec=spec if oldest == spec.spec_version else None,
        base_nulls=behind,
    )
    reason = (
        f"the upsert merged rows of v{merged}; an evolution made "
        f"v{current.spec_version} while it ran"
        if behind
        else f"the upsert merged ledger rows decoded with v{oldest}; the spec is "
        f"v{current.spec_version}"
    )
    return CatchUp(
        current.name,
        reason,
        oldest,
        current.spec_version,
        tuple(columns),
        result,
    )
