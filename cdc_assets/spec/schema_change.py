"""Debezium schema-change records (MySQL/MariaDB schema-change topic) as CREATE TABLE text.

A schema-change record carries the DDL that ran (``ddl``) and, in ``tableChanges``, the table's
full column list after it. The column list becomes a CREATE TABLE statement, so the push path
reuses the DDL onboarding path (``spec.ddl_import.plan_from_ddl``) with the record's DDL as the
audit trail that tells renames from drop-and-add. Pure: no Kafka here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Types whose Debezium ``length`` (and ``scale``) belong in the type text. For integers the length
# is a display width and for text types there is none worth keeping.
_SIZED = {
    "char", "varchar", "binary", "varbinary", "bit", "decimal", "numeric", "dec", "fixed",
    "datetime", "timestamp", "time", "float", "double",
}  # fmt: skip


@dataclass(frozen=True)
class SchemaChange:
    """One table's change in a schema-change record."""

    database: str
    table: str
    ddl: str
    create_table: str  # the table after the change, as MySQL CREATE TABLE text ("" for DROP)
    ts_ms: int | None = None
    position: Mapping[str, Any] = field(default_factory=dict)  # source block: file, pos, gtid
    kind: str = "ALTER"  # Debezium's table change type: CREATE, ALTER or DROP

    @property
    def server(self) -> str | None:
        """The connector's logical name (``source.name``: its topic.prefix), when the record
        carries it."""
        name = self.position.get("name")
        return str(name) if name else None


def _label_literal(value: object) -> str:
    """One ENUM/SET label of ``enumValues`` as a single-quoted SQL literal. Debezium's MySQL
    parser keeps each label as the DDL wrote it, quotes included (``'ham'``, ``"it's"``); a bare
    label (older or hand-written records) is quoted here."""
    text = str(value)
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1].replace('""', '"')
    return "'" + text.replace("'", "''") + "'"


def _type_text(column: Mapping[str, Any]) -> str:
    name = str(column.get("typeExpression") or column.get("typeName") or "").strip()
    base = name.split()[0].lower() if name else ""
    suffix = " ".join(name.split()[1:])  # UNSIGNED, ZEROFILL
    enum_values = column.get("enumValues")
    if base in ("enum", "set") and enum_values:
        values = ", ".join(_label_literal(v) for v in enum_values)
        return f"{base.upper()}({values})"
    length, scale = column.get("length"), column.get("scale")
    if base == "tinyint" and length == 1 and not suffix:
        # MySQL's BOOLEAN is tinyint(1): Debezium reports the column under that name.
        return "BOOLEAN"
    if base in _SIZED and length is not None and length > 0:
        size = (
            f"{length},{scale}"
            if scale is not None and base not in ("datetime", "time", "timestamp")
            else str(length)
        )
        name = f"{base.upper()}({size})" + (f" {suffix}" if suffix else "")
    return name


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def create_table_text(table: str, change_table: Mapping[str, Any]) -> str:
    """MySQL CREATE TABLE for the ``table`` object of a ``tableChanges`` entry."""
    columns = sorted(change_table.get("columns") or [], key=lambda c: c.get("position", 0))
    lines = []
    for col in columns:
        line = f"  {_quote(col['name'])} {_type_text(col)}"
        if not col.get("optional", True):
            line += " NOT NULL"
        # Older records have no hasDefaultValue; a default expression is enough.
        if col.get("hasDefaultValue", True) and col.get("defaultValueExpression") is not None:
            line += " DEFAULT '" + str(col["defaultValueExpression"]).replace("'", "''") + "'"
        if col.get("comment"):
            line += " COMMENT '" + str(col["comment"]).replace("'", "''") + "'"
        lines.append(line)
    keys = change_table.get("primaryKeyColumnNames") or []
    if keys:
        lines.append("  PRIMARY KEY (" + ", ".join(_quote(k) for k in keys) + ")")
    return f"CREATE TABLE {_quote(table)} (\n" + ",\n".join(lines) + "\n)"


def _table_id(text: str) -> tuple[str, str]:
    """``"db"."table"`` (Debezium's table id) -> (db, table)."""
    parts = [p.strip('"') for p in text.split('"."')]
    if len(parts) == 1:
        parts = [p.strip('"`') for p in text.split(".")]
    return (parts[0], parts[-1]) if len(parts) > 1 else ("", parts[0])


def parse_schema_change(value: bytes | str | Mapping[str, Any] | None) -> list[SchemaChange]:
    """The table changes of one schema-change record, its JSON text or its decoded value (an
    Avro record); [] for anything else: the topic also holds records without ``tableChanges``,
    such as SET statements. DROPs are included (``kind``); `shapes` leaves them out."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        record: Any = value
    else:
        try:
            record = json.loads(value)
        except (ValueError, UnicodeDecodeError):
            return []
    if isinstance(record, dict) and "payload" in record and "schema" in record:
        record = record["payload"]
    if not isinstance(record, dict):
        return []
    out = []
    for change in record.get("tableChanges") or []:
        kind = change.get("type") if isinstance(change, dict) else None
        if kind not in ("CREATE", "ALTER", "DROP"):
            continue
        database, table = _table_id(str(change.get("id", "")))
        out.append(
            SchemaChange(
                database=database or str(record.get("databaseName") or ""),
                table=table,
                ddl=str(record.get("ddl") or ""),
                # A DROP carries no table: there is no shape to evolve to.
                create_table=(
                    "" if kind == "DROP" else create_table_text(table, change.get("table") or {})
                ),
                ts_ms=record.get("ts_ms"),
                position=record.get("source") or {},
                kind=kind,
            )
        )
    return out


def shapes(changes: list[SchemaChange]) -> list[SchemaChange]:
    """The changes that carry a table's shape (CREATE and ALTER): what evolution reads."""
    return [c for c in changes if c.kind != "DROP"]
