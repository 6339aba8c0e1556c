"""Table specs from source DDL (pure, sqlglot): onboard a MySQL/MariaDB or PostgreSQL table from its
CREATE TABLE, and turn a changed CREATE TABLE into the proposed next version of an existing spec.

A DDL text may be a dump: besides one CREATE TABLE it may hold ``COMMENT ON`` statements and
``ALTER TABLE ... ADD CONSTRAINT ... PRIMARY KEY`` / ``ALTER COLUMN ... SET DEFAULT`` as pg_dump
writes them; other statements are ignored. Renames are never guessed from the text: only the DDL
audit trail (``RENAME COLUMN``, MySQL ``CHANGE COLUMN``) proves one.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import sqlglot
from pydantic import ValidationError
from sqlglot import exp
from sqlglot.errors import SqlglotError

from cdc_assets.errors import SpecError, UnsupportedTypeError
from cdc_assets.schema.evolution import (
    EvolutionPlan,
    classify,
    rename_references,
    renamed_sink,
)
from cdc_assets.schema.types import DIALECTS, parse_source_type
from cdc_assets.spec.models import ColumnSpec, TableSpec

_SERIALS = {"SERIAL", "SMALLSERIAL", "BIGSERIAL"}  # PostgreSQL: integer NOT NULL + a sequence
# PostgreSQL allows `RENAME a TO b` without COLUMN, which sqlglot reads as a table rename.
_PG_BARE_RENAME = re.compile(r"\bRENAME\s+(?!(?:COLUMN|TO|CONSTRAINT)\b)", re.IGNORECASE)


@dataclass(frozen=True)
class DdlColumn:
    """One column as the DDL declares it; ``type`` is normalised text the spec accepts."""

    name: str
    type: str
    nullable: bool = True
    default: str | None = None
    comment: str | None = None


@dataclass(frozen=True)
class DdlTable:
    """The table a CREATE TABLE (plus its dump's companion statements) declares."""

    name: str
    qualifier: str | None  # MySQL database or PostgreSQL schema written before the name
    columns: tuple[DdlColumn, ...]
    primary_key: tuple[str, ...] = ()
    comment: str | None = None


def parse_create_table(ddl: str, connector: str) -> DdlTable:
    """The one table a DDL text creates, read in the connector's dialect."""
    dialect = DIALECTS[connector]
    statements = _parse(ddl, dialect)
    creates = [s for s in statements if isinstance(s, exp.Create) and s.kind == "TABLE"]
    if len(creates) != 1:
        raise SpecError(f"the DDL must hold exactly one CREATE TABLE, found {len(creates)}")
    table = _read_create(creates[0], dialect)
    for statement in statements:
        table = _apply_companion(table, statement, dialect)
    return table


def spec_from_ddl(
    ddl: str,
    connector: str,
    database: str,
    topic: str,
    namespace: str,
    *,
    name: str | None = None,
    schema: str | None = None,
    sensitive: Collection[str] = (),
    owners: Sequence[str] = (),
    buckets: int | None = None,
) -> TableSpec:
    """A version-1 spec of the table a CREATE TABLE declares; ``sensitive`` names columns to mark
    sensitive (the pipeline is then sensitive too); ``buckets`` is base's bucket count (None: the
    spec's default)."""
    table = parse_create_table(ddl, connector)
    _check_known(table, sensitive)
    used: set[str] = set()
    columns = [
        _new_column(i, c, connector, c.name in sensitive, used)
        for i, c in enumerate(table.columns, start=1)
    ]
    source: dict[str, Any] = {
        "connector": connector,
        "database": database,
        "table": table.name,
        "topic": topic,
    }
    if connector == "postgresql" and (schema or table.qualifier):
        source["schema"] = schema or table.qualifier
    data = {
        "spec_version": 1,
        "name": name or identifier(table.name),
        "description": table.comment,
        "owners": list(owners),
        "source": source,
        "columns": columns,
        "primary_key": list(table.primary_key),
        "pipeline": {"sensitive": bool(sensitive)},
        "sink": {"namespace": namespace},
    }
    if buckets is not None:
        data["base"] = {"buckets": buckets}
    return _validated(data, f"DDL of {table.name}")


def default_topic(
    connector: str,
    database: str,
    table: str,
    *,
    schema: str | None = None,
    prefix: str | None = None,
) -> str:
    """The Debezium topic of a table as the project's connectors name it:
    ``<prefix>.<database>.<table>`` for the MySQL family, ``<prefix>.<schema>.<table>`` for
    PostgreSQL, where the prefix (Debezium's ``topic.prefix``) defaults to the database name
    (the MariaDB connector's topics are routed to that shape; the PostgreSQL connector's prefix is
    its database). Characters Kafka does not allow become ``_``, as Debezium does."""
    middle = (schema or "public") if connector == "postgresql" else database
    name = f"{prefix or database}.{middle}.{table}"
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def proposed_from_ddl(
    current: TableSpec,
    ddl: str,
    audit_ddl: Sequence[str] = (),
    *,
    sensitive: Collection[str] = (),
) -> tuple[TableSpec, dict[str, str]]:
    """The source's new shape as the next version of ``current``, and the renames proved by the
    audit trail (old -> new source name).

    Same-named columns keep their ids, renamed ones keep theirs (and their Iceberg name), new ones
    get the next ids. Soft-dropped columns are left out: ``classify`` and ``apply_plan`` carry
    them. ``audit_ddl`` holds the schema changes of the source since ``current``, in order.
    """
    connector = current.source.connector
    table = parse_create_table(ddl, connector)
    if not _same(table.name, current.source.table, connector):
        raise SpecError(
            f"the DDL creates table {table.name}, but spec {current.name} mirrors "
            f"{current.source.table}"
        )
    audit = read_audit(audit_ddl, current)
    # Sensitive columns are named as the spec knows them: follow the audit trail's renames, and
    # a column it proves dropped is no longer expected in the DDL.
    sensitive = {audit.renames.get(n, n) for n in sensitive if n not in audit.dropped}
    _check_known(table, sensitive)
    names = {c.name for c in table.columns}
    # A rename whose new name is a live column already was applied as an added column (the
    # lenient policy keeps the old one soft-dropped): the DDL's column is that one.
    live = {c.name for c in current.columns if not c.dropped}
    renames = {old: new for old, new in audit.renames.items() if new in names and new not in live}
    renamed_to = {new: old for old, new in renames.items()}
    by_name = current.columns_by_name
    next_id = max(c.id for c in current.columns) + 1
    used = {c.sink_name for c in current.columns}
    columns: list[dict[str, Any]] = []
    dropped_fields = set(current.pipeline.drop_fields)
    for d in table.columns:
        if d.name in dropped_fields:
            continue  # never stored: not a column (pipeline.drop_fields)
        old_name = renamed_to.get(d.name)
        if old_name is None and d.name in by_name and d.name not in renames:
            old_name = d.name
        if old_name is None:
            columns.append(_new_column(next_id, d, connector, d.name in sensitive, used))
            next_id += 1
        else:
            columns.append(_evolved_column(by_name[old_name], d, connector, sensitive))
    data = current.model_dump(mode="json", by_alias=True)
    for old, new in renames.items():
        rename_references(data, old, new)
    data.update(
        spec_version=current.spec_version + 1,
        columns=columns,
        primary_key=list(table.primary_key),
    )
    data["pipeline"]["sensitive"] = current.pipeline.sensitive or any(
        c.get("sensitive") for c in columns
    )
    return _validated(data, f"DDL of {table.name}"), renames


@dataclass(frozen=True)
class AuditTrail:
    """What the DDL audit trail proves about the columns of a spec."""

    renames: dict[str, str]  # old -> final source name
    dropped: frozenset[str]  # current names whose column was dropped (after any renames)


def read_audit(audit_ddl: Sequence[str], spec: TableSpec) -> AuditTrail:
    """The renames and drops of the spec's source table in DDL statements, applied in order.

    Renames chain (a -> b, then b -> c gives a -> c); DROP COLUMN of the current name of a column
    proves its drop. Statements for other tables are ignored.
    """
    connector = spec.source.connector
    dialect = DIALECTS[connector]
    current: dict[str, str | None] = {c.name: c.name for c in spec.columns}
    for text in audit_ddl:
        if dialect == "postgres":
            text = _PG_BARE_RENAME.sub("RENAME COLUMN ", text)
        for statement in _parse(text, dialect):
            if isinstance(statement, exp.Alter) and _is_table(statement.this, spec):
                for old, new in _alter_renames(statement, dialect):
                    for key, value in current.items():
                        if value is not None and _same(value, old, connector):
                            current[key] = new
    renames = {k: v for k, v in current.items() if v is not None and v != k}
    return AuditTrail(renames, frozenset(k for k, v in current.items() if v is None))


def plan_from_ddl(
    current: TableSpec,
    ddl: str,
    audit_ddl: Sequence[str] = (),
    *,
    sensitive: Collection[str] = (),
) -> tuple[TableSpec, EvolutionPlan]:
    """The proposed spec of a changed CREATE TABLE and its evolution plan from ``current``.

    A column that disappears while another appears may be an unrecorded rename: it is a drop only
    when the audit trail shows its DROP COLUMN, otherwise the plan rejects it as ambiguous.
    """
    proposed, renames = proposed_from_ddl(current, ddl, audit_ddl, sensitive=sensitive)
    dropped = read_audit(audit_ddl, current).dropped
    plan = classify(
        current,
        proposed,
        renames,
        proved_drops=dropped,
        from_source=True,
        audited=bool(audit_ddl),
    )
    return proposed, plan


def _parse(text: str, dialect: str) -> list[exp.Expr]:
    try:
        return [s for s in sqlglot.parse(text, read=dialect) if s is not None]
    except SqlglotError as err:
        raise SpecError(f"cannot parse the DDL as {dialect} SQL: {err}") from None


def _name(node: exp.Expr | None, dialect: str) -> str:
    """An identifier as the database stores it: PostgreSQL folds unquoted names to lower case."""
    ident = node.find(exp.Identifier) if node is not None else None
    if ident is None:
        raise SpecError(f"no identifier in {node.sql(dialect) if node else 'nothing'}")
    quoted = bool(ident.args.get("quoted"))
    return ident.name if quoted or dialect != "postgres" else ident.name.lower()


def _same(a: str, b: str, connector: str) -> bool:
    # MySQL column names are case-insensitive; PostgreSQL's are exact once folded.
    return a == b if connector == "postgresql" else a.casefold() == b.casefold()


def _is_table(node: exp.Expr | None, spec: TableSpec) -> bool:
    if not isinstance(node, exp.Table):
        return False
    dialect = DIALECTS[spec.source.connector]
    if not _same(_name(node.this, dialect), spec.source.table, spec.source.connector):
        return False
    qualifier = _name(node.args["db"], dialect) if node.args.get("db") else None
    expected = spec.source.schema_ if dialect == "postgres" else spec.source.database
    return qualifier is None or expected is None or qualifier == expected


def _alter_renames(statement: exp.Alter, dialect: str) -> Iterable[tuple[str, str | None]]:
    """(old, new) per rename in an ALTER TABLE, and (name, None) per dropped column."""
    for action in statement.args.get("actions") or []:
        if isinstance(action, exp.RenameColumn):
            yield _name(action.this, dialect), _name(action.args["to"], dialect)
        elif isinstance(action, exp.ModifyColumn) and action.args.get("rename_from"):
            yield _name(action.args["rename_from"], dialect), _name(action.this.this, dialect)
        elif isinstance(action, exp.Drop) and action.args.get("kind") == "COLUMN":
            for column in action.expressions or action.args.get("tables") or []:
                yield _name(column, dialect), None


def _read_create(create: exp.Create, dialect: str) -> DdlTable:
    schema = create.this
    if not isinstance(schema, exp.Schema) or not isinstance(schema.this, exp.Table):
        raise SpecError("the CREATE TABLE has no column list (CREATE TABLE ... AS is not read)")
    table = schema.this
    name = _name(table.this, dialect)
    qualifier = _name(table.args["db"], dialect) if table.args.get("db") else None
    columns: list[DdlColumn] = []
    key: list[str] = []
    for item in schema.expressions:
        if isinstance(item, exp.ColumnDef):
            column, is_key = _read_column(item, name, dialect)
            columns.append(column)
            key += [column.name] if is_key else []
        else:
            key += _key_of(item, dialect)
    comment = None
    for prop in create.find_all(exp.SchemaCommentProperty):
        comment = prop.this.name
    columns = [replace(c, nullable=False) if c.name in key else c for c in columns]
    return DdlTable(name, qualifier, tuple(columns), tuple(key), comment)


def _read_column(item: exp.ColumnDef, table: str, dialect: str) -> tuple[DdlColumn, bool]:
    name = _name(item.this, dialect)
    kind = item.args.get("kind")
    if not isinstance(kind, exp.DataType):
        raise SpecError(f"table {table}, column {name}: no type")
    nullable = kind.this.name not in _SERIALS
    default = comment = None
    is_key = False
    for constraint in item.constraints:
        c = constraint.kind
        if isinstance(c, exp.NotNullColumnConstraint):
            nullable = bool(c.args.get("allow_null"))
        elif isinstance(c, exp.PrimaryKeyColumnConstraint):
            is_key = True
        elif isinstance(c, exp.DefaultColumnConstraint):
            default = _default_text(c.this, dialect)
        elif isinstance(c, exp.CommentColumnConstraint):
            comment = c.this.name
    type_text = _type_text(kind, dialect)
    column = DdlColumn(name, type_text, nullable, default, comment)
    return column, is_key


def _key_of(item: exp.Expr, dialect: str) -> list[str]:
    keys = [item] if isinstance(item, exp.PrimaryKey) else list(item.find_all(exp.PrimaryKey))
    return [_name(e, dialect) for k in keys for e in k.expressions]


def _apply_companion(table: DdlTable, statement: exp.Expr, dialect: str) -> DdlTable:
    """COMMENT ON and ALTER TABLE statements of a dump that complete the CREATE TABLE."""
    if isinstance(statement, exp.Comment) and statement.args.get("kind") in ("TABLE", "COLUMN"):
        target = statement.this
        text = statement.expression.name
        if statement.args["kind"] == "TABLE":
            same = _name(target.this, dialect) == table.name
            return replace(table, comment=text) if same else table
        if isinstance(target, exp.Column) and _name(target.args["table"], dialect) == table.name:
            return _with_column(table, _name(target.this, dialect), comment=text)
        return table
    if not isinstance(statement, exp.Alter) or not isinstance(statement.this, exp.Table):
        return table
    if _name(statement.this.this, dialect) != table.name:
        return table
    for action in statement.args.get("actions") or []:
        key = _key_of(action, dialect)
        if key:
            table = replace(table, primary_key=tuple(key))
            for name in key:
                table = _with_column(table, name, nullable=False)
        elif isinstance(action, exp.AlterColumn) and action.args.get("default") is not None:
            default = _default_text(action.args["default"], dialect)
            table = _with_column(table, _name(action.this, dialect), default=default)
    return table


def _with_column(table: DdlTable, name: str, **values: Any) -> DdlTable:
    columns = tuple(replace(c, **values) if c.name == name else c for c in table.columns)
    return replace(table, columns=columns)


def _default_text(value: exp.Expr, dialect: str) -> str | None:
    """A DEFAULT as spec text: a literal's value (``0``, ``new``), else the SQL expression."""
    while isinstance(value, exp.Cast | exp.Paren):
        value = value.this
    if isinstance(value, exp.Null):
        return None
    if isinstance(value, exp.Literal):
        return value.name
    if isinstance(value, exp.Neg) and isinstance(value.this, exp.Literal):
        return f"-{value.this.name}"
    if isinstance(value, exp.Boolean):
        return "true" if value.this else "false"
    return value.sql(dialect)


def _type_text(kind: exp.DataType, dialect: str) -> str:
    """sqlglot's rendering of a type in the spec's style: lower case (outside quoted enum values)
    and no space after commas, e.g. ``decimal(12,2)``, ``int unsigned``, ``enum('New','Paid')``."""
    parts = re.split(r"('(?:[^']|'')*')", kind.sql(dialect))
    text = "".join(p if p.startswith("'") else p.lower() for p in parts)
    return re.sub(r",\s+", ",", text)


def _check_known(table: DdlTable, sensitive: Collection[str]) -> None:
    if not table.primary_key:
        raise SpecError(
            f"table {table.name}: no PRIMARY KEY; a CDC mirror upserts by key, so the source "
            "table needs one"
        )
    names = {c.name for c in table.columns}
    unknown = sorted(set(sensitive) - names)
    if unknown:
        raise SpecError(f"table {table.name}: sensitive columns {unknown} are not in the DDL")
    for key in table.primary_key:
        if key not in names:
            raise SpecError(f"table {table.name}: primary key column {key} is not a column")


def identifier(name: str) -> str:
    """A valid spec, column or namespace name for a source name: lower case, letters, digits
    and '_' only, and no leading '_' (reserved for the pipeline's own columns)."""
    text = re.sub(r"[^a-z0-9_]", "_", name.lower()).lstrip("_")
    return text if text and not text[0].isdigit() else f"c_{text}"


def _new_column(
    column_id: int, d: DdlColumn, connector: str, sensitive: bool, used: set[str]
) -> dict[str, Any]:
    _check_type(d, connector)
    out: dict[str, Any] = {"id": column_id, "name": d.name, "type": d.type}
    out.update(nullable=d.nullable, default=d.default, sensitive=sensitive, comment=d.comment)
    sink = identifier(d.name)
    if sink in used:
        sink = f"{sink}_{column_id}"
    used.add(sink)
    if sink != d.name:
        out["sink"] = {"name": sink}
    return out


def _evolved_column(
    current: ColumnSpec, d: DdlColumn, connector: str, sensitive: Collection[str]
) -> dict[str, Any]:
    _check_type(d, connector)
    same_type = _type_key(current.type, connector) == _type_key(d.type, connector)
    sink = renamed_sink(current, d.name) if d.name != current.name else current.sink
    return {
        **current.model_dump(mode="json", by_alias=True),
        "name": d.name,
        # Keep the spec's spelling when the DDL only writes the same type differently.
        "type": current.type if same_type else d.type,
        "nullable": d.nullable,
        # A column added with a constant default: its older rows read that default, whatever
        # the source's default becomes later (or a shape without defaults, an event's schema,
        # says), so it stays.
        "default": current.default if current.backfill_default else d.default,
        "sensitive": current.sensitive or d.name in sensitive,
        "dropped": False,
        # A DDL without comments (PostgreSQL keeps them apart) leaves the spec's comment.
        "comment": d.comment if d.comment is not None else current.comment,
        "sink": sink.model_dump(mode="json"),
        "former_names": (
            [n for n in dict.fromkeys([current.name, *current.former_names]) if n != d.name]
            if d.name != current.name
            else list(current.former_names)
        ),
    }


def _check_type(d: DdlColumn, connector: str) -> None:
    try:
        parse_source_type(d.type, connector)
    except UnsupportedTypeError as err:
        raise SpecError(f"column {d.name}: {err}") from None


def _type_key(text: str, connector: str) -> tuple[object, ...]:
    t = parse_source_type(text, connector)
    if connector == "mariadb" and t.kind == "LONGTEXT":
        # MariaDB's JSON is an alias of LONGTEXT: its catalog and Debezium report that name.
        return ("JSON", None, None, None, (), None)
    # An enum's or set's labels and an array's element are part of the type: a label added at
    # the source is a change of the column's type (its sink type stays string).
    element = _type_key(t.element.text, connector) if t.element is not None else None
    return (t.kind, t.length, t.precision, t.scale, t.values, element)


def with_protections(
    spec: TableSpec, protect: Mapping[str, str], drop_fields: Sequence[str] = ()
) -> TableSpec:
    """A new spec with columns protected (name -> protection: they become sensitive) and source
    columns left out as ``pipeline.drop_fields``: a protection is part of a table from its first
    version (docs/sensitive-data.md)."""
    if not protect and not drop_fields:
        return spec
    names = {c.name for c in spec.columns}
    unknown = sorted((set(protect) | set(drop_fields)) - names)
    if unknown:
        raise SpecError(f"{spec.name}: {unknown} are not columns of the table")
    keyed = sorted(set(drop_fields) & set(spec.primary_key))
    if keyed:
        raise SpecError(f"{spec.name}: key column(s) {keyed} cannot be dropped")
    data = spec.model_dump(mode="json", by_alias=True)
    columns = []
    for column in data["columns"]:
        if column["name"] in drop_fields:
            continue
        if column["name"] in protect:
            column.update(sensitive=True, protect=protect[column["name"]])
        columns.append(column)
    data["columns"] = columns
    data["pipeline"].update(
        sensitive=True, drop_fields=[*data["pipeline"].get("drop_fields", []), *drop_fields]
    )
    return _validated(data, f"spec {spec.name}")


def _validated(data: dict[str, Any], source: str) -> TableSpec:
    try:
        return TableSpec.model_validate(data)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}".removeprefix(": ") for e in err.errors()
        )
        raise SpecError(f"{source}: the spec would be invalid: {problems}") from None
