"""The `cdc-assets` command: jar cache, local stack, spec validation and the main demo run."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from cdc_assets.errors import CdcAssetsError
from cdc_assets.settings import ENV_HOME, ENV_SPECS, Settings, load_settings

# Wide enough for the report table when output is piped (CI logs, `make run | tee`).
console = Console(highlight=False, width=None if sys.stdout.isatty() else 140)


def _cmd_jars(settings: Settings, _: argparse.Namespace) -> int:
    from cdc_assets.resources.jars import KINDS, ensure_jars, jar_cache_size
    from cdc_assets.resources.udf_jar import ensure_udf_jar

    for kind in KINDS:
        jars = ensure_jars(kind, settings)
        console.print(f"{kind}: {len(jars)} jars in {settings.jars_dir / kind}")
    console.print(f"udf: {ensure_udf_jar(settings)}")
    console.print(f"jar cache: {jar_cache_size(settings) / 2**20:.1f} MiB")
    return 0


def _cmd_stack(settings: Settings, args: argparse.Namespace) -> int:
    from cdc_assets.resources import local_stack

    if args.action == "up":
        state = local_stack.stack_up(
            settings, sources=args.sources, spark_connect=args.spark_connect
        )
        console.print(f"stack up: kafka {state.bootstrap_servers} (pid {state.kafka_pid})")
        console.print(f"catalog {state.catalog_file}, warehouse {state.warehouse}")
        if args.spark_connect:
            from cdc_assets.resources import spark_connect

            port = spark_connect.running_port(settings)
            console.print(f"Spark Connect server {spark_connect.remote_url(port or 0)}")
        if args.sources:
            from cdc_assets.resources import source_stack

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


def _cmd_specs(settings: Settings, args: argparse.Namespace) -> int:
    from cdc_assets.spec import load_specs

    if args.action == "import-ddl":
        return _specs_import_ddl(args)
    if args.action == "import-source":
        return _specs_import_source(settings, args)
    if args.action == "import-schema-record":
        return _specs_import_schema_record(settings, args)
    if args.action == "diff":
        return _specs_diff(args)
    directory = Path(args.directory) if args.directory else settings.specs_dir
    specs = load_specs(directory)
    table = Table("spec", "version", "source", "topic", "columns", "key", "buckets")
    for s in specs:
        table.add_row(
            s.name,
            str(s.spec_version),
            f"{s.source.connector}:{s.source.database}.{s.source.table}",
            s.source.topic,
            str(len(s.columns)),
            ", ".join(s.primary_key),
            str(s.base.buckets),
        )
    console.print(table)
    console.print(f"{len(specs)} valid spec(s) in {directory}")
    return 0


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise CdcAssetsError(f"cannot read {path}: {err.strerror}") from None


def _print_plain(text: str) -> None:
    # Plans carry brackets that rich would take for markup; long reasons stay on one line.
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def _specs_import_ddl(args: argparse.Namespace) -> int:
    """A spec from a CREATE TABLE, or with --spec the next version of an existing one."""
    from cdc_assets.schema.evolution import apply_plan
    from cdc_assets.spec.ddl_import import plan_from_ddl, spec_from_ddl
    from cdc_assets.spec.load import load_spec_text
    from cdc_assets.spec.versions import render_spec_yaml

    ddl = _read_text(args.file)
    sensitive = [c.strip() for c in (args.sensitive or "").split(",") if c.strip()]
    if args.spec:
        current = load_spec_text(_read_text(args.spec), args.spec)
        audit = [_read_text(a) for a in args.audit or []]
        _, plan = plan_from_ddl(current, ddl, audit, sensitive=sensitive)
        # The plan goes to stderr so that stdout stays a loadable spec.
        print(plan.describe(), file=sys.stderr)
        if not plan.supported:
            return 1
        if not plan.changes:
            return 0
        spec = apply_plan(current, plan)
    else:
        needed = {"--connector": args.connector, "--database": args.database}
        needed |= {"--topic": args.topic, "--namespace": args.namespace}
        missing = [flag for flag, value in needed.items() if not value]
        if missing:
            raise CdcAssetsError(
                f"import-ddl needs {', '.join(missing)} to onboard a table "
                "(or --spec to evolve an existing spec)"
            )
        spec = spec_from_ddl(
            ddl,
            args.connector,
            args.database,
            args.topic,
            args.namespace,
            name=args.name,
            schema=args.schema,
            sensitive=sensitive,
        )
    header = f"{spec.name} version {spec.spec_version}, from DDL by `cdc-assets specs import-ddl`."
    text = render_spec_yaml(spec, header)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _specs_import_schema_record(settings: Settings, args: argparse.Namespace) -> int:
    """Onboard a MySQL/MariaDB table from Debezium's schema-change topic: the newest record of
    the table (its full column list after the last DDL) becomes version 1 of its spec, through
    the same DDL import as `import-ddl`; the spec watches that topic for later changes."""
    from cdc_assets.pipeline.schema_topic import newest_change_of
    from cdc_assets.resources import build_resources
    from cdc_assets.spec.ddl_import import default_topic, spec_from_ddl
    from cdc_assets.spec.versions import render_spec_yaml

    kafka = build_resources(settings)["kafka"]
    seen = newest_change_of(kafka, args.schema_topic, args.database, args.table)
    if seen is None:
        raise CdcAssetsError(
            f"no record of {args.database}.{args.table} on schema-change topic "
            f"{args.schema_topic!r}: check the names, and that the connector captures the table "
            "with include.schema.changes=true"
        )
    sensitive = [c.strip() for c in (args.sensitive or "").split(",") if c.strip()]
    topic = args.topic or default_topic(
        args.connector, args.database, args.table, prefix=seen.change.server or args.schema_topic
    )
    spec = spec_from_ddl(
        seen.change.create_table,
        args.connector,
        args.database,
        topic,
        args.namespace or args.database,
        name=args.name,
        sensitive=sensitive,
    )
    spec = spec.model_copy(
        update={"source": spec.source.model_copy(update={"schema_change_topic": args.schema_topic})}
    )
    header = (
        f"{spec.name} version 1, from the schema-change record {seen.run_key} by "
        "`cdc-assets specs import-schema-record`."
    )
    text = render_spec_yaml(spec, header)
    if args.out:
        write_spec_checked(Path(args.out), text)
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def redact_url(url: str) -> str:
    """A JDBC URL fit to print: password parameters and user:password@ credentials hidden."""
    url = re.sub(r"(?i)(password=)[^&;]*", r"\1***", url)
    return re.sub(r"(//[^/:@]+:)[^/@]*@", r"\1***@", url)


def source_jdbc_url(
    settings: Settings,
    connector: str,
    database: str,
    explicit: str | None = None,
    server: str | None = None,
) -> str:
    """The JDBC URL of a source database: the one given, else the settings variable
    (``CDC_ASSETS_SOURCE_URL_<SERVER>_<DATABASE>``, ``..._<CONNECTOR>_<DATABASE>``, then
    ``..._<DATABASE>``), else the local stack's source of that kind when `stack up --sources`
    started it."""
    from cdc_assets.resources import sources
    from cdc_assets.settings import source_url_variables

    if explicit:
        return explicit
    url = settings.source_url(database, connector, server)
    if url:
        return url
    kind = "postgres" if connector == "postgresql" else "mariadb"
    if sources.state_path(settings).exists():
        for db, local_kind, local in sources.jdbc_urls(settings):
            if (db, local_kind) == (database, kind):
                return local
    tried = " or ".join(source_url_variables(database, connector, server))
    raise CdcAssetsError(
        f"no JDBC URL for {connector} database {database!r}"
        + (f" on server {server!r}" if server else "")
        + f": pass --url, or set {tried}, "
        "or start the local sources with `cdc-assets stack up --sources`"
    )


def _specs_import_source(settings: Settings, args: argparse.Namespace) -> int:
    """Onboard a live table: its information_schema becomes version 1 of its spec, written to
    the spec directory (never over an existing spec without --force) and loaded back."""
    from cdc_assets.pipeline.source_schema import import_source_spec
    from cdc_assets.resources import build_resources
    from cdc_assets.spec.ddl_import import identifier
    from cdc_assets.spec.information_schema import SourceTable
    from cdc_assets.spec.versions import render_spec_yaml

    if args.schema and args.connector != "postgresql":
        raise CdcAssetsError("--schema is for PostgreSQL; a MySQL-family table is database.table")
    if args.topic and args.topic_prefix:
        raise CdcAssetsError("give --topic or --topic-prefix, not both")
    source = SourceTable(args.connector, args.database, args.table, args.schema)
    url = source_jdbc_url(settings, args.connector, args.database, args.url)
    name = args.name or identifier(args.table)
    target = Path(args.out) if args.out else settings.specs_dir / f"{name}.yaml"
    # Refused before Spark starts; write_spec_checked refuses other clashes after the read.
    if target.exists() and not args.force:
        raise CdcAssetsError(f"{target} exists; pass --force to replace it")
    sensitive = [c.strip() for c in (args.sensitive or "").split(",") if c.strip()]
    spark = build_resources(settings)["spark"].get_session()
    spec, _ = import_source_spec(
        spark,
        url,
        source,
        topic=args.topic,
        topic_prefix=args.topic_prefix,
        namespace=args.namespace,
        name=name,
        sensitive=sensitive,
    )
    header = (
        f"{spec.name} version {spec.spec_version}: {source.qualified()} in {args.connector} "
        f"database {args.database},\nread from its information_schema by "
        "`cdc-assets specs import-source`."
    )
    text = render_spec_yaml(spec, header)
    write_spec_checked(target, text)
    sys.stdout.write(text)
    print(f"wrote {target} (read from {redact_url(url)})", file=sys.stderr)
    return 0


def write_spec_checked(path: Path, text: str) -> None:
    """Write a spec file and validate it by loading it, alone and with the other specs of its
    directory (a topic or sink table used twice); on failure the previous file comes back."""
    from cdc_assets.errors import SpecError
    from cdc_assets.spec.load import load_spec, load_specs

    previous = path.read_text(encoding="utf-8") if path.exists() else None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    try:
        load_spec(path)
        load_specs(path.parent)
    except SpecError:
        if previous is None:
            path.unlink()
        else:
            path.write_text(previous, encoding="utf-8")
        raise


def _specs_diff(args: argparse.Namespace) -> int:
    """The plan of every changed spec; 1 when any change is unsupported."""
    from cdc_assets.spec.review import (
        SpecText,
        directory_specs,
        git_specs,
        review_pair,
        review_sets,
    )

    audit = [_read_text(a) for a in args.audit or []]
    if args.git:
        if args.paths:
            raise CdcAssetsError("give either OLD NEW or --git REV_A REV_B, not both")
        rev_a, rev_b = args.git
        reviews = review_sets(git_specs(rev_a, args.dir), git_specs(rev_b, args.dir), audit)
    elif len(args.paths) != 2:
        raise CdcAssetsError("specs diff needs OLD NEW (two spec files) or --git REV_A REV_B")
    elif all(Path(p).is_dir() for p in args.paths):
        old, new = (directory_specs(Path(p)) for p in args.paths)
        reviews = review_sets(old, new, audit)
    else:
        old_text, new_text = (SpecText(p, _read_text(p)) for p in args.paths)
        reviews = [review_pair(old_text, new_text, audit)]
    for review in reviews:
        _print_plain(review.describe())
    failed = [r.name for r in reviews if not r.ok]
    verdict = f"unsupported: {', '.join(failed)}" if failed else "all supported"
    _print_plain(f"{len(reviews)} spec(s) compared, {verdict}")
    return 1 if failed else 0


# Dagster's per-step DEBUG events would bury the summary; the runs keep them in the instance.
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


# Every table's ingest runs in a pool of its own (cdc_ingest/<table>); a limit of one per pool
# serializes the runs of one table without holding back the others.
DAGSTER_YAML = """concurrency:
  pools:
    default_limit: 1
  # Every run starts a Spark driver: more than two at once thrash a laptop-sized machine.
  runs:
    max_concurrent_runs: 2
# A queued run starts within a second, not the default five: the sensors' micro-batches queue a
# run every few seconds and the wait is part of every change's way into base.
run_queue:
  dequeue_interval_seconds: 1
# Nothing leaves this machine: no usage statistics.
telemetry:
  enabled: false
"""


def ensure_dagster_home(settings: Settings) -> Path:
    """The Dagster home under the CDC home, with the pool limit configured (created once)."""
    home = settings.home / "dagster"
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text(DAGSTER_YAML, encoding="utf-8")
    return home


def _cmd_dev(settings: Settings, args: argparse.Namespace) -> int:
    """`make dev`: the stack with a Spark Connect server, then `dagster dev` (webserver, daemon,
    code server) in a process group of its own. Ctrl-C or SIGTERM stops that group and waits for
    it, so nothing is left running (make sends SIGTERM to this process, not to its children);
    the stack keeps running for the next start (`cdc-assets stack down` stops it)."""
    import signal
    import subprocess

    from cdc_assets.resources.local_stack import stack_up
    from cdc_assets.settings import ENV_WEBSERVER

    stack_up(settings, spark_connect=True)
    env = {
        **os.environ,
        "DAGSTER_HOME": str(ensure_dagster_home(settings)),
        ENV_SPECS: str(settings.specs_dir),
        ENV_WEBSERVER: f"127.0.0.1:{args.port}",
    }
    command = [str(Path(sys.executable).parent / "dagster"), "dev", "-w", "workspace.yaml"]
    command += ["-h", "127.0.0.1", "-p", str(args.port)]
    child = subprocess.Popen(command, env=env, start_new_session=True)
    stopping: list[int] = []

    def stop(signum: int, _frame: Any) -> None:
        stopping.append(signum)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGINT)  # dagster dev's own clean shutdown

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        # Whatever dagster dev left in its group (a code server, a run worker) goes too.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
    if stopping:
        console.print("dagster dev stopped; the stack keeps running (`cdc-assets stack down`)")
        return 0
    return code


def _cmd_dagster_home(settings: Settings, _: argparse.Namespace) -> int:
    print(ensure_dagster_home(settings))
    return 0


def _dagster_instance(settings: Settings) -> Any:
    """A persistent instance under the home, so runs from here show up in `dagster dev`."""
    from dagster import DagsterInstance

    if not os.environ.get("DAGSTER_HOME"):
        os.environ["DAGSTER_HOME"] = str(ensure_dagster_home(settings))
    return DagsterInstance.get()


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


def _cmd_run(settings: Settings, args: argparse.Namespace) -> int:
    """The README's run command: the demo on real sources (``--generator``: on generated events)."""
    if args.generator:
        return _run_generator_demo(settings, args)
    from cdc_assets.demo.live import prepare_specs, run_live_demo

    if not os.environ.get(ENV_SPECS):
        # Evolution writes spec files: the demo evolves a copy, not the repository's specs.
        settings = replace(settings, specs_dir=prepare_specs(settings, settings.specs_dir))
        os.environ[ENV_SPECS] = str(settings.specs_dir)
    outcomes = run_live_demo(
        settings, console, statements=args.statements, after_change=args.after_change
    )
    return 0 if outcomes and all(o.diff.equal for o in outcomes) else 1


def _run_generator_demo(settings: Settings, args: argparse.Namespace) -> int:
    """The demo on the project's generated Debezium stream (no databases): `checks --demo`."""
    from datetime import UTC, datetime

    import dagster as dg

    from cdc_assets.definitions import build_defs
    from cdc_assets.demo.stream import produce_demo
    from cdc_assets.resources import local_stack
    from cdc_assets.resources.jars import ensure_jars
    from cdc_assets.sensors.new_offsets import current_hour_key
    from cdc_assets.spec import load_specs

    started = time.monotonic()
    steps = 7
    console.print(f"[bold][1/{steps}][/bold] JVM dependencies (Maven)")
    for kind in ("spark", "kafka"):
        ensure_jars(kind, settings)
    console.print(f"[bold][2/{steps}][/bold] local stack")
    state = local_stack.stack_up(settings)
    console.print(f"      kafka {state.bootstrap_servers}, catalog {state.catalog_file}")
    console.print(f"[bold][3/{steps}][/bold] onboard_tables job (Spark + Iceberg)")
    defs = build_defs(settings=settings)
    instance = _dagster_instance(settings)
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
        asset_selection=[dg.AssetKey(["cdc", s.name]) for s in specs],
    )
    summary = Table(
        "table", "read", "ledger rows", "dead letters", "skipped", "dead-letter reasons"
    )
    for spec in specs:
        mats = ingest.asset_materializations_for_node(f"cdc__{spec.name}")
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
        asset_selection=[
            dg.AssetKey([layer, s.name]) for s in specs for layer in ("bucketed", "base")
        ],
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
        bmeta = _last_metadata(upsert, f"bucketed__{spec.name}")
        meta = _last_metadata(upsert, f"base__{spec.name}")
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
    console.print(f"[bold][7/{steps}][/bold] what exists, and a sample of each base table")
    console.print(report_tables(settings))
    for spec in specs:
        console.print(base_sample(settings, spec))
    console.print(f"done in {time.monotonic() - started:.1f}s")
    return 0


def _last_metadata(result: Any, node: str) -> dict[str, Any]:
    mats = result.asset_materializations_for_node(node)
    return {k: v.value for k, v in mats[-1].metadata.items()} if mats else {}


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
        table.add_row(*[_cell(row[c]) for c in columns])
    return table


def _cell(value: object) -> str:
    text = "NULL" if value is None else str(value)
    return text if len(text) <= 28 else text[:25] + "..."


def _find_spec(settings: Settings, name: str) -> Any:
    from cdc_assets.spec import load_specs

    specs = {s.name: s for s in load_specs(settings.specs_dir)}
    if name not in specs:
        raise CdcAssetsError(f"no table spec {name!r}; known: {sorted(specs)}")
    return specs[name]


def _cmd_bootstrap(settings: Settings, args: argparse.Namespace) -> int:
    """Load base from a dump. A dump read here from the live source (--jdbc-url or --source)
    without --position is stitched by a watermark read from the source before the dump."""
    from cdc_assets.pipeline.bootstrap import (
        bootstrap_base,
        bootstrap_from_source,
        read_files,
        read_jdbc,
    )
    from cdc_assets.resources import build_resources
    from cdc_assets.sql.upsert import Position

    spec = _find_spec(settings, args.table)
    position = None
    if args.position is not None:
        try:
            position = Position.parse(args.position)
        except ValueError as err:
            raise CdcAssetsError(str(err)) from None
    elif not (args.jdbc_url or args.from_source):
        raise CdcAssetsError(
            "a file dump needs --position: the source position at which it was taken "
            "(only a dump read from the live source finds its own)"
        )
    url = args.jdbc_url
    if args.from_source:
        url = source_jdbc_url(
            settings, spec.source.connector, spec.source.database, server=spec.source.server_name
        )
    props: dict[str, str] = {}
    if args.jdbc_user:
        props["user"] = args.jdbc_user
    if args.jdbc_password_env:
        props["password"] = os.environ.get(args.jdbc_password_env, "")
    if args.jdbc_driver:
        props["driver"] = args.jdbc_driver
    res = build_resources(settings)
    if url and position is None and res["spark"].remote:
        # The watermark holds one JDBC session in the driver's JVM, which a Spark Connect
        # client does not have: this command starts a driver of its own.
        res["spark"] = res["spark"].model_copy(update={"remote": None})
    spark = res["spark"].get_session()
    catalog = res["spark"].catalog.name
    if url and position is None:
        result = bootstrap_from_source(
            spark,
            catalog,
            res["iceberg"].load_catalog(),
            spec,
            url,
            table=args.jdbc_table,
            properties=props,
            replace=args.replace,
            timeout_s=args.watermark_timeout,
        )
    else:
        assert position is not None
        if url:
            table = args.jdbc_table or spec.source.table
            dump = read_jdbc(spark, url, table, {"fetchsize": "10000", **props})
            source = f"jdbc {table}"
        else:
            kind = "parquet" if args.parquet else "csv"
            dump = read_files(spark, args.parquet or args.csv, kind)
            source = f"{kind} {args.parquet or args.csv}"
        result = bootstrap_base(
            spark,
            catalog,
            res["iceberg"].load_catalog(),
            spec,
            dump,
            position,
            source=source,
            replace=args.replace,
        )
    where = f"source position {result.position.text()}"
    if result.watermark is not None:
        where += f", just below the watermark {result.watermark.describe()} read before the dump"
    console.print(
        f"{result.table}: {result.rows} rows loaded into base from {result.source} at {where}, "
        f"in {result.seconds:.1f}s; the next upsert applies the ledger's changes after that "
        "position",
        markup=False,
    )
    return 0


def _cmd_rollback(settings: Settings, args: argparse.Namespace) -> int:
    from datetime import datetime

    from cdc_assets.pipeline.bootstrap import rollback_watermark
    from cdc_assets.pipeline.offsets import encode_offsets
    from cdc_assets.resources import build_resources

    spec = _find_spec(settings, args.table)
    try:
        to = datetime.fromisoformat(args.to)
    except ValueError:
        raise CdcAssetsError(
            f"--to {args.to!r} is not an ISO time like 2026-11-22T10:00Z"
        ) from None
    res = build_resources(settings)
    result = rollback_watermark(
        res["spark"].get_session(),
        res["spark"].catalog.name,
        res["iceberg"].load_catalog(),
        spec,
        to,
    )
    console.print(
        f"{result.table}: watermark {encode_offsets(result.before.watermark)} -> "
        f"{encode_offsets(result.after.watermark)}; the next upsert re-reads the ledger from there"
    )
    return 0


def _cmd_redrive(settings: Settings, args: argparse.Namespace) -> int:
    from cdc_assets.pipeline.redrive import redrive
    from cdc_assets.resources import build_resources
    from cdc_assets.spec import load_specs

    specs = {s.name: s for s in load_specs(settings.specs_dir)}
    if args.table not in specs:
        console.print(f"[red]error:[/red] no table spec {args.table!r}; known: {sorted(specs)}")
        return 2
    spark = build_resources(settings)["spark"]
    result = redrive(
        spark.get_session(), spark.catalog.name, specs[args.table], reason_contains=args.reason
    )
    console.print(
        f"{result.table}: replayed {result.replayed} dead letter(s): {result.to_ledger} to the "
        f"ledger, {result.skipped} skipped, {result.still_dead} still failing"
    )
    for reason, count in sorted(result.reasons.items(), key=lambda kv: -kv[1]):
        console.print(f"  {count:>6}  {reason}")
    return 0 if result.still_dead == 0 else 1


def _cmd_checks(settings: Settings, args: argparse.Namespace) -> int:
    """Every asset check against the live tables (with --demo, after a fresh run of the
    generated-events demo, `cdc-assets run --generator`); 1 when any error-severity check fails."""
    import json

    from cdc_assets.checks.runner import run_checks
    from cdc_assets.definitions import build_defs

    if args.demo:
        code = _run_generator_demo(settings, args)
        if code:
            return code
        console.print("[bold]asset checks[/bold] on the demo's tables")
    defs = build_defs(settings=settings)
    outcomes, run_id = run_checks(
        defs, _dagster_instance(settings), tables=args.table or None, checks=args.check or None
    )
    if not outcomes:
        console.print("[red]error:[/red] no check matches the selection")
        return 2
    table = Table(
        "table", "asset", "check", "result", "summary", title=f"asset checks, run {run_id}"
    )
    for o in outcomes:
        result = (
            "pass" if o.passed else ("[red]ERROR[/red]" if o.is_error else "[yellow]WARN[/yellow]")
        )
        table.add_row(o.table, o.asset, o.check, result, o.description)
    console.print(table)
    errors = [o for o in outcomes if o.is_error]
    warns = [o for o in outcomes if not o.passed and not o.is_error]
    console.print(
        f"{len(outcomes)} checks: {len(outcomes) - len(errors) - len(warns)} passed, "
        f"{len(warns)} warnings, {len(errors)} errors"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps([o.__dict__ for o in outcomes], indent=2, default=str), encoding="utf-8"
        )
    return 1 if errors else 0


def _cmd_evolve(settings: Settings, args: argparse.Namespace) -> int:
    """Apply a schema change to one table through the evolve_schemas job (recorded in Dagster)."""
    import dagster as dg

    from cdc_assets.assets.schema import evolve_run_config
    from cdc_assets.definitions import build_defs

    config: dict[str, Any] = {"trigger": "manual"}
    if args.spec:
        config["proposed_spec"] = _read_text(args.spec)
    else:
        config["source_ddl"] = _read_text(args.ddl)
        config["audit_ddl"] = [_read_text(a) for a in args.audit or []]
    defs = build_defs(settings=settings)
    result = defs.resolve_job_def("evolve_schemas").execute_in_process(
        instance=_dagster_instance(settings),
        run_config={**evolve_run_config(args.table, **config), **QUIET},
        asset_selection=[dg.AssetKey(["schema", args.table])],
        raise_on_error=False,
    )
    if not result.success:
        failures = result.get_step_failure_events()
        for event in failures:
            error = event.event_specific_data.error  # type: ignore[union-attr]
            _print_plain(error.message if error else "evolution failed")
        return 1
    meta = _last_metadata(result, f"schema__{args.table}")
    _print_plain(str(meta.get("diff", "")).strip("`\n"))
    console.print(
        f"{args.table}: {meta.get('decision')}, spec v{meta.get('from_version')} -> "
        f"v{meta.get('spec_version')}; backfilled base rows: {meta.get('backfill_base_rows', 0)}"
    )
    return 0


def _cmd_backfill(settings: Settings, args: argparse.Namespace) -> int:
    """Phase 3 of an evolution on its own: recover columns from the ledger's row images."""
    from datetime import datetime

    from cdc_assets.pipeline.evolve import backfill_from_ledger
    from cdc_assets.resources import build_resources

    spec = _find_spec(settings, args.table)
    known = {c.sink_name for c in spec.columns}
    unknown = sorted(set(args.column) - known)
    if unknown:
        console.print(f"[red]error:[/red] {spec.name} has no column(s) {unknown}")
        return 2
    res = build_resources(settings)
    result = backfill_from_ledger(
        res["spark"].get_session(),
        settings.catalog_name,
        res["iceberg"].load_catalog(),
        spec,
        args.column,
        since=datetime.fromisoformat(args.since) if args.since else None,
    )
    console.print(
        f"{spec.name}: {result.ledger_rows_updated} ledger rows and {result.base_rows_updated} "
        f"base rows got {', '.join(args.column)}; {result.redriven} dead letters redriven "
        f"({result.seconds:.1f}s)"
    )
    return 0


def _cmd_sync(settings: Settings, args: argparse.Namespace) -> int:
    """The pipeline over your own spec directory, without the demo: create missing tables, then
    cycles of ingest, evolutions the schema_changes sensor asks for, and upsert (the daemon's
    order, in this process) once, or until a cycle finds nothing new (``--until-caught-up``)."""
    from cdc_assets.jobs.inprocess import PipelineDriver
    from cdc_assets.resources.local_stack import require_bootstrap

    if settings.kafka_bootstrap is None:
        require_bootstrap(settings)  # a clear error when neither a broker nor the stack is up
    driver = PipelineDriver(settings, _dagster_instance(settings))
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
    console.print(report_tables(settings))
    return 0


def _cmd_fleet(settings: Settings, args: argparse.Namespace) -> int:
    """Every table's lag, watermark delay, dead letters by reason, evolutions and run times,
    worst first; with --prometheus, the same as Prometheus exposition text (a file for
    node_exporter's textfile collector, or - for stdout); with --serve, on an HTTP endpoint."""
    from cdc_assets.checks.fleet import prometheus_text, worst_first
    from cdc_assets.pipeline.fleet import fleet_metrics
    from cdc_assets.resources import build_resources
    from cdc_assets.spec import load_specs

    specs = load_specs(settings.specs_dir)
    resources = build_resources(settings)
    catalog = resources["iceberg"].load_catalog()

    def measure() -> list[Any]:
        return fleet_metrics(resources["kafka"], catalog, specs, _dagster_instance(settings))

    if args.serve is not None:
        return _serve_fleet(args.serve, measure)
    metrics = worst_first(measure())
    if args.prometheus:
        text = prometheus_text(metrics)
        if args.prometheus == "-":
            sys.stdout.write(text)
            return 0
        Path(args.prometheus).write_text(text, encoding="utf-8")
    table = Table(
        "table",
        "server",
        "lag records",
        "lag s",
        "base delay s",
        "dead letters",
        "evolutions",
        "last evolution s",
        "note",
    )
    for m in metrics[: args.limit]:
        table.add_row(
            m.table,
            m.server,
            _number(m.lag_records),
            _number(m.lag_seconds),
            _number(m.watermark_delay_seconds),
            str(m.dead_letter_total),
            str(m.evolutions),
            _number(m.last_evolution_seconds),
            (m.error or "")[:80],
        )
    console.print(table)
    return 0


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _serve_fleet(port: int, measure: Any) -> int:
    """Serve the fleet metrics on 127.0.0.1:<port>/metrics, measured at every scrape."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from cdc_assets.checks.fleet import prometheus_text

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.rstrip("/") not in ("", "/metrics"):
                self.send_error(404)
                return
            body = prometheus_text(measure()).encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    console.print(f"fleet metrics on http://127.0.0.1:{server.server_port}/metrics (Ctrl-C stops)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def _cmd_report(settings: Settings, _: argparse.Namespace) -> int:
    console.print(report_tables(settings))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cdc-assets", description=__doc__)
    parser.add_argument(
        "--home", help="state directory (default: $CDC_ASSETS_HOME or ./.cdc-assets)"
    )
    parser.add_argument("--specs", help="table spec directory (default: ./table_specs)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("jars", help="fetch the JVM jars with Maven (no-op when cached)").set_defaults(
        fn=_cmd_jars
    )
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
    stack.set_defaults(fn=_cmd_stack)
    specs = sub.add_parser(
        "specs", help="validate, import (from DDL or a live source) and diff table specs"
    )
    specs_sub = specs.add_subparsers(dest="action", required=True)
    validate = specs_sub.add_parser("validate", help="validate every spec of a directory")
    validate.add_argument("directory", nargs="?")
    imp = specs_sub.add_parser(
        "import-ddl", help="a spec from a CREATE TABLE, or the next version of an existing spec"
    )
    imp.add_argument("file", help="file with the CREATE TABLE (a dump of the table will do)")
    imp.add_argument("--connector", choices=["mysql", "mariadb", "postgresql"])
    imp.add_argument("--database", help="source database")
    imp.add_argument("--topic", help="Kafka topic of the table's change events")
    imp.add_argument("--namespace", help="Iceberg namespace")
    imp.add_argument("--name", help="spec name (default: the table name)")
    imp.add_argument("--schema", help="PostgreSQL schema, when the DDL does not qualify the table")
    imp.add_argument("--sensitive", help="comma-separated columns to mark sensitive")
    imp.add_argument("--spec", help="existing spec: write its next version for the changed DDL")
    imp.add_argument(
        "--audit",
        action="append",
        help="with --spec: file of DDL statements run on the source since that version, "
        "which proves renames and drops (repeatable)",
    )
    imp.add_argument("--out", help="write the spec to this file instead of stdout")
    src = specs_sub.add_parser(
        "import-source",
        help="a spec from a live source table's information_schema, written to the spec directory",
    )
    src.add_argument("--connector", required=True, choices=["mysql", "mariadb", "postgresql"])
    src.add_argument("--database", required=True, help="source database")
    src.add_argument("--table", required=True, help="source table")
    src.add_argument("--schema", help="PostgreSQL schema (default: public)")
    src.add_argument(
        "--url",
        help="JDBC URL of the source database (default: CDC_ASSETS_SOURCE_URL_<CONNECTOR>_"
        "<DATABASE> or CDC_ASSETS_SOURCE_URL_<DATABASE>, else the local stack's source)",
    )
    src.add_argument(
        "--topic",
        help="Kafka topic of the table's change events (default: <prefix>.<database>.<table>, "
        "PostgreSQL <prefix>.<schema>.<table>)",
    )
    src.add_argument(
        "--topic-prefix", help="Debezium topic.prefix for the default topic (default: database)"
    )
    src.add_argument("--namespace", help="Iceberg namespace (default: the database)")
    src.add_argument("--name", help="spec name (default: the table name)")
    src.add_argument("--sensitive", help="comma-separated columns to mark sensitive")
    src.add_argument("--out", help="spec file to write (default: <spec dir>/<name>.yaml)")
    src.add_argument("--force", action="store_true", help="replace an existing spec file")
    rec = specs_sub.add_parser(
        "import-schema-record",
        help="a spec from Debezium's schema-change topic (MySQL/MariaDB): the table's newest "
        "record",
    )
    rec.add_argument("--schema-topic", required=True, help="the connector's schema-change topic")
    rec.add_argument("--database", required=True, help="source database")
    rec.add_argument("--table", required=True, help="source table")
    rec.add_argument("--connector", choices=["mysql", "mariadb"], default="mysql")
    rec.add_argument(
        "--topic",
        help="Kafka topic of the table's change events (default: <prefix>.<database>.<table>, "
        "prefix = the record's server name)",
    )
    rec.add_argument("--namespace", help="Iceberg namespace (default: the database)")
    rec.add_argument("--name", help="spec name (default: the table name)")
    rec.add_argument("--sensitive", help="comma-separated columns to mark sensitive")
    rec.add_argument("--out", help="write the spec here (validated; not over another spec)")
    diff = specs_sub.add_parser(
        "diff", help="plan the change between two spec versions; exit 1 if any is unsupported"
    )
    diff.add_argument("paths", nargs="*", metavar="PATH", help="OLD NEW: spec files or dirs")
    diff.add_argument(
        "--git", nargs=2, metavar=("REV_A", "REV_B"), help="compare --dir at two git revisions"
    )
    diff.add_argument("--dir", default="table_specs", help="spec directory (with --git)")
    diff.add_argument(
        "--audit", action="append", help="file of source DDL statements proving renames"
    )
    specs.set_defaults(fn=_cmd_specs)
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
    run.set_defaults(fn=_cmd_run)
    sub.add_parser(
        "dagster-home", help="create the Dagster home under the CDC home and print its path"
    ).set_defaults(fn=_cmd_dagster_home)
    dev = sub.add_parser(
        "dev",
        help="the stack with Spark Connect, then dagster dev (UI, daemon); Ctrl-C or SIGTERM "
        "stops dagster dev and everything it started",
    )
    dev.add_argument("--port", type=int, default=3000, help="webserver port on 127.0.0.1")
    dev.set_defaults(fn=_cmd_dev)
    sync = sub.add_parser(
        "sync",
        help="run the pipeline over the spec directory (CDC_ASSETS_SPECS), no demo: create "
        "missing tables, then ingest, evolve, upsert once or until caught up",
    )
    sync.add_argument(
        "--until-caught-up",
        action="store_true",
        help="repeat cycles until one finds nothing new (exit 1 if --max-cycles is reached)",
    )
    sync.add_argument("--max-cycles", type=int, default=20, help="with --until-caught-up")
    sync.set_defaults(fn=_cmd_sync)
    fleet = sub.add_parser(
        "fleet",
        help="every table's lag, base delay, dead letters, evolutions and run times, worst "
        "first; Prometheus exposition with --prometheus or --serve",
    )
    fleet.add_argument("--limit", type=int, default=50, help="rows of the summary (worst first)")
    fleet.add_argument(
        "--prometheus", metavar="FILE", help="also write Prometheus exposition text (- : stdout)"
    )
    fleet.add_argument(
        "--serve", type=int, metavar="PORT", help="serve /metrics on 127.0.0.1:PORT instead"
    )
    fleet.set_defaults(fn=_cmd_fleet)
    sub.add_parser("report", help="tables of every spec as the catalog sees them").set_defaults(
        fn=_cmd_report
    )
    checks = sub.add_parser(
        "checks", help="run every asset check on the live tables; exit 1 on an error"
    )
    checks.add_argument("--table", action="append", help="only this table (repeatable)")
    checks.add_argument("--check", action="append", help="only this check name (repeatable)")
    checks.add_argument("--json", help="also write the outcomes to this JSON file")
    checks.add_argument(
        "--demo",
        action="store_true",
        help="first run the generated-events demo (`cdc-assets run --generator`, no databases): "
        "what the test suite checks once per session",
    )
    checks.add_argument("--events", type=int, default=2000, help="with --demo: events per table")
    checks.set_defaults(fn=_cmd_checks)
    evolve = sub.add_parser(
        "evolve", help="apply a schema change to a table (Iceberg, spec file, backfill)"
    )
    evolve.add_argument("table", help="spec name")
    proposed = evolve.add_mutually_exclusive_group(required=True)
    proposed.add_argument("--spec", help="the proposed spec version (YAML file)")
    proposed.add_argument("--ddl", help="the source table's CREATE TABLE (SQL file)")
    evolve.add_argument("--audit", action="append", help="DDL that ran since (file, repeatable)")
    evolve.set_defaults(fn=_cmd_evolve)
    backfill = sub.add_parser(
        "backfill", help="recover columns of the current spec from the ledger's row images"
    )
    backfill.add_argument("table", help="spec name")
    backfill.add_argument(
        "--column", action="append", required=True, help="sink column name (repeatable)"
    )
    backfill.add_argument("--since", help="ISO time; default: the whole ledger")
    backfill.set_defaults(fn=_cmd_backfill)
    redrive = sub.add_parser("redrive", help="replay a table's dead letters after a fix")
    redrive.add_argument("table", help="spec name")
    redrive.add_argument("--reason", help="only dead letters whose reason contains this text")
    redrive.set_defaults(fn=_cmd_redrive)
    boot = sub.add_parser(
        "bootstrap", help="load base from a source dump and stitch it to the change stream"
    )
    boot.add_argument("table", help="spec name")
    what = boot.add_mutually_exclusive_group(required=True)
    what.add_argument("--parquet", help="Parquet file or directory of the dump")
    what.add_argument("--csv", help="CSV file or directory of the dump (header line required)")
    what.add_argument("--jdbc-url", help="JDBC URL of the live source database")
    what.add_argument(
        "--source",
        dest="from_source",
        action="store_true",
        help="dump the spec's source table; JDBC URL from CDC_ASSETS_SOURCE_URL_<CONNECTOR>_"
        "<DATABASE> or CDC_ASSETS_SOURCE_URL_<DATABASE>, else the local stack's source",
    )
    boot.add_argument(
        "--jdbc-table",
        help="table to read (default: the spec's source table, qualified by its database or "
        "PostgreSQL schema when the position is read from the source)",
    )
    boot.add_argument("--jdbc-user")
    boot.add_argument("--jdbc-password-env", help="environment variable holding the password")
    boot.add_argument("--jdbc-driver", help="JDBC driver class, when the URL does not imply it")
    boot.add_argument(
        "--position",
        help="source position of the dump as major[:minor[:row]]: binlog file number:position"
        " (MySQL/MariaDB) or the LSN as a number (PostgreSQL); required for files, and for a "
        "JDBC dump the default is a watermark read from the live source before the dump",
    )
    boot.add_argument(
        "--watermark-timeout",
        type=float,
        default=300.0,
        help="seconds to wait for transactions open at the watermark (PostgreSQL) or for the "
        "table's read lock (MySQL) (default: 300)",
    )
    boot.add_argument("--replace", action="store_true", help="overwrite a base that has rows")
    boot.set_defaults(fn=_cmd_bootstrap)
    rollback = sub.add_parser(
        "rollback-watermark", help="make the next upsert re-read the ledger from a time"
    )
    rollback.add_argument("table", help="spec name")
    rollback.add_argument("--to", required=True, help="ISO time, e.g. 2026-11-22T10:00:00+00:00")
    rollback.set_defaults(fn=_cmd_rollback)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = load_settings()
    # Flags become environment too, so Dagster code loaded later sees the same settings.
    if args.home:
        settings = replace(settings, home=Path(args.home).resolve())
        os.environ[ENV_HOME] = str(settings.home)
    if args.specs:
        settings = replace(settings, specs_dir=Path(args.specs).resolve())
        os.environ[ENV_SPECS] = str(settings.specs_dir)
    try:
        code: int = args.fn(settings, args)
    except CdcAssetsError as err:
        console.print(f"[red]error:[/red] {err}")
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
