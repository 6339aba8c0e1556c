"""Spec versions an evolution stored in the catalog, as a commit for the team's repository
(pure): which files change, the branch name and the commit message naming each change and the
source position it came from. ``cdc-assets specs export`` does the git work."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from cdc_assets.schema.history import HistoryEntry
from cdc_assets.spec.models import TableSpec

BRANCH_PREFIX = "cdc-assets/spec-versions-"


@dataclass(frozen=True)
class ExportedSpec:
    """One table whose stored version is newer than its file: what replaces the file, and
    the evolutions that led there (oldest first)."""

    file_version: int
    stored: TableSpec
    yaml: str
    history: Sequence[HistoryEntry] = field(default_factory=tuple)

    @property
    def name(self) -> str:
        return self.stored.name


def newer_stored(file_spec: TableSpec, stored: TableSpec | None) -> bool:
    """Whether the catalog holds a version of the table newer than its file."""
    return stored is not None and stored.spec_version > file_spec.spec_version


def evolutions_between(
    history: Sequence[HistoryEntry], name: str, from_version: int, to_version: int
) -> list[HistoryEntry]:
    """The applied evolutions of ``name`` that made the versions after ``from_version`` up to
    ``to_version``, oldest first."""
    return sorted(
        (
            e
            for e in history
            if e.table == name
            and e.decision in ("applied", "partial")
            and from_version <= e.from_version < e.to_version <= to_version
        ),
        key=lambda e: e.to_version,
    )


def branch_name(now: datetime) -> str:
    return BRANCH_PREFIX + now.strftime("%Y%m%d-%H%M%S")


def commit_message(exports: Sequence[ExportedSpec]) -> str:
    """A subject naming every table and version step, then per table each evolution: its
    trigger and time, the plan, the source DDL and the ledger's Kafka offsets when applied."""
    steps = ", ".join(f"{e.name} v{e.file_version} -> v{e.stored.spec_version}" for e in exports)
    lines = [f"Spec versions from schema evolution: {steps}", ""]
    for export in exports:
        lines.append(f"{export.name}: v{export.file_version} -> v{export.stored.spec_version}")
        if not export.history:
            lines.append("  (no evolution recorded for these versions in cdc_meta.schema_history)")
        for entry in export.history:
            when = entry.applied_at.isoformat(timespec="seconds")
            lines.append(
                f"  v{entry.from_version} -> v{entry.to_version} ({entry.decision}, "
                f"{entry.trigger}, applied {when})"
            )
            lines += [f"    {line}" for line in entry.diff.splitlines() if line.strip()]
            if entry.source_ddl:
                lines.append("    source DDL:")
                lines += [f"      {line}" for line in entry.source_ddl.splitlines() if line]
            if entry.kafka_offsets:
                offsets = ", ".join(f"{p}:{o}" for p, o in sorted(entry.kafka_offsets.items()))
                lines.append(f"    ledger Kafka offsets when applied: {offsets}")
            if entry.reasons:
                lines.append("    refused:")
                lines += [f"      {line}" for line in entry.reasons.splitlines() if line]
        lines.append("")
    lines.append("Review with: cdc-assets specs diff --git <base> HEAD")
    return "\n".join(lines).rstrip() + "\n"
