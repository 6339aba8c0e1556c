"""The demo on real sources (`cdc-assets run`, the README's run command).

MariaDB and PostgreSQL change through their own clients, real Debezium connectors write the
changes to Kafka, and the pipeline mirrors them into Iceberg: a seeded workload over the three
example tables (inserts, updates of the same keys, deletes and re-inserts, primary-key updates,
transactions over several tables), then schema changes mid-stream on both servers (a column added
and a column widened on each), more workload in the new shape, and the pipeline cycles until it
has caught up. The source database is the oracle: base must equal ``SELECT *`` of the source.

Evolution writes spec files. Unless a spec directory is configured, the demo works on a copy of
``table_specs/`` under the home, so the repository's specs stay as they are.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdc_assets.jobs.inprocess import CycleResult
from cdc_assets.quality.mirror_diff import MirrorDiff
from cdc_assets.settings import Settings
from cdc_assets.spec.models import ColumnSpec, TableSpec
from cdc_assets_dev.demo import shards
from cdc_assets_dev.demo.workload import WorkloadGenerator, script
from cdc_assets_dev.stack import sources

# Schema changes made mid-stream: (server, database, SQL, the column they add or widen).
# Idempotent, so a second demo run changes nothing more (the schema-change records it writes
# plan no change).
SCHEMA_CHANGES: tuple[tuple[sources.ServerName, str, str], ...] = (
    (
        "mariadb",
        "app",
        "ALTER TABLE users ADD COLUMN IF NOT EXISTS nickname VARCHAR(40) NULL AFTER display_name;",
    ),
    ("mariadb", "shop", "ALTER TABLE order_items MODIFY COLUMN sku VARCHAR(128) NOT NULL;"),
    ("postgres", "shop", "ALTER TABLE public.orders ADD COLUMN IF NOT EXISTS coupon varchar(20);"),
    ("postgres", "shop", "ALTER TABLE public.orders ALTER COLUMN amount TYPE numeric(16,2);"),
)

# How the specs look to the workload after SCHEMA_CHANGES: (table, column, type, after).
_NEW_SHAPE: dict[str, list[tuple[str, str, str | None]]] = {
    "users": [("nickname", "varchar(40)", "display_name")],
    "order_items": [("sku", "varchar(128)", None)],
    "orders": [("coupon", "varchar(20)", None), ("amount", "numeric(16,2)", None)],
}

# Key ranges per demo run: a rerun writes keys of its own next to the rows of earlier runs.
KEY_STRIDE = 10_000_000


def demo_specs_dir(settings: Settings) -> Path:
    """The demo's own copy of the example specs (made once, then evolved in place)."""
    return settings.home / "demo-specs"


def prepare_specs(settings: Settings, project_specs: Path) -> Path:
    """The example specs and the sharded table's (``demo.shards``), copied once."""
    target = demo_specs_dir(settings)
    if not target.exists():
        shutil.copytree(project_specs, target)
    shards.ensure_spec(target)
    return target


def shaped(spec: TableSpec, *, add_missing: bool = True) -> TableSpec:
    """``spec`` as the source table looks after SCHEMA_CHANGES (for the workload's values): the
    source's exact types even where the spec has a vaguer one (PostgreSQL's new varchar(20)
    arrives as a Connect string, so the evolved spec says text). ``add_missing=False``: only the
    columns the spec has (before the changes, or on a rerun)."""
    columns = list(spec.columns)
    next_id = max(c.id for c in columns) + 1
    for name, type_text, after in _NEW_SHAPE.get(spec.name, []):
        existing = next((i for i, c in enumerate(columns) if c.name == name), None)
        if existing is not None:
            # Where the spec knows the column: its own type, unless vaguer than the source's.
            if columns[existing].type == "text" or add_missing:
                columns[existing] = columns[existing].model_copy(update={"type": type_text})
            continue
        if not add_missing:
            continue
        at = next(i for i, c in enumerate(columns) if c.name == after) + 1 if after else None
        column = ColumnSpec(id=next_id, name=name, type=type_text)
        next_id += 1
        columns.insert(len(columns) if at is None else at, column)
    return spec.model_copy(update={"columns": columns})


def _execute(settings: Settings, server: sources.ServerName, sql: str, database: str) -> str:
    if server == "mariadb":
        return sources.mariadb_execute(settings, sql, database)
    return sources.postgres_execute(settings, sql, database)


def next_key_base(settings: Settings, specs: Sequence[TableSpec]) -> int:
    """The first multiple of KEY_STRIDE above every key the demo tables hold."""
    highest = 0
    for spec in specs:
        if spec.source.sharded:
            continue  # on servers of their own (shards.next_key_base)
        server: sources.ServerName = (
            "postgres" if spec.source.connector == "postgresql" else "mariadb"
        )
        first_key = spec.primary_key[0]
        table = (
            f"{spec.source.schema_ or 'public'}.{spec.source.table}"
            if server == "postgres"
            else spec.source.table
        )
        out = _execute(
            settings,
            server,
            f"SELECT COALESCE(MAX({first_key}), 0) FROM {table};",
            spec.source.database,
        )
        numbers = [int(n) for n in re.findall(r"-?\d+", out)]
        highest = max([highest, *numbers])
    return (highest // KEY_STRIDE + 1) * KEY_STRIDE


@dataclass
class Workload:
    """One seeded workload per server, run through the servers' clients. Successive ``run``
    calls continue from where the last one left off (same generators, same key range)."""

    settings: Settings
    specs: list[TableSpec]
    seed: int
    key_base: int
    statements_run: dict[str, int] = field(default_factory=dict)
    _generators: dict[str, WorkloadGenerator] = field(default_factory=dict)

    def servers(self) -> dict[sources.ServerName, list[TableSpec]]:
        by_server: dict[sources.ServerName, list[TableSpec]] = {}
        for spec in self.specs:
            if spec.source.sharded:
                continue  # its own workload (shards.run_workload)
            server: sources.ServerName = (
                "postgres" if spec.source.connector == "postgresql" else "mariadb"
            )
            by_server.setdefault(server, []).append(spec)
        return by_server

    def run(self, count: int, *, shape: Callable[[TableSpec], TableSpec] = lambda s: s) -> None:
        """``count`` row-changing statements per table, each server's in one client session.
        ``shape`` gives the tables' source shape to the first call."""
        for i, (server, specs) in enumerate(sorted(self.servers().items())):
            generator = self._generators.get(server)
            if generator is None:
                generator = WorkloadGenerator(
                    [shape(s) for s in specs], seed=self.seed + i, key_base=self.key_base
                )
                self._generators[server] = generator
            statements = generator.statements(count)
            # The client starts in the first table's database; statements name their tables.
            _execute(self.settings, server, script(statements), specs[0].source.database)
            self.statements_run[server] = self.statements_run.get(server, 0) + len(statements)


def apply_schema_changes(settings: Settings) -> list[str]:
    done = []
    for server, database, sql in SCHEMA_CHANGES:
        _execute(settings, server, sql, database)
        done.append(f"{server}/{database}: {sql}")
    return done


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    started = time.monotonic()
    return fn(), time.monotonic() - started


def wait_quiet(
    kafka: Any, topics: Sequence[str], *, quiet_s: float = 10.0, timeout_s: float = 600.0
) -> dict[str, dict[int, int]]:
    """Wait until the topics' end offsets stop moving for ``quiet_s`` (Debezium has delivered
    what the workload committed; heartbeats go to topics of their own). Returns the offsets."""
    deadline = time.monotonic() + timeout_s
    last = kafka.latest_offsets(list(topics))
    still_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = kafka.latest_offsets(list(topics))
        if now != last:
            last, still_since = now, time.monotonic()
        elif time.monotonic() - still_since >= quiet_s:
            return dict(last)
    raise TimeoutError(f"the topics {list(topics)} kept growing for {timeout_s:.0f} s")


@dataclass(frozen=True)
class TableOutcome:
    """What the demo shows per table: the comparison and the schema versions applied."""

    table: str
    diff: MirrorDiff
    versions: list[str]


def versions_applied(iceberg_catalog: Any, table: str) -> list[str]:
    """``1 -> 2 (push, applied)``-style lines from the schema history of ``table``."""
    from cdc_assets.pipeline.shared.meta_tables import read_history

    return [
        f"{e.from_version} -> {e.to_version} ({e.trigger}, {e.decision})"
        for e in read_history(iceberg_catalog, table)
    ]


def run_live_demo(
    settings: Settings, console: Any, *, statements: int, after_change: int, seed: int = 7
) -> list[TableOutcome]:
    """The whole demo (see the module docstring); prints numbered steps to ``console``."""
    from rich.table import Table

    from cdc_assets.cli import dagster_instance
    from cdc_assets.jars.maven import ensure_jars
    from cdc_assets.jobs.inprocess import PipelineDriver
    from cdc_assets.pipeline.bootstrap.source_compare import compare_source, source_url_for
    from cdc_assets.resources import build_resources
    from cdc_assets.spec import load_specs
    from cdc_assets_dev.stack.local_stack import lake_description, stack_up

    steps = 8
    started = time.monotonic()

    def step(n: int, text: str) -> None:
        elapsed = time.monotonic() - started
        console.print(f"[bold][{n}/{steps}][/bold] {text}  [dim]({elapsed:.0f} s elapsed)[/dim]")

    step(1, "JVM dependencies (Maven): Spark + Iceberg, Kafka, Kafka Connect + Debezium")
    for kind in ("spark", "kafka", "connect"):
        ensure_jars(kind, settings)
    step(2, "local stack: Kafka, Iceberg catalog, MariaDB, PostgreSQL, Kafka Connect + Debezium")
    state = stack_up(settings, sources=True)
    console.print(f"      kafka {state.bootstrap_servers}, {lake_description(settings)}")
    for db, server, _ in sources.jdbc_urls(settings):
        console.print(f"      {server} database {db}")
    # The sharded table, when the specs hold it (the demo's own copy does).
    sharded = any(
        s.name == shards.TABLE and s.source.sharded for s in load_specs(settings.specs_dir)
    )
    if sharded:
        for line in shards.start_shards(settings, state.bootstrap_servers):
            console.print(f"      shard {line}")
    step(3, f"specs in {settings.specs_dir}; onboard_tables job")
    driver = PipelineDriver(settings, dagster_instance(settings))
    created = driver.onboard()
    console.print(f"      {len(created)} Iceberg table(s) created")
    specs = load_specs(settings.specs_dir)
    base = next_key_base(settings, specs)
    shard_base = shards.next_key_base(settings, KEY_STRIDE) if sharded else 0
    step(4, f"workload: {statements} changes per table through the databases' clients")
    first = Workload(settings, specs, seed=seed, key_base=base)
    first.run(statements, shape=lambda s: shaped(s, add_missing=False))
    if sharded:
        first.statements_run |= shards.run_workload(
            settings,
            _spec_named(specs, shards.TABLE),
            {shard: lambda v: v for shard in shards.SHARD_SERVERS},
            statements=statements,
            seed=seed,
            key_base=shard_base,
        )
    console.print(
        "      "
        + ", ".join(f"{s}: {n} statements" for s, n in sorted(first.statements_run.items()))
    )
    resources = build_resources(settings)
    kafka = resources["kafka"]
    topics = [t for s in specs for t in s.source.topics]
    step(5, "pipeline cycle: ingest_ledgers, schema_changes sensor, upsert_bases")
    wait_quiet(kafka, topics)
    _print_cycle(console, driver.cycle())
    _print_views(console, driver.refresh_views())
    step(6, "schema changes mid-stream, then more workload in the new shape")
    for line in apply_schema_changes(settings):
        console.print(f"      {line}")
    second = Workload(settings, specs, seed=seed + 100, key_base=base + KEY_STRIDE // 2)
    second.run(after_change, shape=shaped)
    if sharded:
        # One shard changes first and the other keeps writing its old shape, then it changes too.
        first_shard, second_shard = shards.SHARD_SERVERS
        spec = _spec_named(specs, shards.TABLE)
        console.print(f"      {shards.apply_schema_change(settings, first_shard)}")
        second.statements_run |= shards.run_workload(
            settings,
            spec,
            {first_shard: shards.with_new_column, second_shard: lambda v: v},
            statements=after_change,
            seed=seed + 100,
            key_base=shard_base + KEY_STRIDE // 2,
        )
        console.print(f"      {shards.apply_schema_change(settings, second_shard)}")
        later = shards.run_workload(
            settings,
            spec,
            {second_shard: shards.with_new_column},
            statements=after_change,
            seed=seed + 200,
            key_base=shard_base + 3 * KEY_STRIDE // 4,
        )
        for shard_server, n in later.items():
            second.statements_run[shard_server] = second.statements_run.get(shard_server, 0) + n
    console.print(
        "      "
        + ", ".join(f"{s}: {n} statements" for s, n in sorted(second.statements_run.items()))
    )
    step(7, "converge: cycles until a cycle reads nothing new and evolves nothing")
    wait_quiet(kafka, topics)
    for cycle in driver.converge():
        _print_cycle(console, cycle)
    _print_views(console, driver.refresh_views())
    step(8, "source (SELECT * through JDBC) against base, per table")
    specs = load_specs(settings.specs_dir)
    urls = sources.jdbc_urls(settings)
    catalog = resources["iceberg"].load_catalog()
    spark = resources["spark"].get_session()
    outcomes = []
    report = Table(
        "table",
        "spec version",
        "source rows",
        "base rows",
        "differences",
        "schema versions applied",
    )
    compared: list[tuple[str, TableSpec, MirrorDiff]] = []
    for spec in specs:
        if spec.source.sharded:
            for shard, diff in shards.compare(spark, settings.catalog_name, spec, settings).items():
                compared.append((f"{spec.name} ({shard})", spec, diff))
            continue
        url = source_url_for(spec, urls)
        if url is not None:
            compared.append(
                (spec.name, spec, compare_source(spark, settings.catalog_name, spec, url))
            )
    for label, spec, diff in compared:
        versions = versions_applied(catalog, spec.name)
        outcomes.append(TableOutcome(label, diff, versions))
        differences = diff.missing + diff.extra + diff.differing + diff.duplicated
        report.add_row(
            label,
            str(spec.spec_version),
            f"{diff.source_rows:,}",
            f"{diff.base_rows:,}",
            "none" if diff.equal else f"{differences:,}",
            "; ".join(versions) or "-",
        )
    console.print(report)
    for outcome in outcomes:
        if not outcome.diff.equal:
            console.print(outcome.diff.summary())
    console.print(f"done in {time.monotonic() - started:.0f} s")
    return outcomes


def _spec_named(specs: Sequence[TableSpec], name: str) -> TableSpec:
    return next(s for s in specs if s.name == name)


def _print_views(console: Any, views: dict[str, dict[str, Any]]) -> None:
    """One line per consumer view: its columns and the schema package version it published."""
    for view, meta in sorted(views.items()):
        shown = meta.get("error") or (
            f"{meta.get('columns')} columns, reads {', '.join(meta.get('reads', []))}, "
            f"package {meta.get('artifact')}"
        )
        console.print(f"      view {view}: {shown}")


def _print_cycle(console: Any, cycle: CycleResult) -> None:
    read = ", ".join(f"{t} {n}" for t, n in sorted(cycle.read.items()))
    upserted = ", ".join(
        f"{t} {m.get('changed_keys', 0)} keys"
        f" ({m.get('bucketed_seconds', 0):.1f} + {m.get('seconds', 0):.1f} s)"
        for t, m in sorted(cycle.upsert.items())
    )
    evolved = ", ".join(f"{t} ({'ok' if ok else 'FAILED'})" for t, ok in cycle.evolved) or "none"
    console.print(f"      read: {read}; evolved: {evolved}; upserted: {upserted}")
    took = ", ".join(f"{phase} {s:.0f} s" for phase, s in cycle.seconds.items() if s >= 0.5)
    if took:
        console.print(f"      took: {took}")
