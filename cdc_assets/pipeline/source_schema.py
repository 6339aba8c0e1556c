"""A reachable source's table definition, read from its information_schema through Spark's JDBC
source (MariaDB/MySQL and PostgreSQL drivers ship in the Spark jar cache)."""

from __future__ import annotations

from typing import Any

from cdc_assets.pipeline.bootstrap import read_jdbc
from cdc_assets.spec.information_schema import columns_query, create_table, primary_key_query
from cdc_assets.spec.models import TableSpec


def _rows(spark: Any, url: str, query: str) -> list[dict[str, Any]]:
    return [r.asDict() for r in read_jdbc(spark, url, f"({query}) cdc_assets_q").collect()]


def source_create_table(spark: Any, url: str, spec: TableSpec) -> str | None:
    """The source table's CREATE TABLE as its database describes it now (None: no such table)."""
    columns = _rows(spark, url, columns_query(spec))
    if not columns:
        return None
    key = [str(r["name"]) for r in _rows(spark, url, primary_key_query(spec))]
    return create_table(spec, columns, key)
