"""The commit `cdc-assets specs export` makes (pure): which evolutions it names and how."""

from __future__ import annotations

from datetime import UTC, datetime

from cdc_assets.schema.history import HistoryEntry
from cdc_assets.spec.export import (
    ExportedSpec,
    branch_name,
    commit_message,
    evolutions_between,
    newer_stored,
)
from cdc_assets_tests.unit.test_ddl_import import accounts

AT = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def entry(frm: int, to: int, decision: str = "applied", table: str = "accounts") -> HistoryEntry:
    return HistoryEntry(
        table=table,
        from_version=frm,
        to_version=to,
        diff=f"+ add column c{to} int",
        trigger="push",
        decision=decision,
        applied_at=AT,
        source_ddl=f"ALTER TABLE accounts ADD COLUMN c{to} int",
        kafka_offsets={1: 20, 0: 10},
        reasons="column x: refused" if decision == "partial" else None,
    )


def test_the_evolutions_between_the_file_and_the_stored_version() -> None:
    history = [
        entry(1, 2),
        entry(2, 3, "partial"),
        entry(3, 3, "no-op"),
        entry(2, 2, "rejected"),
        entry(3, 4),
        entry(1, 2, table="other"),
    ]
    steps = evolutions_between(history, "accounts", 2, 4)
    assert [(e.from_version, e.to_version) for e in steps] == [(2, 3), (3, 4)]


def test_the_message_names_each_change_and_its_source_position() -> None:
    v1 = accounts()
    v3 = v1.model_copy(update={"spec_version": 3})
    assert newer_stored(v1, v3)
    assert not newer_stored(v3, v1)
    assert not newer_stored(v1, None)
    message = commit_message([ExportedSpec(1, v3, "yaml", (entry(1, 2), entry(2, 3, "partial")))])
    lines = message.splitlines()
    assert lines[0] == "Spec versions from schema evolution: accounts v1 -> v3"
    assert "  v2 -> v3 (partial, push, applied 2026-12-03T12:00:00+00:00)" in lines
    assert "      ALTER TABLE accounts ADD COLUMN c3 int" in lines
    assert "    ledger Kafka offsets when applied: 0:10, 1:20" in lines
    assert "      column x: refused" in lines
    assert branch_name(AT) == "cdc-assets/spec-versions-20261203-120000"
