"""Compare a source table with its base mirror row for row: the source read through Spark's JDBC
source, base through Spark, the difference computed by ``cdc_assets.quality.mirror_diff``.

Only the spec's columns are compared (a source may have columns the spec does not know yet), and
only live base rows exist (deletes remove rows; tombstones are a table of their own).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC
from decimal import Decimal
from typing import Any

from cdc_assets.pipeline.bootstrap.bootstrap import read_jdbc
from cdc_assets.pipeline.shared.protection import key_for
from cdc_assets.quality.mirror_diff import (
    MirrorDiff,
    calendar_date,
    clock_text,
    compared_plans,
    diff_mirror,
    instant_from_micros,
    instant_from_seconds,
    wall_clock,
)
from cdc_assets.schema.layers import base_layout
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.ddl import table_identifier
from cdc_assets.sql.mirror_read import (
    ReadColumn,
    render_base_select,
    render_source_select,
    source_dialect,
    source_table,
)

Row = dict[str, object]


def decode(column: ReadColumn, value: Any) -> object:
    """A value as read (JDBC or Spark) -> the comparison's Python value."""
    if value is None:
        return None
    how = column.decode
    if how == "wall_clock":
        return wall_clock(str(value))
    if how == "utc_wall_clock":
        return wall_clock(str(value)).replace(tzinfo=UTC)
    if how == "date":
        return calendar_date(str(value))
    if how == "clock":
        return clock_text(str(value))
    if how == "epoch_seconds":
        return instant_from_seconds(Decimal(str(value)))
    if how == "epoch_micros":
        return instant_from_micros(int(value))
    return _plain(value)


def _plain(value: Any) -> object:
    """A Spark value as plain Python: a struct (Row) as a dict, arrays and maps element by
    element, bytes as bytes."""
    if isinstance(value, bytearray):
        return bytes(value)
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _decoded(rows: Iterable[Any], columns: Sequence[ReadColumn]) -> list[Row]:
    return [{c.column: decode(c, row[c.alias]) for c in columns} for row in rows]


def read_source_rows(spark: Any, url: str, spec: TableSpec) -> list[Row]:
    """Every row of the source table: the spec's columns, by source name."""
    dialect = source_dialect(url)
    select, columns = render_source_select(
        compared_plans(spec), source_table(dialect, spec.source.schema_, spec.source.table), dialect
    )
    return _decoded(read_jdbc(spark, url, select).collect(), columns)


def read_base_rows(spark: Any, catalog: str, spec: TableSpec) -> list[Row]:
    """Every row of base: the spec's columns, by sink name (of a shard's view, that shard's
    rows)."""
    shard = (
        (spec.shard_column, spec.shard.shard_name)
        if spec.shard_column and spec.shard is not None
        else None
    )
    select, columns = render_base_select(
        compared_plans(spec), table_identifier(catalog, base_layout(spec)), shard
    )
    return _decoded(spark.sql(select).collect(), columns)


def compare_source(
    spark: Any, catalog: str, spec: TableSpec, url: str, *, examples: int = 5
) -> MirrorDiff:
    """The difference between the source table at ``url`` (a JDBC URL) and base, now.

    The two reads are not one snapshot: compare when the source is quiet and the pipeline has
    caught up (a busy source is ahead by the changes in flight).
    """
    source = read_source_rows(spark, url, spec)
    base = read_base_rows(spark, catalog, spec)
    return diff_mirror(spec, source, base, examples=examples, protection_key=key_for(spec))


def source_url_for(spec: TableSpec, urls: Iterable[tuple[str, str, str]]) -> str | None:
    """The URL of the spec's database among ``(database, server, url)`` entries such as the local
    stack's ``sources.jdbc_urls(settings)`` (server ``mariadb`` or ``postgres``)."""
    server = "postgres" if spec.source.connector == "postgresql" else "mariadb"
    return next(
        (url for database, s, url in urls if database == spec.source.database and s == server),
        None,
    )
