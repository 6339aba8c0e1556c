"""The `cdc-assets` argument parser and entry point: one sub-command per command module."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from cdc_assets.cli.common import console
from cdc_assets.cli.environment import cmd_dagster_home, cmd_jars, cmd_spark_conf
from cdc_assets.cli.fleet import cmd_fleet
from cdc_assets.cli.kafka import CLIENTS, cmd_kafka_conf
from cdc_assets.cli.migrate import cmd_migrate_asset_keys
from cdc_assets.cli.plugins import add_plugin_commands
from cdc_assets.cli.report import cmd_report
from cdc_assets.cli.specs import cmd_specs
from cdc_assets.cli.sync import cmd_sync
from cdc_assets.cli.tables import (
    cmd_backfill,
    cmd_bootstrap,
    cmd_checks,
    cmd_consistent,
    cmd_evolve,
    cmd_history,
    cmd_protect_rewrite,
    cmd_redrive,
    cmd_rollback,
)
from cdc_assets.errors import CdcAssetsError
from cdc_assets.settings import ENV_HOME, ENV_SPECS, load_settings

DESCRIPTION = (
    "Mirror databases into Apache Iceberg from Debezium change streams: the jar cache, the local "
    "stack, table specs, the demo, the pipeline and its checks."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cdc-assets", description=DESCRIPTION)
    parser.add_argument(
        "--home", help="state directory (default: $CDC_ASSETS_HOME or ./.cdc-assets)"
    )
    parser.add_argument("--specs", help="table spec directory (default: ./table_specs)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("jars", help="fetch the JVM jars with Maven (no-op when cached)").set_defaults(
        fn=cmd_jars
    )
    spark_conf = sub.add_parser(
        "spark-conf",
        help="print the Spark properties a driver or Spark Connect server of this deployment "
        "needs (spark-defaults.conf lines; the catalog's credentials as *** unless asked)",
    )
    spark_conf.add_argument(
        "--show-secrets", action="store_true", help="print passwords, keys and tokens as they are"
    )
    spark_conf.set_defaults(fn=cmd_spark_conf)
    kafka_conf = sub.add_parser(
        "kafka-conf",
        help="print the Kafka client settings the CDC_ASSETS_KAFKA_* security block renders, for "
        "a client the project does not start (Connect worker, Debezium connector, spark-submit)",
    )
    kafka_conf.add_argument("client", choices=CLIENTS)
    kafka_conf.add_argument(
        "--show-secrets", action="store_true", help="print passwords and secrets as they are"
    )
    kafka_conf.set_defaults(fn=cmd_kafka_conf)
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
    imp.add_argument(
        "--protect",
        help="comma-separated COLUMN=PROTECTION (hash, encrypt, mask_email, mask_last4, "
        "mask_shape): protected at ingest (docs/sensitive-data.md)",
    )
    imp.add_argument(
        "--drop-fields", help="comma-separated source columns never stored (pipeline.drop_fields)"
    )
    imp.add_argument(
        "--buckets", type=int, help="base's bucket count of a new spec (default 16: no size known)"
    )
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
    src.add_argument(
        "--protect",
        help="comma-separated COLUMN=PROTECTION (hash, encrypt, mask_email, mask_last4, "
        "mask_shape): protected at ingest (docs/sensitive-data.md)",
    )
    src.add_argument(
        "--drop-fields", help="comma-separated source columns never stored (pipeline.drop_fields)"
    )
    src.add_argument(
        "--buckets",
        type=int,
        help="base's bucket count (default: from the table's size, one per 512 MiB of it on the "
        "source, a power of two; see docs/specs.md)",
    )
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
    rec.add_argument(
        "--protect",
        help="comma-separated COLUMN=PROTECTION (hash, encrypt, mask_email, mask_last4, "
        "mask_shape): protected at ingest (docs/sensitive-data.md)",
    )
    rec.add_argument(
        "--drop-fields", help="comma-separated source columns never stored (pipeline.drop_fields)"
    )
    rec.add_argument("--buckets", type=int, help="base's bucket count (default 16: no size known)")
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
    export = specs_sub.add_parser(
        "export",
        help="write the spec versions evolutions stored in the catalog into a git checkout, on "
        "a new branch, as one commit naming each change (ready for review)",
    )
    export.add_argument("--to", default=".", help="the git checkout (default: here)")
    export.add_argument("--dir", default="table_specs", help="spec directory in the checkout")
    export.add_argument(
        "--branch", help="branch to create (default: cdc-assets/spec-versions-<time>)"
    )
    export.add_argument(
        "--no-commit", action="store_true", help="only write the files: no branch, no commit"
    )
    specs.set_defaults(fn=cmd_specs)
    sub.add_parser(
        "dagster-home", help="create the Dagster home under the CDC home and print its path"
    ).set_defaults(fn=cmd_dagster_home)
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
    sync.add_argument(
        "--checks",
        action="store_true",
        help="then run every asset check once (cycles carry only the ingest's accounting "
        "check, as the sensors' runs do); exit 1 if one fails",
    )
    sync.set_defaults(fn=cmd_sync)
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
    fleet.set_defaults(fn=cmd_fleet)
    migrate = sub.add_parser(
        "migrate-asset-keys",
        help="move the Dagster history of raw/<t>, cdc/<t>, bucketed/<t>, schema/<t> to the keys "
        "that name their layer (raw/<t>_topic, cdc/<t>_cdc, ...)",
    )
    migrate.add_argument("--dry-run", action="store_true", help="only list what would move")
    migrate.add_argument("--keep-old", action="store_true", help="copy, but do not wipe old keys")
    migrate.set_defaults(fn=cmd_migrate_asset_keys)
    sub.add_parser("report", help="tables of every spec as the catalog sees them").set_defaults(
        fn=cmd_report
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
    checks.set_defaults(fn=cmd_checks)
    evolve = sub.add_parser(
        "evolve", help="apply a schema change to a table (Iceberg, spec file, backfill)"
    )
    evolve.add_argument("table", help="spec name")
    proposed = evolve.add_mutually_exclusive_group(required=True)
    proposed.add_argument("--spec", help="the proposed spec version (YAML file)")
    proposed.add_argument("--ddl", help="the source table's CREATE TABLE (SQL file)")
    evolve.add_argument("--audit", action="append", help="DDL that ran since (file, repeatable)")
    evolve.set_defaults(fn=cmd_evolve)
    backfill = sub.add_parser(
        "backfill", help="recover columns of the current spec from the ledger's row images"
    )
    backfill.add_argument("table", help="spec name")
    backfill.add_argument(
        "--column", action="append", required=True, help="sink column name (repeatable)"
    )
    backfill.add_argument("--since", help="ISO time; default: the whole ledger")
    backfill.set_defaults(fn=cmd_backfill)
    history = sub.add_parser(
        "history",
        help="bring a table's history (SCD2) up to its ledger, or read it as of a source time",
    )
    history.add_argument("table", help="spec name (its spec has history.mode: scd2)")
    how = history.add_mutually_exclusive_group()
    how.add_argument(
        "--full", action="store_true", help="recompute every key's versions from the whole ledger"
    )
    how.add_argument(
        "--as-of",
        help="print the rows as the source held them at this time (ISO, e.g. "
        "2026-12-01T09:30:00+00:00; no zone: UTC); reads, changes nothing",
    )
    history.add_argument("--limit", type=int, default=20, help="rows to print with --as-of")
    history.set_defaults(fn=cmd_history)
    consistent = sub.add_parser(
        "consistent",
        help="move a consistency group's cut to the newest transaction applied in all its tables",
    )
    consistent.add_argument("group", help="the group's name (consistency.group in its specs)")
    consistent.set_defaults(fn=cmd_consistent)
    redrive = sub.add_parser("redrive", help="replay a table's dead letters after a fix")
    redrive.add_argument("table", help="spec name")
    redrive.add_argument("--reason", help="only dead letters whose reason contains this text")
    redrive.set_defaults(fn=cmd_redrive)
    reprotect = sub.add_parser(
        "protect-rewrite",
        help="rewrite values stored before a column's protection, and expire the snapshots "
        "that held them (docs/sensitive-data.md)",
    )
    reprotect.add_argument("table", help="spec name")
    reprotect.add_argument(
        "--rekey",
        action="store_true",
        help="also encrypt again with the current key the values and dead letters encrypted "
        "with a retired one (CDC_ASSETS_PROTECTION_OLD_KEY_<ID>); hashes cannot be re-keyed",
    )
    reprotect.set_defaults(fn=cmd_protect_rewrite)
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
    boot.add_argument(
        "--shard",
        help="a sharded table's shard to load (its rows are replaced; the others stay): how a "
        "shard added to a live spec gets its existing rows",
    )
    boot.add_argument("--replace", action="store_true", help="overwrite a base that has rows")
    boot.set_defaults(fn=cmd_bootstrap)
    rollback = sub.add_parser(
        "rollback-watermark", help="make the next upsert re-read the ledger from a time"
    )
    rollback.add_argument("table", help="spec name")
    rollback.add_argument("--to", required=True, help="ISO time, e.g. 2026-11-22T10:00:00+00:00")
    rollback.add_argument("--shard", help="a sharded table's shard whose watermark moves")
    rollback.set_defaults(fn=cmd_rollback)
    add_plugin_commands(sub)
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
