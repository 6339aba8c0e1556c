"""The batch decode as one SQL statement (sql.batch_decode): its nesting and what it reads."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlglot
from sqlglot import exp

from cdc_assets.schema.wire import plan_fields
from cdc_assets.spec import load_spec
from cdc_assets.sql.batch_decode import OLD_KEY_HEADER, render_classified
from cdc_assets.sql.decode import ENVELOPE_FUNCTION, HEADER_FUNCTION

SPECS = Path(__file__).resolve().parents[2] / "table_specs"


def _render(name: str, *, headers: bool, schemas: dict[int, str] | None = None) -> str:
    spec = load_spec(SPECS / f"{name}.yaml")
    return render_classified(
        "cdc_records_x",
        spec,
        plan_fields(spec),
        schemas or {},
        None,
        f"{spec.source.topic}-value",
        headers=headers,
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
