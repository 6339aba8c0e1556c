"""Create a spec's Iceberg tables with Spark SQL rendered from the spec (onboarding)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from cdc_assets.pipeline.shared.iceberg_types import iceberg_type
from cdc_assets.pipeline.shared.watermark import is_commit_conflict
from cdc_assets.schema.layers import TXN_COLUMNS, TableLayout, all_layouts
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.ddl import (
    render_create_namespace,
    render_create_table,
    render_identifier_fields,
    render_write_order,
)

# Attempts of an idempotent table property change that lost a commit race (another run that
# creates or evolves the same new table committed first: seen through the daemon, seed 20 of
# test_daemon_scenarios), and the pause between them.
PROPERTY_ATTEMPTS = 5
PROPERTY_RETRY_PAUSE_S = 0.2


@dataclass(frozen=True)
class TableOutcome:
    layer: str
    identifier: str
    created: bool


def ensure_tables(
    spark: Any, catalog: str, spec: TableSpec, namespaces: set[str] | None = None
) -> list[TableOutcome]:
    """Create every layer's table that does not exist yet; existing tables are left unchanged.
    ``namespaces``: the namespaces this caller already made sure of (updated here), so that a
    fleet's onboarding creates each once, not once per table and layer."""
    outcomes = []
    ensured = set() if namespaces is None else namespaces
    for layer, layout in all_layouts(spec).items():
        identifier = f"{catalog}.{layout.namespace}.{layout.name}"
        if layout.namespace not in ensured:
            spark.sql(render_create_namespace(catalog, layout.namespace))
            ensured.add(layout.namespace)
        exists = bool(spark.catalog.tableExists(identifier))
        if not exists:
            spark.sql(render_create_table(catalog, layout))
            for sql in (
                render_identifier_fields(catalog, layout),
                render_write_order(catalog, layout),
            ):
                if sql:
                    _idempotent(spark, sql)
        outcomes.append(TableOutcome(layer, identifier, created=not exists))
    return outcomes


def _idempotent(spark: Any, sql: str) -> None:
    """Run an idempotent ALTER (identifier fields, write order), again when its commit lost a
    race: it states what the table must have, so applying it on the newer metadata is right."""
    for attempt in range(1, PROPERTY_ATTEMPTS + 1):
        try:
            spark.sql(sql)
            return
        except Exception as exc:
            if attempt == PROPERTY_ATTEMPTS or not is_commit_conflict(exc):
                raise
            time.sleep(PROPERTY_RETRY_PAUSE_S * attempt)


def missing_tables(iceberg_catalog: Any, spec: TableSpec) -> list[str]:
    """The identifiers (namespace.name) of ``spec``'s tables that do not exist in the catalog."""
    return [
        f"{layout.namespace}.{layout.name}"
        for layout in all_layouts(spec).values()
        if not iceberg_catalog.table_exists(f"{layout.namespace}.{layout.name}")
    ]


def ensure_txn_columns(table: Any, layout: TableLayout) -> Any:
    """Add the transaction columns ``layout`` has and the live table lacks (a table that joined
    a consistency group after it was created): optional columns, null in the rows before.
    Returns the table as it is now."""
    live = {f.name for f in table.schema().fields}
    missing = [c for c in TXN_COLUMNS if c.name in layout.column_names and c.name not in live]
    if not missing:
        return table
    try:
        with table.update_schema() as update:
            for column in missing:
                update.add_column(column.name, iceberg_type(column.type), doc=column.doc)
    except Exception:
        # Another writer added them first (a commit conflict): fine when they are there now.
        table.refresh()
        if any(c.name not in {f.name for f in table.schema().fields} for c in missing):
            raise
    table.refresh()
    return table


# Base's table property for a source table the schema-change topic shows dropped or renamed
# (``<property>.<shard>`` for one shard of a sharded table): readers outside Dagster see why the
# mirror stopped changing. Removed once the source table is present again under the spec's name.
SOURCE_STATE_PROPERTY = "cdc.source-table"


def mark_source_tables(iceberg_catalog: Any, spec: TableSpec, states: dict[str, Any]) -> bool:
    """Set or clear base's ``SOURCE_STATE_PROPERTY`` from ``states`` (spec name or shard name ->
    ``spec.source_table.SourceTable``); whether base's properties changed."""
    from cdc_assets.schema.layers import base_layout

    layout = base_layout(spec)
    ident = f"{layout.namespace}.{layout.name}"
    if not iceberg_catalog.table_exists(ident):
        return False
    want: dict[str, str] = {}
    for view in spec.shard_specs():
        name = view.shard.shard_name if view.shard is not None else spec.name
        key = SOURCE_STATE_PROPERTY if view.shard is None else f"{SOURCE_STATE_PROPERTY}.{name}"
        state = states.get(name)
        if state is not None and not state.present:
            want[key] = state.describe(view.source.database, view.source.table)
    table = iceberg_catalog.load_table(ident)
    held = {k: v for k, v in table.properties.items() if k.startswith(SOURCE_STATE_PROPERTY)}
    if held == want:
        return False
    with table.transaction() as txn:
        stale = [k for k in held if k not in want]
        if stale:
            txn.remove_properties(*stale)
        if want:
            txn.set_properties(want)
    return True
