"""Commands on one table: `bootstrap`, `rollback-watermark`, `redrive`, `protect-rewrite`,
`checks`, `evolve`, `backfill`."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from rich.table import Table

from cdc_assets.cli.common import (
    QUIET,
    cell,
    console,
    dagster_instance,
    find_spec,
    last_metadata,
    print_plain,
    read_text,
)
from cdc_assets.cli.plugins import runner
from cdc_assets.cli.specs import source_jdbc_url
from cdc_assets.errors import CdcAssetsError
from cdc_assets.settings import Settings


def cmd_bootstrap(settings: Settings, args: argparse.Namespace) -> int:
    """Load base from a dump. A dump read here from the live source (--jdbc-url or --source)
    without --position is stitched by a watermark read from the source before the dump."""
    from cdc_assets.pipeline.bootstrap.bootstrap import (
        bootstrap_base,
        bootstrap_from_source,
        read_files,
        read_jdbc,
    )
    from cdc_assets.resources import build_resources
    from cdc_assets.schema.position import Position

    spec = shard_view(find_spec(settings, args.table), args.shard)
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


def shard_view(spec: Any, shard: str | None) -> Any:
    """The spec, or its view of ``shard`` (required for a sharded spec, refused otherwise)."""
    names = spec.source.shard_names
    if shard is None:
        if spec.source.shards:
            raise CdcAssetsError(
                f"{spec.name} has shards {', '.join(names)}: name one with --shard"
            )
        return spec
    views = {v.shard.shard_name: v for v in spec.shard_specs() if v.shard is not None}
    if shard not in views:
        known = f"its shards are {', '.join(names)}" if names else "it has no shards"
        raise CdcAssetsError(f"{spec.name}: no shard {shard!r}; {known}")
    return views[shard]


def cmd_rollback(settings: Settings, args: argparse.Namespace) -> int:
    from datetime import datetime

    from cdc_assets.pipeline.bootstrap.bootstrap import rollback_watermark
    from cdc_assets.pipeline.shared.offsets import encode_offsets
    from cdc_assets.resources import build_resources

    spec = shard_view(find_spec(settings, args.table), args.shard)
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


def cmd_history(settings: Settings, args: argparse.Namespace) -> int:
    """Update a table's history (``--full``: from the whole ledger), or print it ``--as-of``."""
    from datetime import UTC, datetime

    from rich.table import Table

    from cdc_assets.pipeline.upsert.history import read_as_of, update_history
    from cdc_assets.resources import build_resources

    spec = find_spec(settings, args.table)
    if not spec.history.enabled:
        console.print(
            f"[red]error:[/red] {spec.name} keeps no history: set history.mode: scd2 in its spec"
        )
        return 2
    res = build_resources(settings)
    if args.as_of:
        at = datetime.fromisoformat(args.as_of)
        at = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
        rows = read_as_of(res["iceberg"].load_catalog(), spec, at)
        table = Table(
            title=f"{spec.name} as of {at.isoformat()} (source time): {rows.num_rows} rows"
        )
        names = rows.column_names
        for name in names:
            table.add_column(name)
        for row in rows.slice(0, args.limit).to_pylist():
            table.add_row(*(cell(row[n]) for n in names))
        console.print(table)
        return 0
    spark = res["spark"]
    for view in spec.shard_specs():
        result = update_history(
            spark.get_session(),
            spark.catalog.name,
            res["iceberg"].load_catalog(),
            view,
            full=args.full,
        )
        where = f" (shard {view.shard.shard_name})" if view.shard is not None else ""
        keys = "" if result.touched_keys is None else f", {result.touched_keys} keys recomputed"
        console.print(
            f"{spec.name}{where}: history {result.mode}: {result.reason}{keys} "
            f"({result.seconds:.1f}s)"
        )
    return 0


def cmd_consistent(settings: Settings, args: argparse.Namespace) -> int:
    """Move a consistency group's cut as far as its tables allow, and say where it stands."""
    from cdc_assets.pipeline.upsert.consistency import update_cut
    from cdc_assets.resources import build_resources
    from cdc_assets.spec import load_specs
    from cdc_assets.spec.groups import consistency_groups

    groups = consistency_groups(load_specs(settings.specs_dir))
    if args.group not in groups:
        known = ", ".join(sorted(groups)) or "none"
        console.print(
            f"[red]error:[/red] no consistency group {args.group!r} in {settings.specs_dir} "
            f"(groups: {known})"
        )
        return 2
    res = build_resources(settings)
    spark = res["spark"]
    result = update_cut(
        spark.get_session(),
        spark.catalog.name,
        res["iceberg"].load_catalog(),
        res["kafka"],
        args.group,
        groups[args.group],
    )
    at = result.cut_source_ts.isoformat() if result.cut_source_ts else "-"
    state = "moved" if result.moved else result.reason
    console.print(
        f"{args.group}: cut at transaction {result.txn_id or '(none yet)'} (source time {at}; "
        f"{state}); {result.pending} transactions pending, lag {result.lag_ms / 1000:.1f}s, "
        f"{result.transactions_read} transaction records read ({result.seconds:.1f}s)"
    )
    return 0


def cmd_redrive(settings: Settings, args: argparse.Namespace) -> int:
    from cdc_assets.pipeline.ingest.redrive import redrive
    from cdc_assets.resources import build_resources
    from cdc_assets.spec import load_specs

    specs = {s.name: s for s in load_specs(settings.specs_dir)}
    if args.table not in specs:
        console.print(f"[red]error:[/red] no table spec {args.table!r}; known: {sorted(specs)}")
        return 2
    spark = build_resources(settings)["spark"]
    still_dead = 0
    # A sharded table's dead letters are per shard: each replayed into its shard's ledger.
    for view in specs[args.table].shard_specs():
        result = redrive(spark.get_session(), spark.catalog.name, view, reason_contains=args.reason)
        where = f" (shard {view.shard.shard_name})" if view.shard is not None else ""
        console.print(
            f"{result.table}{where}: replayed {result.replayed} dead letter(s): "
            f"{result.to_ledger} to the ledger, {result.skipped} skipped, "
            f"{result.still_dead} still failing"
        )
        for reason, count in sorted(result.reasons.items(), key=lambda kv: -kv[1]):
            console.print(f"  {count:>6}  {reason}")
        still_dead += result.still_dead
    return 0 if still_dead == 0 else 1


def cmd_protect_rewrite(settings: Settings, args: argparse.Namespace) -> int:
    """Rewrite a table's values stored before their protection; 1 while any is left."""
    from cdc_assets.pipeline.maintenance.reprotect import reprotect_table
    from cdc_assets.resources import build_resources

    spec = find_spec(settings, args.table)
    if not spec.protects:
        console.print(f"{spec.name}: protects no value; nothing to rewrite")
        return 0
    res = build_resources(settings)
    spark = res["spark"]
    result = reprotect_table(
        spark.get_session(),
        spark.catalog.name,
        res["iceberg"].load_catalog(),
        spec,
        progress=True,
        console=console,
        rekey=args.rekey,
    )
    rows = ", ".join(f"{layer} {n}" for layer, n in sorted(result.rows_rewritten.items()))
    console.print(
        f"{spec.name}: {result.plain_before} unprotected value(s) before, {result.plain_after} "
        f"after; rows written: {rows or 'none'}; {result.snapshots_expired} snapshot(s) "
        f"expired ({result.seconds:.1f}s)"
    )
    if args.rekey:
        console.print(
            f"  key ids in use after: {', '.join(result.key_ids_after) or 'none'}; "
            f"{result.stale_after} encrypted value(s) or payload(s) still of a retired key"
        )
    for kept in result.kept_with_plaintext:
        console.print(f"  kept, still unprotected: {kept}")
    if result.kept_with_plaintext:
        console.print(
            "  the pipeline still needs these snapshots (base or the history has not read "
            "them): run the table's upsert, then this command again"
        )
    return 0 if result.clean else 1


def cmd_checks(settings: Settings, args: argparse.Namespace) -> int:
    """Every asset check against the live tables (with --demo, after a fresh run of the
    generated-events demo, `cdc-assets run --generator`); 1 when any error-severity check fails."""
    import json

    from cdc_assets.checks.runner import run_checks
    from cdc_assets.definitions import build_defs

    if args.demo:
        code = runner("generator-demo")(settings, args)
        if code:
            return code
        console.print("[bold]asset checks[/bold] on the demo's tables")
    # the demo's tables hold generated events, not the local sources' rows
    defs = build_defs(settings=settings, local_sources=not args.demo)
    outcomes, run_id = run_checks(
        defs, dagster_instance(settings), tables=args.table or None, checks=args.check or None
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


def cmd_evolve(settings: Settings, args: argparse.Namespace) -> int:
    """Apply a schema change to one table through the evolve_schemas job (recorded in Dagster)."""

    from cdc_assets.assets.keys import asset_key
    from cdc_assets.assets.schema import evolve_run_config
    from cdc_assets.definitions import build_defs

    config: dict[str, Any] = {"trigger": "manual"}
    if args.spec:
        config["proposed_spec"] = read_text(args.spec)
    else:
        config["source_ddl"] = read_text(args.ddl)
        config["audit_ddl"] = [read_text(a) for a in args.audit or []]
    defs = build_defs(settings=settings)
    result = defs.resolve_job_def("evolve_schemas").execute_in_process(
        instance=dagster_instance(settings),
        run_config={**evolve_run_config(args.table, **config), **QUIET},
        asset_selection=[asset_key("schema", args.table)],
        raise_on_error=False,
    )
    if not result.success:
        failures = result.get_step_failure_events()
        for event in failures:
            error = event.event_specific_data.error  # type: ignore[union-attr]
            print_plain(error.message if error else "evolution failed")
        return 1
    meta = last_metadata(result, asset_key("schema", args.table))
    print_plain(str(meta.get("diff", "")).strip("`\n"))
    console.print(
        f"{args.table}: {meta.get('decision')}, spec v{meta.get('from_version')} -> "
        f"v{meta.get('spec_version')}; backfilled base rows: {meta.get('backfill_base_rows', 0)}"
    )
    return 0


def cmd_backfill(settings: Settings, args: argparse.Namespace) -> int:
    """Phase 3 of an evolution on its own: recover columns from the ledger's row images."""
    from datetime import datetime

    from cdc_assets.pipeline.evolution.evolve import backfill_from_ledger
    from cdc_assets.resources import build_resources

    spec = find_spec(settings, args.table)
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
    if result.ledger_rows_rejected:
        console.print(
            f"{result.ledger_rows_rejected} ledger rows hold a value the spec's type refuses "
            f"(left null), first at partition:offset {', '.join(result.rejected_examples)}"
        )
    return 0
