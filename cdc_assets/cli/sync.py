"""`cdc-assets sync`: the pipeline over the spec directory in this process, once or until caught
up."""

from __future__ import annotations

import argparse
import time

from cdc_assets.cli.common import console, dagster_instance
from cdc_assets.cli.report import report_tables
from cdc_assets.settings import Settings


def cmd_sync(settings: Settings, args: argparse.Namespace) -> int:
    """The pipeline over your own spec directory, without the demo: create missing tables, then
    cycles of ingest, evolutions the schema_changes sensor asks for, and upsert (the daemon's
    runs, in this process) once, or until a cycle finds nothing new (``--until-caught-up``);
    with ``--checks``, every asset check once at the end."""
    from cdc_assets.jobs.inprocess import PipelineDriver
    from cdc_assets.local_servers.endpoints import require_bootstrap

    if settings.kafka_bootstrap is None:
        require_bootstrap(settings)  # a clear error when neither a broker nor the stack is up
    driver = PipelineDriver(settings, dagster_instance(settings))
    created = driver.onboard()
    console.print(f"specs: {settings.specs_dir} ({len(driver.specs())} tables)")
    if created:
        console.print(f"created tables: {', '.join(created)}")
    cycles = args.max_cycles if args.until_caught_up else 1
    started = time.monotonic()
    for n in range(1, cycles + 1):
        cycle = driver.cycle()
        read = sum(cycle.read.values())
        evolved = ", ".join(t for t, ok in cycle.evolved) or "none"
        console.print(
            f"cycle {n}: {read} records ingested, evolved: {evolved}, "
            f"{time.monotonic() - started:.1f} s elapsed"
        )
        failed = [t for t, ok in cycle.evolved if not ok]
        if failed:
            console.print(f"[red]evolution failed for {', '.join(failed)}[/red]")
            return 1
        if cycle.quiet:
            console.print("caught up: nothing new on any topic")
            break
    else:
        if args.until_caught_up:
            console.print(f"[yellow]not caught up after {cycles} cycles[/yellow]")
            return 1
    for view, meta in sorted(driver.refresh_views().items()):
        state = meta.get("error") or f"{meta.get('columns')} columns"
        console.print(f"view {view}: {state}")
    console.print(report_tables(settings))
    if args.checks:
        outcomes = driver.run_checks()
        failed = sorted(check for check, passed in outcomes.items() if not passed)
        console.print(f"checks: {len(outcomes) - len(failed)} passed, {len(failed)} failed")
        for check in failed:
            console.print(f"[red]failed: {check}[/red]")
        return 1 if failed else 0
    return 0
