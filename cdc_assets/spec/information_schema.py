"""A source table's CREATE TABLE from its database's information_schema (pull detection from a
reachable source). Pure: the queries as text, and the rows they return turned into DDL that the
DDL onboarding path (``spec.ddl_import``) reads like any other CREATE TABLE.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cdc_assets.spec.models import TableSpec


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def columns_query(spec: TableSpec) -> str:
    """One row per column, in order: name, type text, nullable, default, comment."""
    src = spec.source
    if src.connector == "postgresql":
        return (
            "SELECT column_name AS name, data_type AS data_type, udt_name AS udt_name, "
            "character_maximum_length AS char_len, numeric_precision AS num_precision, "
            "numeric_scale AS num_scale, datetime_precision AS dt_precision, "
            "is_nullable AS nullable, column_default AS dflt, '' AS comment "
            "FROM information_schema.columns "
            f"WHERE table_schema = {_lit(src.schema_ or 'public')} "
            f"AND table_name = {_lit(src.table)} ORDER BY ordinal_position"
        )
    return (
        "SELECT column_name AS name, column_type AS column_type, is_nullable AS nullable, "
        "column_default AS dflt, column_comment AS comment "
        "FROM information_schema.columns "
        f"WHERE table_schema = {_lit(src.database)} AND table_name = {_lit(src.table)} "
        "ORDER BY ordinal_position"
    )


def primary_key_query(spec: TableSpec) -> str:
    """The primary key's columns, in key order."""
    src = spec.source
    if src.connector == "postgresql":
        # information_schema shows key columns only to the table's owner: read the catalog.
        return (
            "SELECT a.attname AS name FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey) "
            f"WHERE i.indisprimary AND n.nspname = {_lit(src.schema_ or 'public')} "
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


def _pg_type(row: Mapping[str, Any]) -> str:
    data_type = str(row["data_type"]).lower()
    if data_type in ("character varying", "character") and row.get("char_len"):
        return f"{data_type}({row['char_len']})"
    if data_type == "numeric" and row.get("num_precision") is not None:
        return f"numeric({row['num_precision']},{row.get('num_scale') or 0})"
    if data_type == "user-defined" or data_type == "array":
        return str(row["udt_name"])
    return data_type


def _mysql_type(row: Mapping[str, Any]) -> str:
    # BOOLEAN is an alias of tinyint(1) that information_schema cannot tell apart; Debezium
    # sends both the same way, and the spec names them boolean.
    text = str(row["column_type"])
    return "boolean" if text.lower() == "tinyint(1)" else text


def _quote(name: str, connector: str) -> str:
    if connector == "postgresql":
        return '"' + name.replace('"', '""') + '"'
    return "`" + name.replace("`", "``") + "`"


def create_table(spec: TableSpec, columns: Sequence[Mapping[str, Any]], key: Sequence[str]) -> str:
    """CREATE TABLE of the source table from the rows of the two queries above."""
    connector = spec.source.connector
    lines = []
    for row in columns:
        type_text = _pg_type(row) if connector == "postgresql" else _mysql_type(row)
        line = f"  {_quote(str(row['name']), connector)} {type_text}"
        if str(row["nullable"]).upper() == "NO":
            line += " NOT NULL"
        default = row.get("dflt")
        # A default is what the evolution rules reject for new columns; MariaDB reports a
        # missing default as the text NULL, and sequences/generated values are not defaults.
        text = "" if default is None else str(default)
        if text and text.upper() != "NULL" and "nextval(" not in text:
            line += f" DEFAULT {text}"
        lines.append(line)
    if key:
        lines.append("  PRIMARY KEY (" + ", ".join(_quote(k, connector) for k in key) + ")")
    return f"CREATE TABLE {_quote(spec.source.table, connector)} (\n" + ",\n".join(lines) + "\n)"
