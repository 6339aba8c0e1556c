"""Render Iceberg DDL for Spark SQL from a TableLayout."""

from __future__ import annotations

import re

from cdc_assets.schema.alter import COMMENT_PROPERTY, METADATA_PROPERTIES, plan_creation
from cdc_assets.schema.layers import TableLayout
from cdc_assets.schema.types import SinkType

# Spark's TIMESTAMP is an instant (Iceberg timestamptz); TIMESTAMP_NTZ is Iceberg's timestamp.
_SPARK_TYPES = {
    "boolean": "BOOLEAN",
    "int": "INT",
    "long": "BIGINT",
    "float": "FLOAT",
    "double": "DOUBLE",
    "date": "DATE",
    "timestamp": "TIMESTAMP_NTZ",
    "timestamptz": "TIMESTAMP",
    "string": "STRING",
    "binary": "BINARY",
}


def spark_type(sink: SinkType) -> str:
    """The Spark SQL type name of a sink type."""
    if sink.name == "decimal":
        return f"DECIMAL({sink.precision},{sink.scale})"
    if sink.element is not None:
        return f"ARRAY<{spark_type(sink.element)}>"
    if sink.value is not None:
        return f"MAP<STRING, {spark_type(sink.value)}>"
    if sink.fields:
        return "STRUCT<" + ", ".join(f"{quote(n)}: {spark_type(t)}" for n, t in sink.fields) + ">"
    return _SPARK_TYPES[sink.name]


def quote(name: str) -> str:
    """Quote an identifier for Spark SQL."""
    return "`" + name.replace("`", "``") + "`"


def literal(text: str) -> str:
    """A Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def temp_view_name(kind: str, namespace: str, name: str) -> str:
    """A temp view's name for one table's step, ``cdc_<kind>_<namespace>_<name>``, with every
    character an unquoted identifier cannot hold as ``_``. Views belong to a Spark session, and
    steps of two tables at once run on sessions of their own."""
    return re.sub(r"\W", "_", f"cdc_{kind}_{namespace}_{name}")


def table_identifier(catalog: str, layout: TableLayout) -> str:
    return ".".join(quote(p) for p in (catalog, layout.namespace, layout.name))


def _partition_field(expr: str) -> str:
    # Partition expressions are transform(arg, column) or a bare column; quote the column only.
    if "(" not in expr:
        return quote(expr)
    func, args = expr.rstrip(")").split("(", 1)
    *params, column = (a.strip() for a in args.split(","))
    return f"{func}({', '.join([*params, quote(column)])})"


def render_create_table(catalog: str, layout: TableLayout) -> str:
    """CREATE TABLE IF NOT EXISTS for one layout: the alteration from an empty table
    (``schema.alter.plan_creation``) as one statement, with the partitioning and the format
    version that only a creation sets."""
    creation = plan_creation(layout)
    cols = []
    for col in creation.adds:
        line = f"  {quote(col.name)} {spark_type(col.type)}"
        if col.required:
            line += " NOT NULL"
        if col.doc:
            line += f" COMMENT {literal(col.doc)}"
        cols.append(line)
    properties = {k: layout.properties[k] for k in METADATA_PROPERTIES if k in layout.properties}
    properties.update(creation.set_properties)
    comment = properties.pop(COMMENT_PROPERTY, None)
    sql = f"CREATE TABLE IF NOT EXISTS {table_identifier(catalog, layout)} (\n"
    sql += ",\n".join(cols) + "\n) USING iceberg"
    if layout.partition_by:
        sql += "\nPARTITIONED BY (" + ", ".join(map(_partition_field, layout.partition_by)) + ")"
    if comment:
        sql += f"\nCOMMENT {literal(comment)}"
    if properties:
        props = ",\n".join(f"  {literal(k)} = {literal(v)}" for k, v in sorted(properties.items()))
        sql += f"\nTBLPROPERTIES (\n{props}\n)"
    return sql


def render_identifier_fields(catalog: str, layout: TableLayout) -> str | None:
    """ALTER TABLE ... SET IDENTIFIER FIELDS (Iceberg SQL extension) of the creation's plan, or
    None without a key."""
    fields = plan_creation(layout).identifier_fields
    if not fields:
        return None
    names = ", ".join(quote(f) for f in fields)
    return f"ALTER TABLE {table_identifier(catalog, layout)} SET IDENTIFIER FIELDS {names}"


def render_write_order(catalog: str, layout: TableLayout) -> str | None:
    """ALTER TABLE ... WRITE DISTRIBUTED BY PARTITION LOCALLY ORDERED BY (Iceberg SQL
    extension): rows go to writers by partition (hash, as before) and each file is sorted by
    ``write_order``; None without one."""
    if not layout.write_order:
        return None
    names = ", ".join(quote(c) for c in layout.write_order)
    return (
        f"ALTER TABLE {table_identifier(catalog, layout)} "
        f"WRITE DISTRIBUTED BY PARTITION LOCALLY ORDERED BY {names}"
    )


def render_create_namespace(catalog: str, namespace: str) -> str:
    return f"CREATE NAMESPACE IF NOT EXISTS {quote(catalog)}.{quote(namespace)}"
