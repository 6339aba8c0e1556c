"""A reachable source's table definition, read from its information_schema through Spark's JDBC
source (MariaDB/MySQL and PostgreSQL drivers ship in the Spark jar cache): for pull detection of
an existing spec's table, and for onboarding a live table as a new spec."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from cdc_assets.errors import CdcAssetsError, SpecError
from cdc_assets.pipeline.bootstrap.bootstrap import read_jdbc
from cdc_assets.spec.ddl_import import default_topic, identifier, spec_from_ddl
from cdc_assets.spec.information_schema import (
    SourceIdentity,
    SourceTable,
    as_source_table,
    attnums_query,
    columns_query,
    create_table,
    json_checks_query,
    json_columns,
    primary_key_query,
    size_query,
    with_attnums,
)
from cdc_assets.spec.models import TableSpec
from cdc_assets.spec.sizing import SourceSize, buckets_for


def _rows(spark: Any, url: str, query: str) -> list[dict[str, Any]]:
    return [r.asDict() for r in read_jdbc(spark, url, f"({query}) cdc_assets_q").collect()]


def is_mariadb(spark: Any, url: str) -> bool:
    """Whether a MySQL-protocol server is MariaDB (a JDBC URL says only which driver talks)."""
    rows = _rows(spark, url, "SELECT VERSION() AS version")
    return "mariadb" in str(rows[0]["version"]).lower()


def source_create_table(spark: Any, url: str, table: TableSpec | SourceTable) -> str | None:
    """The source table's CREATE TABLE as its database describes it now (None: no such table).

    ``table`` is a spec (its source) or a ``SourceTable``."""
    src = as_source_table(table)
    columns = _rows(spark, url, columns_query(src))
    if not columns:
        return None
    key = [str(r["name"]) for r in _rows(spark, url, primary_key_query(src))]
    json: set[str] = set()
    longtext = any(str(r.get("column_type")).lower() == "longtext" for r in columns)
    if not src.is_postgres and longtext and is_mariadb(spark, url):
        json = json_columns(_rows(spark, url, json_checks_query(src)))
    return create_table(src, columns, key, json=json)


def source_identity(spark: Any, url: str, table: TableSpec | SourceTable) -> SourceIdentity | None:
    """A PostgreSQL table's column numbers (None for other sources, which have none that
    survive a rename)."""
    src = as_source_table(table)
    if not src.is_postgres:
        return None
    return SourceIdentity.from_rows(_rows(spark, url, attnums_query(src)))


def source_size(spark: Any, url: str, table: TableSpec | SourceTable) -> SourceSize | None:
    """The table's size as its database estimates it (None: the table is not there)."""
    rows = _rows(spark, url, size_query(as_source_table(table)))
    if not rows:
        return None

    def number(value: Any) -> int | None:
        return None if value is None else int(value)

    return SourceSize(number(rows[0]["size_bytes"]), number(rows[0]["row_estimate"]))


def import_source_spec(
    spark: Any,
    url: str,
    source: SourceTable,
    *,
    topic: str | None = None,
    topic_prefix: str | None = None,
    namespace: str | None = None,
    name: str | None = None,
    sensitive: Collection[str] = (),
    buckets: int | None = None,
) -> tuple[TableSpec, str]:
    """Onboard a live table: version 1 of its spec, and the CREATE TABLE it was made from.

    ``buckets`` is base's bucket count; None sizes it from the table's size
    (``spec.sizing.buckets_for``), which ``source_size`` reads from the database.

    Onboarding is schema evolution from an empty schema: the information_schema becomes a
    CREATE TABLE, which the DDL import turns into a spec exactly as for `specs import-ddl`.
    The topic follows the connector's naming (``default_topic``) unless given; the Iceberg
    namespace defaults to the source database.
    """
    ddl = source_create_table(spark, url, source)
    if ddl is None:
        raise CdcAssetsError(
            f"{source.connector} database {source.database!r} has no table "
            f"{source.qualified()!r} that the JDBC user can see"
        )
    if buckets is None:
        buckets = buckets_for(source_size(spark, url, source))
    try:
        spec = spec_from_ddl(
            ddl,
            source.connector,
            source.database,
            topic
            or default_topic(
                source.connector,
                source.database,
                source.table,
                schema=source.schema,
                prefix=topic_prefix,
            ),
            namespace or identifier(source.database),
            name=name,
            schema=source.pg_schema if source.is_postgres else None,
            sensitive=sensitive,
            buckets=buckets,
        )
    except SpecError as err:
        raise SpecError(f"{source.qualified()}: {err}") from None
    identity = source_identity(spark, url, source)
    if identity is not None:
        # each column's number, by which pull detection later tells its renames and drops
        spec = with_attnums(spec, identity.live)
    return spec, ddl
