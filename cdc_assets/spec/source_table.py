"""Whether a source table still exists under the spec's name, read from the schema-change records
of a MySQL/MariaDB source (pure; DDL read with sqlglot).

Debezium records a ``DROP TABLE`` as a table change of type DROP, and a table rename as an ALTER
of the *new* name whose DDL says which table it was (``RENAME TABLE a TO b``, ``ALTER TABLE a
RENAME TO b``); the record does not name the old table otherwise. A snapshot starts with a
``DROP TABLE IF EXISTS`` of each table, followed by its CREATE. So the state is derived from the
whole sequence each time (level-triggered), never from one record: the last record about the
table decides, and a table created again under the name is present again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokens import Token, TokenType  # type: ignore[attr-defined]

from cdc_assets.spec.models import FormerSource, TableSpec
from cdc_assets.spec.schema_change import SchemaChange

TableName = tuple[str | None, str]  # (database or None when the DDL left it out, table)
State = Literal["present", "dropped", "renamed"]

_NAME_TOKENS = (TokenType.VAR, TokenType.IDENTIFIER, TokenType.DOT)


@dataclass(frozen=True)
class SourceTable:
    """The source table's state after the records read, and the record that decided it."""

    state: State
    change: SchemaChange | None = None
    renamed_to: TableName | None = None

    @property
    def present(self) -> bool:
        return self.state == "present"

    def describe(self, database: str, table: str) -> str:
        """One sentence for a check or a log line."""
        if self.change is None or self.state == "present":
            return f"source table {database}.{table} exists"
        where = _position(self.change)
        if self.state == "dropped":
            return (
                f"source table {database}.{table} was dropped ({self.change.ddl.strip()!r}"
                f"{where}); the mirror is kept as it was, nothing is deleted"
            )
        new_db, new_table = self.renamed_to or (None, "?")
        return (
            f"source table {database}.{table} was renamed to {new_db or database}.{new_table} "
            f"({self.change.ddl.strip()!r}{where}); its changes now go to that table's topic, "
            "which this spec does not read yet: the drift check's evolution follows the rename "
            "(policy evolve or lenient, a topic of Debezium's default name), else the spec "
            "must be pointed at it"
        )


def _position(change: SchemaChange) -> str:
    pos = change.position
    if pos.get("gtid"):
        return f" at GTID {pos['gtid']}"
    if pos.get("file"):
        return f" at {pos['file']}:{pos.get('pos')}"
    return ""


def _name(tokens: list[Token]) -> TableName | None:
    parts = [t.text for t in tokens if t.token_type is not TokenType.DOT]
    if not parts or len(parts) > 2:
        return None
    return (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])


def _rename_table_pairs(rest: str) -> list[tuple[TableName, TableName]]:
    """``TABLE [IF EXISTS] a TO b [, c TO d] [WAIT n | NOWAIT]`` (the text after RENAME)."""
    try:
        tokens = sqlglot.tokenize(rest, read="mysql")
    except SqlglotError:
        return []
    words = [t.text.upper() for t in tokens]
    i = 1 if words[:1] in (["TABLE"], ["TABLES"]) else 0
    if words[i : i + 2] == ["IF", "EXISTS"]:
        i += 2
    pairs: list[tuple[TableName, TableName]] = []
    current: list[Token] = []
    sides: list[TableName | None] = []
    for token in [*tokens[i:], None]:
        text = token.text.upper() if token is not None else ""
        if token is None or token.token_type is TokenType.COMMA or text in ("WAIT", "NOWAIT"):
            sides.append(_name(current))
            if len(sides) == 2 and sides[0] and sides[1]:
                pairs.append((sides[0], sides[1]))
            if token is None or text in ("WAIT", "NOWAIT"):
                break
            current, sides = [], []
        elif text == "TO" and token.token_type is TokenType.VAR and not sides:
            sides.append(_name(current))
            current = []
        elif token.token_type in _NAME_TOKENS:
            current.append(token)
    return pairs


def renamed_tables(ddl: str) -> list[tuple[TableName, TableName]]:
    """The (old, new) table names a MySQL/MariaDB statement renames; [] for anything else."""
    text = ddl.strip().rstrip(";")
    head = text.split(None, 1)
    if head and head[0].upper() == "RENAME" and len(head) == 2:
        return _rename_table_pairs(head[1])
    # MySQL accepts RENAME AS as well as RENAME TO; sqlglot reads only the latter.
    normal = text
    for spelling in (" RENAME AS ", " rename as ", " Rename As "):
        normal = normal.replace(spelling, " RENAME TO ")
    try:
        tree = sqlglot.parse_one(normal, read="mysql")
    except SqlglotError:
        return []
    if not isinstance(tree, exp.Alter) or not isinstance(tree.this, exp.Table):
        return []
    out = []
    for action in tree.args.get("actions") or []:
        if isinstance(action, exp.AlterRename) and isinstance(action.this, exp.Table):
            old = (tree.this.db or None, tree.this.name)
            out.append((old, (action.this.db or None, action.this.name)))
    return out


def _same(name: TableName, database: str, table: str, default_db: str) -> bool:
    db = name[0] or default_db
    return db.lower() == database.lower() and name[1].lower() == table.lower()


def source_table_state(changes: Iterable[SchemaChange], database: str, table: str) -> SourceTable:
    """The state of ``database.table`` after ``changes`` (in the order they were recorded), as
    the module docstring says. No record about it at all: present (nothing says otherwise)."""
    state = SourceTable("present")
    for change in changes:
        if change.database.lower() == database.lower() and change.table.lower() == table.lower():
            if change.kind == "DROP":
                state = SourceTable("dropped", change)
            else:
                state = SourceTable("present", change)
            continue
        if change.kind != "ALTER" or not state.present:
            continue
        for old, new in renamed_tables(change.ddl):
            if _same(old, database, table, change.database) and not _same(
                new, database, table, change.database
            ):
                state = SourceTable("renamed", change, (new[0] or change.database, new[1]))
    return state


def followed(spec: TableSpec, state: SourceTable) -> TableSpec | str:
    """The spec pointed at the table ``state`` says the source table was renamed to (its old
    name and topic appended to ``source.renamed_from``), or why the rename is not followed.

    Followed under the ``evolve`` and ``lenient`` policies when the topic has Debezium's default
    name (``<prefix>.<database>.<table>``), so the new table's topic is known. The result is
    the next version: a proposal the evolution reads as a ``FollowSourceRename``."""
    source = spec.source
    if state.state != "renamed" or state.renamed_to is None:
        return f"source table {source.database}.{source.table} was not renamed"
    if source.shards:
        return "a sharded table's renames are not followed: point each shard at it by hand"
    policy = spec.evolution.policy
    if policy in ("freeze", "fail"):
        return f"evolution.policy is {policy}: a renamed source table is not followed"
    suffix = f".{source.database}.{source.table}"
    if not source.topic.endswith(suffix):
        return (
            f"the topic {source.topic} is not Debezium's default name (<prefix>{suffix}), so "
            "the renamed table's topic is unknown: propose a spec with its source.table and "
            "topic, and the old ones appended to source.renamed_from"
        )
    database, table = state.renamed_to
    topic = f"{source.topic[: -len(suffix)]}.{database}.{table}"
    data = spec.model_dump(mode="json", by_alias=True)
    data["spec_version"] = spec.spec_version + 1
    former = FormerSource(database=source.database, table=source.table, topic=source.topic)
    data["source"].update(
        database=database,
        table=table,
        topic=topic,
        renamed_from=[*data["source"].get("renamed_from", []), former.model_dump(mode="json")],
    )
    return TableSpec.model_validate(data)
