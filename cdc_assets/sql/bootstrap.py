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
from cdc_assets.sql.decode import (
    EPOCH_RANGES,
    document_lost,
    epoch_to_sink,
    parse_document,
    split_set,
)
from cdc_assets.sql.mirror_read import SourceDialect, quote_source
from cdc_assets.sql.protect import ProtectionKey, document_sql, protect_sql


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
    """The sink value of one dump column: as the ledger decodes a change's value (epochs in
    years 1-9999 through their transform, JSON documents parsed into a declared nested type, a
    SET split into a list), from what the dump holds instead of Debezium's encoding."""
    ref = quote(source_column)
    if plan.transform in EPOCH_RANGES:
        return epoch_to_sink(plan.transform, f"try_cast({ref} AS BIGINT)")
    if plan.parses_document:
        return parse_document(f"CAST({ref} AS STRING)", plan.sink)
    if plan.splits_set:
        return split_set(f"CAST({ref} AS STRING)")
    natural = f"try_cast({ref} AS {spark_type(plan.natural)})"
    if plan.sink == plan.natural:
        return natural
    return f"try_cast({natural} AS {spark_type(plan.sink)})"


def _bad_value(plan: FieldPlan, source_column: str) -> str:
    """True for a dump value that does not become a sink value: NULL where the dump has one,
    or a document that does not parse into its declared type (``from_json`` leaves such
    values null without saying so)."""
    ref = quote(source_column)
    value = dump_value(plan, source_column)
    if plan.parses_document:
        text = f"CAST({ref} AS STRING)"
        return f"({ref} IS NOT NULL AND {document_lost(text, value, plan.sink)})"
    return f"({ref} IS NOT NULL AND {value} IS NULL)"


def _dump_expression(plan: FieldPlan, name: str, dialect: SourceDialect) -> str | None:
    """How the dump reads one column where Spark's JDBC source would not read it as the
    database holds it; None: as it is.

    Dates and date-times are read as text in ISO form and cast by Spark: the JDBC drivers build
    ``java.sql`` values in the Julian calendar before 1582-10-15, which shifts such values by
    days (and moves the ten days of October 1582 that Julian Rome skipped), where the databases
    and Spark count in the proleptic Gregorian calendar. A PostgreSQL year before 1 (BC) or an
    infinity stays in PostgreSQL's own text, which does not cast: the checks query reports it as
    a bad value instead of loading a year of the common era."""
    natural, kind = plan.natural.name, plan.source.kind
    if dialect == "mariadb":
        if kind in ("CHAR", "NCHAR", "SET", "ENUM"):
            return f"CAST({name} AS CHAR)"
        if natural == "timestamp":
            return f"DATE_FORMAT({name}, '%Y-%m-%d %H:%i:%s.%f')"
        if natural == "date":
            return f"DATE_FORMAT({name}, '%Y-%m-%d')"
        return None
    if dialect == "postgres":
        if natural == "timestamptz":
            utc = f"({name} AT TIME ZONE 'UTC')"
            return _common_era(utc, f"to_char({utc}, 'YYYY-MM-DD HH24:MI:SS.US') || 'Z'", name)
        if natural == "timestamp":
            return _common_era(name, f"to_char({name}, 'YYYY-MM-DD HH24:MI:SS.US')", name)
        if natural == "date":
            return _common_era(name, f"to_char({name}, 'YYYY-MM-DD')", name)
    return None


def _common_era(value: str, text: str, name: str) -> str:
    """``text`` for a finite PostgreSQL value of the common era; any other (BC, infinity) as
    PostgreSQL writes it, which Spark does not cast: a bad value of the dump."""
    return (
        f"CASE WHEN isfinite({value}) AND EXTRACT(YEAR FROM {value}) >= 1 THEN {text} "
        f"ELSE CAST({name} AS TEXT) END"
    )


def render_dump_query(plans: list[FieldPlan], table: str, dialect: SourceDialect) -> str:
    """What the JDBC dump reads from ``table``: the table itself, or a subquery that reads some
    columns as the database holds them (``_dump_expression``): MariaDB's CHAR, SET and ENUM
    (Spark's JDBC source would pad them like CHAR(n), to their longest value for SET and ENUM),
    and dates and date-times of both databases as ISO text."""
    parts, changed = [], False
    for plan in plans:
        name = quote_source(dialect, plan.name)
        expression = _dump_expression(plan, name, dialect)
        changed = changed or expression is not None
        parts.append(name if expression is None else f"{expression} AS {name}")
    if not changed:
        return table
    return f"(SELECT {', '.join(parts)} FROM {table}) cdc_assets_dump"


def render_bootstrap_select(
    spec: TableSpec,
    view: str,
    columns: Mapping[str, str],
    position: Position,
    key: ProtectionKey | None = None,
) -> str:
    """SELECT of base rows from the dump view, stamped with the dump's source position (and,
    for one shard of a sharded table, with the shard's name). Protected columns are protected
    as the ingest protects them (`sql.protect`, with ``key``)."""
    values = []
    for p in plan_fields(spec):
        value = dump_value(p, columns[p.name])
        if p.protect is not None:
            value = protect_sql(p.protect, value, key)
        elif p.protect_paths and p.parses_document:
            # Protected as text, then read into the declared type (as the ingest does).
            text = document_sql(f"CAST({quote(columns[p.name])} AS STRING)", p.protect_paths, key)
            value = parse_document(text, p.sink)
        elif p.protect_paths:
            value = document_sql(value, p.protect_paths, key)
        values.append(f"{value} AS {quote(p.sink_name)}")
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
        parts.append(f"count_if({_bad_value(p, columns[p.name])}) AS {quote('bad__' + p.name)}")
    return f"SELECT {', '.join(parts)} FROM {quote(view)}"
