"""One schema evolution of one table, end to end: classify, then the three phases (Iceberg
schemas, spec version, backfill from the ledger), with a row in the schema history either way.

The current spec is read at run time, not from the definitions loaded before: a queued evolution
must see what the one before it wrote. Phase 2 stores the new version in the catalog, where every
process of a deployment reads it (``pipeline.evolution.spec_store``), and writes this checkout's
spec file.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cdc_assets.errors import CdcAssetsError, SpecError
from cdc_assets.pipeline.evolution.evolve import (
    BackfillResult,
    backfill_from_ledger,
    evolve_iceberg,
    redrive_refused,
)
from cdc_assets.pipeline.evolution.spec_store import current_spec, record_spec
from cdc_assets.pipeline.shared.failpoint import fail_once
from cdc_assets.pipeline.shared.meta_tables import record_history
from cdc_assets.pipeline.shared.offsets import table_offsets
from cdc_assets.pipeline.shared.pause import table_paused
from cdc_assets.pipeline.shared.tables import ensure_tables, missing_tables
from cdc_assets.schema.changes import (
    AddColumn,
    ChangeSourceType,
    DropColumn,
    EvolutionPlan,
    FollowSourceRename,
    Rejection,
    RenameColumn,
    RetireColumn,
    SoftDropColumn,
    WidenType,
)
from cdc_assets.schema.evolution import apply_plan, classify
from cdc_assets.schema.history import HistoryEntry
from cdc_assets.schema.recover import dead_letter_reasons
from cdc_assets.spec.ddl_import import plan_from_ddl
from cdc_assets.spec.information_schema import SourceIdentity, identity_audit, with_attnums
from cdc_assets.spec.load import load_spec_text
from cdc_assets.spec.models import TableSpec
from cdc_assets.spec.versions import write_spec

log = logging.getLogger(__name__)


class EvolutionRejectedError(CdcAssetsError):
    """The proposed change is not supported; no table was touched."""

    def __init__(self, table: str, plan: EvolutionPlan) -> None:
        self.plan = plan
        super().__init__(
            f"{table}: schema change rejected, no table was changed:\n{plan.describe()}"
        )


@dataclass
class ConvergeResult:
    table: str
    decision: str  # applied | no-op
    plan: EvolutionPlan
    from_version: int
    to_version: int
    spec_path: Path
    schema_ids: dict[str, int] = field(default_factory=dict)
    backfill: BackfillResult | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    refused: tuple[Rejection, ...] = ()  # changes not applied (decision "partial"), and why


def spec_path(specs_dir: Path, table: str) -> Path:
    path = specs_dir / f"{table}.yaml"
    if not path.exists():
        raise SpecError(f"{path}: no spec for table {table!r}")
    return path


def proposal(
    current: TableSpec,
    *,
    proposed_yaml: str | None = None,
    source_ddl: str | None = None,
    audit_ddl: Sequence[str] = (),
) -> EvolutionPlan:
    """The plan from ``current`` to a proposed spec (its YAML) or to a source CREATE TABLE."""
    if proposed_yaml:
        proposed = load_spec_text(proposed_yaml, f"proposed spec of {current.name}")
        return classify(current, proposed)
    if source_ddl:
        sensitive = [c.name for c in current.columns if c.sensitive]
        _, plan = plan_from_ddl(current, source_ddl, audit_ddl, sensitive=sensitive)
        return plan
    raise SpecError(f"{current.name}: give a proposed spec or the source's CREATE TABLE")


def lacks(plan: EvolutionPlan) -> bool:
    """Whether the source's shape lacks a column of the spec: a drop or soft drop planned, or a
    disappearance refused as ambiguous."""
    return any(isinstance(c, SoftDropColumn | DropColumn) for c in plan.changes) or any(
        r.blocks for r in plan.rejections
    )


def _backfill_columns(plan: EvolutionPlan, spec: TableSpec) -> list[str]:
    ids = {c.column.id for c in plan.changes if isinstance(c, AddColumn)}
    # A column renamed at the source: rows decoded before the evolution looked its value up
    # under the old name and hold null (or are dead letters, for a NOT NULL column); the new
    # name is in their row images.
    ids |= {c.id for c in plan.changes if isinstance(c, RenameColumn)}
    # A longer varchar keeps its Iceberg type but accepts values the ingest refused against the
    # old length: like a widening, its dead letters are redriven.
    ids |= {c.id for c in plan.changes if isinstance(c, WidenType | ChangeSourceType)}
    return [c.sink_name for c in spec.columns if c.id in ids]


def converge(
    spark: Callable[[], Any],
    catalog: str,
    iceberg_catalog: Any,
    specs_dir: Path,
    table: str,
    *,
    proposed_yaml: str | None = None,
    source_ddl: str | None = None,
    audit_ddl: Sequence[str] = (),
    trigger: str = "manual",
    detected_at: datetime | None = None,
    kafka_offsets: Mapping[Any, int] | None = None,
    change_position: Mapping[str, Any] | None = None,
    source_attnums: Mapping[str, int] | None = None,
    read_identity: Callable[[], SourceIdentity | None] | None = None,
    drain: Callable[[TableSpec], Any] | None = None,
) -> ConvergeResult:
    """Bring ``table`` to the proposed schema; raise EvolutionRejectedError for unsupported changes.

    ``spark`` is called only when there is something to backfill or a table to create, so a no-op
    or a rejection never starts a JVM. ``change_position``: the source position of the change
    (the schema-change record's ``source`` block), which bounds the re-decoding of a column whose
    encoding changed (`backfill_from_ledger`). ``source_attnums``: PostgreSQL's column
    numbers, kept in the evolved spec. ``read_identity``: reads them from the live source when
    the source's shape lacks a column of the spec (is it renamed or dropped?); the renames and
    drops they prove join the audit trail. ``drain``: ingests a spec's topic to its end; a
    followed rename of the source table reads the old topic with it before the spec moves to
    the new one, so no change of the old name waits for the new table's first change.
    """
    path = spec_path(specs_dir, table)
    current = current_spec(iceberg_catalog, specs_dir, table)
    if kafka_offsets is None:
        # The ledgers' position when the change is applied: where its effects can start.
        kafka_offsets = table_offsets(iceberg_catalog, current) or None
    plan = proposal(
        current, proposed_yaml=proposed_yaml, source_ddl=source_ddl, audit_ddl=audit_ddl
    )
    if source_ddl and read_identity is not None and not current.source.shards and lacks(plan):
        identity = read_identity()
        if identity is not None:
            # A column the source's shape lacks: the numbers say renamed or dropped (the
            # shape alone cannot), so the rename keeps the column's values and history.
            audit_ddl = [*audit_ddl, *identity_audit(current, identity)]
            source_attnums = source_attnums or identity.live
            plan = proposal(current, source_ddl=source_ddl, audit_ddl=audit_ddl)

    proposed_plan = plan  # as proposed, with any refusals; `plan` becomes what is applied

    def history(decision: str, to_version: int, **extra: Any) -> None:
        record_history(
            iceberg_catalog,
            HistoryEntry(
                table=table,
                from_version=current.spec_version,
                to_version=to_version,
                diff=proposed_plan.describe(),
                source_ddl="\n".join([*audit_ddl, source_ddl or ""]).strip() or None,
                trigger=trigger,
                decision=decision,
                reasons="\n".join(str(r) for r in proposed_plan.rejections) or None,
                kafka_offsets={str(p): o for p, o in (kafka_offsets or {}).items()} or None,
                detected_at=detected_at,
                applied_at=datetime.now(UTC),
                **extra,
            ),
        )

    # Decided per column: a safe change is applied even when another column's is refused (a
    # shard behind on one column must not block another's addition); the refusals are recorded
    # and reported, and the schema_converged check shows them until the source or the spec moves.
    refused = plan.rejections
    if not plan.supported:
        applicable = plan.applicable
        if not applicable.changes:
            history("rejected", current.spec_version)
            raise EvolutionRejectedError(table, plan)
        log.warning(
            f"{table}: applying the supported changes only; refused: "
            + "; ".join(str(r) for r in refused)
        )
        plan = applicable
    if not plan.changes:
        history("no-op", current.spec_version)
        return ConvergeResult(
            table, "no-op", plan, current.spec_version, current.spec_version, path
        )

    seconds: dict[str, float] = {}
    started = time.monotonic()
    fail_once("evolve_start")
    # A continuous worker leaves the table alone until this evolution has committed.
    with table_paused(iceberg_catalog, current, "evolution"):
        evolved = with_attnums(apply_plan(current, plan), source_attnums or {})
        # Onboarding is evolution from nothing: a table whose first ingest has not run yet (a new
        # spec, the sensor quicker than the ingest) is created at the current version here, then
        # evolved like any other, so the order of the first ingest and the first evolution never
        # matters.
        missing = missing_tables(iceberg_catalog, current)
        if missing:
            log.info(f"{table}: creating {', '.join(missing)} before evolving them")
            ensure_tables(spark(), catalog, current)
        seconds["onboard"] = round(time.monotonic() - started, 2)
        started = time.monotonic()
        schema_ids = evolve_iceberg(iceberg_catalog, current, evolved, plan)
        seconds["iceberg"] = round(time.monotonic() - started, 2)
        if drain is not None and any(isinstance(c, FollowSourceRename) for c in plan.changes):
            started = time.monotonic()
            drain(current)
            seconds["drain"] = round(time.monotonic() - started, 2)

        started = time.monotonic()
        # The stored version is the one every process reads; the file is this checkout's copy.
        record_spec(iceberg_catalog, evolved, specs_dir)
        try:
            write_spec(evolved, path)
        except OSError as exc:  # a read-only checkout: the stored version is what counts
            log.warning(f"{table}: v{evolved.spec_version} stored, but {path} not written: {exc}")
        seconds["spec"] = round(time.monotonic() - started, 2)

        started = time.monotonic()
        columns = _backfill_columns(plan, evolved)
        backfill = None
        if columns:
            # A column added with a default the source gave its older rows: every ledger row,
            # not only those since the change, decodes to it (their images lack the field). A
            # retyped column's new one likewise: every older image holds a value that may convert.
            defaulted = any(
                (isinstance(c, AddColumn) and c.column.backfill_default)
                or isinstance(c, RetireColumn)
                for c in plan.changes
            )
            backfill = backfill_from_ledger(
                spark(),
                catalog,
                iceberg_catalog,
                evolved,
                columns,
                since=None if defaulted else detected_at,
                from_spec=current,
                change_position=change_position,
                new_change=True,
            )
        else:
            # Nothing to recover from the row images, but a NOT NULL column the source dropped
            # turned every row sent without it into a dead letter: those decode now.
            reasons = dead_letter_reasons(current, evolved, [])
            if reasons:
                redrive_refused(spark(), catalog, iceberg_catalog, evolved, reasons)
        seconds["backfill"] = round(time.monotonic() - started, 2)
    history(
        "partial" if refused else "applied",
        evolved.spec_version,
        iceberg_schema_ids=schema_ids,
        snapshot_ids=backfill.snapshot_ids if backfill is not None else {},
    )
    return ConvergeResult(
        table,
        "partial" if refused else "applied",
        plan,
        current.spec_version,
        evolved.spec_version,
        path,
        schema_ids,
        backfill,
        seconds,
        refused,
    )
