"""`cdc-assets run` (the README's run command) and `report`: the demo and what the catalog holds."""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace
from typing import Any

from rich.table import Table

from cdc_assets.cli.common import QUIET, cell, console, dagster_instance, last_metadata
from cdc_assets.settings import ENV_SPECS, Settings


def cmd_run(settings: Settings, args: argparse.Namespace) -> int:
    """The README's run command: the demo on real sources (``--generator``: on generated events)."""
    if args.generator:
        return run_generator_demo(settings, args)
    from cdc_assets.demo.live import prepare_specs, run_live_demo

    if not os.environ.get(ENV_SPECS):
        # Evolution writes spec files: the demo evolves a copy, not the repository's specs.
        settings = replace(settings, specs_dir=prepare_specs(settings, settings.specs_dir))
        os.environ[ENV_SPECS] = str(settings.specs_dir)
    outcomes = run_live_demo(
        settings, console, statements=args.statements, after_change=args.after_change
    )
    return 0 if outcomes and all(o.diff.equal for o in outcomes) else 1


def run_generator_demo(settings: Settings, args: argparse.Namespace) -> int:
    """The demo on the project's generated Debezium stream (no databases): `checks --demo`."""
    from datetime import UTC, datetime

    from cdc_assets.assets.keys import asset_key, node_name
    from cdc_assets.definitions import build_defs
    from cdc_assets.demo.stream import produce_demo
    from cdc_assets.jars.maven import ensure_jars
    from cdc_assets.jobs.upsert import upsert_assets
    from cdc_assets.sensors.new_offsets import current_hour_key
    from cdc_assets.spec import load_specs
    from cdc_assets.stack import local_stack

    started = time.monotonic()
    steps = 7
    console.print(f"[bold][1/{steps}][/bold] JVM dependencies (Maven)")
    for kind in ("spark", "kafka"):
        ensure_jars(kind, settings)
    console.print(f"[bold][2/{steps}][/bold] local stack")
    state = local_stack.stack_up(settings)
    console.print(
        f"      kafka {state.bootstrap_servers}, {local_stack.lake_description(settings)}"
    )
    console.print(f"[bold][3/{steps}][/bold] onboard_tables job (Spark + Iceberg)")
    # the generated stream's tables mirror no database: never compared with the local sources
    defs = build_defs(settings=settings, local_sources=False)
    instance = dagster_instance(settings)
    result = defs.resolve_job_def("onboard_tables").execute_in_process(
        instance=instance, run_config=QUIET
    )
    created = result.output_for_node("create_spec_tables")
    console.print(f"      {len(created)} table(s) created, run {result.run_id}")
    specs = load_specs(settings.specs_dir)
    console.print(f"[bold][4/{steps}][/bold] demo Debezium stream into Kafka")
    produced = produce_demo(specs, state.bootstrap_servers, events=args.events)
    console.print("      " + ", ".join(f"{t}: {n} records" for t, n in produced.items()))
    console.print(f"[bold][5/{steps}][/bold] ingest_ledgers job: Kafka -> CDC ledger")
    hour = current_hour_key(datetime.now(UTC))
    ingest = defs.resolve_job_def("ingest_ledgers").execute_in_process(
        instance=instance,
        run_config=QUIET,
        partition_key=hour,
        asset_selection=[asset_key("cdc", s.name) for s in specs],
    )
    summary = Table(
        "table", "read", "ledger rows", "dead letters", "skipped", "dead-letter reasons"
    )
    for spec in specs:
        mats = ingest.asset_materializations_for_node(node_name("cdc", spec.name))
        meta: dict[str, Any] = {k: v.value for k, v in mats[-1].metadata.items()} if mats else {}
        reasons = meta.get("dead_letter_reasons") or {}
        summary.add_row(
            spec.name,
            str(meta.get("records_read", 0)),
            str(meta.get("ledger_rows", 0)),
            str(meta.get("dead_letters", 0)),
            str(meta.get("skipped", 0)),
            "; ".join(f"{n} x {r}" for r, n in sorted(reasons.items())),
        )
    console.print(summary)
    console.print(
        f"[bold][6/{steps}][/bold] upsert_bases job: ledger -> bucketed -> MERGE into base"
    )
    upsert = defs.resolve_job_def("upsert_bases").execute_in_process(
        instance=instance,
        run_config=QUIET,
        asset_selection=upsert_assets(specs),
    )
    merges = Table(
        "table",
        "changed keys",
        "inserted",
        "updated",
        "deleted",
        "storage-partitioned",
        "base rows",
    )
    for spec in specs:
        bmeta = last_metadata(upsert, node_name("bucketed", spec.name))
        meta = last_metadata(upsert, node_name("base", spec.name))
        merges.add_row(
            spec.name,
            str(bmeta.get("changed_keys", 0)),
            str(meta.get("rows_inserted", "-")),
            str(meta.get("rows_updated", "-")),
            str(meta.get("rows_deleted", "-")),
            str(meta.get("storage_partitioned_join", "-")),
            str(meta.get("base_rows", "-")),
        )
    console.print(merges)
    view_keys = [k for k in defs.resolve_asset_graph().get_all_asset_keys() if k.path[0] == "view"]
    if view_keys:
        views = defs.resolve_job_def("refresh_views").execute_in_process(
            instance=instance, run_config=QUIET, asset_selection=view_keys, raise_on_error=False
        )
        for key in view_keys:
            meta = last_metadata(views, "__".join(key.path))
            shown = f"{meta['columns']} columns" if meta else "[red]failed[/red]"
            console.print(f"      view {'.'.join(key.path[1:])}: {shown}")
    console.print(f"[bold][7/{steps}][/bold] what exists, and a sample of each base table")
    console.print(report_tables(settings))
    for spec in specs:
        console.print(base_sample(settings, spec))
    console.print(f"done in {time.monotonic() - started:.1f}s")
    return 0


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
