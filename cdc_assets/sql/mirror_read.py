"""SQL that reads a source table (through Spark's JDBC source) and its base mirror (Spark SQL)
for the row-for-row comparison of ``cdc_assets.quality.mirror_diff`` (pure).

Dates and times leave the source database as text it formats itself, or as numbers since the
epoch, never as JDBC temporal values: drivers turn those into instants in the JVM's time zone,
which would compare the driver's time zone handling rather than the mirror. Base's instants are
read as microseconds and its wall-clock times as text for the same reason. Result columns are
positional (``c0``, ``c1``, ...) because source column names may not be valid aliases.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from cdc_assets.schema.wire import FieldPlan
from cdc_assets.sql.ddl import literal, quote

SourceDialect = Literal["mariadb", "postgres", "generic"]
# How the value a read column returns becomes the comparison's value:
# as_is: the JDBC/Spark value; wall_clock: "YYYY-MM-DD HH:MM:SS.ffffff" (naive);
# utc_wall_clock: the same text read as UTC; date: "YYYY-MM-DD"; clock: a time of day as text;
# epoch_seconds: seconds (with a fraction) since the epoch; epoch_micros: microseconds.
Decode = Literal[
    "as_is", "wall_clock", "utc_wall_clock", "date", "clock", "epoch_seconds", "epoch_micros"
]

_URL_DIALECTS: dict[str, SourceDialect] = {
    "jdbc:mariadb:": "mariadb",
    "jdbc:mysql:": "mariadb",
    "jdbc:postgresql:": "postgres",
}
# PostgreSQL types Spark's JDBC source does not read as the ledger holds them: as text.
_PG_TEXT_KINDS = {"JSON", "JSONB", "UUID", "INET", "XML", "TIMETZ", "ENUM", "DECIMAL", "BIT"}


@dataclass(frozen=True)
class ReadColumn:
    """One column of a comparison read: the column it reads (source or sink name), its result
    alias and how to decode the result."""

    column: str
    alias: str
    decode: Decode = "as_is"


def source_dialect(url: str) -> SourceDialect:
    """The database a JDBC URL points at, as far as the source read cares."""
    return next((d for prefix, d in _URL_DIALECTS.items() if url.startswith(prefix)), "generic")


def quote_source(dialect: SourceDialect, name: str) -> str:
    """An identifier quoted for the source database. MariaDB gets backticks: Spark probes the
    query's columns before it runs the session statement that turns ANSI_QUOTES on."""
    if dialect == "mariadb":
        return "`" + name.replace("`", "``") + "`"
    return '"' + name.replace('"', '""') + '"'


def source_table(dialect: SourceDialect, schema: str | None, table: str) -> str:
    parts = [schema, table] if schema else [table]
    return ".".join(quote_source(dialect, p) for p in parts)


def _mariadb_column(plan: FieldPlan, ref: str) -> tuple[str, Decode]:
    natural, kind = plan.natural.name, plan.source.kind
    if natural == "timestamptz":
        # TIMESTAMP is an instant: its seconds since the epoch, whatever the session time zone.
        return f"UNIX_TIMESTAMP({ref})", "epoch_seconds"
    if natural == "timestamp":
        return f"DATE_FORMAT({ref}, '%Y-%m-%d %H:%i:%s.%f')", "wall_clock"
    if natural == "date":
        return f"DATE_FORMAT({ref}, '%Y-%m-%d')", "date"
    if kind == "TIME":
        return f"CAST({ref} AS CHAR)", "clock"
    if kind in ("CHAR", "NCHAR", "SET", "ENUM"):
        # As MariaDB returns it (trailing blanks stripped): Spark would pad a CHAR(n) result,
        # and reads SET and ENUM columns as CHAR of their longest value.
        return f"CAST({ref} AS CHAR)", "as_is"
    return ref, "as_is"


def _postgres_column(plan: FieldPlan, ref: str) -> tuple[str, Decode]:
    natural, kind = plan.natural.name, plan.source.kind
    if natural == "timestamptz":
        return f"to_char({ref} AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')", "utc_wall_clock"
    if natural == "timestamp":
        return f"to_char({ref}, 'YYYY-MM-DD HH24:MI:SS.US')", "wall_clock"
    if natural == "date":
        return f"to_char({ref}, 'YYYY-MM-DD')", "date"
    if kind == "TIME":
        return f"to_char({ref}, 'HH24:MI:SS.US')", "clock"
    if kind == "INTERVAL":
        return f"CAST(EXTRACT(EPOCH FROM {ref}) * 1000000 AS BIGINT)", "as_is"
    if natural == "string" and kind in _PG_TEXT_KINDS:
        return f"CAST({ref} AS TEXT)", "as_is"
    return ref, "as_is"


def render_source_select(
    plans: list[FieldPlan], table: str, dialect: SourceDialect
) -> tuple[str, list[ReadColumn]]:
    """A JDBC subquery (``(SELECT ...) alias``) reading ``plans``' columns from the source."""
    parts, columns = [], []
    for i, plan in enumerate(plans):
        ref = quote_source(dialect, plan.name)
        if dialect == "mariadb":
            expr, decode = _mariadb_column(plan, ref)
        elif dialect == "postgres":
            expr, decode = _postgres_column(plan, ref)
        else:
            expr, decode = ref, "as_is"
        alias = f"c{i}"
        parts.append(f"{expr} AS {alias}")
        columns.append(ReadColumn(plan.name, alias, decode))
    return f"(SELECT {', '.join(parts)} FROM {table}) cdc_assets_source", columns


def render_base_select(
    plans: list[FieldPlan], table: str, shard: tuple[str, str] | None = None
) -> tuple[str, list[ReadColumn]]:
    """Spark SQL reading ``plans``' sink columns from base (``table``: a Spark identifier).
    Base holds live rows only (a delete removes the row; tombstones live in a table of
    their own), so every row counts; of a sharded table, with ``shard`` (shard column, name),
    the rows of that shard."""
    parts, columns = [], []
    for i, plan in enumerate(plans):
        ref = quote(plan.sink_name)
        alias = f"c{i}"
        if plan.sink.name == "timestamptz":
            parts.append(f"unix_micros({ref}) AS {alias}")
            columns.append(ReadColumn(plan.sink_name, alias, "epoch_micros"))
        elif plan.sink.name == "timestamp":
            parts.append(f"CAST({ref} AS STRING) AS {alias}")
            columns.append(ReadColumn(plan.sink_name, alias, "wall_clock"))
        else:
            parts.append(f"{ref} AS {alias}")
            columns.append(ReadColumn(plan.sink_name, alias, "as_is"))
    where = f" WHERE {quote(shard[0])} = {literal(shard[1])}" if shard is not None else ""
    return f"SELECT {', '.join(parts)} FROM {table}{where}", columns
