"""Spark SQL behind the data-quality checks: null counts, duplicate keys, pending ledger rows.

Each query scans its table once and returns one row (or a small sample) so a check stays cheap
next to the pipeline itself. Result columns are positional aliases (``n0``, ``n1``, ...) because
column names of the source may not be valid aliases.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from cdc_assets.sql.ddl import literal, quote

# Ledger rows whose data columns hold a row image worth counting: a delete keeps its before image,
# which may hold only the key (PostgreSQL's default replica identity), and a truncate holds none.
IMAGE_OPS = ("c", "u", "r")


@dataclass(frozen=True)
class AddedColumnProbe:
    """Count, for a column added after onboarding, the rows changed since it was added."""

    column: str
    added_at: datetime


def _timestamp(ts: datetime) -> str:
    return f"TIMESTAMP {literal(ts.isoformat())}"


def render_null_counts(
    table: str,
    columns: Sequence[str],
    *,
    where: str | None = None,
    toast_aware: bool = False,
    added: Sequence[AddedColumnProbe] = (),
) -> str:
    """One row: ``rows``, then ``n<i>`` = nulls of ``columns[i]``, then for each added column
    ``since<j>`` = rows whose source change is at or after it was added and ``null_since<j>``.

    ``toast_aware``: a null that the source did not send (listed in ``_unavailable``) is not a
    null value, the stored value stands for it.
    """
    parts = ["count(*) AS rows"]
    for i, col in enumerate(columns):
        cond = f"{quote(col)} IS NULL"
        if toast_aware:
            cond += (
                f" AND NOT array_contains(split(coalesce(_unavailable, ''), ','), {literal(col)})"
            )
        parts.append(f"count_if({cond}) AS n{i}")
    for j, probe in enumerate(added):
        since = f"_source_ts >= {_timestamp(probe.added_at)}"
        parts.append(f"count_if({since}) AS since{j}")
        parts.append(f"count_if({since} AND {quote(probe.column)} IS NULL) AS null_since{j}")
    sql = f"SELECT {', '.join(parts)} FROM {table}"
    return sql + (f" WHERE {where}" if where else "")


def ledger_image_filter(partitions: Sequence[tuple[str, int]]) -> str:
    """Rows with a row image in the given (dt, hr) ledger partitions."""
    ops = ", ".join(literal(op) for op in IMAGE_OPS)
    hours = " OR ".join(f"(dt = {literal(dt)} AND hr = {hr})" for dt, hr in partitions)
    return f"_op IN ({ops}) AND ({hours or 'false'})"


def render_duplicate_key_count(table: str, keys: Sequence[str]) -> str:
    """One row: ``keys`` = distinct keys held by more than one row, ``rows`` = rows they hold."""
    cols = ", ".join(quote(k) for k in keys)
    return (
        "SELECT count(*) AS keys, coalesce(sum(n), 0) AS rows FROM "
        f"(SELECT count(*) AS n FROM {table} GROUP BY {cols} HAVING count(*) > 1)"
    )


def render_duplicate_key_sample(table: str, keys: Sequence[str], limit: int = 5) -> str:
    """Up to ``limit`` duplicated keys (as text) with their row counts, most copies first."""
    cols = ", ".join(quote(k) for k in keys)
    text = "concat_ws(', ', " + ", ".join(f"CAST({quote(k)} AS STRING)" for k in keys) + ")"
    return (
        f"SELECT {text} AS key, count(*) AS n FROM {table} GROUP BY {cols} "
        f"HAVING count(*) > 1 ORDER BY n DESC, key LIMIT {limit}"
    )


def pending_filter(watermark: Mapping[int, int]) -> str:
    """Ledger rows at or beyond base's watermark: not applied to base yet."""
    applied = [
        f"(_kafka_partition = {p} AND _kafka_offset < {o})" for p, o in sorted(watermark.items())
    ]
    return f"NOT ({' OR '.join(applied)})" if applied else "true"


def render_pending(ledger: str, watermark: Mapping[int, int], min_dt: str | None = None) -> str:
    """One row: pending ledger rows and the oldest and newest Kafka timestamps among them
    (microseconds since the epoch), plus the newest Kafka timestamp of the whole ledger."""
    cond = pending_filter(watermark)
    where = f" WHERE dt >= {literal(min_dt)}" if min_dt else ""
    return (
        f"SELECT count_if({cond}) AS pending, "
        f"unix_micros(min(CASE WHEN {cond} THEN _kafka_ts END)) AS oldest_pending, "
        f"unix_micros(max(CASE WHEN {cond} THEN _kafka_ts END)) AS newest_pending, "
        f"unix_micros(max(_kafka_ts)) AS newest FROM {ledger}{where}"
    )


def render_source_count(table: str) -> str:
    """A JDBC subquery counting the source table's rows (``table`` as the source spells it)."""
    return f"(SELECT COUNT(*) AS n FROM {table}) cdc_assets_count"
