"""The batch decode as one SQL statement (sql.batch_decode): its nesting and what it reads."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlglot
from sqlglot import exp

from cdc_assets.schema.wire import plan_fields
from cdc_assets.spec import load_spec
from cdc_assets.sql.batch_decode import JVM_READER, OLD_KEY_HEADER, SQL_READER, render_classified
from cdc_assets.sql.decode import ENVELOPE_FIELDS, ENVELOPE_FUNCTION, HEADER_FUNCTION

SPECS = Path(__file__).resolve().parents[2] / "table_specs"


def _render(
    name: str, *, headers: bool, schemas: dict[int, str] | None = None, reader: str = JVM_READER
) -> str:
    spec = load_spec(SPECS / f"{name}.yaml")
    return render_classified(
        "cdc_records_x",
        spec,
        plan_fields(spec),
        schemas or {},
        None,
        f"{spec.source.topic}-value",
        headers=headers,
        reader=reader,
    )


@pytest.mark.parametrize("name", ["users", "orders", "order_items"])
def test_one_statement_reads_the_records_once_and_ends_with_the_outcome(name: str) -> None:
    sql = _render(name, headers=True)
    tree = sqlglot.parse_one(sql, read="spark")
    assert isinstance(tree, exp.Select)
    outer = [e.alias_or_name for e in tree.expressions]
    assert outer == ["*", "_status", "_stage", "_reason"]
    tables = [t.name for t in tree.find_all(exp.Table)]
    assert tables == ["cdc_records_x"]
    # the innermost projection renames Kafka's columns and drops the rest
    innermost = [s for s in tree.find_all(exp.Select)][-1]
    assert [e.alias_or_name for e in innermost.expressions] == [
        "key_bin",
        "value_bin",
        "_kafka_partition",
        "_kafka_offset",
        "_kafka_ts",
        "_old_key",
    ]
    assert sql.count(f"{ENVELOPE_FUNCTION}(") == 1
    assert OLD_KEY_HEADER in sql
    assert HEADER_FUNCTION in sql


def test_records_without_headers_have_no_old_key() -> None:
    sql = _render("users", headers=False)
    assert HEADER_FUNCTION not in sql
    assert "CAST(NULL AS STRING) AS `_old_key`" in sql


@pytest.mark.parametrize("name", ["users", "orders", "order_items"])
def test_the_sql_reader_calls_none_of_the_projects_functions(name: str) -> None:
    """Without the jar: Spark's own functions only, every envelope column still there."""
    sql = _render(name, headers=True, reader=SQL_READER)
    assert ENVELOPE_FUNCTION not in sql
    assert HEADER_FUNCTION not in sql
    assert OLD_KEY_HEADER in sql
    tree = sqlglot.parse_one(sql, read="spark")
    named = {e.alias_or_name for s in tree.find_all(exp.Select) for e in s.expressions}
    want = {n for n, _ in ENVELOPE_FIELDS if n != "vals"} | {"img", "image", "_status"}
    assert want <= named
    # the value is parsed once, the image once
    assert sql.count("from_json(CAST(value_json AS STRING)") == 1
    assert sql.count("from_json(CASE WHEN op = 'd' THEN before ELSE after END") == 1


def test_an_unknown_reader_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown envelope reader 'java'"):
        _render("users", headers=True, reader="java")
