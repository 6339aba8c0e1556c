"""How a live Iceberg table must change to become what a layout renders (pure: plan as data).

Phase 1 of schema evolution compares each live table with the layout of the proposed spec and
stages the difference as one ``TableAlteration``: columns to add, widen, make optional, document
or drop, moves that restore the layout's column order, and table properties. The I/O side
(``cdc_assets.pipeline.evolution.evolve``) applies it with pyiceberg. Planning from the live table
rather
than from the plan makes every run converge: a table already evolved plans nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cdc_assets.schema.drift import normalise_type
from cdc_assets.schema.layers import Column, TableLayout
from cdc_assets.schema.types import SinkType, parse_sink_type, promotion_problems

# Iceberg keeps the format version in the metadata, not among the table properties.
METADATA_PROPERTIES = ("format-version",)
# Spark stores a table comment (CREATE TABLE ... COMMENT) as this property.
COMMENT_PROPERTY = "comment"


@dataclass(frozen=True)
class LiveField:
    """A top-level column of a live Iceberg table; ``type`` as Iceberg prints it."""

    name: str
    type: str
    required: bool = False
    doc: str | None = None


@dataclass(frozen=True)
class LiveTable:
    """What the alteration planner needs of a live table."""

    fields: tuple[LiveField, ...]
    identifier_fields: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ColumnUpdate:
    """An existing column's new type, optionality or doc (None: unchanged)."""

    name: str
    type: SinkType | None = None
    make_optional: bool = False
    doc: str | None = None


@dataclass(frozen=True)
class TableAlteration:
    """The changes that make one live table equal to its layout, in the order they apply:
    adds, updates and deletes, then moves (``after`` None: first), then properties."""

    table: str
    adds: tuple[Column, ...] = ()
    updates: tuple[ColumnUpdate, ...] = ()
    deletes: tuple[str, ...] = ()
    moves: tuple[tuple[str, str | None], ...] = ()
    identifier_fields: tuple[str, ...] | None = None
    set_properties: Mapping[str, str] = field(default_factory=dict)
    remove_properties: tuple[str, ...] = ()

    @property
    def changes_schema(self) -> bool:
        return bool(
            self.adds
            or self.updates
            or self.deletes
            or self.moves
            or self.identifier_fields is not None
        )

    @property
    def empty(self) -> bool:
        return not (self.changes_schema or self.set_properties or self.remove_properties)

    def describe(self) -> list[str]:
        """One line per change, for logs and errors."""
        out = [f"add column {c.name} {c.type}" for c in self.adds]
        for u in self.updates:
            if u.type is not None:
                out.append(f"widen column {u.name} to {u.type}")
            if u.make_optional:
                out.append(f"make column {u.name} optional")
            if u.doc is not None:
                out.append(f"document column {u.name}")
        out += [f"drop column {name}" for name in self.deletes]
        out += [
            f"move column {name} " + (f"after {after}" if after else "first")
            for name, after in self.moves
        ]
        if self.identifier_fields is not None:
            out.append(f"identifier fields ({', '.join(self.identifier_fields)})")
        out += [f"set property {k}" for k in sorted(self.set_properties)]
        out += [f"remove property {k}" for k in self.remove_properties]
        return out


class AlterationError(ValueError):
    """The live table cannot become the layout by a supported change."""


def _desired_properties(layout: TableLayout) -> dict[str, str]:
    props = {k: v for k, v in layout.properties.items() if k not in METADATA_PROPERTIES}
    if layout.comment:
        props[COMMENT_PROPERTY] = layout.comment
    return props


def plan_creation(target: TableLayout) -> TableAlteration:
    """Onboarding as evolution: the alteration that turns an empty table into ``target``. Table
    creation renders exactly this (``sql.ddl.render_create_table``), so a new table and an
    evolved one get their columns, types, docs, order and properties from the same planner."""
    return plan_alteration(LiveTable(()), target, creating=True)


def plan_alteration(
    live: LiveTable,
    target: TableLayout,
    previous: TableLayout | None = None,
    *,
    creating: bool = False,
) -> TableAlteration:
    """The changes that turn ``live`` into ``target``.

    ``previous`` is the layout of the spec version the table was made for: a live column that
    the target lacks is dropped only when ``previous`` has it (a hard drop of the plan); any
    other unknown column raises AlterationError, as does a change Iceberg cannot make in place
    (narrowing, a type-category change, optional -> required). ``creating``: the table is new,
    so its key columns may be added as required.
    """
    table = f"{target.namespace}.{target.name}"
    by_name = {f.name: f for f in live.fields}
    known = set(previous.column_names) if previous is not None else set()
    wanted = set(target.column_names)
    problems: list[str] = []
    deletes = []
    for f in live.fields:
        if f.name in wanted:
            continue
        if f.name in known:
            deletes.append(f.name)
        else:
            problems.append(
                f"column {f.name} ({f.type}) is neither in the current nor in the proposed spec"
            )
    adds: list[Column] = []
    updates: list[ColumnUpdate] = []
    for col in target.columns:
        got = by_name.get(col.name)
        if got is None:
            if col.required and not creating:
                problems.append(f"column {col.name} is required: a new column must be optional")
            adds.append(col)
            continue
        update = _column_update(got, col, problems)
        if update is not None:
            updates.append(update)
    if problems:
        raise AlterationError(f"{table}: " + "; ".join(problems))
    order = [f.name for f in live.fields if f.name not in deletes] + [c.name for c in adds]
    identifier = tuple(target.identifier_fields)
    props = dict(live.properties)
    desired = _desired_properties(target)
    stale = _desired_properties(previous) if previous is not None else {}
    return TableAlteration(
        table=table,
        adds=tuple(adds),
        updates=tuple(updates),
        deletes=tuple(deletes),
        moves=tuple(_moves(order, target.column_names)),
        identifier_fields=identifier if set(identifier) != set(live.identifier_fields) else None,
        set_properties={k: v for k, v in desired.items() if props.get(k) != v},
        remove_properties=tuple(sorted(k for k in stale if k not in desired and k in props)),
    )


def _column_update(got: LiveField, col: Column, problems: list[str]) -> ColumnUpdate | None:
    new_type = None
    if normalise_type(got.type) != normalise_type(str(col.type)):
        try:
            old = parse_sink_type(got.type)
        except ValueError:
            problems.append(f"column {col.name} has type {got.type}, which is not a sink type")
            return None
        reasons = promotion_problems(old, col.type, col.name)
        if reasons:
            problems.extend(f"column {r}" for r in reasons)
            return None
        new_type = col.type
    make_optional = got.required and not col.required
    if col.required and not got.required:
        problems.append(f"column {col.name} is optional; Iceberg cannot make it required")
        return None
    doc = col.doc if col.doc is not None and col.doc != got.doc else None
    if new_type is None and not make_optional and doc is None:
        return None
    return ColumnUpdate(col.name, new_type, make_optional, doc)


def _moves(order: Sequence[str], target: Sequence[str]) -> list[tuple[str, str | None]]:
    """Moves that turn ``order`` into ``target`` (same names), each placing one column right
    after its predecessor in ``target``; none when the order already matches."""
    current = list(order)
    moves: list[tuple[str, str | None]] = []
    for i, name in enumerate(target):
        after = target[i - 1] if i else None
        at = current.index(name)
        in_place = at == 0 if after is None else at > 0 and current[at - 1] == after
        if in_place:
            continue
        current.pop(at)
        current.insert(0 if after is None else current.index(after) + 1, name)
        moves.append((name, after))
    return moves
