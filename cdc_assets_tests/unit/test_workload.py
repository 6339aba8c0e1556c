"""The SQL workload generator: deterministic per seed, the mix of statements it promises, values
that fit their columns, SQL that parses with the literals it meant, and a model of the tables
that replaying its own changes reproduces."""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
import sqlglot
from sqlglot import exp

from cdc_assets.spec import load_specs
from cdc_assets.spec.models import TableSpec
from cdc_assets_dev.demo.workload import (
    CHANGE_KINDS,
    Dialect,
    Key,
    Row,
    Statement,
    WorkloadGenerator,
    script,
    string_literal,
)
from cdc_assets_tests.conftest import PROJECT_ROOT

SPECS = {s.name: s for s in load_specs(PROJECT_ROOT / "table_specs")}
MARIADB = [SPECS["users"], SPECS["order_items"]]
POSTGRES = [SPECS["orders"]]
KEY_BASE = 5_000_000_000
SQLGLOT = {"mariadb": "mysql", "postgres": "postgres"}


def generated(specs: list[TableSpec], n: int, seed: int = 3) -> tuple[WorkloadGenerator, list]:
    generator = WorkloadGenerator(specs, seed=seed, key_base=KEY_BASE)
    return generator, generator.statements(n)


@pytest.fixture(scope="module")
def mariadb() -> tuple[WorkloadGenerator, list[Statement]]:
    return generated(MARIADB, 1_500)


@pytest.fixture(scope="module")
def postgres() -> tuple[WorkloadGenerator, list[Statement]]:
    return generated(POSTGRES, 1_500)


def test_same_seed_same_statements_and_calls_continue() -> None:
    first = WorkloadGenerator(MARIADB, seed=9, key_base=KEY_BASE)
    second = WorkloadGenerator(MARIADB, seed=9, key_base=KEY_BASE)
    for n in (50, 80):  # a second call continues from the first call's state, the same way
        assert script(first.statements(n)) == script(second.statements(n))
    assert first.rows("users") == second.rows("users")
    other = WorkloadGenerator(MARIADB, seed=10, key_base=KEY_BASE)
    assert script(other.statements(50)) != script(
        WorkloadGenerator(MARIADB, seed=9, key_base=KEY_BASE).statements(50)
    )


def test_n_change_statements_per_table_and_every_kind(
    mariadb: tuple[WorkloadGenerator, list[Statement]],
    postgres: tuple[WorkloadGenerator, list[Statement]],
) -> None:
    for _, statements in (mariadb, postgres):
        per_table = Counter(s.table for s in statements if s.kind in CHANGE_KINDS)
        assert set(per_table.values()) == {1_500}
        kinds = Counter(s.kind for s in statements)
        for kind in (*CHANGE_KINDS, "begin", "commit", "rollback", "savepoint", "rollback_to"):
            assert kinds[kind] >= 5, (kind, kinds)
        assert kinds["time_zone"] >= 10
        # Updates dominate, and the same keys are updated again and again.
        assert kinds["update"] > kinds["insert"]
        updated = Counter(
            c.key for s in statements if s.kind == "update" for c in s.changes if c.before
        )
        assert updated.most_common(1)[0][1] >= 20
        # Deleted keys come back.
        reinserted = {c.key for s in statements if s.kind == "reinsert" for c in s.changes}
        deleted = {
            c.key for s in statements if s.kind == "delete" for c in s.changes if not c.after
        }
        assert len(reinserted & deleted) >= 50


def test_transactions_span_tables_and_roll_back(
    mariadb: tuple[WorkloadGenerator, list[Statement]],
) -> None:
    _, statements = mariadb
    spanning = rolled_back = 0
    tables: set[str] = set()
    inside = False
    for statement in statements:
        if statement.kind == "begin":
            inside, tables = True, set()
        elif statement.kind in ("commit", "rollback"):
            spanning += len(tables) > 1
            inside = False
        elif statement.table is not None:
            if inside:
                tables.add(statement.table)
            else:
                assert not statement.rolled_back, "outside a transaction nothing is undone"
            rolled_back += statement.rolled_back
    assert spanning >= 20
    assert rolled_back >= 20


def replay(generator: WorkloadGenerator, statements: list[Statement]) -> dict[str, dict[Key, Row]]:
    """Apply every change that was not rolled back, checking each before image."""
    tables: dict[str, dict[Key, Row]] = {name: {} for name in generator.tables}
    for statement in statements:
        if statement.rolled_back:
            continue
        for change in statement.changes:
            rows = tables[change.table]
            assert rows.get(change.key) == change.before, (statement.sql, change)
            if change.after is None:
                del rows[change.key]
            else:
                key_names = generator.tables[change.table].key_names
                assert tuple(change.after[k] for k in key_names) == change.key
                rows[change.key] = change.after
    return tables


@pytest.mark.parametrize("which", ["mariadb", "postgres"])
def test_the_model_is_what_its_changes_make(which: str, request: pytest.FixtureRequest) -> None:
    generator, statements = request.getfixturevalue(which)
    replayed = replay(generator, statements)
    for name, rows in replayed.items():
        model = generator.rows(name)
        assert model == [rows[k] for k in sorted(rows, key=repr)]
        assert len(model) >= 200
        key_names = generator.tables[name].key_names
        assert all(int(row[key_names[0]]) >= KEY_BASE for row in model)  # type: ignore[call-overload]


_RANGES = {"BIGINT": 2**63, "INT": 2**31, "SMALLINT": 2**15}


@pytest.mark.parametrize("which", ["mariadb", "postgres"])
def test_values_fit_their_columns(which: str, request: pytest.FixtureRequest) -> None:
    generator, statements = request.getfixturevalue(which)
    seen: Counter[str] = Counter()
    for statement in statements:
        for change in statement.changes:
            if change.after is None:
                continue
            spec = generator.tables[change.table].spec
            for column in spec.columns:
                value = change.after[column.name]
                source = column.source_type(spec.source.connector)
                if value is None:
                    assert column.nullable, (column.name, statement.sql)
                    seen["null"] += 1
                    continue
                if source.kind in _RANGES:
                    assert -_RANGES[source.kind] <= int(value) < _RANGES[source.kind]  # type: ignore[call-overload]
                elif source.kind == "UINT":
                    assert 0 <= int(value) < 2**32  # type: ignore[call-overload]
                    seen["uint max"] += value == 2**32 - 1
                elif source.kind == "DECIMAL":
                    assert isinstance(value, Decimal)
                    scale, precision = source.scale or 0, source.precision or 0
                    assert value == value.quantize(Decimal(1).scaleb(-scale))
                    assert abs(value) < Decimal(10) ** (precision - scale)
                    largest = Decimal(10) ** (precision - scale) - Decimal(1).scaleb(-scale)
                    seen["decimal bound"] += abs(value) == largest
                    seen["negative decimal"] += value < 0
                elif isinstance(value, str) and source.length is not None:
                    assert len(value) <= source.length, (column.name, value)
                    if source.kind == "CHAR" and which == "postgres":
                        assert len(value) == source.length  # PostgreSQL pads CHAR(n)
                if isinstance(value, str):
                    seen["4-byte"] += any(ord(ch) > 0xFFFF for ch in value)
                    seen["quote or backslash"] += "'" in value or "\\" in value
                if isinstance(value, datetime):
                    zoned = value.tzinfo is not None
                    assert zoned == (source.kind == "TIMESTAMPTZ"), column.name
                    assert not zoned or value.utcoffset() == UTC.utcoffset(None)
                    seen["before 1970"] += value.replace(tzinfo=None) < datetime(1970, 1, 1)
                if isinstance(value, date) and not isinstance(value, datetime):
                    seen["before 1970"] += value < date(1970, 1, 1)
    for what in ("null", "decimal bound", "negative decimal", "4-byte", "quote or backslash"):
        assert seen[what] >= 10, (what, seen)
    assert seen["before 1970"] >= 5, seen
    if which == "mariadb":
        assert seen["uint max"] >= 1, seen


def test_time_zones_vary(
    mariadb: tuple[WorkloadGenerator, list[Statement]],
    postgres: tuple[WorkloadGenerator, list[Statement]],
) -> None:
    maria_zones = {s.sql for s in mariadb[1] if s.kind == "time_zone"}
    assert len(maria_zones) >= 5
    assert "SET time_zone = '+05:45';" in maria_zones
    pg_sql = script(postgres[1])
    assert "SET TIME ZONE INTERVAL '-03:30' HOUR TO MINUTE;" in pg_sql
    # timestamptz literals with an offset of their own, as well as without one
    assert re.search(r"'\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?[+-]\d\d:\d\d'", pg_sql)


@pytest.mark.parametrize(
    "text",
    ["plain", "it's", "back\\slash", "\\'", "a\\\\'b", "new\nline\r\n", "😀 𠀋 👩\u200d💻", "''\\"],
)
@pytest.mark.parametrize("dialect", ["mariadb", "postgres"])
def test_string_literals_read_back_as_written(dialect: Dialect, text: str) -> None:
    sql = f"SELECT {string_literal(dialect, text)}"
    literal = sqlglot.parse_one(sql, read=SQLGLOT[dialect]).find(exp.Literal)
    assert literal is not None
    assert literal.this == text
    if dialect == "mariadb":
        # The mariadb client drops a carriage return at the end of a line: none in its scripts.
        assert "\r" not in sql
        assert "\n" not in sql


@pytest.mark.parametrize("which", ["mariadb", "postgres"])
def test_statements_parse(which: str, request: pytest.FixtureRequest) -> None:
    generator, statements = request.getfixturevalue(which)
    for statement in statements[:400]:
        parsed = sqlglot.parse_one(statement.sql, read=SQLGLOT[generator.dialect])
        assert parsed is not None, statement.sql
        if statement.kind == "insert":
            (change,) = statement.changes
            # CHAR values come back padded (PostgreSQL) or stripped (MariaDB): compare those
            # without trailing blanks.
            strings = {
                lit.this.rstrip(" ") for lit in parsed.find_all(exp.Literal) if lit.is_string
            }
            assert change.after is not None
            for value in change.after.values():
                if isinstance(value, str):
                    assert value.rstrip(" ") in strings, (value, strings)
