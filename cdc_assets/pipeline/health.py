"""Measurements behind the asset checks: read the tables (Spark for data, pyiceberg for metadata)
and the topic, return plain values for ``cdc_assets.checks.rules`` to judge. No Dagster here."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from cdc_assets.checks.rules import DuplicateKeys, KafkaLag, NullCounts, WatermarkLag
from cdc_assets.pipeline.offsets import COUNTS_PROPERTY, OFFSETS_PROPERTY
from cdc_assets.pipeline.topic import observe_topic
from cdc_assets.pipeline.watermark import base_state
from cdc_assets.resources.kafka import KafkaResource
from cdc_assets.schema.drift import LiveColumn, layout_differences
from cdc_assets.schema.layers import TableLayout, all_layouts, base_layout, ledger_layout
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.checks import (
    AddedColumnProbe,
    ledger_image_filter,
    render_duplicate_key_count,
    render_duplicate_key_sample,
    render_null_counts,
    render_pending,
    render_source_count,
)
from cdc_assets.sql.ddl import table_identifier


def _load(iceberg_catalog: Any, layout: TableLayout) -> Any:
    return iceberg_catalog.load_table(f"{layout.namespace}.{layout.name}")


def _micros(value: int | None) -> datetime | None:
    return (
        None if value is None else datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=value)
    )


def added_columns(table: Any) -> dict[str, datetime]:
    """Columns of the current schema that the table was not created with, and when they were
    first written: the first snapshot whose schema has them (now, if none has yet)."""
    metadata = table.metadata
    schemas = sorted(metadata.schemas, key=lambda s: s.schema_id)
    initial = {f.field_id for f in schemas[0].fields}
    by_id = {s.schema_id: s for s in schemas}
    out: dict[str, datetime] = {}
    for f in table.schema().fields:
        if f.field_id in initial:
            continue
        stamps = [
            s.timestamp_ms
            for s in metadata.snapshots
            if s.schema_id is not None
            and s.schema_id in by_id
            and any(x.field_id == f.field_id for x in by_id[s.schema_id].fields)
        ]
        out[f.name] = (
            datetime.fromtimestamp(min(stamps) / 1000, UTC) if stamps else datetime.now(UTC)
        )
    return out


def base_null_counts(spark: Any, catalog: str, iceberg_catalog: Any, spec: TableSpec) -> NullCounts:
    """Null counts of every data column of base, with the rows changed since a column was added."""
    layout = base_layout(spec)
    columns = [c.sink_name for c in spec.columns]
    added = added_columns(_load(iceberg_catalog, layout))
    probes = [AddedColumnProbe(c, added[c]) for c in columns if c in added]
    sql = render_null_counts(table_identifier(catalog, layout), columns, added=probes)
    row = spark.sql(sql).collect()[0]
    since = {
        p.column: (p.added_at, int(row[f"since{j}"]), int(row[f"null_since{j}"]))
        for j, p in enumerate(probes)
    }
    return NullCounts(
        rows=int(row["rows"]),
        nulls={c: int(row[f"n{i}"]) for i, c in enumerate(columns)},
        since=since,
    )


def newest_ledger_partitions(
    iceberg_catalog: Any, spec: TableSpec, n: int
) -> list[tuple[str, int]]:
    """The ``n`` newest (dt, hr) partitions the ledger holds rows in."""
    table = _load(iceberg_catalog, ledger_layout(spec))
    if table.current_snapshot() is None:
        return []
    parts = table.inspect.partitions().to_pylist()
    found = {(p["partition"]["dt"], p["partition"]["hr"]) for p in parts if p["record_count"]}
    return sorted(found, reverse=True)[:n]


def ledger_null_counts(
    spark: Any, catalog: str, iceberg_catalog: Any, spec: TableSpec, partitions: int
) -> tuple[NullCounts, list[tuple[str, int]]]:
    """Nulls per data column among the row images (c/u/r) of the newest ledger partitions; a
    TOAST placeholder the source did not send is not counted as null."""
    hours = newest_ledger_partitions(iceberg_catalog, spec, partitions)
    columns = [c.sink_name for c in spec.columns]
    if not hours:
        return NullCounts(0, {c: 0 for c in columns}), []
    sql = render_null_counts(
        table_identifier(catalog, ledger_layout(spec)),
        columns,
        where=ledger_image_filter(hours),
        toast_aware=True,
    )
    row = spark.sql(sql).collect()[0]
    return NullCounts(
        int(row["rows"]), {c: int(row[f"n{i}"]) for i, c in enumerate(columns)}
    ), hours


def duplicate_keys(spark: Any, catalog: str, spec: TableSpec, sample: int = 5) -> DuplicateKeys:
    table = table_identifier(catalog, base_layout(spec))
    keys = [c.sink_name for c in spec.key_columns]
    row = spark.sql(render_duplicate_key_count(table, keys)).collect()[0]
    found = int(row["keys"])
    rows: list[tuple[str, int]] = []
    if found:
        rows = [
            (r["key"], int(r["n"]))
            for r in spark.sql(render_duplicate_key_sample(table, keys, sample)).collect()
        ]
    return DuplicateKeys(found, int(row["rows"]), rows)


def watermark_lag(spark: Any, catalog: str, iceberg_catalog: Any, spec: TableSpec) -> WatermarkLag:
    """Base's watermark against the ledger. Ledger partitions older than the upsert's lookback
    before the watermark are not read: the upsert would not read them either."""
    state = base_state(_load(iceberg_catalog, base_layout(spec)))
    min_dt = None
    if state.watermark_ts is not None:
        min_dt = (state.watermark_ts - timedelta(hours=spec.base.lookback_hours)).strftime(
            "%Y-%m-%d"
        )
    sql = render_pending(table_identifier(catalog, ledger_layout(spec)), state.watermark, min_dt)
    row = spark.sql(sql).collect()[0]
    return WatermarkLag(
        watermark_ts=state.watermark_ts,
        pending=int(row["pending"]),
        oldest_pending_ts=_micros(row["oldest_pending"]),
        newest_ledger_ts=_micros(row["newest"]),
    )


def kafka_lag(kafka: KafkaResource, iceberg_catalog: Any, spec: TableSpec) -> KafkaLag:
    obs = observe_topic(kafka, iceberg_catalog, spec)
    return KafkaLag(sum(obs.lag.values()), obs.retention_headroom_s, obs.retention_ms)


def dead_letter_counts(iceberg_catalog: Any, spec: TableSpec, commits: int) -> tuple[int, int, int]:
    """(records read, dead letters, ingest commits) over the newest ``commits`` ingest commits
    of the ledger's current lineage."""
    from pyiceberg.table.snapshots import ancestors_of

    table = _load(iceberg_catalog, ledger_layout(spec))
    current = table.current_snapshot()
    read = dead = seen = 0
    if current is None:
        return 0, 0, 0
    for snapshot in ancestors_of(current, table.metadata):
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        if OFFSETS_PROPERTY not in props or COUNTS_PROPERTY not in props:
            continue
        counts = json.loads(props[COUNTS_PROPERTY])
        read += int(counts.get("read", 0))
        dead += int(counts.get("dead", 0))
        seen += 1
        if seen >= commits:
            break
    return read, dead, seen


def _type_name(iceberg_type: Any) -> str:
    return str(iceberg_type)


def _partitioning(table: Any) -> str:
    schema = table.schema()
    parts = []
    for f in table.spec().fields:
        name = schema.find_field(f.source_id).name
        transform = str(f.transform)
        if transform == "identity":
            parts.append(name)
        elif transform.startswith("bucket["):
            parts.append(f"bucket({transform[7:-1]}, {name})")
        else:
            parts.append(f"{transform}({name})")
    return ", ".join(parts)


def iceberg_differences(iceberg_catalog: Any, spec: TableSpec) -> dict[str, list[str]]:
    """Per layer, how the live Iceberg table differs from what the spec renders."""
    out: dict[str, list[str]] = {}
    for layer, layout in all_layouts(spec).items():
        ident = f"{layout.namespace}.{layout.name}"
        if not iceberg_catalog.table_exists(ident):
            out[layer] = [f"table {ident} does not exist (run onboard_tables)"]
            continue
        table = iceberg_catalog.load_table(ident)
        live = [
            LiveColumn(f.name, _type_name(f.field_type), f.required) for f in table.schema().fields
        ]
        out[layer] = layout_differences(layout, live, _partitioning(table))
    return out


def source_columns(spark: Any, url: str, spec: TableSpec) -> list[str]:
    """Column names of the source table, read through JDBC without reading rows."""
    from cdc_assets.pipeline.bootstrap import read_jdbc

    return list(read_jdbc(spark, url, _source_table(spec)).limit(0).columns)


def _source_table(spec: TableSpec) -> str:
    schema = spec.source.schema_
    return f"{schema}.{spec.source.table}" if schema else spec.source.table


def source_row_count(spark: Any, url: str, spec: TableSpec) -> int:
    from cdc_assets.pipeline.bootstrap import read_jdbc

    return int(read_jdbc(spark, url, render_source_count(_source_table(spec))).collect()[0]["n"])


def base_row_count(spark: Any, catalog: str, spec: TableSpec) -> int:
    table = table_identifier(catalog, base_layout(spec))
    return int(spark.sql(f"SELECT count(*) AS n FROM {table}").collect()[0]["n"])
