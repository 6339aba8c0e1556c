"""`cdc-assets report`: the tables of every spec as the catalog sees them, and a sample of a
base table (also printed by the demos and `sync`)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table

from cdc_assets.cli.common import cell, console
from cdc_assets.settings import Settings


def base_sample(settings: Settings, spec: Any, rows: int = 5) -> Table:
    """The first rows of a base table, read with pyiceberg (not Spark)."""
    from cdc_assets.resources import build_resources
    from cdc_assets.schema.layers import base_layout

    layout = base_layout(spec)
    catalog = build_resources(settings)["iceberg"].load_catalog()
    tbl = catalog.load_table(f"{layout.namespace}.{layout.name}")
    columns = [c.sink_name for c in spec.columns]
    data = tbl.scan(selected_fields=tuple(columns), limit=rows).to_arrow().to_pylist()
    table = Table(*columns, title=f"{settings.catalog_name}.{layout.namespace}.{layout.name}")
    for row in data:
        table.add_row(*[cell(row[c]) for c in columns])
    return table


def _partitioning(tbl: Any) -> str:
    schema = tbl.schema()
    fields = [f"{f.transform}({schema.find_column_name(f.source_id)})" for f in tbl.spec().fields]
    return ", ".join(fields) or "none"


def report_tables(settings: Settings) -> Table:
    """What exists in the catalog for each spec, read independently with pyiceberg."""
    from cdc_assets.assets.metadata import live_rows
    from cdc_assets.resources import build_resources
    from cdc_assets.schema.layers import all_layouts
    from cdc_assets.spec import load_specs

    catalog = build_resources(settings)["iceberg"].load_catalog()
    table = Table(
        "spec", "layer", "iceberg table", "columns", "partitioning", "snapshots", "live rows"
    )
    for spec in load_specs(settings.specs_dir):
        for layer, layout in all_layouts(spec).items():
            ident = f"{layout.namespace}.{layout.name}"
            if not catalog.table_exists(ident):
                table.add_row(spec.name, layer, ident, "-", "-", "-", "missing")
                continue
            tbl = catalog.load_table(ident)
            snap = tbl.current_snapshot()
            # Live rows: data rows less merge-on-read deletes (total-records alone counts every
            # version an upsert replaced).
            live = live_rows(snap.summary.additional_properties) if snap and snap.summary else 0
            rows = 0 if live is None else live
            table.add_row(
                spec.name,
                layer,
                f"{settings.catalog_name}.{ident}",
                str(len(tbl.schema().fields)),
                _partitioning(tbl),
                str(len(tbl.snapshots())),
                str(rows),
            )
    return table


def cmd_report(settings: Settings, _: argparse.Namespace) -> int:
    console.print(report_tables(settings))
    return 0
