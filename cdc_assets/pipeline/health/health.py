"""Measurements behind the asset checks: read the tables (Spark for data, pyiceberg for metadata)
and the topic, return plain values for ``cdc_assets.quality.rules`` to judge. No Dagster here."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from cdc_assets.pipeline.bootstrap.source_compare import compare_source
from cdc_assets.pipeline.shared.iceberg_types import sink_text
from cdc_assets.pipeline.shared.offsets import (
    COUNTS_PROPERTY,
    OFFSETS_PROPERTY,
    START_OFFSETS_PROPERTY,
    UNKNOWN_FIELDS_PROPERTY,
    decode_offsets,
)
from cdc_assets.pipeline.shared.topic import observe_topic
from cdc_assets.pipeline.shared.watermark import base_state, readable_snapshot, shard_of
from cdc_assets.quality.mirror_diff import MirrorDiff
from cdc_assets.quality.rules import (
    DuplicateKeys,
    ImageMismatches,
    KafkaLag,
    NullCounts,
    WatermarkLag,
)
from cdc_assets.resources.kafka_client import KafkaClient
from cdc_assets.schema.drift import LiveColumn, layout_differences
from cdc_assets.schema.layers import (
    TableLayout,
    all_layouts,
    base_layout,
    dead_letter_layout,
    ledger_layout,
)
from cdc_assets.schema.recover import refused_column
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
from cdc_assets.sql.ddl import literal, quote, table_identifier


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


def image_mismatches(
    spark: Any,
    catalog: str,
    iceberg_catalog: Any,
    spec: TableSpec,
    *,
    examples: int = 5,
    last_upsert_only: bool = False,
) -> ImageMismatches:
    """Compare the typed values of the ledger with its row images (decoded as the ingest decodes
    them under ``spec``), and base with the ledger changes it holds, over the ledger partitions
    of the upsert's lookback before now; with ``last_upsert_only``, over the ledger rows base's
    newest upsert applied (the check right after an upsert: its cost follows the change set)."""
    from cdc_assets.schema.recover import reencoded_positions, value_columns
    from cdc_assets.schema.retype import retired_conversions
    from cdc_assets.sql.backfill import (
        after_position,
        backfill_min_dt,
        nested_columns,
        render_image_mismatch_counts,
        render_image_mismatch_examples,
        render_ledger_values,
        render_position_count,
        render_position_examples,
    )

    columns = value_columns(spec)
    ledger_l = ledger_layout(spec)
    snapshot = readable_snapshot(_load(iceberg_catalog, ledger_l))
    since = backfill_min_dt(datetime.now(UTC), spec.base.lookback_hours)
    if snapshot is None or not columns:
        return ImageMismatches(0, {}, since=since)
    offsets = None
    if last_upsert_only:
        from cdc_assets.pipeline.shared.watermark import last_applied_offsets

        offsets = last_applied_offsets(_load(iceberg_catalog, base_layout(spec)), shard_of(spec))
    ledger = table_identifier(catalog, ledger_l)
    # A column whose encoding changed: its older images are compared as they were written.
    positions = reencoded_positions(_load(iceberg_catalog, ledger_l).properties)
    after_by_column = {
        c: cond
        for c, position in positions.items()
        if c in columns and (cond := after_position(spec, position)) is not None
    }
    conversions = retired_conversions(spec)
    # A retyped column's rows from before the change hold the old column's value converted,
    # and their images the old encoding: they are compared as the evolution's backfill filled
    # them, and the rows written since are compared with their images.
    values = render_ledger_values(
        spec,
        ledger,
        snapshot,
        columns,
        min_dt=since,
        offsets=offsets,
        reencoded=[c for c in after_by_column if c not in conversions],
        converted=conversions,
        after_by_column=after_by_column,
    )
    nested = nested_columns(spec)
    counts = spark.sql(render_image_mismatch_counts(values, columns, nested)).collect()[0]
    compared = int(spark.sql(f"SELECT count(*) AS n FROM ({values}) AS v").collect()[0]["n"])
    per_column = {c: int(counts[c]) for c in columns}
    ledger_examples: list[str] = []
    if any(per_column.values()):
        ledger_examples = [
            f"ledger p{r['_kafka_partition']}@{r['_kafka_offset']}: {r['mismatch']}"
            for r in spark.sql(
                render_image_mismatch_examples(values, columns, examples, nested)
            ).collect()
        ]
    base = table_identifier(catalog, base_layout(spec))
    base_count = int(
        spark.sql(
            render_position_count(
                spec, base, ledger, snapshot, columns, min_dt=since, offsets=offsets
            )
        ).collect()[0]["n"]
    )
    base_examples: list[str] = []
    if base_count:
        sql = render_position_examples(
            spec, base, ledger, snapshot, columns, min_dt=since, limit=examples, offsets=offsets
        )
        base_examples = [f"base {r['key']}: {r['mismatch']}" for r in spark.sql(sql).collect()]
    return ImageMismatches(
        compared,
        per_column,
        ledger_examples,
        base_count,
        base_examples,
        since=since,
        last_upsert_only=offsets is not None,
    )


def duplicate_keys(spark: Any, catalog: str, spec: TableSpec, sample: int = 5) -> DuplicateKeys:
    table = table_identifier(catalog, base_layout(spec))
    keys = spec.key_sink_names
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
    state = base_state(_load(iceberg_catalog, base_layout(spec)), shard_of(spec))
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


def kafka_lag(kafka: KafkaClient, iceberg_catalog: Any, spec: TableSpec) -> KafkaLag:
    obs = observe_topic(kafka, iceberg_catalog, spec)
    return KafkaLag(sum(obs.lag.values()), obs.retention_headroom_s, obs.retention_ms)


def dead_letter_counts(
    iceberg_catalog: Any, spec: TableSpec, commits: int
) -> tuple[int, int, int, int]:
    """(records read, dead letters at ingest, ingest commits, dead letters still waiting) over
    the newest ``commits`` ingest commits of the ledger's current lineage. Still waiting: those
    of the commits' offset ranges the dead-letter table holds now (a redrive took the others)."""
    from pyiceberg import expressions as ex
    from pyiceberg.table.snapshots import ancestors_of

    table = _load(iceberg_catalog, ledger_layout(spec))
    current = table.current_snapshot()
    read = dead = seen = 0
    if current is None:
        return 0, 0, 0, 0
    ranges: list[Any] = []
    eq: Any = ex.EqualTo
    ge: Any = ex.GreaterThanOrEqual
    lt: Any = ex.LessThan
    for snapshot in ancestors_of(current, table.metadata):
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        if OFFSETS_PROPERTY not in props or COUNTS_PROPERTY not in props:
            continue
        counts = json.loads(props[COUNTS_PROPERTY])
        read += int(counts.get("read", 0))
        dead += int(counts.get("dead", 0))
        if int(counts.get("dead", 0)):
            start = decode_offsets(props.get(START_OFFSETS_PROPERTY, "{}"))
            for p, o in decode_offsets(props[OFFSETS_PROPERTY]).items():
                ranges.append(
                    ex.And(eq("partition", p), ge("offset", start.get(p, 0)), lt("offset", o))
                )
        seen += 1
        if seen >= commits:
            break
    waiting = 0
    if ranges:
        dlt = _load(iceberg_catalog, dead_letter_layout(spec))
        row_filter = ranges[0] if len(ranges) == 1 else ex.Or(*ranges)
        waiting = dlt.scan(row_filter=row_filter, selected_fields=("offset",)).to_arrow().num_rows
    return read, dead, seen, waiting


# Ledger commits read back for the fields the stream carried (newest first).
UNKNOWN_FIELDS_COMMITS = 1000


def unknown_fields(iceberg_catalog: Any, spec: TableSpec) -> dict[str, tuple[int, int]]:
    """Per field the ledger's row images carried and the spec that decoded them lacked, the
    (first, last) commit times in epoch milliseconds, from the summaries of the newest ledger
    commits (no data is read)."""
    from pyiceberg.exceptions import NoSuchTableError
    from pyiceberg.table.snapshots import ancestors_of

    try:
        table = _load(iceberg_catalog, ledger_layout(spec))
    except NoSuchTableError:
        return {}
    current = table.current_snapshot()
    seen: dict[str, tuple[int, int]] = {}
    if current is None:
        return seen
    for n, snapshot in enumerate(ancestors_of(current, table.metadata)):
        if n >= UNKNOWN_FIELDS_COMMITS:
            break
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        if UNKNOWN_FIELDS_PROPERTY not in props:
            continue
        at = int(snapshot.timestamp_ms)
        for name in json.loads(props[UNKNOWN_FIELDS_PROPERTY]):
            first, last = seen.get(name, (at, at))
            seen[name] = (min(first, at), max(last, at))
    return seen


def refused_values(iceberg_catalog: Any, spec: TableSpec) -> dict[str, tuple[int, int]]:
    """Per source column, the dead letters waiting because the spec's type or nullability
    refused the source's value (`schema.recover.refused_column`), as (letters, oldest failure
    in epoch milliseconds). Reads the reason and time of every waiting letter (a redrive takes
    the letters it converts)."""
    import pyarrow.compute as pc
    from pyiceberg.exceptions import NoSuchTableError

    try:
        table = _load(iceberg_catalog, dead_letter_layout(spec))
    except NoSuchTableError:
        return {}
    letters = table.scan(selected_fields=("reason", "failed_at")).to_arrow()
    if not letters.num_rows:
        return {}
    letters = letters.set_column(1, "failed_at", pc.cast(letters["failed_at"], "int64"))
    grouped = letters.group_by("reason").aggregate([("failed_at", "count"), ("failed_at", "min")])
    out: dict[str, tuple[int, int]] = {}
    for row in grouped.to_pylist():
        column = refused_column(row["reason"])
        if column is None:
            continue
        count, oldest = out.get(column, (0, row["failed_at_min"] // 1000))
        out[column] = (count + row["failed_at_count"], min(oldest, row["failed_at_min"] // 1000))
    return out


def known_fields(spec: TableSpec) -> set[str]:
    """Source field names the spec accounts for: its columns' names and former names, and the
    fields it leaves out on purpose (``checks.unmirrored_fields``)."""
    names = {c.name for c in spec.columns}
    names |= {n for c in spec.columns for n in c.former_names}
    return names | set(spec.checks.unmirrored_fields)


def _type_name(iceberg_type: Any) -> str:
    return sink_text(iceberg_type)


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
        out[layer] = layout_differences(layout, live_columns(table), _partitioning(table))
    return out


def live_columns(table: Any) -> list[LiveColumn]:
    """The columns of a pyiceberg table's current schema, as the drift check compares them."""
    return [LiveColumn(f.name, _type_name(f.field_type), f.required) for f in table.schema().fields]


def source_columns(spark: Any, url: str, spec: TableSpec) -> list[str]:
    """Column names of the source table, read through JDBC without reading rows."""
    from cdc_assets.pipeline.bootstrap.bootstrap import read_jdbc

    return list(read_jdbc(spark, url, _source_table(spec)).limit(0).columns)


def _source_table(spec: TableSpec) -> str:
    schema = spec.source.schema_
    return f"{schema}.{spec.source.table}" if schema else spec.source.table


def source_row_count(spark: Any, url: str, spec: TableSpec) -> int:
    from cdc_assets.pipeline.bootstrap.bootstrap import read_jdbc

    return int(read_jdbc(spark, url, render_source_count(_source_table(spec))).collect()[0]["n"])


def base_row_count(spark: Any, catalog: str, spec: TableSpec) -> int:
    """Rows of base (of one shard's view: that shard's rows)."""
    table = table_identifier(catalog, base_layout(spec))
    where = ""
    if spec.shard_column and spec.shard is not None:
        where = f" WHERE {quote(spec.shard_column)} = {literal(spec.shard.shard_name)}"
    return int(spark.sql(f"SELECT count(*) AS n FROM {table}{where}").collect()[0]["n"])


def source_values(
    spark: Any,
    catalog: str,
    iceberg_catalog: Any,
    kafka: KafkaClient,
    spec: TableSpec,
    url: str,
    *,
    settle_s: float = 10.0,
) -> tuple[MirrorDiff, int]:
    """Base against the source table at ``url`` now, and, where they differ, the changes still
    in flight: Kafka records the ledger has not read and ledger rows the upsert has not applied,
    counted after a pause (``settle_s``) in which a change the source committed before it was
    read reaches Kafka."""
    diff = compare_source(spark, catalog, spec, url)
    if diff.equal:
        return diff, 0
    time.sleep(settle_s)
    pending = watermark_lag(spark, catalog, iceberg_catalog, spec).pending
    return diff, kafka_lag(kafka, iceberg_catalog, spec).lag + pending
