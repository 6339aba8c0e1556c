"""Load base from a source dump and stitch it to the change stream; roll the watermark back.

A bootstrap writes the dump into base stamped with the dump's source position and commits the
upsert state "nothing of the ledger applied yet, floor = dump position". The next upsert reads
the whole ledger and ignores every change at or before the floor, so a change the dump already
contains is not applied twice and a change after it is not lost.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cdc_assets.errors import CdcAssetsError
from cdc_assets.pipeline.bootstrap.source_position import (
    MysqlMethod,
    Watermark,
    dump_table_ref,
    jdbc_driver,
    read_watermark,
)
from cdc_assets.pipeline.shared.progress import spark_progress
from cdc_assets.pipeline.shared.protection import key_for
from cdc_assets.pipeline.shared.watermark import (
    UPSERT_KIND,
    UpsertState,
    base_state,
    commit_properties_only,
    shard_of,
    shard_states,
    snapshot_properties,
)
from cdc_assets.pipeline.upsert.upsert import load_table, spark_identifier
from cdc_assets.schema.layers import base_layout, ledger_layout, tombstones_layout
from cdc_assets.schema.position import Position
from cdc_assets.schema.wire import plan_fields
from cdc_assets.spec.information_schema import SourceTable
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.bootstrap import (
    render_bootstrap_checks,
    render_bootstrap_select,
    render_dump_query,
    resolve_columns,
)
from cdc_assets.sql.ddl import literal, quote
from cdc_assets.sql.mirror_read import source_dialect


class BootstrapError(CdcAssetsError):
    """The dump cannot be loaded as it is (missing columns, bad values, keys), or base is not
    empty and replacing it was not asked for."""


@dataclass
class BootstrapResult:
    table: str
    rows: int
    position: Position
    source: str
    seconds: float = 0.0
    watermark: Watermark | None = None  # read from the live source before the dump


def read_files(spark: Any, path: str, file_format: str) -> Any:
    """A Parquet or CSV (with a header line) dump."""
    if file_format == "parquet":
        return spark.read.parquet(path)
    if file_format == "csv":
        return (
            spark.read.option("header", "true")
            .option("multiLine", "true")
            .option("escape", '"')
            .option("mode", "FAILFAST")
            .csv(path)
        )
    raise BootstrapError(f"unknown dump format {file_format!r}; use parquet or csv")


def read_jdbc(spark: Any, url: str, table: str, properties: dict[str, str] | None = None) -> Any:
    """A snapshot of a live table through Spark's JDBC source."""
    reader = spark.read.format("jdbc").option("url", url).option("dbtable", table)
    driver = jdbc_driver(url)
    props = {**({"driver": driver} if driver else {}), **(properties or {})}
    if url.startswith("jdbc:mariadb:"):
        # Spark has no dialect for this scheme and quotes column names with double quotes,
        # which MariaDB reads as strings unless ANSI_QUOTES is on.
        props.setdefault("sessionInitStatement", "SET SESSION sql_mode = 'ANSI_QUOTES'")
    for key, value in props.items():
        reader = reader.option(key, value)
    return reader.load()


def check_replaceable(iceberg_catalog: Any, spec: TableSpec, replace: bool) -> None:
    """BootstrapError when base holds rows (of the shard, for one shard of a sharded table) and
    replacing them was not asked for."""
    if spec.source.shards:
        raise BootstrapError(
            f"{spec.name} has shards: bootstrap one shard at a time (--shard "
            f"{'|'.join(spec.source.shard_names)}); the other shards' rows stay as they are"
        )
    base = load_table(iceberg_catalog, base_layout(spec))
    current = base.current_snapshot()
    rows_now = int(current.summary.get("total-records", "0")) if current and current.summary else 0
    if rows_now and spec.shard_column and spec.shard is not None:
        from pyiceberg.expressions import EqualTo

        eq: Any = EqualTo  # pydantic's mypy plugin misreads pyiceberg's predicates
        mine = eq(spec.shard_column, spec.shard.shard_name)
        rows_now = base.scan(row_filter=mine, selected_fields=(spec.shard_column,)).count()
    if rows_now and not replace:
        raise BootstrapError(
            f"{spec.name}: base already holds {rows_now} rows; pass replace=True (--replace) "
            "to overwrite it with the dump"
        )


def bootstrap_base(
    spark: Any,
    catalog: str,
    iceberg_catalog: Any,
    spec: TableSpec,
    dump: Any,
    position: Position,
    *,
    source: str = "dump",
    replace: bool = False,
    progress: bool = True,
    properties: dict[str, str] | None = None,
) -> BootstrapResult:
    """Replace base with ``dump`` and set the floor to ``position`` (where the dump was taken).
    ``properties`` go into the summary of the bootstrap's snapshot."""
    started = time.monotonic()
    base_l = base_layout(spec)
    check_replaceable(iceberg_catalog, spec, replace)
    try:
        columns = resolve_columns(spec, list(dump.columns))
    except ValueError as err:
        raise BootstrapError(f"{spec.name}: {err}") from None
    view = f"cdc_bootstrap_{spec.name}"
    dump.createOrReplaceTempView(view)
    try:
        with spark_progress(spark, f"{spec.name}: checking the dump", enabled=progress):
            checks = spark.sql(render_bootstrap_checks(spec, view, columns)).collect()[0]
        problems = [
            f"{checks[name]} row(s) with {what}"
            for name, what in (("null_keys", "a NULL key"), ("duplicate_keys", "a duplicate key"))
            if checks[name]
        ]
        problems += [
            f"column {c.name!r}: {checks['bad__' + c.name]} value(s) do not convert to "
            f"{c.sink_type(spec.source.connector)}"
            for c in spec.columns
            if checks["bad__" + c.name]
        ]
        if problems:
            raise BootstrapError(f"{spec.name}: the dump was not loaded: " + "; ".join(problems))
        shard = shard_of(spec)
        state = UpsertState(floor=position, shard=shard)
        props = {**state.properties(), UPSERT_KIND: "bootstrap", "cdc.bootstrap-source": source}
        props.update(properties or {})
        target = spark_identifier(catalog, base_l)
        names = ", ".join(quote(c) for c in base_l.column_names)
        # By name: base may already have columns of a newer spec (schema evolution).
        select = render_bootstrap_select(spec, view, columns, position, key_for(spec))
        tombstones = spark_identifier(catalog, tombstones_layout(spec))
        if shard is None:
            with (
                spark_progress(spark, f"{spec.name}: loading base", enabled=progress),
                snapshot_properties(spark, props),
            ):
                spark.sql(f"INSERT OVERWRITE {target} ({names}) {select}")
            # Deletes remembered from before the dump are older than the floor: drop them.
            spark.sql(f"DELETE FROM {tombstones}")
        else:
            # One shard: its rows and remembered deletes go, the other shards' stay; their
            # states ride along in the commit that records this shard's.
            mine = f"{quote(spec.shard_column or '')} = {literal(shard)}"
            others = [n for n in spec.source.shard_names if n != shard]
            props = {**shard_states(load_table(iceberg_catalog, base_l), others), **props}
            with spark_progress(spark, f"{spec.name}: loading shard {shard}", enabled=progress):
                spark.sql(f"DELETE FROM {target} WHERE {mine}")
                with snapshot_properties(spark, props):
                    spark.sql(f"INSERT INTO {target} ({names}) {select}")
            spark.sql(f"DELETE FROM {tombstones} WHERE {mine}")
        table = load_table(iceberg_catalog, base_l)
        if base_state(table, shard).token() != state.token():
            commit_properties_only(table, props)  # an empty dump: Spark made no commit
    finally:
        spark.catalog.dropTempView(view)
    return BootstrapResult(
        spec.name, int(checks["rows"]), position, source, time.monotonic() - started
    )


def bootstrap_from_source(
    spark: Any,
    catalog: str,
    iceberg_catalog: Any,
    spec: TableSpec,
    url: str,
    *,
    table: str | None = None,
    properties: dict[str, str] | None = None,
    replace: bool = False,
    progress: bool = True,
    timeout_s: float = 300.0,
    mysql_method: MysqlMethod = "auto",
    before_dump: Callable[[Watermark], None] | None = None,
) -> BootstrapResult:
    """Bootstrap base from a JDBC dump of the live source table, stitched by a low watermark read
    before the dump (``source_position``: why it is safe, and why replaying the changes between
    the watermark and the dump is harmless).

    The dump is one SELECT (one JDBC partition, so one snapshot of the table), kept by Spark
    (``localCheckpoint``) so that the checks and the load see the same rows. Base is stamped just
    below the watermark. ``before_dump`` runs between the watermark and the dump (tests use it
    to change rows in that window).
    """
    started = time.monotonic()
    check_replaceable(iceberg_catalog, spec, replace)  # before the watermark and the dump
    source = SourceTable.of(spec)
    props = {"fetchsize": "10000", **(properties or {})}
    gtid = spec.source.order == "gtid" and spec.source.connector != "postgresql"
    watermark = read_watermark(
        spark,
        url,
        source,
        properties=props,
        timeout_s=timeout_s,
        mysql_method=mysql_method,
        gtid_domain=spec.source.gtid_domain if gtid else None,
    )
    if before_dump is not None:
        before_dump(watermark)
    name = table or dump_table_ref(url, source)
    query = render_dump_query(plan_fields(spec), name, source_dialect(url))
    with spark_progress(spark, f"{spec.name}: reading the dump", enabled=progress):
        dump = read_jdbc(spark, url, query, props).localCheckpoint(eager=True)
    result = bootstrap_base(
        spark,
        catalog,
        iceberg_catalog,
        spec,
        dump,
        watermark.floor,
        source=f"jdbc {name}",
        replace=replace,
        progress=progress,
        properties={"cdc.bootstrap-watermark": watermark.describe()},
    )
    result.watermark = watermark
    result.seconds = time.monotonic() - started
    return result


@dataclass
class RollbackResult:
    table: str
    before: UpsertState
    after: UpsertState
    moved: dict[int, tuple[int, int]] = field(default_factory=dict)


def rollback_watermark(
    spark: Any, catalog: str, iceberg_catalog: Any, spec: TableSpec, to: datetime
) -> RollbackResult:
    """Move base's watermark back to the first ledger record at or after ``to`` per partition.

    The next upsert re-reads the ledger from there. Changes are still applied only when newer
    than the row base holds, so this repairs base after it was restored to an older snapshot
    (``CALL <catalog>.system.rollback_to_snapshot``) without disturbing newer rows.
    """
    if to.tzinfo is None:
        to = to.replace(tzinfo=UTC)
    base = load_table(iceberg_catalog, base_layout(spec))
    shard = shard_of(spec)  # one shard of a sharded table: its own watermark
    before = base_state(base, shard)
    ledger = spark_identifier(catalog, ledger_layout(spec))
    stamp = literal(to.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f"))
    rows = spark.sql(
        f"SELECT _kafka_partition AS p, min(_kafka_offset) AS o FROM {ledger} "
        f"WHERE _kafka_ts >= CAST({stamp} AS TIMESTAMP) GROUP BY _kafka_partition"
    ).collect()
    watermark = dict(before.watermark)
    moved: dict[int, tuple[int, int]] = {}
    for row in rows:
        partition, offset = int(row["p"]), int(row["o"])
        current = watermark.get(partition)
        if current is not None and offset < current:
            moved[partition] = (current, offset)
            watermark[partition] = offset
    ts = before.watermark_ts
    after = UpsertState(
        watermark=watermark,
        watermark_ts=min(ts, to) if ts is not None else None,
        ledger_sequence=0,  # read redriven rows again too; applying twice changes nothing
        ledger_snapshot=before.ledger_snapshot,
        floor=before.floor,
        shard=shard,
    )
    others = [n for n in spec.source.shard_names if n != shard]
    commit_properties_only(
        base,
        {
            **shard_states(base, others),
            **after.properties(),
            UPSERT_KIND: "rollback",
            "cdc.rollback-to": to.isoformat(),
        },
    )
    return RollbackResult(spec.name, before, after, moved)
