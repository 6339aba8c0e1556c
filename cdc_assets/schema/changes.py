"""The vocabulary of a schema-evolution plan: one dataclass per supported change, rejections
with their reasons, and the plan that holds both (pure; built by ``cdc_assets.schema.evolution``).

Column changes name the column by stable ``id`` (how they apply) and by ``name`` in the new
version (how they read).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from cdc_assets.schema.types import SinkType
from cdc_assets.spec.models import ColumnSpec


@dataclass(frozen=True)
class AddColumn:
    """A new nullable column; ``after`` names the column it follows (None: first)."""

    column: ColumnSpec
    after: str | None
    symbol: ClassVar[str] = "+"

    @property
    def name(self) -> str:
        return self.column.name

    def __str__(self) -> str:
        where = f"after {self.after}" if self.after else "first"
        return f"add column {self.column.name} {self.column.type} (id {self.column.id}, {where})"


@dataclass(frozen=True)
class WidenType:
    """The sink type widens (int -> long, float -> double, decimal precision up)."""

    id: int
    name: str
    old: SinkType
    new: SinkType
    type: str  # the new source type text
    sink_type: str | None  # the new sink.type override, if any
    symbol: ClassVar[str] = "~"

    def __str__(self) -> str:
        return f"widen column {self.name}: {self.old} -> {self.new} (source type {self.type})"


@dataclass(frozen=True)
class ChangeSourceType:
    """The declared source type changes but its Iceberg type does not (varchar(20) -> (40))."""

    id: int
    name: str
    old: str
    new: str
    sink_type: str | None
    symbol: ClassVar[str] = "~"

    def __str__(self) -> str:
        return f"column {self.name}: source type {self.old} -> {self.new}, Iceberg type unchanged"


@dataclass(frozen=True)
class MakeOptional:
    id: int
    name: str
    symbol: ClassVar[str] = "~"

    def __str__(self) -> str:
        return f"column {self.name}: required -> optional"


@dataclass(frozen=True)
class SoftDropColumn:
    """Gone from the source: kept in Iceberg and the spec (``dropped``), null for new rows."""

    id: int
    name: str
    symbol: ClassVar[str] = "-"

    def __str__(self) -> str:
        return f"soft-drop column {self.name}: kept in Iceberg, null for new rows"


@dataclass(frozen=True)
class DropColumn:
    """Removed from the spec and the Iceberg tables (only with ``evolution.drop_columns: hard``)."""

    id: int
    name: str
    symbol: ClassVar[str] = "-"

    def __str__(self) -> str:
        return f"drop column {self.name} from the spec and the Iceberg tables"


@dataclass(frozen=True)
class RetireColumn:
    """A source type Iceberg cannot promote to (string -> int, a decimal scale, a timestamp's
    zone): the column keeps its Iceberg column and values under a spec name no source field
    has (``retired``), soft-dropped; the source's field goes on in a new column (an
    `AddColumn` next in the plan), backfilled from the ledger where old values convert."""

    id: int
    name: str  # the source field's name, which the new column takes
    retired: str  # the spec name the old column gets
    sink_name: str  # its Iceberg column, kept
    old: SinkType
    new: SinkType
    symbol: ClassVar[str] = "~"

    def __str__(self) -> str:
        return (
            f"column {self.name}: {self.old} -> {self.new} cannot be promoted in Iceberg: "
            f"{self.sink_name} is kept with its values (spec name {self.retired}, soft-dropped) "
            "and a new column carries the new type"
        )


@dataclass(frozen=True)
class RenameColumn:
    """A source rename proved by the DDL audit trail; the Iceberg column keeps ``sink_name``."""

    id: int
    old: str
    new: str
    sink_name: str
    symbol: ClassVar[str] = "~"

    @property
    def name(self) -> str:
        return self.new

    def __str__(self) -> str:
        return f"rename column {self.old} -> {self.new} (Iceberg column {self.sink_name} kept)"


@dataclass(frozen=True)
class SetColumnAttribute:
    """A change of a column's metadata: comment, default (of an existing column), sensitive, or
    a protection set (``protect``, ``protect_paths``: values stored before it are rewritten by
    `pipeline.maintenance.reprotect`)."""

    id: int
    name: str
    attribute: Literal["comment", "default", "sensitive", "protect", "protect_paths"]
    old: Any
    new: Any
    symbol: ClassVar[str] = "~"

    def __str__(self) -> str:
        return f"column {self.name}: {self.attribute} {self.old!r} -> {self.new!r}"


@dataclass(frozen=True)
class SetTableSetting:
    """A change of a top-level spec section that is not a schema change (owners, schedule...)."""

    field: str
    old: Any
    new: Any
    diffs: tuple[tuple[str, Any, Any], ...]  # (path, old, new) of each leaf that differs
    symbol: ClassVar[str] = "~"

    @property
    def name(self) -> str:
        return self.field

    def __str__(self) -> str:
        return "setting " + "; ".join(f"{p}: {a!r} -> {b!r}" for p, a, b in self.diffs)


@dataclass(frozen=True)
class FollowSourceRename:
    """The source table was renamed: the spec reads it under its new name and topic, and the
    old ones join ``source.renamed_from`` (the ledger reads the old topic to its end first)."""

    old_database: str
    old_table: str
    old_topic: str
    database: str
    table: str
    topic: str
    symbol: ClassVar[str] = ">"

    @property
    def name(self) -> str:
        return "source"

    def __str__(self) -> str:
        return (
            f"source table {self.old_database}.{self.old_table} renamed to "
            f"{self.database}.{self.table}: read from {self.topic} after {self.old_topic}"
        )


Change = (
    AddColumn
    | WidenType
    | ChangeSourceType
    | MakeOptional
    | SoftDropColumn
    | DropColumn
    | RenameColumn
    | RetireColumn
    | SetColumnAttribute
    | SetTableSetting
    | FollowSourceRename
)


@dataclass(frozen=True)
class Rejection:
    """An unsupported change; ``column`` is None for table-level reasons."""

    column: str | None
    reason: str
    # Other columns whose changes wait with this one (an ambiguous rename's candidates).
    blocks: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"column {self.column}: {self.reason}" if self.column else self.reason


@dataclass(frozen=True)
class EvolutionPlan:
    """The supported changes from one spec version to the next, or why there is no next."""

    table: str
    from_version: int
    changes: tuple[Change, ...] = ()
    rejections: tuple[Rejection, ...] = ()

    @property
    def supported(self) -> bool:
        return not self.rejections

    @property
    def applicable(self) -> EvolutionPlan:
        """The changes that can be applied while others are refused, as a supported plan: none
        when a reason concerns the whole table (key, identity, version); otherwise every change
        but those of a refused column (or one its refusal blocks). An added column placed after
        a column left out is placed where that one would have gone."""
        if any(r.column is None for r in self.rejections):
            return EvolutionPlan(self.table, self.from_version)
        refused = {r.column for r in self.rejections} | {
            b for r in self.rejections for b in r.blocks
        }
        kept: list[Change] = []
        anchors: dict[str, str | None] = {}
        for change in self.changes:
            names = {change.name, getattr(change, "old", change.name)}
            if names & refused:
                if isinstance(change, AddColumn):
                    anchors[change.name] = anchors.get(change.after or "", change.after)
                continue
            if isinstance(change, AddColumn) and change.after in anchors:
                change = AddColumn(change.column, anchors[change.after])
            kept.append(change)
        return EvolutionPlan(self.table, self.from_version, tuple(kept))

    @property
    def to_version(self) -> int:
        return self.from_version + 1 if self.changes else self.from_version

    def describe(self) -> str:
        """The plan as review text: one line per change or rejection."""
        if not self.changes and not self.rejections:
            return f"{self.table}: no changes (version {self.from_version})"
        verdict = "supported" if self.supported else "REJECTED, no table is changed"
        lines = [f"{self.table}: version {self.from_version} -> {self.to_version}: {verdict}"]
        lines += [f"  {c.symbol} {c}" for c in self.changes]
        lines += [f"  ! {r}" for r in self.rejections]
        return "\n".join(lines)
