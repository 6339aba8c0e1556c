"""The schema-change audit trail: one row per evolution decision, in an Iceberg table of its own
(``cdc_meta.schema_history``), as plain data (pure; `cdc_assets.pipeline.evolution.evolve` reads
and writes).

Maps (schema ids, snapshot ids, Kafka offsets) are kept as JSON text so the table's schema never
depends on which layers or partitions a table has.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, get_args

from cdc_assets.schema.changes import EvolutionPlan
from cdc_assets.schema.layers import INT, STRING, TIMESTAMPTZ, Column, TableLayout

HISTORY_NAMESPACE = "cdc_meta"
# The cdc_meta tables take one small append per evolution (and per decision): a manifest each
# unless appends merge them. A reader then opens every manifest: the stored versions of one
# spec, read after every ingest and by every definitions load, took 1.0 s over 1,000 appends
# against 0.05 s with merged manifests (benchmarks/spec_store_reads.py).
META_TABLE_PROPERTIES = {"format-version": "2", "commit.manifest-merge.enabled": "true"}
HISTORY_TABLE = "schema_history"

Trigger = Literal["push", "pull", "manual"]
Decision = Literal["applied", "partial", "rejected", "no-op"]  # partial: some columns refused
TRIGGERS: tuple[str, ...] = get_args(Trigger)
DECISIONS: tuple[str, ...] = get_args(Decision)


def schema_history_layout() -> TableLayout:
    """The audit-trail table: small, append-only, unpartitioned."""
    return TableLayout(
        namespace=HISTORY_NAMESPACE,
        name=HISTORY_TABLE,
        columns=(
            Column("table", STRING, required=True, doc="table spec name"),
            Column("from_version", INT, required=True, doc="spec version before the change"),
            Column("to_version", INT, required=True, doc="spec version after the change"),
            Column("diff", STRING, required=True, doc="the evolution plan as review text"),
            Column("source_ddl", STRING, doc="DDL of the source change, when known"),
            Column("trigger", STRING, required=True, doc="push, pull or manual"),
            Column("decision", STRING, required=True, doc="applied, rejected or no-op"),
            Column("reasons", STRING, doc="why the change was rejected"),
            Column(
                "iceberg_schema_ids",
                STRING,
                required=True,
                doc="JSON: layer -> Iceberg schema id after the change",
            ),
            Column(
                "snapshot_ids",
                STRING,
                required=True,
                doc="JSON: layer -> Iceberg snapshot id at the change",
            ),
            Column("kafka_offsets", STRING, doc="JSON: Kafka partition -> offset at the change"),
            Column("detected_at", TIMESTAMPTZ, doc="when the change was seen"),
            Column("applied_at", TIMESTAMPTZ, required=True, doc="when the decision was made"),
        ),
        properties=dict(META_TABLE_PROPERTIES),
        comment="schema evolution decisions of every table spec",
    )


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    if value.tzinfo is None:
        raise ValueError(f"{value!r} has no time zone; history timestamps are instants")
    return value.astimezone(UTC)


def _dumps(mapping: Mapping[Any, int]) -> str:
    return json.dumps({str(k): v for k, v in sorted(mapping.items())}, separators=(",", ":"))


def _loads(text: str) -> dict[str, int]:
    return {str(k): int(v) for k, v in json.loads(text).items()}


@dataclass(frozen=True)
class HistoryEntry:
    """One evolution decision for one table."""

    table: str
    from_version: int
    to_version: int
    diff: str
    trigger: str  # one of TRIGGERS
    decision: str  # one of DECISIONS
    applied_at: datetime
    source_ddl: str | None = None
    reasons: str | None = None
    iceberg_schema_ids: Mapping[str, int] = field(default_factory=dict)
    snapshot_ids: Mapping[str, int] = field(default_factory=dict)
    # partition -> offset; read back with int keys
    kafka_offsets: Mapping[Any, int] | None = None
    detected_at: datetime | None = None

    def __post_init__(self) -> None:
        if self.trigger not in TRIGGERS:
            raise ValueError(f"trigger {self.trigger!r}: valid are {', '.join(TRIGGERS)}")
        if self.decision not in DECISIONS:
            raise ValueError(f"decision {self.decision!r}: valid are {', '.join(DECISIONS)}")
        _utc(self.applied_at)
        _utc(self.detected_at)

    @classmethod
    def for_plan(
        cls,
        plan: EvolutionPlan,
        *,
        trigger: str,
        applied_at: datetime,
        decision: str | None = None,
        **details: Any,
    ) -> HistoryEntry:
        """The entry of a plan; the decision defaults to what the plan says (rejected when it
        has rejections, no-op without changes, else applied)."""
        if decision is None:
            decision = "rejected" if not plan.supported else "applied" if plan.changes else "no-op"
        reasons = "; ".join(str(r) for r in plan.rejections) or None
        return cls(
            table=plan.table,
            from_version=plan.from_version,
            # the version the change was (or would have been) applied as
            to_version=plan.from_version + (1 if plan.changes or plan.rejections else 0),
            diff=plan.describe(),
            trigger=trigger,
            decision=decision,
            applied_at=applied_at,
            reasons=details.pop("reasons", reasons),
            **details,
        )

    def to_row(self) -> dict[str, Any]:
        """The row of the history table (see `schema_history_layout`)."""
        return {
            "table": self.table,
            "from_version": self.from_version,
            "to_version": self.to_version,
            "diff": self.diff,
            "source_ddl": self.source_ddl,
            "trigger": self.trigger,
            "decision": self.decision,
            "reasons": self.reasons,
            "iceberg_schema_ids": _dumps(self.iceberg_schema_ids),
            "snapshot_ids": _dumps(self.snapshot_ids),
            "kafka_offsets": None if self.kafka_offsets is None else _dumps(self.kafka_offsets),
            "detected_at": _utc(self.detected_at),
            "applied_at": _utc(self.applied_at),
        }

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> HistoryEntry:
        offsets = row.get("kafka_offsets")
        return cls(
            table=row["table"],
            from_version=int(row["from_version"]),
            to_version=int(row["to_version"]),
            diff=row["diff"],
            trigger=row["trigger"],
            decision=row["decision"],
            applied_at=row["applied_at"],
            source_ddl=row.get("source_ddl"),
            reasons=row.get("reasons"),
            iceberg_schema_ids=_loads(row["iceberg_schema_ids"]),
            snapshot_ids=_loads(row["snapshot_ids"]),
            kafka_offsets=(
                None
                if offsets is None
                # A sharded table's offsets are keyed <shard>:<partition>.
                else {int(k) if k.isdigit() else k: v for k, v in _loads(offsets).items()}
            ),
            detected_at=row.get("detected_at"),
        )


SPEC_VERSIONS_TABLE = "spec_versions"


def spec_versions_layout() -> TableLayout:
    """Every spec version an evolution made, as the YAML it wrote: what every process of a
    deployment reads, wherever the run that evolved the table wrote its spec file."""
    return TableLayout(
        namespace=HISTORY_NAMESPACE,
        name=SPEC_VERSIONS_TABLE,
        columns=(
            Column("table", STRING, required=True, doc="table spec name"),
            Column(
                "base_table",
                STRING,
                required=True,
                doc="namespace.table of its base: one catalog may serve several deployments",
            ),
            Column("spec_version", INT, required=True, doc="the spec's version"),
            Column("spec_yaml", STRING, required=True, doc="the spec as its YAML file reads"),
            Column("recorded_at", TIMESTAMPTZ, required=True, doc="when the version was made"),
            Column("recorded_by", STRING, doc="host and spec directory of the run"),
        ),
        properties=dict(META_TABLE_PROPERTIES),
        comment="spec versions made by schema evolution, for every process of a deployment",
    )
