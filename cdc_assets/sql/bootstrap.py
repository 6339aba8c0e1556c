"""Spark SQL that turns a source dump (source column names, source values) into base rows.

A dump holds what the database holds, so the spec's sink mapping applies as it does to change
events: renames, transforms (epoch numbers to timestamps), type overrides. Values convert with
``try_cast`` and the checks query counts every value that did not convert, so a bad dump fails
with the column and the count instead of loading NULLs.
"""

from __future__ import annotations

from collections.abc import Mapping

from cdc_assets.schema.position import Position
from cdc_assets.schema.wire import FieldPlan, plan_fields
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.ddl import literal, quote, spark_type

_TRANSFORMS = {
    "epoch_seconds_to_timestamp": "timestamp_seconds({})",
    "epoch_millis_to_timestamp": "timestamp_millis({})",
    "epoch_micros_to_timestamp": "timestamp_micros({})",
    "epoch_days_to_date": "date_from_unix_date(CAST({} AS INT))",
}


def resolve_columns(spec: TableSpec, dump_columns: list[str]) -> dict[str, str]:
    """Spec column name -> dump column name (case-insensitive); missing columns raise."""
    by_lower = {c.lower(): c for c in dump_columns}
    resolved: dict[str, str] = {}
    missing = []
    for column in spec.columns:
        found = by_lower.get(column.name.lower())
        if found is None:
            missing.append(column.name)
        else:
            resolved[column.name] = found
    if missing:
        raise ValueError(
            f"the dump has no column(s) {missing} of spec {spec.name!r}; "
            f"it has {sorted(dump_columns)}"
        )
    return resolved


def dump_value(plan: FieldPlan, source_column: str) -> str:
    """The sink value of one dump column."""
    ref = quote(source_column)
    if plan.transform is not None:
        return _TRANSFORMS[plan.transform].format(f"try_cast({ref} AS BIGINT)")
    natural = f"try_cast({ref} AS {spark_type(plan.natural)})"
    if plan.sink == plan.natural:
        return natural
    return f"try_cast({natural} AS {spark_type(plan.sink)})"


def render_bootstrap_select(
    spec: TableSpec, view: str, columns: Mapping[str, str], position: Position
) -> str:
    """SELECT of base rows from the dump view, stamped with the dump's source position (and,
    for one shard of a sharded table, with the shard's name)."""
    values = [
        f"{dump_value(p, columns[p.name])} AS {quote(p.sink_name)}" for p in plan_fields(spec)
    ]
    if spec.shard_column and spec.shard is not None:
        values.insert(0, f"{literal(spec.shard.shard_name)} AS {quote(spec.shard_column)}")
    values += [
        "'r' AS _op",
        "CAST(NULL AS TIMESTAMP) AS _source_ts",
        f"CAST({position.major} AS BIGINT) AS _seq_major",
        f"CAST({position.minor} AS BIGINT) AS _seq_minor",
        f"CAST({position.row} AS BIGINT) AS _seq_row",
        "-1 AS _kafka_partition",
        "CAST(-1 AS BIGINT) AS _kafka_offset",
    ]
    return f"SELECT {', '.join(values)} FROM {quote(view)}"


def render_bootstrap_checks(spec: TableSpec, view: str, columns: Mapping[str, str]) -> str:
    """One row: ``rows``, ``null_keys``, ``duplicate_keys`` and ``bad__<column>`` counts."""
    plans = plan_fields(spec)
    keys = [quote(columns[k]) for k in spec.primary_key]
    parts = [
        "count(*) AS rows",
        f"count_if({' OR '.join(f'{k} IS NULL' for k in keys)}) AS null_keys",
        f"count(*) - count(DISTINCT {', '.join(keys)}) AS duplicate_keys",
    ]
    for p in plans:
        source = quote(columns[p.name])
        parts.append(
            f"count_if({source} IS NOT NULL AND {dump_value(p, columns[p.name])} IS NULL) "
            f"AS {quote('bad__' + p.name)}"
        )
    return f"SELECT {', '.join(parts)} FROM {quote(view)}"
