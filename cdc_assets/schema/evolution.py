"""Schema evolution of a table spec: classify a proposed spec against the current one, and apply a
supported plan as the next spec version (pure; the rules of DESIGN.md "Schema evolution rules").

A proposed spec is either the next version as written (a reviewed YAML change) or the source's new
shape (from a changed CREATE TABLE, see ``cdc_assets.spec.ddl_import``); both classify the same
way. Columns are matched by stable id first, then by name. A column whose name changed keeps its
id only when ``renames`` (old source name -> new, read from the DDL audit trail) proves it: the
schema text alone cannot tell a rename from a drop plus an add.

Types are compared as Iceberg sink types with ``can_promote``, the one widening rule of the
project. Spec types are primitives only (no nested fields), so there are no nested changes.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from cdc_assets.schema.apply import apply_plan, rename_references, renamed_sink, retyped_names
from cdc_assets.schema.changes import (
    AddColumn,
    Change,
    ChangeSourceType,
    DropColumn,
    EvolutionPlan,
    FollowSourceRename,
    MakeOptional,
    Rejection,
    RenameColumn,
    RetireColumn,
    SetColumnAttribute,
    SetTableSetting,
    SoftDropColumn,
    WidenType,
)
from cdc_assets.schema.column_rules import (
    PROTECT_CHANGED,
    PROTECT_NEW,
    behind,
    narrowing_reason,
    protect_later,
)
from cdc_assets.schema.recover import reencoded
from cdc_assets.schema.retype import image_readable, value_converts
from cdc_assets.schema.types import SinkType, can_promote, promotion_problems
from cdc_assets.schema.wire import plan_column
from cdc_assets.spec.models import ColumnSpec, TableSpec

# Changing these points the spec at another source or Iceberg table: a new onboarding.
_IDENTITY = {
    "name": "spec",
    "source.connector": "source",
    "source.database": "source table",
    "source.schema": "source table",
    "source.table": "source table",
    "source.topic": "Kafka topic",
    "sink.namespace": "set of Iceberg tables",
    "sink.table": "set of Iceberg tables",
    "sink.dead_letter_suffix": "dead-letter table",
}


def classify(
    current: TableSpec,
    proposed: TableSpec,
    renames: Mapping[str, str] | None = None,
    *,
    proved_drops: Collection[str] | None = None,
    from_source: bool = False,
    audited: bool = False,
) -> EvolutionPlan:
    """Every difference between two versions of a spec, as supported changes or rejections.

    ``renames`` maps old to new source column names proved by the DDL audit trail.
    ``proved_drops`` is for a proposed spec read from DDL text, where a drop plus an add may be
    an unrecorded rename: the current columns the audit trail shows dropped. A column that
    disappears while another appears is then a drop only if listed. None (a YAML spec, whose
    stable ids say which column is new) skips that rule.

    ``from_source``: the proposal is a source's shape (a schema-change record, row events,
    information_schema), not a reviewed spec. A source may be behind the table (a shard or
    server whose ALTER has not run yet, events older than the spec): a type narrower than the
    spec's that the spec's type holds every value of, and a NOT NULL the spec has as optional,
    keep the spec as it is: the mirror never narrows. ``audited``: the shape comes with the
    DDL that led to it (push detection); on a sharded table a column it lacks without a
    ``DROP COLUMN`` in that DDL is then a shard behind, not a drop. (Pull detection compares
    every shard's shape instead, ``schema.shape.leading_server``.)
    """
    renames = dict(renames or {})
    if not from_source:
        # A reviewed spec that keeps a column's id under a new name and lists the old one in
        # its former_names states the rename itself: a person's proof, as the DDL is a source's.
        by_id = {c.id: c for c in current.columns}
        for p in proposed.columns:
            c = by_id.get(p.id)
            if c is not None and c.name != p.name and c.name in p.former_names:
                renames.setdefault(c.name, p.name)
    out = _Classifier(
        current,
        proposed,
        renames,
        proved_drops,
        from_source=from_source,
        shard_audit=from_source and audited,
    )
    out.run()
    changes, rejects = out.changes, out.rejects
    if from_source:
        changes, rejects = _under_policy(current, proposed, changes, rejects)
    return EvolutionPlan(current.name, current.spec_version, tuple(changes), tuple(rejects))


def _under_policy(
    current: TableSpec, proposed: TableSpec, changes: list[Change], rejects: list[Rejection]
) -> tuple[list[Change], list[Rejection]]:
    """A source's changes under the table's ``evolution.policy`` (see ``EvolutionSpec``)."""
    policy = current.evolution.policy
    if policy == "evolve" or not changes:
        return changes, rejects
    if policy in ("freeze", "fail"):
        what = "; ".join(str(c) for c in changes)
        consequence = (
            "new fields stay in _row_json and rows still land (values a type refuses become "
            "dead letters)"
            if policy == "freeze"
            else "the table's ingest stops at the first batch that carries the change"
        )
        reason = (
            f"evolution.policy is {policy}: source schema changes are not applied ({what}); "
            f"{consequence}; change the spec file to apply them"
        )
        return [], [*rejects, Rejection(None, reason)]
    # A column that disappeared while others appeared, without proof of a rename or a drop,
    # is safe to keep as a soft-dropped column: nothing is renamed or removed in Iceberg.
    ambiguous = {r.column for r in rejects if r.blocks}
    by_name = current.columns_by_name
    kept = [r for r in rejects if not r.blocks]
    soft = [SoftDropColumn(by_name[n].id, n) for n in sorted(n for n in ambiguous if n)]
    return _lenient(current, proposed, [*changes, *soft]), kept


def _lenient(current: TableSpec, proposed: TableSpec, changes: list[Change]) -> list[Change]:
    """Never rename or drop in Iceberg: a rename becomes the old column soft-dropped plus the
    new name added (a column of its own, filled from the row images by the backfill); a hard
    drop becomes a soft drop. Other changes of a renamed column go with the added one."""
    renamed = {c.id: c for c in changes if isinstance(c, RenameColumn)}
    by_id = {p.id: p for p in proposed.columns}
    held = {c.sink_name for c in current.columns}
    next_id = max(c.id for c in current.columns) + 1
    out: list[Change] = []
    for change in changes:
        if isinstance(change, DropColumn):
            out.append(SoftDropColumn(change.id, change.name))
        elif isinstance(change, RenameColumn):
            new = by_id[change.id]
            sink = new.sink.model_copy(update={"name": None})
            if new.name in held:  # the Iceberg name is taken (by the old column, say)
                sink = sink.model_copy(update={"name": f"{new.name}_{next_id}"})
            column = new.model_copy(
                update={
                    "id": next_id,
                    "nullable": True,
                    "default": None,
                    "dropped": False,
                    "former_names": [],
                    "sink": sink,
                }
            )
            next_id += 1
            out.append(SoftDropColumn(change.id, change.old))
            out.append(AddColumn(column, change.old))
        elif getattr(change, "id", None) in renamed:
            continue  # the added column has the proposed type and attributes already
        else:
            out.append(change)
    # apply_plan numbers added columns in plan order: say so in the plan too, so the ids it
    # shows (and the backfill selects by) are the evolved spec's. The classifier numbered the
    # columns added as such before the renamed ones were turned into additions.
    first = max(c.id for c in current.columns) + 1
    added = (c for c in out if isinstance(c, AddColumn))
    numbered = {id(c): first + i for i, c in enumerate(added)}
    return [
        AddColumn(c.column.model_copy(update={"id": numbered[id(c)]}), c.after)
        if isinstance(c, AddColumn)
        else c
        for c in out
    ]


class _Classifier:
    """One classification: walks the proposed columns, then the current ones left over."""

    def __init__(
        self,
        current: TableSpec,
        proposed: TableSpec,
        renames: dict[str, str],
        proved_drops: Collection[str] | None,
        *,
        from_source: bool = False,
        shard_audit: bool = False,
    ) -> None:
        self.from_source = from_source
        self.shard_audit = shard_audit
        self.current = current
        self.proposed = proposed
        self.renames = renames
        self.proved_drops = proved_drops
        self.connector = current.source.connector
        self.changes: list[Change] = []
        self.rejects: list[Rejection] = []
        self.handled: set[int] = set()  # current column ids accounted for
        self.matched: dict[int, int] = {}  # proposed id -> current id
        self.new_names: list[str] = []  # proposed columns that are new, supported or not
        # Current columns left out of the proposed spec stay in Iceberg unless drops are hard.
        proposed_ids = {c.id for c in proposed.columns}
        soft = proposed.evolution.drop_columns == "soft"
        self.kept_sink_names = {
            c.sink_name: c.name for c in current.columns if soft and c.id not in proposed_ids
        }
        self.next_id = max(c.id for c in current.columns) + 1

    def take_id(self) -> int:
        """The id a new column gets (apply_plan numbers them the same way, in plan order)."""
        self.next_id += 1
        return self.next_id - 1

    def reject(self, column: str | None, reason: str, blocks: tuple[str, ...] = ()) -> None:
        self.rejects.append(Rejection(column, reason, blocks))

    def run(self) -> None:
        self.compare_settings()
        by_id = {c.id: c for c in self.current.columns}
        by_name = {c.name: c for c in self.current.columns}
        proposed_ids = {p.id for p in self.proposed.columns}
        renamed_from = {new: old for old, new in self.renames.items()}
        previous: str | None = None
        pairs: list[tuple[ColumnSpec, ColumnSpec]] = []
        # Changes follow the proposed column order, so an added column's `after` already
        # carries its new name when the plan is applied in order.
        for p in self.proposed.columns:
            c = by_id.get(p.id)
            if c is not None:
                self.handled.add(c.id)
                if c.name == p.name or self.renames.get(c.name) == p.name:
                    pairs.append((c, p))
                    self.matched[p.id] = c.id
                    self.compare_column(c, p)
                else:
                    self.reject_id_clash(c, p, by_name.get(p.name))
            else:
                same = by_name.get(renamed_from.get(p.name, p.name))
                if same is not None and same.id not in proposed_ids:
                    self.handled.add(same.id)
                    self.reject(
                        p.name,
                        f"id {same.id} -> {p.id}: column ids are stable for a column's life; "
                        f"keep id {same.id}",
                    )
                else:
                    self.new_names.append(p.name)
                    p = self.with_default(p)
                    if self.check_new(p):
                        added = AddColumn(p.model_copy(update={"id": self.take_id()}), previous)
                        self.changes.append(added)
            previous = p.name
        self.check_order(pairs)
        self.drop_missing()
        self.check_key()
        self.check_version()

    def reject_id_clash(self, c: ColumnSpec, p: ColumnSpec, owner: ColumnSpec | None) -> None:
        if owner is not None and owner.id != c.id:
            self.handled.add(owner.id)
            self.reject(
                p.name,
                f"has id {p.id}, which belongs to column {c.name}; ids are stable, "
                f"keep id {owner.id}",
            )
            return
        self.reject(
            c.name,
            f"renamed to {p.name} (id {p.id}) without proof: a rename and a drop plus an add "
            "look the same in the schema text, and the DDL audit trail has no "
            f"`ALTER TABLE ... RENAME COLUMN {c.name} TO {p.name}` (nor MySQL "
            f"`CHANGE COLUMN {c.name} {p.name} ...`); pass the audit trail (in a reviewed "
            f"spec: list {c.name} in {p.name}'s former_names), or give {p.name} a new id to add "
            f"it as a new column and drop {c.name}",
        )

    def with_default(self, p: ColumnSpec) -> ColumnSpec:
        """A column a source added with a constant default: its older rows read the default
        (``backfill_default``), and it is optional in Iceberg even when the source declares it
        NOT NULL, since the ledger's older changes do not hold it."""
        if not self.from_source or p.default is None or not _constant(p.default):
            return p
        if p.sink.transform is not None or p.sink_type(self.connector).is_nested:
            return p
        return p.model_copy(update={"backfill_default": True, "nullable": True})

    def check_new(self, p: ColumnSpec) -> bool:
        problems = []
        if not p.nullable:
            problems.append("a new column must be nullable: rows already written have no value")
        if p.default is not None and not p.backfill_default:
            problems.append(
                f"added with default {p.default!r}: the source fills the rows it has with the "
                "default without emitting change events, so history in Iceberg would be null "
                "where the source holds the default; add it without a default, or with a "
                "constant default and backfill_default: true (a source's ADD COLUMN ... "
                "DEFAULT <constant> is applied so)"
            )
        elif p.backfill_default and not _constant(p.default or ""):
            problems.append(
                f"default {p.default!r} is an expression: older rows cannot be given its value"
            )
        if p.sensitive and not self.current.pipeline.sensitive:
            problems.append(self.sensitive_reason())
        if p.dropped:
            problems.append("a new column cannot be dropped already")
        if p.protect is not None or p.protect_paths:
            problems.append(PROTECT_NEW)
        holder = self.kept_sink_names.get(p.sink_name)
        if holder is not None and holder != p.name:
            problems.append(
                f"its Iceberg name {p.sink_name} is held by column {holder}, which stays in "
                "Iceberg as a soft-dropped column; set sink.name to another name"
            )
        for problem in problems:
            self.reject(p.name, problem)
        return not problems

    def sensitive_reason(self) -> str:
        return (
            "sensitive column in a non-sensitive pipeline (pipeline.sensitive is false in "
            f"version {self.current.spec_version}); onboard the table in a sensitive pipeline "
            "or leave the column out"
        )

    def compare_column(self, c: ColumnSpec, p: ColumnSpec) -> None:
        if c.name != p.name:
            self.changes.append(RenameColumn(c.id, c.name, p.name, c.sink_name))
        if c.dropped and not p.dropped:
            self.reject(
                p.name,
                f"was dropped in version {self.current.spec_version} or earlier and reappears: "
                "rows written while it was gone are null and its old values may mean something "
                "else, so it is not revived automatically; review it by hand",
            )
            return
        if p.sink_name != c.sink_name:
            self.reject(
                p.name,
                f"Iceberg name {c.sink_name} -> {p.sink_name}: renaming an Iceberg column breaks "
                f"jobs and readers that select it by name; keep sink.name: {c.sink_name}",
            )
        if self.compare_type(c, p):
            return  # retired: the new column carries the proposed attributes
        if not c.nullable and p.nullable and not p.dropped:
            self.changes.append(MakeOptional(c.id, p.name))
        elif c.nullable and not p.nullable and self.from_source:
            pass  # a stricter source's values fit the optional column
        elif c.nullable and not p.nullable:
            self.reject(
                p.name,
                "optional -> required: rows already written may hold null; keep it nullable",
            )
        self.compare_attributes(c, p)
        if p.dropped and not c.dropped:
            self.changes.append(SoftDropColumn(c.id, p.name))

    def compare_type(self, c: ColumnSpec, p: ColumnSpec) -> bool:
        """Records the type change of ``c``; True when it retired the column for a new one."""
        if c.sink.transform != p.sink.transform:
            old = c.sink.transform.value if c.sink.transform else "none"
            new = p.sink.transform.value if p.sink.transform else "none"
            self.reject(
                p.name,
                f"sink transform {old} -> {new} changes how values are computed; rows already "
                "written would disagree with new ones",
            )
            return False
        old_sink, new_sink = c.sink_type(self.connector), p.sink_type(self.connector)
        if (
            self.from_source
            and behind(c, p, old_sink, new_sink, self.connector)
            and not reencoded(plan_column(self.current, c), plan_column(self.current, p))
        ):
            # The spec's type holds every value the source's narrower one can send (but not
            # when the narrower one comes in other units: datetime(6) -> datetime(3) sends
            # millis, which the spec would read as micros).
            return False
        if self.from_source and self.retired_as(p, new_sink):
            # The type the column had before a retype: a record or replica from before the
            # change. Its values go into the new column; the spec never flips back.
            return False
        if old_sink != new_sink:
            if can_promote(old_sink, new_sink):
                widen = WidenType(c.id, p.name, old_sink, new_sink, p.type, p.sink.type)
                self.changes.append(widen)
            elif old_sink.is_nested or new_sink.is_nested:
                # Nested types: one reason per field that cannot change, naming its path.
                reasons = promotion_problems(old_sink, new_sink, p.name)
                self.reject(p.name, "; ".join(reasons))
            else:
                reason = narrowing_reason(c.type, p.type, old_sink, new_sink)
                refusal = self.retire_refusal(c, p)
                if refusal is None:
                    self.retire(c, p, old_sink, new_sink)
                    return True
                self.reject(p.name, f"{reason}{refusal}")
        elif (c.type, c.sink.type) != (p.type, p.sink.type):
            self.changes.append(ChangeSourceType(c.id, p.name, c.type, p.type, p.sink.type))
        return False

    def retired_as(self, p: ColumnSpec, sink: SinkType) -> bool:
        """Whether a column retired from ``p``'s field (`retyped_names`: ``<name>__v<n>``) had
        the type ``sink``."""
        pattern = re.compile(rf"{re.escape(p.name)}__v\d+(_\d+)?")
        return any(
            d.dropped and pattern.fullmatch(d.name) and d.sink_type(self.connector) == sink
            for d in self.current.columns
        )

    def retire_refusal(self, c: ColumnSpec, p: ColumnSpec) -> str | None:
        """Why a type change Iceberg cannot make is not taken as a new column (None: it is):
        only a source's change under evolve or lenient, of a column that is not the key, the
        bucket column, renamed at once, or computed by a transform."""
        if not self.from_source or self.current.evolution.policy not in ("evolve", "lenient"):
            return ""
        if c.name in self.current.primary_key or c.name == self.current.base.bucket_column:
            return "; it is a key or bucket column, whose type cannot change"
        if self.current.source.shards:
            # Shards run the ALTER one by one: until every one has, both types arrive, and
            # each would retire the other's column in turn.
            return "; a sharded table's shards send both types until each has run the change"
        if c.name != p.name:
            return "; renamed at the same time: apply the rename first"
        if p.sink.transform is not None:
            return "; its sink transform would apply to the new type"
        old_wire = plan_column(self.current, c).wire
        new_wire = plan_column(self.current, p).wire
        old_sink, new_sink = c.sink_type(self.connector), p.sink_type(self.connector)
        if not image_readable(old_wire, new_wire) and not value_converts(old_sink, new_sink):
            # The backfill fills the new column from the images where an old raw value reads as
            # itself, or from the old column's values where they convert exactly
            # (`schema.retype`); anything else would read as other values of the new type.
            return (
                f"; the old values are sent as {old_wire} and would read as other values of "
                f"the new type ({new_wire}): a new column cannot be filled exactly"
            )
        return None

    def retire(self, c: ColumnSpec, p: ColumnSpec, old: SinkType, new: SinkType) -> None:
        """`RetireColumn` of ``c`` and the `AddColumn` right after it that takes its source field
        with the new type, named by `retyped_names`."""
        retired, sink = retyped_names(self.current, c, new)
        self.changes.append(RetireColumn(c.id, c.name, retired, c.sink_name, old, new))
        column = p.model_copy(
            update={
                "id": self.take_id(),
                "nullable": True,
                "default": None,
                "backfill_default": False,
                "dropped": False,
                "former_names": [],
                "sink": p.sink.model_copy(update={"name": sink}),
            }
        )
        self.changes.append(AddColumn(column, retired))

    def compare_attributes(self, c: ColumnSpec, p: ColumnSpec) -> None:
        problem, changed = protect_later(c, p, self.connector)
        if problem is not None:
            self.reject(p.name, problem)
        elif changed:
            if p.protect != c.protect:
                self.changes.append(SetColumnAttribute(c.id, p.name, "protect", None, p.protect))
            if p.protect_paths != c.protect_paths:
                self.changes.append(
                    SetColumnAttribute(
                        c.id, p.name, "protect_paths", c.protect_paths, p.protect_paths
                    )
                )
        if p.sensitive != c.sensitive:
            if c.sensitive:
                self.reject(
                    p.name,
                    "sensitive -> not sensitive would lift the protection of values already "
                    "written; not applied automatically",
                )
            elif not self.current.pipeline.sensitive:
                self.reject(p.name, self.sensitive_reason())
            else:
                self.changes.append(SetColumnAttribute(c.id, p.name, "sensitive", False, True))
        if p.comment != c.comment:
            self.changes.append(SetColumnAttribute(c.id, p.name, "comment", c.comment, p.comment))
        if p.default != c.default:
            # Only future inserts see a new default, and they arrive as change events.
            self.changes.append(SetColumnAttribute(c.id, p.name, "default", c.default, p.default))

    def check_order(self, pairs: list[tuple[ColumnSpec, ColumnSpec]]) -> None:
        position = {c.id: i for i, c in enumerate(self.current.columns)}
        order = [position[c.id] for c, _ in pairs]
        keep = _longest_increasing(order)
        for i, (_, p) in enumerate(pairs):
            if i not in keep:
                self.reject(
                    p.name,
                    "moved among the existing columns; reordering is not applied automatically "
                    "(an evolved table would list its columns unlike a fresh onboarding)",
                )

    def drop_missing(self) -> None:
        hard = self.proposed.evolution.drop_columns == "hard"
        added = self.new_names
        for c in self.current.columns:
            if c.id in self.handled or c.name in self.current.primary_key:
                continue  # a missing key column is a key change, reported by check_key
            proved = self.proved_drops is None or c.name in self.proved_drops
            if not proved and self.shard_audit and self.current.source.shards:
                continue  # a shard without the column is behind the others, not a drop
            if added and not c.dropped and not proved:
                self.reject_ambiguous(c.name, added)
                continue
            if hard:
                self.changes.append(DropColumn(c.id, c.name))
            elif not c.dropped:
                self.changes.append(SoftDropColumn(c.id, c.name))

    def reject_ambiguous(self, name: str, added: list[str]) -> None:
        self.reject(
            name,
            f"disappears while {', '.join(added)} {'is' if len(added) == 1 else 'are'} new: the "
            "DDL text cannot tell a rename from a drop plus an add, and the audit trail proves "
            f"neither (`ALTER TABLE ... RENAME COLUMN {name} TO ...` or `DROP COLUMN {name}`); "
            "pass the schema-change history of the table",
            tuple(added),
        )

    def check_key(self) -> None:
        old = tuple(c.id for c in self.current.key_columns)
        new = tuple(self.matched.get(c.id) for c in self.proposed.key_columns)
        if old != new:
            self.reject(
                None,
                f"primary key ({', '.join(self.current.primary_key)}) -> "
                f"({', '.join(self.proposed.primary_key)}): the key decides upserts, deletes and "
                "bucketing of every layer; a new key needs a new onboarding",
            )
            return  # the bucket column follows the key; one reason is enough
        cur, prop = self.current, self.proposed
        old_part = (cur.base.buckets, cur.bucket_column.sink_name)
        new_part = (prop.base.buckets, prop.bucket_column.sink_name)
        if old_part != new_part:
            self.reject(
                None,
                f"base partitioning bucket({old_part[0]}, {old_part[1]}) -> "
                f"bucket({new_part[0]}, {new_part[1]}) would rewrite base and change the "
                "storage-partitioned upsert; not a schema change",
            )

    def check_version(self) -> None:
        want = self.current.spec_version + 1
        if self.changes and self.proposed.spec_version != want:
            self.reject(
                None,
                f"spec_version {self.proposed.spec_version}: a changed spec must be version "
                f"{want}, one version per change set, applied in order",
            )

    def compare_settings(self) -> None:
        cur = self.current.model_dump(mode="json", by_alias=True)
        new = self.proposed.model_dump(mode="json", by_alias=True)
        for key in cur:
            if key in ("spec_version", "columns", "primary_key"):
                continue
            diffs = _leaf_diff(cur[key], new.get(key), key)
            if key == "source":
                follow = _followed_rename(self.current, self.proposed)
                if follow is not None:
                    self.changes.append(follow)
                    diffs = [d for d in diffs if d[0] not in _FOLLOWED]
            blocked = False
            for path, old, value in diffs:
                if path in _IDENTITY:
                    blocked = True
                    self.reject(
                        None,
                        f"{path}: {old!r} -> {value!r} points the spec at another "
                        f"{_IDENTITY[path]}; that is a new onboarding, not an evolution",
                    )
                elif path == "pipeline.sensitive" and old and not value:
                    blocked = True
                    self.reject(
                        None,
                        "pipeline.sensitive: true -> false would lift the protection of data "
                        "already written; not applied automatically",
                    )
            if diffs and not blocked:
                self.changes.append(SetTableSetting(key, cur[key], new.get(key), tuple(diffs)))


# What following a source table's rename changes (FollowSourceRename).
_FOLLOWED = {"source.database", "source.table", "source.topic", "source.renamed_from"}


def _followed_rename(current: TableSpec, proposed: TableSpec) -> FollowSourceRename | None:
    """A proposal that points the spec at another source table *and* records the current one
    as its former name follows a rename (``spec.source_table.followed`` writes such one)."""
    old, new = current.source, proposed.source
    if old.shards or new.shards or (old.database, old.table) == (new.database, new.table):
        return None
    former = [(f.database, f.table, f.topic) for f in new.renamed_from]
    expected = [(f.database, f.table, f.topic) for f in old.renamed_from]
    if former != [*expected, (old.database, old.table, old.topic)]:
        return None
    return FollowSourceRename(
        old.database, old.table, old.topic, new.database, new.table, new.topic
    )


# Defaults the source computes per row or per statement: no constant for older rows.
_DEFAULT_EXPRESSIONS = {
    "current_timestamp", "current_date", "current_time", "localtime", "localtimestamp", "now",
    "sysdate", "current_user", "user", "uuid", "null",
}  # fmt: skip


def _constant(default: str) -> bool:
    """Whether a spec default (`spec.ddl_import` keeps a literal's value, else the SQL text) is
    a constant, not an expression such as ``CURRENT_TIMESTAMP`` or ``nextval('s')``."""
    text = default.strip().lower()
    return "(" not in text and text not in _DEFAULT_EXPRESSIONS


def _leaf_diff(old: Any, new: Any, path: str) -> list[tuple[str, Any, Any]]:
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[tuple[str, Any, Any]] = []
        for key in [*old, *(k for k in new if k not in old)]:
            out += _leaf_diff(old.get(key), new.get(key), f"{path}.{key}")
        return out
    return [] if old == new else [(path, old, new)]


def _longest_increasing(values: list[int]) -> set[int]:
    """Indexes of one longest strictly increasing subsequence: the columns that did not move."""
    best: list[list[int]] = []  # best[i]: indexes of an increasing run ending at i
    for i, v in enumerate(values):
        run: list[int] = []
        for j in range(i):
            if values[j] < v and len(best[j]) > len(run):
                run = best[j]
        best.append([*run, i])
    longest: list[int] = max(best, key=len) if best else []
    return set(longest)


__all__ = [
    "PROTECT_CHANGED",
    "PROTECT_NEW",
    "AddColumn",
    "Change",
    "ChangeSourceType",
    "DropColumn",
    "EvolutionPlan",
    "FollowSourceRename",
    "MakeOptional",
    "Rejection",
    "RenameColumn",
    "RetireColumn",
    "SetColumnAttribute",
    "SetTableSetting",
    "SoftDropColumn",
    "WidenType",
    "apply_plan",
    "classify",
    "rename_references",
    "renamed_sink",
    "retyped_names",
]
