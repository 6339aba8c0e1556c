"""`cdc-assets specs`: validate, import (from DDL, a schema-change record or a live source) and
diff table specs."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from rich.table import Table

from cdc_assets.cli.common import console, print_plain, read_text
from cdc_assets.errors import CdcAssetsError
from cdc_assets.settings import Settings
from cdc_assets.spec.models import TableSpec


def cmd_specs(settings: Settings, args: argparse.Namespace) -> int:
    from cdc_assets.spec import load_specs

    if args.action == "import-ddl":
        return _specs_import_ddl(args)
    if args.action == "import-source":
        return _specs_import_source(settings, args)
    if args.action == "import-schema-record":
        return _specs_import_schema_record(settings, args)
    if args.action == "diff":
        return _specs_diff(args)
    if args.action == "export":
        return _specs_export(settings, args)
    directory = Path(args.directory) if args.directory else settings.specs_dir
    specs = load_specs(directory)
    table = Table("spec", "version", "source", "topic", "columns", "key", "buckets")
    for s in specs:
        table.add_row(
            s.name,
            str(s.spec_version),
            f"{s.source.connector}:{s.source.database}.{s.source.table}",
            ", ".join(s.source.topics),
            str(len(s.columns)),
            ", ".join(s.primary_key),
            str(s.base.buckets),
        )
    console.print(table)
    console.print(f"{len(specs)} valid spec(s) in {directory}")
    return 0


def _specs_import_ddl(args: argparse.Namespace) -> int:
    """A spec from a CREATE TABLE, or with --spec the next version of an existing one."""
    from cdc_assets.schema.evolution import apply_plan
    from cdc_assets.spec.ddl_import import plan_from_ddl, spec_from_ddl
    from cdc_assets.spec.load import load_spec_text
    from cdc_assets.spec.versions import render_spec_yaml

    ddl = read_text(args.file)
    sensitive = [c.strip() for c in (args.sensitive or "").split(",") if c.strip()]
    if args.spec:
        if args.protect or args.drop_fields:
            raise CdcAssetsError(
                "--protect and --drop-fields are for a new spec: protecting a column of an "
                "existing table is refused (docs/sensitive-data.md#changing-protections)"
            )
        if args.buckets is not None:
            raise CdcAssetsError(
                "--buckets is for a new spec: an existing table keeps its bucket count"
            )
        current = load_spec_text(read_text(args.spec), args.spec)
        audit = [read_text(a) for a in args.audit or []]
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
            buckets=args.buckets,
        )
        spec = _protected(spec, args)
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
    from cdc_assets.pipeline.evolution.schema_topic import newest_change_of
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
        buckets=args.buckets,
    )
    spec = spec.model_copy(
        update={"source": spec.source.model_copy(update={"schema_change_topic": args.schema_topic})}
    )
    spec = _protected(spec, args)
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
    from cdc_assets.local_servers.endpoints import local_source_urls
    from cdc_assets.settings import source_url_variables

    if explicit:
        return explicit
    url = settings.source_url(database, connector, server)
    if url:
        return url
    local = local_source_urls(settings)
    for name in source_url_variables(database, connector, server):
        if name in local:
            return local[name]
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
    from cdc_assets.pipeline.bootstrap.source_schema import import_source_spec, source_size
    from cdc_assets.resources import build_resources
    from cdc_assets.spec.ddl_import import identifier
    from cdc_assets.spec.information_schema import SourceTable
    from cdc_assets.spec.sizing import buckets_for
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
    buckets, how = args.buckets, "as given"
    if buckets is None:
        size = source_size(spark, url, source)
        buckets = buckets_for(size)
        how = f"for {size.describe()}" if size is not None else "the default"
    spec, _ = import_source_spec(
        spark,
        url,
        source,
        topic=args.topic,
        topic_prefix=args.topic_prefix,
        namespace=args.namespace,
        name=name,
        sensitive=sensitive,
        buckets=buckets,
    )
    spec = _protected(spec, args)
    header = (
        f"{spec.name} version {spec.spec_version}: {source.qualified()} in {args.connector} "
        f"database {args.database},\nread from its information_schema by "
        "`cdc-assets specs import-source`."
    )
    text = render_spec_yaml(spec, header)
    write_spec_checked(target, text)
    sys.stdout.write(text)
    print(f"wrote {target} (read from {redact_url(url)})", file=sys.stderr)
    print(f"base: bucket({spec.base.buckets}, {spec.bucket_column.name}), {how}", file=sys.stderr)
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

    audit = [read_text(a) for a in args.audit or []]
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
        old_text, new_text = (SpecText(p, read_text(p)) for p in args.paths)
        reviews = [review_pair(old_text, new_text, audit)]
    for review in reviews:
        print_plain(review.describe())
    failed = [r.name for r in reviews if not r.ok]
    verdict = f"unsupported: {', '.join(failed)}" if failed else "all supported"
    print_plain(f"{len(reviews)} spec(s) compared, {verdict}")
    return 1 if failed else 0


def _specs_export(settings: Settings, args: argparse.Namespace) -> int:
    """The catalog's spec versions newer than the checkout's files, written there and committed
    on a branch of their own."""
    from datetime import UTC, datetime

    from cdc_assets.pipeline.evolution.spec_store import base_table, stored_specs
    from cdc_assets.pipeline.shared.meta_tables import read_history
    from cdc_assets.resources import build_resources
    from cdc_assets.spec import load_specs
    from cdc_assets.spec.export import (
        ExportedSpec,
        branch_name,
        commit_message,
        evolutions_between,
        newer_stored,
    )
    from cdc_assets.spec.review import git
    from cdc_assets.spec.versions import render_spec_yaml

    checkout = Path(args.to).resolve()
    directory = checkout / args.dir
    specs = load_specs(directory)
    catalog = build_resources(settings)["iceberg"].load_catalog()
    stored = stored_specs(catalog, {s.name for s in specs}, cache=False)
    history = read_history(catalog)
    exports = []
    for spec in specs:
        newer = stored.get((spec.name, base_table(spec)))
        if newer is not None and newer_stored(spec, newer):
            steps = evolutions_between(history, spec.name, spec.spec_version, newer.spec_version)
            exports.append(
                ExportedSpec(spec.spec_version, newer, render_spec_yaml(newer), tuple(steps))
            )
    if not exports:
        print_plain(f"{len(specs)} spec(s) in {directory}: none has a newer stored version")
        return 0
    files = [directory / f"{e.name}.yaml" for e in exports]
    if not args.no_commit:
        dirty = git(["status", "--porcelain", "--", *map(str, files)], checkout)
        if dirty.strip():
            raise CdcAssetsError(
                f"{checkout} has uncommitted changes to {', '.join(f.name for f in files)}: "
                "commit or stash them first (or pass --no-commit)"
            )
    branch = args.branch or branch_name(datetime.now(UTC))
    if not args.no_commit:
        git(["switch", "-c", branch], checkout)
    for export, path in zip(exports, files, strict=True):
        path.write_text(export.yaml, encoding="utf-8")
        print_plain(f"{path}: v{export.file_version} -> v{export.stored.spec_version}")
    if args.no_commit:
        return 0
    git(["add", "--", *map(str, files)], checkout)
    identity = []
    if not git(["config", "--get", "user.email"], checkout, check=False).strip():
        # A deployment's machine may have no git identity: name the tool, not a person.
        identity = ["-c", "user.name=cdc-assets", "-c", "user.email=cdc-assets@localhost"]
    git([*identity, "commit", "-q", "-F", "-"], checkout, stdin=commit_message(exports))
    head = git(["rev-parse", "--short", "HEAD"], checkout).strip()
    print_plain(
        f"branch {branch}, commit {head}: {len(exports)} spec(s); review with "
        f"`cdc-assets specs diff --git <base> {branch}`"
    )
    return 0


def _protected(spec: TableSpec, args: argparse.Namespace) -> TableSpec:
    """``spec`` with the protections of ``--protect`` and the fields of ``--drop-fields``."""
    from cdc_assets.spec.ddl_import import with_protections

    protect = {}
    for item in (args.protect or "").split(","):
        if not item.strip():
            continue
        column, sep, protection = item.partition("=")
        if not sep or not column.strip() or not protection.strip():
            raise CdcAssetsError(f"--protect {item!r}: give COLUMN=PROTECTION")
        protect[column.strip()] = protection.strip()
    drop = [c.strip() for c in (args.drop_fields or "").split(",") if c.strip()]
    return with_protections(spec, protect, drop)
