"""The schemas of consumer views, derived from their base tables through the view's plan (pure).

A view is a SELECT over base tables (the mirrors of table specs) and other views. Its schema is
not stored anywhere: it follows from the schemas it reads, so it is derived again whenever one of
them changes. sqlglot qualifies the query (stars expanded, every column tied to its relation) and
annotates types; on top of that each output column carries what the plan proves:

- a plain column reference keeps its source's type, nullability, enum values, doc and casing;
  a rename keeps all of that under the new name;
- joins concatenate their sides; the nullable side of an outer join makes its columns nullable;
  filters change nothing;
- CAST, COALESCE, CASE, arithmetic and functions get sqlglot's inferred type; they are non-null
  only when proven (COALESCE with a non-null argument, a CASE whose every branch is non-null, a
  literal, count); a CASE whose every result is a string literal is an enum of those literals,
  a COALESCE or CAST to string of an enum column stays that enum.

Views over views are derived in dependency order; a cycle, an unknown table or column, or a
query that does not parse is a `ViewError` naming the view's file.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, ParseError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify

from cdc_assets.errors import CdcAssetsError
from cdc_assets.schema.layers import SEQUENCE_COLUMNS
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.ddl import spark_type

DIALECT = "spark"
_ENUM_RE = re.compile(r"^\s*enum\s*\((.*)\)\s*$", re.IGNORECASE | re.DOTALL)
_QUOTED_RE = re.compile(r"'((?:[^']|'')*)'")


class ViewError(CdcAssetsError):
    """A view cannot be derived: it does not parse, reads something unknown, or is in a cycle."""


@dataclass(frozen=True)
class SchemaColumn:
    """One column of a table or view as consumers see it."""

    name: str  # the column in the catalog (Iceberg's lowercase sink name, or the view's alias)
    type: str  # Spark SQL type text
    nullable: bool = True
    display: str | None = None  # casing as the source (or the view's author) wrote it
    doc: str | None = None
    enum: tuple[str, ...] | None = None

    @property
    def label(self) -> str:
        return self.display or self.name


@dataclass(frozen=True)
class RelationSchema:
    """A table or view: ``name`` is ``namespace.table``; ``reads`` the relations a view reads."""

    name: str
    columns: tuple[SchemaColumn, ...]
    kind: str = "table"
    reads: tuple[str, ...] = ()

    def column(self, name: str) -> SchemaColumn | None:
        wanted = name.lower()
        return next((c for c in self.columns if c.name.lower() == wanted), None)


@dataclass(frozen=True)
class ViewDefinition:
    """A view as written: ``name`` is ``namespace.view``, ``origin`` where it came from."""

    name: str
    sql: str
    origin: str


def enum_values(source_type: str) -> tuple[str, ...] | None:
    """The values of a MySQL ``enum('a','b')`` type, else None."""
    match = _ENUM_RE.match(source_type)
    if match is None:
        return None
    return tuple(v.replace("''", "'") for v in _QUOTED_RE.findall(match.group(1)))


@functools.cache  # a few dozen distinct types, asked for by every column of every spec
def type_text(spark_sql_type: str) -> str:
    """A Spark SQL type as the derivation writes every type: sqlglot's rendering, lowercase."""
    return exp.DataType.build(spark_sql_type, dialect=DIALECT).sql(DIALECT).lower()


def table_schema(spec: TableSpec, *, pipeline_columns: bool = True) -> RelationSchema:
    """The base table of a spec as views read it: sink names and types, the source's casing,
    and (``pipeline_columns``) the change columns base keeps after them (``_op``,
    ``_source_ts``, the source position, the Kafka coordinates), which ``SELECT *`` returns."""
    keys = set(spec.primary_key)
    columns = [
        SchemaColumn(
            name=c.sink_name,
            type=type_text(spark_type(c.sink_type(spec.source.connector))),
            nullable=c.name not in keys and (c.nullable or c.dropped),
            display=c.name if c.name.lower() == c.sink_name else c.sink_name,
            doc=c.comment,
            enum=enum_values(c.type),
        )
        for c in spec.columns
    ]
    if spec.shard_column:
        # A sharded table's rows are told apart by their shard first: part of the key.
        shard = SchemaColumn(spec.shard_column, "string", False, doc="the shard of the row")
        columns.insert(0, shard)
    if pipeline_columns:
        columns += [
            SchemaColumn(c.name, type_text(spark_type(c.type)), not c.required, doc=c.doc)
            for c in SEQUENCE_COLUMNS
        ]
    return RelationSchema(relation_name(spec), tuple(columns))


def relation_name(spec: TableSpec) -> str:
    """The name views read a spec's base table by: ``<namespace>.<table>``."""
    return f"{spec.sink.namespace}.{spec.sink.table or spec.name}"


def parse_view(view: ViewDefinition) -> exp.Query:
    try:
        parsed = sqlglot.parse_one(view.sql, dialect=DIALECT)
    except ParseError as err:
        raise ViewError(f"{view.origin}: the view does not parse: {err}") from err
    if not isinstance(parsed, exp.Query):
        raise ViewError(f"{view.origin}: a view is one SELECT query, not {parsed.key.upper()}")
    return parsed


def view_reads(view: ViewDefinition) -> tuple[str, ...]:
    """The relations (``namespace.name``) a view reads, CTE names left out."""
    query = parse_view(view)
    ctes = {c.alias_or_name.lower() for c in query.find_all(exp.CTE)}
    found = []
    for table in query.find_all(exp.Table):
        if not table.db and table.name.lower() in ctes:
            continue
        if not table.db:
            raise ViewError(
                f"{view.origin}: table {table.name!r} needs its namespace (namespace.table)"
            )
        found.append(f"{table.db}.{table.name}".lower())
    return tuple(sorted(set(found)))


def dependency_order(
    table_names: Iterable[str], views: Sequence[ViewDefinition]
) -> list[ViewDefinition]:
    """The views in an order where each comes after everything it reads; ViewError for a view
    named like a table, a read of an unknown relation, or a cycle."""
    known = {t.lower() for t in table_names}
    pending = {v.name.lower(): v for v in views}
    clash = sorted(set(pending) & known)
    if clash:
        raise ViewError(f"views named like tables: {clash}")
    reads = {name: view_reads(v) for name, v in pending.items()}
    for name in sorted(pending):
        unknown = [r for r in reads[name] if r not in known and r not in pending]
        if unknown:
            raise ViewError(
                f"{pending[name].origin}: reads unknown table or view {', '.join(unknown)}"
            )
    ordered = []
    while pending:
        ready = [n for n in sorted(pending) if all(r in known for r in reads[n])]
        if not ready:
            raise ViewError("views read each other in a cycle: " + ", ".join(sorted(pending)))
        for name in ready:
            ordered.append(pending.pop(name))
            known.add(name)
    return ordered


def derive_all(
    tables: Iterable[RelationSchema], views: Sequence[ViewDefinition]
) -> dict[str, RelationSchema]:
    """Every relation by lowercase name: the tables as given and each view derived from what it
    reads, in dependency order (so the order views are listed or were changed in never
    matters)."""
    known: dict[str, RelationSchema] = {t.name.lower(): t for t in tables}
    for view in dependency_order(list(known), views):
        known[view.name.lower()] = derive_view(view, known)
    return known


def derive_view(view: ViewDefinition, relations: Mapping[str, RelationSchema]) -> RelationSchema:
    """The schema of one view from the schemas of what it reads (see the module docstring)."""
    query = parse_view(view)
    schema: dict[str, object] = {}
    for relation in relations.values():
        namespace, table = relation.name.lower().split(".", 1)
        tables = schema.setdefault(namespace, {})
        assert isinstance(tables, dict)
        tables[table] = {c.name.lower(): c.type for c in relation.columns}
    try:
        qualified = qualify(query.copy(), schema=schema, dialect=DIALECT, quote_identifiers=False)
        annotated = annotate_types(qualified, schema=schema, dialect=DIALECT)
    except OptimizeError as err:
        raise ViewError(f"{view.origin}: {err}") from err
    if not isinstance(annotated, exp.Select):
        raise ViewError(f"{view.origin}: only a SELECT (with joins, filters, CTEs) is supported")
    sources = _alias_sources(annotated, relations)
    nullable_aliases = _outer_nullable(annotated)
    written = _written_casing(query)
    columns = []
    for select in annotated.selects:
        name = select.alias_or_name
        value = select.unalias()
        assert isinstance(value, exp.Expression)
        column = _derive_column(value, sources, nullable_aliases)
        if column.type in ("", "unknown", "null"):
            raise ViewError(f"{view.origin}: cannot infer the type of column {name!r}")
        display = written.get(name.lower()) or column.display or name
        columns.append(replace(column, name=name.lower(), display=display))
    seen: set[str] = set()
    for c in columns:
        if c.name in seen:
            raise ViewError(f"{view.origin}: column {c.name!r} appears twice: alias one of them")
        seen.add(c.name)
    return RelationSchema(view.name.lower(), tuple(columns), "view", view_reads(view))


def _alias_sources(
    select: exp.Select, relations: Mapping[str, RelationSchema]
) -> dict[str, RelationSchema]:
    out = {}
    for table in select.find_all(exp.Table):
        if table.db:
            relation = relations.get(f"{table.db}.{table.name}".lower())
            if relation is not None:
                out[table.alias_or_name.lower()] = relation
    return out


def _outer_nullable(select: exp.Select) -> set[str]:
    """Aliases whose columns an outer join may fill with NULL."""
    joins = select.args.get("joins") or []
    from_ = select.args.get("from") or select.args.get("from_")
    left = [from_.this.alias_or_name.lower()] if from_ is not None else []
    nullable: set[str] = set()
    for join in joins:
        right = join.this.alias_or_name.lower()
        side = (join.side or "").upper()
        if side in ("LEFT", "FULL"):
            nullable.add(right)
        if side in ("RIGHT", "FULL"):
            nullable.update(left)
        left.append(right)
    return nullable


def _written_casing(query: exp.Query) -> dict[str, str]:
    """Aliases as the view's author wrote them (the plan lowercases identifiers)."""
    out = {}
    for select in query.selects if isinstance(query, exp.Select) else []:
        if isinstance(select, exp.Alias):
            out[select.alias.lower()] = select.alias
    return out


def _derive_column(
    expr: exp.Expression, sources: Mapping[str, RelationSchema], nullable_aliases: set[str]
) -> SchemaColumn:
    type_text = expr.type.sql(DIALECT).lower() if expr.type is not None else "unknown"
    if isinstance(expr, exp.Column):
        relation = sources.get(expr.table.lower())
        found = relation.column(expr.name) if relation is not None else None
        if found is None:
            return SchemaColumn(expr.name, type_text)
        return replace(found, nullable=found.nullable or expr.table.lower() in nullable_aliases)
    parts = [_derive_column(c, sources, nullable_aliases) for c in _operands(expr)]
    if isinstance(expr, exp.Literal):
        return SchemaColumn("", type_text, nullable=False)
    if isinstance(expr, exp.Null):
        return SchemaColumn("", type_text, nullable=True)
    if isinstance(expr, exp.Count):
        return SchemaColumn("", type_text, nullable=False)
    if isinstance(expr, exp.Coalesce):
        enums = {p.enum for p in parts if p.enum is not None}
        enum = enums.pop() if len(enums) == 1 and _literals_within(expr, parts) else None
        return SchemaColumn("", type_text, all(p.nullable for p in parts), enum=enum)
    if isinstance(expr, exp.Cast):
        inner = parts[0]
        enum = inner.enum if type_text == "string" else None
        return SchemaColumn("", type_text, inner.nullable, enum=enum)
    if isinstance(expr, exp.Case):
        results = [i.args["true"] for i in expr.args.get("ifs") or []]
        default = expr.args.get("default")
        branches = [*results, default] if default is not None else results
        derived = [_derive_column(b, sources, nullable_aliases) for b in branches]
        nullable = default is None or any(d.nullable for d in derived)
        literals = [b for b in branches if isinstance(b, exp.Literal) and b.is_string]
        enum = tuple(sorted({b.name for b in literals})) if len(literals) == len(branches) else None
        return SchemaColumn("", type_text, nullable, enum=enum)
    return SchemaColumn("", type_text, any(p.nullable for p in parts) or not parts)


def _operands(expr: exp.Expression) -> list[exp.Expression]:
    """The direct value arguments of a function or operator."""
    out = []
    for value in expr.args.values():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, exp.Expression) and not isinstance(item, exp.DataType):
                out.append(item)
    return out


def _literals_within(expr: exp.Coalesce, parts: list[SchemaColumn]) -> bool:
    """A COALESCE keeps an enum when its other arguments are literals among the enum's values."""
    enums = [p.enum for p in parts if p.enum is not None]
    if not enums:
        return False
    values = set(enums[0])
    for operand in _operands(expr):
        if isinstance(operand, exp.Literal) and operand.name not in values:
            return False
    return True
