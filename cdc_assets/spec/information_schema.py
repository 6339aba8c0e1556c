"""A source table's CREATE TABLE from its database's information_schema: pull detection from a
reachable source, and onboarding a live table as a new spec. Pure: the queries as text, and the
rows they return turned into DDL that the DDL onboarding path (``spec.ddl_import``) reads like any
other CREATE TABLE.

The table is named by a ``SourceTable`` (connector, database, PostgreSQL schema, table), which an
existing spec provides (``SourceTable.of(spec)``) and onboarding builds from its arguments.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cdc_assets.spec.models import TableSpec

# Integer display widths (`bigint(20)`, `int(10) unsigned`) say nothing about the values;
# MySQL 8 no longer reports them, MariaDB does. tinyint(1) is handled before (boolean).
_DISPLAY_WIDTH = re.compile(
    r"^(tinyint|smallint|mediumint|int|integer|bigint)\(\d+\)", re.IGNORECASE
)


@dataclass(frozen=True)
class SourceTable:
    """Where a table lives: connector kind, database, PostgreSQL schema, table name."""

    connector: str
    database: str
    table: str
    schema: str | None = None

    @classmethod
    def of(cls, spec: TableSpec) -> SourceTable:
        src = spec.source
        return cls(src.connector, src.database, src.table, src.schema_)

    @property
    def pg_schema(self) -> str:
        return self.schema or "public"

    @property
    def is_postgres(self) -> bool:
        return self.connector == "postgresql"

    def qualified(self) -> str:
        """``schema.table`` (PostgreSQL) or ``database.table``, unquoted, for messages."""
        return f"{self.pg_schema if self.is_postgres else self.database}.{self.table}"


def as_source_table(table: TableSpec | SourceTable) -> SourceTable:
    return table if isinstance(table, SourceTable) else SourceTable.of(table)


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def columns_query(table: TableSpec | SourceTable) -> str:
    """One row per column, in order: name, type text, nullable, default, comment."""
    src = as_source_table(table)
    if src.is_postgres:
        relation = "(quote_ident(table_schema) || '.' || quote_ident(table_name))::regclass"
        return (
            "SELECT column_name AS name, data_type AS data_type, udt_name AS udt_name, "
            "character_maximum_length AS char_len, numeric_precision AS num_precision, "
            "numeric_scale AS num_scale, datetime_precision AS dt_precision, "
            "is_nullable AS nullable, column_default AS dflt, "
            f"coalesce(col_description({relation}, ordinal_position::int), '') AS comment, "
            # An enum type's labels, in their order (a user-defined type that is not an enum
            # has none).
            "(SELECT string_agg(quote_literal(e.enumlabel), ',' ORDER BY e.enumsortorder) "
            "FROM pg_enum e JOIN pg_type t ON t.oid = e.enumtypid "
            "JOIN pg_namespace tn ON tn.oid = t.typnamespace "
            "WHERE t.typname = udt_name AND tn.nspname = udt_schema) AS enum_labels "
            "FROM information_schema.columns "
            f"WHERE table_schema = {_lit(src.pg_schema)} "
            f"AND table_name = {_lit(src.table)} ORDER BY ordinal_position"
        )
    return (
        "SELECT column_name AS name, column_type AS column_type, is_nullable AS nullable, "
        "column_default AS dflt, column_comment AS comment "
        "FROM information_schema.columns "
        f"WHERE table_schema = {_lit(src.database)} AND table_name = {_lit(src.table)} "
        "ORDER BY ordinal_position"
    )


def primary_key_query(table: TableSpec | SourceTable) -> str:
    """The primary key's columns, in key order."""
    src = as_source_table(table)
    if src.is_postgres:
        # information_schema shows key columns only to the table's owner: read the catalog.
        return (
            "SELECT a.attname AS name FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey) "
            f"WHERE i.indisprimary AND n.nspname = {_lit(src.pg_schema)} "
            f"AND c.relname = {_lit(src.table)} "
            "ORDER BY array_position(i.indkey::int2[], a.attnum)"
        )
    # MariaDB shows table_constraints only to users with more than SELECT; key_column_usage
    # names the primary key PRIMARY on its own.
    return (
        "SELECT column_name AS name FROM information_schema.key_column_usage "
        f"WHERE constraint_name = 'PRIMARY' AND table_schema = {_lit(src.database)} "
        f"AND table_name = {_lit(src.table)} ORDER BY ordinal_position"
    )


def attnums_query(table: TableSpec | SourceTable) -> str:
    """PostgreSQL only: every column's number (``attnum``), name and whether it was dropped.

    A column keeps its number across renames, and a dropped column's number stays in the
    catalog (``attisdropped``, under a placeholder name) and is never given to another column:
    the numbers tell a rename from a drop plus an add, which the table's text cannot."""
    src = as_source_table(table)
    return (
        "SELECT a.attname AS name, a.attnum AS attnum, a.attisdropped AS dropped "
        "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        f"WHERE n.nspname = {_lit(src.pg_schema)} AND c.relname = {_lit(src.table)} "
        "AND c.relkind IN ('r', 'p') AND a.attnum > 0 ORDER BY a.attnum"
    )


@dataclass(frozen=True)
class SourceIdentity:
    """A PostgreSQL table's column numbers now: live name -> attnum, and the dropped numbers."""

    live: Mapping[str, int]
    dropped: frozenset[int]

    @classmethod
    def from_rows(cls, rows: Sequence[Mapping[str, Any]]) -> SourceIdentity:
        """From the rows of ``attnums_query``."""
        live = {str(r["name"]): int(r["attnum"]) for r in rows if not r["dropped"]}
        dropped = frozenset(int(r["attnum"]) for r in rows if r["dropped"])
        return cls(live, dropped)


def identity_audit(spec: TableSpec, identity: SourceIdentity) -> list[str]:
    """The renames and drops that the column numbers prove, as the DDL an audit trail holds
    (``ALTER TABLE ... RENAME COLUMN``, ``DROP COLUMN``), for the spec's columns that know
    their number (``source_attnum``).

    A number whose column has another name now is a rename, unless the spec's name is live
    under another number (the table was created anew, or the column dropped and added again:
    no proof either way). A number the catalog lists as dropped is a drop. A number it does not
    list at all (a table created anew) proves nothing."""
    src = SourceTable.of(spec)
    table = f"{_quote(src.pg_schema, 'postgresql')}.{_quote(src.table, 'postgresql')}"
    by_number = {n: name for name, n in identity.live.items()}
    out = []
    for c in spec.columns:
        if c.dropped or c.source_attnum is None:
            continue
        now = by_number.get(c.source_attnum)
        if now is not None and now != c.name and c.name not in identity.live:
            out.append(
                f"ALTER TABLE {table} RENAME COLUMN {_quote(c.name, 'postgresql')} "
                f"TO {_quote(now, 'postgresql')}"
            )
        elif now is None and c.source_attnum in identity.dropped:
            out.append(f"ALTER TABLE {table} DROP COLUMN {_quote(c.name, 'postgresql')}")
    return out


def with_attnums(spec: TableSpec, attnums: Mapping[str, int]) -> TableSpec:
    """``spec`` with the column numbers of its live columns that do not know theirs yet
    (``attnums``: source name -> attnum; the renames already applied, so names match)."""
    if not attnums or not any(
        c.source_attnum is None and not c.dropped and c.name in attnums for c in spec.columns
    ):
        return spec
    data = spec.model_dump(mode="json", by_alias=True)
    for column in data["columns"]:
        if column.get("source_attnum") is None and not column.get("dropped"):
            column["source_attnum"] = attnums.get(column["name"])
    # validated anew: a copy would keep the cached lookups of the old columns
    return TableSpec.model_validate(data)


def json_checks_query(table: TableSpec | SourceTable) -> str:
    """MariaDB only: the CHECK constraints of the table. A MariaDB JSON column is a LONGTEXT with
    the check ``json_valid(`column`)``, which is the only way to tell it from a LONGTEXT. (MySQL
    has a real JSON type, and its check_constraints view has no table_name column.)"""
    src = as_source_table(table)
    return (
        "SELECT check_clause AS clause FROM information_schema.check_constraints "
        f"WHERE constraint_schema = {_lit(src.database)} AND table_name = {_lit(src.table)}"
    )


def size_query(table: TableSpec | SourceTable) -> str:
    """The table's on-disk size in bytes and its row count, as the database estimates them
    (columns ``size_bytes`` and ``row_estimate``): InnoDB's data length and row estimate,
    PostgreSQL's table size (heap and TOAST) and ``reltuples`` (-1 before the first ANALYZE)."""
    src = as_source_table(table)
    if src.is_postgres:
        return (
            "SELECT pg_table_size(c.oid) AS size_bytes, "
            "CAST(c.reltuples AS BIGINT) AS row_estimate "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            f"WHERE n.nspname = {_lit(src.pg_schema)} AND c.relname = {_lit(src.table)} "
            "AND c.relkind IN ('r', 'p')"
        )
    return (
        "SELECT data_length AS size_bytes, table_rows AS row_estimate "
        "FROM information_schema.tables "
        f"WHERE table_schema = {_lit(src.database)} AND table_name = {_lit(src.table)}"
    )


def json_columns(checks: Sequence[Mapping[str, Any]]) -> set[str]:
    """Names of the columns that a ``json_valid(`name`)`` check (rows of json_checks_query)
    declares as JSON."""
    found = set()
    for row in checks:
        # Quoted with backticks, or with double quotes when the session runs with ANSI_QUOTES
        # (as Spark's JDBC reads of MariaDB do).
        clause = str(row["clause"]).strip()
        match = re.fullmatch(r"json_valid\((`(?:[^`]|``)+`|\"(?:[^\"]|\"\")+\")\)", clause)
        if match:
            quoted = match.group(1)
            found.add(quoted[1:-1].replace(quoted[0] * 2, quoted[0]))
    return found


def _pg_type(row: Mapping[str, Any]) -> str:
    data_type = str(row["data_type"]).lower()
    if data_type in ("character varying", "character") and row.get("char_len"):
        return f"{data_type}({row['char_len']})"
    if data_type == "numeric" and row.get("num_precision") is not None:
        return f"numeric({row['num_precision']},{row.get('num_scale') or 0})"
    if data_type == "user-defined" and row.get("enum_labels"):
        return f"enum({row['enum_labels']})"
    if data_type == "array" and str(row["udt_name"]).startswith("_"):
        # The element type's name with an underscore: _int4 is integer[].
        return f"{str(row['udt_name'])[1:]}[]"
    if data_type == "user-defined" or data_type == "array":
        return str(row["udt_name"])
    return data_type


def _mysql_type(row: Mapping[str, Any], json: Collection[str]) -> str:
    # BOOLEAN is an alias of tinyint(1) that information_schema cannot tell apart; Debezium
    # sends both the same way, and the spec names them boolean.
    text = str(row["column_type"])
    if text.lower() == "tinyint(1)":
        return "boolean"
    if text.lower() == "longtext" and str(row["name"]) in json:
        return "json"
    return _DISPLAY_WIDTH.sub(r"\1", text)


def _quote(name: str, connector: str) -> str:
    if connector == "postgresql":
        return '"' + name.replace('"', '""') + '"'
    return "`" + name.replace("`", "``") + "`"


def _string(text: str, connector: str) -> str:
    # MySQL string literals treat backslash as an escape; PostgreSQL's standard strings do not.
    return _lit(text if connector == "postgresql" else text.replace("\\", "\\\\"))


def create_table(
    table: TableSpec | SourceTable,
    columns: Sequence[Mapping[str, Any]],
    key: Sequence[str],
    *,
    json: Collection[str] = (),
) -> str:
    """CREATE TABLE of the source table from the rows of the queries above; ``json`` names the
    MariaDB LONGTEXT columns that are JSON (see json_checks_query). Column comments follow as
    inline COMMENT (MySQL family) or COMMENT ON statements (PostgreSQL)."""
    src = as_source_table(table)
    connector = src.connector
    name = _quote(src.table, connector)
    lines = []
    comments = []
    for row in columns:
        column = str(row["name"])
        type_text = _pg_type(row) if src.is_postgres else _mysql_type(row, json)
        line = f"  {_quote(column, connector)} {type_text}"
        if str(row["nullable"]).upper() == "NO":
            line += " NOT NULL"
        default = row.get("dflt")
        # A default is what the evolution rules reject for new columns; MariaDB reports a
        # missing default as the text NULL, and sequences/generated values are not defaults.
        text = "" if default is None else str(default)
        if text and text.upper() != "NULL" and "nextval(" not in text:
            line += f" DEFAULT {text}"
        comment = str(row.get("comment") or "")
        if comment and src.is_postgres:
            comments.append(
                f"COMMENT ON COLUMN {name}.{_quote(column, connector)} IS "
                f"{_string(comment, connector)}"
            )
        elif comment:
            line += f" COMMENT {_string(comment, connector)}"
        lines.append(line)
    if key:
        lines.append("  PRIMARY KEY (" + ", ".join(_quote(k, connector) for k in key) + ")")
    return ";\n".join([f"CREATE TABLE {name} (\n" + ",\n".join(lines) + "\n)", *comments])
