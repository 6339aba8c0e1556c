"""The development package's `cdc-assets` commands: ``stack`` (the local servers), ``run`` (the
README's main job: the demo on real sources, or ``--generator`` on generated events) and ``dev``
(the stack, then ``dagster dev``); and the generated-events demo that ``checks --demo`` runs.
Registered through entry points (``dev/pyproject.toml``): the product never imports this package.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.table import Table

from cdc_assets.cli.common import (
    QUIET,
    console,
    dagster_instance,
    ensure_dagster_home,
    last_metadata,
    materializations,
)
from cdc_assets.cli.report import base_sample, report_tables
from cdc_assets.settings import ENV_SPECS, Settings


def register(sub: Any) -> None:
    """Add ``stack``, ``run`` and ``dev`` to the `cdc-assets` sub-command parsers (the product
    finds this through the ``cdc_assets.cli`` entry point)."""
    stack = sub.add_parser("stack", help="local Kafka broker + Iceberg catalog + warehouse")
    stack.add_argument("action", choices=["up", "status", "down"])
    stack.add_argument("--purge", action="store_true", help="with down: delete all stack state")
    stack.add_argument(
        "--sources",
        action="store_true",
        help="with up: also MariaDB, PostgreSQL, Kafka Connect and the Debezium connectors",
    )
    stack.add_argument(
        "--spark-connect",
        action="store_true",
        help="with up: also a Spark Connect server, which runs then share (one warm driver)",
    )
    stack.add_argument(
        "--cluster",
        action="store_true",
        help="with up: also a Spark standalone master and two workers on loopback, with the Spark "
        "Connect server as their driver (or CDC_ASSETS_CLUSTER=1)",
    )
    stack.add_argument(
        "--rest-catalog",
        action="store_true",
        help="with up: also an Iceberg REST catalog server over the stack's catalog; runs then "
        "go through it (both engines' REST clients; the cluster profile runs one by default)",
    )
    stack.add_argument(
        "--registry",
        action="store_true",
        help="with up: also a schema registry (Apicurio, Confluent-compatible API) for Avro "
        "records; the pipeline then decodes registry-framed values with it",
    )
    stack.add_argument(
        "--avro",
        default="",
        metavar="SERVERS",
        help="with up --sources: comma-separated servers (mariadb, postgres) whose connectors "
        "write Avro through the schema registry (started for them) instead of JSON",
    )
    stack.set_defaults(fn=cmd_stack)
    run = sub.add_parser(
        "run",
        help="main job: jars, stack with real sources and Debezium, tables, workload with schema "
        "changes, the pipeline until it caught up, source against base",
    )
    run.add_argument(
        "--statements", type=int, default=1000, help="workload changes per table (default 1000)"
    )
    run.add_argument(
        "--after-change",
        type=int,
        default=300,
        help="changes per table after the schema changes (default 300)",
    )
    run.add_argument(
        "--generator",
        action="store_true",
        help="the demo on generated Debezium events instead (no databases, no Kafka Connect)",
    )
    run.add_argument(
        "--events", type=int, default=2000, help="with --generator: change events per table"
    )
    run.set_defaults(fn=cmd_run)
    dev = sub.add_parser(
        "dev",
        help="the stack with Spark Connect, then dagster dev (UI, daemon); Ctrl-C or SIGTERM "
        "stops dagster dev and everything it started",
    )
    dev.add_argument("--port", type=int, default=3000, help="webserver port on 127.0.0.1")
    dev.set_defaults(fn=cmd_dev)


def cmd_stack(settings: Settings, args: argparse.Namespace) -> int:
    from cdc_assets_dev.stack import local_stack

    if args.action == "up":
        state = local_stack.stack_up(
            settings,
            sources=args.sources,
            spark_connect=args.spark_connect,
            cluster=args.cluster,
            registry=args.registry,
            avro=tuple(s.strip() for s in args.avro.split(",") if s.strip()),
            rest=args.rest_catalog,
        )
        console.print(f"stack up: kafka {state.bootstrap_servers} (pid {state.kafka_pid})")
        if args.registry or args.avro:
            console.print(f"schema registry {local_stack.running_registry(settings)}")
        console.print(local_stack.lake_description(settings))
        if args.spark_connect or args.cluster or settings.cluster:
            from cdc_assets_dev.stack import spark_cluster, spark_connect

            cluster = spark_cluster.running(settings)
            if cluster is not None:
                workers = len(cluster.worker_uis)
                console.print(f"Spark master {cluster.master_url} with {workers} workers")

            port = spark_connect.running_port(settings)
            console.print(f"Spark Connect server {spark_connect.remote_url(port or 0)}")
        if args.sources:
            from cdc_assets_dev.stack import source_stack

            for line in source_stack.status(settings).render():
                console.print(line, markup=False)
        return 0
    if args.action == "down":
        local_stack.stack_down(settings, purge=args.purge)
        console.print("stack down" + (" (state removed)" if args.purge else ""))
        return 0
    status = local_stack.stack_status(settings)
    console.print(status.render())
    return 0 if status.healthy else 1


# Seconds `dev` waits for dagster dev's own shutdown after SIGINT/SIGTERM before killing its
# process group: everything it started is gone within 30 s of the signal.
DEV_STOP_GRACE_S = 20.0


def _default_signals() -> None:
    """In dagster dev's process: SIGINT and SIGTERM as Python starts them. Started from a shell
    in the background, a process inherits SIGINT ignored, and Python then never turns SIGINT
    into its KeyboardInterrupt: dagster dev would not stop when asked."""
    import signal

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def cmd_dev(settings: Settings, args: argparse.Namespace) -> int:
    """`make dev`: the stack with a Spark Connect server, then `dagster dev` (webserver, daemon,
    code server) in a process group of its own. Ctrl-C or SIGTERM, in the foreground or the
    background, stops that group (dagster dev's own shutdown, then SIGKILL for whatever is left
    after ``DEV_STOP_GRACE_S``) and a Spark Connect server `dev` itself started, so nothing it
    started is left running (make sends SIGTERM to this process, not to its children); the
    broker and catalog keep running for the next start (`cdc-assets stack down` stops them)."""
    import signal
    import subprocess
    import time

    from cdc_assets.settings import ENV_WEBSERVER
    from cdc_assets_dev.stack import spark_connect
    from cdc_assets_dev.stack.local_stack import stack_up

    connect_was_running = spark_connect.running_port(settings) is not None
    stack_up(settings, spark_connect=True)
    env = {
        **os.environ,
        "DAGSTER_HOME": str(ensure_dagster_home(settings)),
        ENV_SPECS: str(settings.specs_dir),
        ENV_WEBSERVER: f"127.0.0.1:{args.port}",
    }
    command = [str(Path(sys.executable).parent / "dagster"), "dev", "-w", "workspace.yaml"]
    command += ["-h", "127.0.0.1", "-p", str(args.port)]
    child = subprocess.Popen(command, env=env, start_new_session=True, preexec_fn=_default_signals)
    stopping: list[float] = []

    def stop(signum: int, _frame: Any) -> None:
        stopping.append(time.monotonic())
        with contextlib.suppress(ProcessLookupError):
            # dagster dev's own clean shutdown; a second signal asks again
            os.killpg(child.pid, signal.SIGINT if len(stopping) == 1 else signal.SIGTERM)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            try:
                code = child.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if stopping and time.monotonic() - stopping[0] > DEV_STOP_GRACE_S:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(child.pid, signal.SIGKILL)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        try:
            child.wait(timeout=DEV_STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        # Whatever dagster dev left in its group (a code server, a run worker) goes too.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        if not connect_was_running:
            spark_connect.stop_server(settings)
    if stopping:
        console.print(
            "dagster dev stopped; the broker and catalog keep running (`cdc-assets stack down`)"
        )
        return 0
    return code


def cmd_run(settings: Settings, args: argparse.Namespace) -> int:
    """The README's run command: the demo on real sources (``--generator``: on generated events)."""
    if args.generator:
        return run_generator_demo(settings, args)
    from cdc_assets_dev.demo.live import prepare_specs, run_live_demo

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

    from cdc_assets.assets.keys import asset_key
    from cdc_assets.definitions import build_defs
    from cdc_assets.jars.maven import ensure_jars
    from cdc_assets.jobs.upsert import upsert_assets
    from cdc_assets.sensors.new_offsets import current_hour_key
    from cdc_assets.spec import load_specs
    from cdc_assets_dev.demo.stream import produce_demo
    from cdc_assets_dev.stack import local_stack

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
        mats = materializations(ingest, asset_key("cdc", spec.name))
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
        bmeta = last_metadata(upsert, asset_key("bucketed", spec.name))
        meta = last_metadata(upsert, asset_key("base", spec.name))
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
            meta = last_metadata(views, key)
            shown = f"{meta['columns']} columns" if meta else "[red]failed[/red]"
            console.print(f"      view {'.'.join(key.path[1:])}: {shown}")
    console.print(f"[bold][7/{steps}][/bold] what exists, and a sample of each base table")
    console.print(report_tables(settings))
    for spec in specs:
        console.print(base_sample(settings, spec))
    console.print(f"done in {time.monotonic() - started:.1f}s")
    return 0
