"""Seeded SQL workloads for tables on their real databases (MariaDB or PostgreSQL), with the
generator's own model of what the tables hold afterwards.

A workload is what an application does to its tables: inserts (some several rows in one
statement), the same keys updated again and again, deletes, re-inserts of deleted keys, primary
key updates, NULLs, texts with 4-byte characters, quotes and backslashes, decimals at the bounds
of their precision, timestamps written in several time zones, and transactions of several
statements over all tables of the server (some rolled back, some with a savepoint rolled back).
Pure Python: the statements are text, run by the database's own client
(``cdc_assets_dev.stack.sources``). Values in the model are what the database holds, as Python
values: ``int``, ``Decimal``, ``str``, ``bool``, ``date``, naive ``datetime`` for columns without
a zone and UTC ``datetime`` for columns with one.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Literal

from cdc_assets.schema.sink_values import plain
from cdc_assets.schema.wire import FieldPlan, plan_fields
from cdc_assets.spec.models import TableSpec

Dialect = Literal["mariadb", "postgres"]
Key = tuple[object, ...]
Row = dict[str, object]

# Statements that change rows; the others control the session or the transaction.
CHANGE_KINDS = (
    "insert",
    "multi_insert",
    "update",
    "multi_update",
    "delete",
    "reinsert",
    "key_update",
)
CONTROL_KINDS = ("session", "time_zone", "begin", "commit", "rollback", "savepoint", "rollback_to")

DIALECTS: dict[str, Dialect] = {
    "mysql": "mariadb",
    "mariadb": "mariadb",
    "postgresql": "postgres",
}

_INT_RANGES = {
    "TINYINT": (-(2**7), 2**7 - 1),
    "UTINYINT": (0, 2**8 - 1),
    "SMALLINT": (-(2**15), 2**15 - 1),
    "USMALLINT": (0, 2**16 - 1),
    "MEDIUMINT": (-(2**23), 2**23 - 1),
    "UMEDIUMINT": (0, 2**24 - 1),
    "INT": (-(2**31), 2**31 - 1),
    "UINT": (0, 2**32 - 1),
    "BIGINT": (-(2**63), 2**63 - 1),
}
_TEXT_KINDS = ("VARCHAR", "NVARCHAR", "CHAR", "NCHAR", "TEXT", "TINYTEXT", "MEDIUMTEXT", "LONGTEXT")

_WORDS = (
    "alpha", "orbit", "maple", "river", "quartz", "delta", "ember", "harbor", "lumen", "nova",
    "pixel", "sable", "tundra", "willow", "zephyr", "copper", "meadow", "signal",
)  # fmt: skip
# Letters outside ASCII, 4-byte characters (emoji, a musical symbol, a CJK extension B ideogram),
# a flag and a ZWJ sequence (several code points), combining marks and right-to-left scripts.
_UNICODE = (
    "café", "naïve", "Zoë", "Ærøskøbing", "Łódź", "straße", "Ελλάδα", "Москва", "日本語", "한국어",
    "עברית", "العربية", "हिन्दी", "😀", "🚀", "🦄", "𝄞", "𠀋", "🇳🇴", "👩\u200d💻", "e\u0301",
)  # fmt: skip
# What breaks naive quoting, client parsing and JSON: quotes, backslashes, control characters,
# comment and statement delimiters, psql variables and dollar quotes, LIKE wildcards.
_AWKWARD = (
    "'", "''", '"', "\\", "\\'", "\\\\", "\n", "\t", "\r\n", ";", "--", "/*", "*/", "$$", ":v",
    "\\g", "%", "_", "`", "{}", "a,b",
)  # fmt: skip
# Offsets whole, half and three-quarter hours away from UTC, on both sides.
_OFFSETS = ("+00:00", "+01:00", "+02:00", "+05:30", "+05:45", "+09:00", "-03:30", "-08:00")
# MariaDB TIMESTAMP holds 1970-01-01 00:00:01 .. 2038-01-19 03:14:07.999999 UTC.
_TS_MIN = datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)
_TS_MAX = datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=UTC)
_CHAR_LETTERS = ("A", "z", "9", "ß", "😀", "日", "-", "'", " ")
_INSTANT_EDGES = (
    datetime(1970, 1, 1),
    datetime(1969, 12, 31, 23, 59, 59, 999999),
    datetime(1900, 1, 1),
    datetime(2999, 12, 31, 23, 59, 59, 999999),
)
_WALL_CLOCK_EDGES = (datetime(1000, 1, 1), datetime(9999, 12, 31, 23, 59, 59, 999999))
_DATE_EDGES = (
    date(1970, 1, 1),
    date(1969, 12, 31),
    date(1900, 3, 1),
    date(1000, 1, 1),
    date(9999, 12, 31),
)
_LONG_TEXT_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 äöüß€ñ漢字"


def dialect_of(spec: TableSpec) -> Dialect:
    try:
        return DIALECTS[spec.source.connector]
    except KeyError:
        raise ValueError(f"{spec.name}: no SQL workload for {spec.source.connector}") from None


# --- statements ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RowChange:
    """One row a statement changes: its image before and after (None: absent)."""

    table: str
    key: Key
    before: Row | None
    after: Row | None


@dataclass(frozen=True)
class Statement:
    """One SQL statement and, for a change, the rows it changes if it runs alone."""

    kind: str
    sql: str
    table: str | None = None
    changes: tuple[RowChange, ...] = ()
    # Set when a later ROLLBACK (or ROLLBACK TO SAVEPOINT) undoes this statement.
    rolled_back: bool = False


def script(statements: Sequence[Statement]) -> str:
    """The statements as one script for the database's client, one per line."""
    return "\n".join(s.sql for s in statements) + "\n"


# --- values and literals ---------------------------------------------------------------------


def _quote_ident(dialect: Dialect, name: str) -> str:
    if dialect == "mariadb":
        return "`" + name.replace("`", "``") + "`"
    return '"' + name.replace('"', '""') + '"'


def string_literal(dialect: Dialect, text: str) -> str:
    """A SQL string literal: MariaDB reads backslash escapes in literals (no NO_BACKSLASH_ESCAPES
    in its sql_mode), PostgreSQL does not (standard_conforming_strings is on). Line breaks go to
    MariaDB escaped: its client drops a carriage return at the end of a script line."""
    if dialect == "mariadb":
        text = text.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n")
    return "'" + text.replace("'", "''") + "'"


def _fraction(value: datetime, digits: int) -> str:
    return "" if digits == 0 else "." + f"{value.microsecond:06d}"[:digits]


def _wall_clock(value: datetime, digits: int) -> str:
    return (
        f"{value.year:04d}-{value.month:02d}-{value.day:02d} "
        f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}" + _fraction(value, digits)
    )


def _offset_of(text: str) -> timezone:
    sign = -1 if text[0] == "-" else 1
    hours, minutes = int(text[1:3]), int(text[4:6])
    return timezone(sign * timedelta(hours=hours, minutes=minutes))


@dataclass
class _Column:
    """A spec column with what the generator needs to write values into it."""

    plan: FieldPlan
    kind: str
    fraction_digits: int = 0
    zoned: bool = False

    @property
    def name(self) -> str:
        return self.plan.name


def _columns(spec: TableSpec) -> list[_Column]:
    out = []
    for plan in plan_fields(spec):
        kind = plan.source.kind
        supported = (
            kind in _INT_RANGES
            or kind in _TEXT_KINDS
            or kind in ("DECIMAL", "BOOLEAN", "JSON", "DATE", "DATETIME", "TIMESTAMP")
            or kind == "TIMESTAMPTZ"
        )
        if not supported or (kind == "DECIMAL" and plan.source.precision is None):
            raise ValueError(f"{spec.name}.{plan.name}: no workload values for {plan.source.text}")
        digits = min(plan.source.precision or 0, 6) if kind in ("DATETIME", "TIMESTAMP") else 0
        if kind == "TIMESTAMPTZ":
            digits = min(plan.source.precision if plan.source.precision is not None else 6, 6)
        out.append(_Column(plan, kind, digits, zoned=plan.natural.name == "timestamptz"))
    return out


class _Values:
    """Random values for columns, kept inside what each column type holds."""

    def __init__(self, rng: random.Random, dialect: Dialect) -> None:
        self.rng = rng
        self.dialect = dialect
        self.utc_session = True  # whether the statements are written in a UTC session

    def value(self, column: _Column) -> object:
        kind, rng = column.kind, self.rng
        if column.plan.transform is not None:
            return self._epoch(column.plan.transform)
        if kind in _INT_RANGES:
            return self._int(kind)
        if kind == "DECIMAL":
            return self._decimal(column.plan.source.precision or 10, column.plan.source.scale or 0)
        if kind == "BOOLEAN":
            return rng.random() < 0.5
        if kind == "JSON":
            return self._json()
        if kind == "DATE":
            return self._date()
        if kind in ("DATETIME", "TIMESTAMP", "TIMESTAMPTZ"):
            return self._instant(column)
        return self._text(column)

    def _epoch(self, transform: str) -> int:
        """An integer the column's transform reads as a time: mostly 1950-2100, some before
        1970 (negative) and the epoch itself."""
        per_second = {"epoch_seconds_to_timestamp": 1, "epoch_days_to_date": 0}.get(transform)
        if transform == "epoch_days_to_date":
            return self.rng.randint(-7_300, 47_000)
        per_second = per_second or (1_000 if "millis" in transform else 1_000_000)
        if self.rng.random() < 0.05:
            return self.rng.choice((0, -1, 1, -per_second * 86_400 - 1))
        return self.rng.randint(-20 * 365 * 86_400 * per_second, 130 * 365 * 86_400 * per_second)

    def _int(self, kind: str) -> int:
        low, high = _INT_RANGES[kind]
        roll = self.rng.random()
        if roll < 0.08:
            return self.rng.choice((low, high, 0, -1 if low < 0 else 1))
        if roll < 0.2:
            return self.rng.randint(low, high)
        return self.rng.randint(max(low, -1000), min(high, 100_000))

    def _decimal(self, precision: int, scale: int) -> Decimal:
        rng = self.rng
        quantum = Decimal(1).scaleb(-scale)
        largest = Decimal(10) ** (precision - scale) - quantum
        roll = rng.random()
        if roll < 0.1:  # the bounds of the declared precision, the smallest steps, zero
            return rng.choice((largest, -largest, quantum, -quantum, Decimal(0).quantize(quantum)))
        digits = rng.randint(1, precision)
        unscaled = rng.randrange(10**digits)
        value = Decimal(unscaled).scaleb(-scale)
        return -value if rng.random() < 0.3 else value

    def _text(self, column: _Column) -> str:
        rng, source = self.rng, column.plan.source
        length = source.length
        if column.kind in ("CHAR", "NCHAR"):
            size = length or 1
            if rng.random() < 0.2:
                size = rng.randint(1, size)  # shorter than declared: padding shows
            text = "".join(
                rng.choice(("A", "z", "9", "ß", "😀", "日", "-", "'")) for _ in range(size)
            )
            return self._stored_char(text, size if length is None else length)
        if length is None and column.kind == "TEXT" and rng.random() < 0.05:
            # Long and incompressible: PostgreSQL stores it out of line (TOAST).
            size = rng.randint(3_000, 9_000)
            return "".join(rng.choice(_LONG_TEXT_ALPHABET) for _ in range(size))
        limit = min(length or 300, 300)
        # Sometimes exactly the declared length.
        target = limit if rng.random() < 0.05 else rng.randint(1, limit)
        parts: list[str] = []
        total = 0
        while total < target:
            roll = rng.random()
            pool = _WORDS if roll < 0.55 else _UNICODE if roll < 0.85 else _AWKWARD
            piece = rng.choice(pool)
            parts.append(piece)
            total += len(piece) + 1
        text = " ".join(parts)[:target]
        if rng.random() < 0.05:
            text = text[: max(target - 2, 0)] + "  "  # trailing blanks a VARCHAR keeps
        return text or "x"

    def _stored_char(self, text: str, length: int) -> str:
        """What CHAR(n) gives back: MariaDB strips trailing blanks, PostgreSQL pads to n."""
        if self.dialect == "mariadb":
            return text.rstrip(" ")
        return text.ljust(length)

    def _json(self) -> str:
        rng = self.rng
        doc: dict[str, object] = {
            "color": rng.choice(("red", "grün", "藍")),
            "size": rng.randint(-5, 48),
            "price": rng.choice((1.5, 0.1, -2.25, 1e21, 3)),
            "tags": [rng.choice(_WORDS + _UNICODE) for _ in range(rng.randint(0, 3))],
            "note": rng.choice(_AWKWARD) + rng.choice(_UNICODE),
            "gift": rng.random() < 0.2,
            "ref": None,
        }
        if rng.random() < 0.3:
            doc["nested"] = {"a": [1, {"b": "c\\d"}], "e": {}}
        # MariaDB keeps JSON text as written: vary spacing, order and escaping.
        keys = list(doc)
        rng.shuffle(keys)
        ordered = {k: doc[k] for k in keys}
        indent = rng.choice((None, None, 2))
        return json.dumps(ordered, ensure_ascii=rng.random() < 0.3, indent=indent)

    def _date(self) -> date:
        rng = self.rng
        if rng.random() < 0.05:
            return rng.choice(_DATE_EDGES)
        return date(1950, 1, 1) + timedelta(days=rng.randrange(365 * 120))

    def _instant(self, column: _Column) -> datetime:
        rng, digits = self.rng, column.fraction_digits
        if self.dialect == "mariadb" and column.zoned:
            low, high = _TS_MIN, _TS_MAX
            # The range is checked in UTC: its edges only from a UTC session.
            edges = [_TS_MIN, _TS_MAX] if self.utc_session else []
        else:
            low, high = datetime(1901, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC)
            edges = [e.replace(tzinfo=UTC) for e in _INSTANT_EDGES]
            if not column.zoned:
                # Far edges only where no time zone moves them out of the year range.
                edges += [e.replace(tzinfo=UTC) for e in _WALL_CLOCK_EDGES]
        if edges and rng.random() < 0.05:
            value = rng.choice(edges)
        else:
            span = int((high - low).total_seconds()) - 1
            value = low + timedelta(seconds=rng.randrange(span), microseconds=rng.randrange(10**6))
        kept = 10 ** (6 - digits)
        value = value.replace(microsecond=value.microsecond // kept * kept)
        return value if column.zoned else value.replace(tzinfo=None)


# --- the model -------------------------------------------------------------------------------


class _KeyPool:
    """Keys with O(1) add, remove and random choice, in a deterministic order."""

    def __init__(self) -> None:
        self._items: list[Key] = []
        self._index: dict[Key, int] = {}

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def add(self, key: Key) -> None:
        if key not in self._index:
            self._index[key] = len(self._items)
            self._items.append(key)

    def remove(self, key: Key) -> None:
        index = self._index.pop(key, None)
        if index is None:
            return
        last = self._items.pop()
        if index < len(self._items):
            self._items[index] = last
            self._index[last] = index

    def choice(self, rng: random.Random) -> Key:
        return self._items[rng.randrange(len(self._items))]


@dataclass
class TableModel:
    """What one table holds after the statements generated so far (committed ones only)."""

    spec: TableSpec
    sql_name: str
    columns: list[_Column]
    key_names: list[str]
    key_base: int
    rows: dict[Key, Row] = field(default_factory=dict)
    live: _KeyPool = field(default_factory=_KeyPool)
    deleted: _KeyPool = field(default_factory=_KeyPool)
    hot: list[Key] = field(default_factory=list)
    next_key: int = 0

    def apply(self, change: RowChange) -> None:
        """Apply one change, checking that its before image is what the table holds."""
        held = self.rows.get(change.key)
        if held != change.before:
            raise AssertionError(
                f"{self.spec.name} {change.key}: the change expects {change.before}, "
                f"the model holds {held}"
            )
        if change.after is None:
            del self.rows[change.key]
            self.live.remove(change.key)
            self.deleted.add(change.key)
        else:
            self.rows[change.key] = change.after
            self.live.add(change.key)
            self.deleted.remove(change.key)

    def fresh_key(self) -> Key:
        """A key no statement has used yet: composite keys read like order lines."""
        n = self.next_key
        self.next_key += 1
        if len(self.key_names) == 1:
            return (self.key_base + n,)
        # (order, line) pairs: four lines per order, then further keys of the same shape.
        head = self.key_base + n // 4
        return (head, n % 4 + 1, *([n] * (len(self.key_names) - 2)))

    def key_dict(self, key: Key) -> Row:
        return dict(zip(self.key_names, key, strict=True))


class WorkloadGenerator:
    """Statements for the tables of one database server, seeded, with the model of their rows.

    Calls to ``statements`` continue from the state the previous call left (keys written before
    are updated and deleted again); the same seed and the same calls give the same statements.
    Keys start at ``key_base`` so that the workload never touches rows it did not write.
    """

    def __init__(self, specs: Sequence[TableSpec], *, seed: int, key_base: int) -> None:
        if not specs:
            raise ValueError("a workload needs at least one table")
        dialects = {dialect_of(s) for s in specs}
        if len(dialects) != 1:
            raise ValueError(f"one workload runs on one server, got {sorted(dialects)}")
        self.dialect: Dialect = dialects.pop()
        self.rng = random.Random(seed)
        self.values = _Values(self.rng, self.dialect)
        self.tables: dict[str, TableModel] = {}
        for spec in specs:
            source = spec.source
            container = source.database if self.dialect == "mariadb" else source.schema_ or "public"
            sql_name = ".".join(_quote_ident(self.dialect, p) for p in (container, source.table))
            self.tables[spec.name] = TableModel(
                spec, sql_name, _columns(spec), list(spec.primary_key), key_base
            )
        self.zone = "+00:00"  # the session time zone the statements are written in
        self._savepoints = 0

    # --- the public side

    def rows(self, table: str) -> list[Row]:
        """The model's rows of ``table`` (source column names), in key order."""
        model = self.tables[table]
        return [dict(model.rows[k]) for k in sorted(model.rows, key=repr)]

    def statements(self, count: int) -> list[Statement]:
        """``count`` row-changing statements per table, with the session and transaction
        statements around them. Changes of rolled-back statements are marked and not applied."""
        out: list[Statement] = [*self._prologue()]
        budget = Counter({name: count for name in self.tables})
        while +budget:
            if self.rng.random() < 0.2:
                out.extend(self._transaction(budget))
            else:
                name = self._pick_table(budget)
                statement = self._change(self.tables[name])
                self._apply(statement)
                out.append(statement)
                budget[name] -= 1
            if self.rng.random() < 0.03:
                out.append(self._set_zone())
        return out

    # --- composition

    def _prologue(self) -> Iterator[Statement]:
        if self.dialect == "mariadb":
            # utf8mb4 whatever the client's default (utf8mb3 cannot hold 4-byte characters);
            # strict for every table, so a value that does not fit fails instead of shrinking.
            yield Statement("session", "SET NAMES utf8mb4;")
            yield Statement(
                "session",
                "SET SESSION sql_mode = "
                "'STRICT_ALL_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION';",
            )
            yield Statement("time_zone", f"SET time_zone = '{self.zone}';")
        else:
            yield Statement("session", "SET client_encoding = 'UTF8';")
            # Commits do not wait for the WAL to reach the disk: several times faster, and
            # logical decoding streams the same changes once the WAL writer has flushed them.
            yield Statement("session", "SET synchronous_commit = off;")
            yield Statement("time_zone", self._pg_zone_sql())

    def _pg_zone_sql(self) -> str:
        sign = "-" if self.zone.startswith("-") else ""
        return f"SET TIME ZONE INTERVAL '{sign}{self.zone[1:]}' HOUR TO MINUTE;"

    def _set_zone(self) -> Statement:
        self.zone = self.rng.choice(_OFFSETS)
        self.values.utc_session = self.zone == "+00:00"
        if self.dialect == "mariadb":
            return Statement("time_zone", f"SET time_zone = '{self.zone}';")
        return Statement("time_zone", self._pg_zone_sql())

    def _pick_table(self, budget: Counter[str]) -> str:
        names = sorted(n for n, left in budget.items() if left > 0)
        return self.rng.choice(names)

    def _transaction(self, budget: Counter[str]) -> list[Statement]:
        """BEGIN, 2-8 changes over the tables (a delete and re-insert of one key among them
        sometimes), perhaps a savepoint rolled back to, then COMMIT or ROLLBACK."""
        rng = self.rng
        begin = "START TRANSACTION;" if self.dialect == "mariadb" else "BEGIN;"
        out = [Statement("begin", begin)]
        body: list[Statement] = []
        savepoint_at: int | None = None
        savepoint_name = ""
        for _ in range(rng.randint(2, 8)):
            if not +budget:
                break
            name = self._pick_table(budget)
            model = self.tables[name]
            if savepoint_at is None and body and rng.random() < 0.15:
                self._savepoints += 1
                savepoint_name = f"sp{self._savepoints}"
                savepoint_at = len(body)
                body.append(Statement("savepoint", f"SAVEPOINT {savepoint_name};"))
            if rng.random() < 0.15 and len(model.live) > 0 and budget[name] >= 2:
                # Delete a key and insert it again in the same transaction.
                key = model.live.choice(rng)
                for statement in (self._delete(model, key), self._insert(model, key, "reinsert")):
                    self._apply(statement)
                    body.append(statement)
                budget[name] -= 2
            else:
                statement = self._change(model)
                self._apply(statement)
                body.append(statement)
                budget[name] -= 1
        if savepoint_at is not None and rng.random() < 0.5:
            undone = body[savepoint_at + 1 :]
            self._undo(undone)
            body[savepoint_at + 1 :] = [_rolled_back(s) for s in undone]
            body.append(Statement("rollback_to", f"ROLLBACK TO SAVEPOINT {savepoint_name};"))
        if rng.random() < 0.12:
            self._undo([s for s in body if not s.rolled_back])
            body = [_rolled_back(s) for s in body]
            out.extend(body)
            out.append(Statement("rollback", "ROLLBACK;"))
        else:
            out.extend(body)
            out.append(Statement("commit", "COMMIT;"))
        return out

    def _apply(self, statement: Statement) -> None:
        for change in statement.changes:
            self.tables[change.table].apply(change)

    def _undo(self, statements: Sequence[Statement]) -> None:
        for statement in reversed(statements):
            for change in reversed(statement.changes):
                self.tables[change.table].apply(
                    RowChange(change.table, change.key, change.after, change.before)
                )

    # --- single statements

    def _change(self, model: TableModel) -> Statement:
        rng = self.rng
        live, deleted = len(model.live), len(model.deleted)
        roll = rng.random()
        if live < 8 or roll < 0.2:
            return self._insert(model, model.fresh_key(), "insert")
        if roll < 0.26:
            return self._multi_insert(model)
        if roll < 0.56:
            return self._update(model, self._hot_key(model) if rng.random() < 0.5 else None)
        if roll < 0.62:
            return self._multi_update(model)
        if roll < 0.74:
            key = model.live.choice(rng)
            return self._delete(model, key)
        if roll < 0.84 and deleted:
            return self._insert(model, model.deleted.choice(rng), "reinsert")
        if roll < 0.9:
            return self._key_update(model)
        return self._update(model, None)

    def _hot_key(self, model: TableModel) -> Key:
        """One of a few keys that are updated again and again (replaced once deleted)."""
        model.hot = [k for k in model.hot if k in model.live]
        while len(model.hot) < 5 and len(model.hot) < len(model.live):
            candidate = model.live.choice(self.rng)
            if candidate not in model.hot:
                model.hot.append(candidate)
        return self.rng.choice(model.hot)

    def _new_row(self, model: TableModel, key: Key) -> Row:
        row = model.key_dict(key)
        for column in model.columns:
            if column.name in row:
                continue
            if column.plan.nullable and self.rng.random() < 0.15:
                row[column.name] = None
            else:
                row[column.name] = self.values.value(column)
        return row

    def _literal(self, column: _Column, value: object) -> str:
        if value is None:
            return "NULL"
        if isinstance(value, bool):
            return "TRUE" if value else "FALSE"
        if isinstance(value, int):
            return str(value)
        if isinstance(value, Decimal):
            return plain(value)
        if isinstance(value, datetime):
            if not column.zoned:
                return f"'{_wall_clock(value, column.fraction_digits)}'"
            local = value.astimezone(_offset_of(self.zone))
            text = _wall_clock(local, column.fraction_digits)
            if self.dialect == "postgres" and self.rng.random() < 0.5:
                # An explicit offset (not the session's) wins over the session time zone.
                offset = self.rng.choice(_OFFSETS)
                text = _wall_clock(value.astimezone(_offset_of(offset)), column.fraction_digits)
                return f"'{text}{offset}'"
            return f"'{text}'"
        if isinstance(value, date):
            return f"'{value.isoformat()}'"
        if isinstance(value, str):
            return string_literal(self.dialect, value)
        raise TypeError(f"no literal for {value!r}")

    def _values_sql(self, model: TableModel, row: Row) -> str:
        return "(" + ", ".join(self._literal(c, row[c.name]) for c in model.columns) + ")"

    def _column_list(self, model: TableModel) -> str:
        return ", ".join(_quote_ident(self.dialect, c.name) for c in model.columns)

    def _where(self, model: TableModel, key: Key) -> str:
        by_name = {c.name: c for c in model.columns}
        return " AND ".join(
            f"{_quote_ident(self.dialect, name)} = {self._literal(by_name[name], value)}"
            for name, value in zip(model.key_names, key, strict=True)
        )

    def _insert(self, model: TableModel, key: Key, kind: str) -> Statement:
        row = self._new_row(model, key)
        sql = (
            f"INSERT INTO {model.sql_name} ({self._column_list(model)}) VALUES "
            f"{self._values_sql(model, row)};"
        )
        before = None
        return Statement(
            kind, sql, model.spec.name, (RowChange(model.spec.name, key, before, row),)
        )

    def _multi_insert(self, model: TableModel) -> Statement:
        keys = [model.fresh_key() for _ in range(self.rng.randint(2, 4))]
        rows = [self._new_row(model, k) for k in keys]
        values = ", ".join(self._values_sql(model, r) for r in rows)
        sql = f"INSERT INTO {model.sql_name} ({self._column_list(model)}) VALUES {values};"
        changes = tuple(
            RowChange(model.spec.name, k, None, r) for k, r in zip(keys, rows, strict=True)
        )
        return Statement("multi_insert", sql, model.spec.name, changes)

    def _assignments(self, model: TableModel, row: Row) -> tuple[Row, str]:
        """New values for 1-3 non-key columns (NULL where allowed, sometimes the value the row
        already has); the assigned values and the SET clause."""
        data = [c for c in model.columns if c.name not in model.key_names]
        picked = self.rng.sample(data, k=min(len(data), self.rng.randint(1, 3)))
        assigned: Row = {}
        parts = []
        for column in picked:
            roll = self.rng.random()
            if column.plan.nullable and roll < 0.15:
                value: object = None
            elif roll < 0.2:
                value = row[column.name]  # an update that changes nothing in this column
            else:
                value = self.values.value(column)
            assigned[column.name] = value
            parts.append(
                f"{_quote_ident(self.dialect, column.name)} = {self._literal(column, value)}"
            )
        return assigned, ", ".join(parts)

    def _update(self, model: TableModel, key: Key | None) -> Statement:
        key = key if key is not None else model.live.choice(self.rng)
        before = model.rows[key]
        assigned, assignments = self._assignments(model, before)
        sql = f"UPDATE {model.sql_name} SET {assignments} WHERE {self._where(model, key)};"
        change = RowChange(model.spec.name, key, before, {**before, **assigned})
        return Statement("update", sql, model.spec.name, (change,))

    def _multi_update(self, model: TableModel) -> Statement:
        """One statement, several rows: the same assignments to 2-4 keys."""
        keys: list[Key] = []
        while len(keys) < min(len(model.live), self.rng.randint(2, 4)):
            key = model.live.choice(self.rng)
            if key not in keys:
                keys.append(key)
        assigned, assignments = self._assignments(model, model.rows[keys[0]])
        changes = tuple(
            RowChange(model.spec.name, key, model.rows[key], {**model.rows[key], **assigned})
            for key in keys
        )
        columns = ", ".join(_quote_ident(self.dialect, n) for n in model.key_names)
        tuples = ", ".join(f"({self._key_literals(model, key)})" for key in keys)
        sql = f"UPDATE {model.sql_name} SET {assignments} WHERE ({columns}) IN ({tuples});"
        return Statement("multi_update", sql, model.spec.name, changes)

    def _key_literals(self, model: TableModel, key: Key) -> str:
        by_name = {c.name: c for c in model.columns}
        return ", ".join(
            self._literal(by_name[n], v) for n, v in zip(model.key_names, key, strict=True)
        )

    def _delete(self, model: TableModel, key: Key) -> Statement:
        before = model.rows[key]
        sql = f"DELETE FROM {model.sql_name} WHERE {self._where(model, key)};"
        return Statement(
            "delete", sql, model.spec.name, (RowChange(model.spec.name, key, before, None),)
        )

    def _key_update(self, model: TableModel) -> Statement:
        """A primary-key update: the row moves to a key no statement has used."""
        old = model.live.choice(self.rng)
        new = model.fresh_key()
        before = model.rows[old]
        after = {**before, **model.key_dict(new)}
        by_name = {c.name: c for c in model.columns}
        changed = [(n, v) for n, v, o in zip(model.key_names, new, old, strict=True) if v != o]
        assignments = ", ".join(
            f"{_quote_ident(self.dialect, n)} = {self._literal(by_name[n], v)}" for n, v in changed
        )
        sql = f"UPDATE {model.sql_name} SET {assignments} WHERE {self._where(model, old)};"
        changes = (
            RowChange(model.spec.name, old, before, None),
            RowChange(model.spec.name, new, None, after),
        )
        return Statement("key_update", sql, model.spec.name, changes)


def _rolled_back(statement: Statement) -> Statement:
    return Statement(
        statement.kind, statement.sql, statement.table, statement.changes, rolled_back=True
    )
