"""Nested and richer types from real Debezium (issue 22 parts 4 to 6), JSON and Avro, both
databases: a PostgreSQL table with arrays, a jsonb document and an enum type; a MariaDB table
with a SET, a JSON document, an ENUM and a CHAR(6). Each table is captured twice, by a connector
writing JSON and by one writing Avro through the stack's schema registry, and mirrored by a spec
of its own whose document column is read as a struct and whose SET is a list.

Rows written before the connectors start arrive as snapshot reads; base must equal the source
table row for row (the project's source comparison, nested values element by element). Then
updates that change arrays (elements added, emptied, nulled), documents, sets and enum values
stream, and before the pipeline reads them the source adds a column and widens one (an integer
array to bigint on PostgreSQL, an INT to BIGINT on MariaDB, an enum label added): the
``schema_changes`` sensor proposes each evolution from what the connector wrote (the registry's
writer schemas for Avro, the embedded schema or the schema-change topic for JSON), the
``evolve_schemas`` job applies it as Dagster runs it, and base equals the source again, with the
changes written before the ALTER and the new values after it. Last, a bootstrap from each live
table (JDBC) replaces base, which must still equal the source.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from cdc_assets.definitions import build_defs
from cdc_assets.pipeline.bootstrap.bootstrap import bootstrap_from_source
from cdc_assets.pipeline.bootstrap.source_compare import compare_source
from cdc_assets.pipeline.bootstrap.source_schema import import_source_spec
from cdc_assets.pipeline.ingest.ingest import ingest_incremental
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.pipeline.upsert.upsert import build_bucketed, merge_base
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.settings import Settings, source_url_variable
from cdc_assets.spec.information_schema import SourceTable
from cdc_assets.spec.load import load_spec
from cdc_assets.spec.models import SinkMapping, TableSpec
from cdc_assets.spec.versions import write_spec
from cdc_assets_dev.stack import connect, schema_registry, sources
from cdc_assets_dev.stack.local_stack import StackState
from cdc_assets_tests.integration.test_two_servers import tick
from cdc_assets_tests.support import extra_connector

pytestmark = pytest.mark.integration

WAIT_S = 180.0
DOC = "struct<color:string,size:int,tags:list<string>,dims:map<string,double>>"
FORMATS = ("json", "avro")


@dataclass
class Mirror:
    """One captured table: its spec file, source URL, server and wire format."""

    server: str  # mariadb / postgres
    fmt: str  # json / avro
    spec_file: Path
    url: str
    connector: str  # its Kafka Connect name

    def spec(self) -> TableSpec:
        return load_spec(self.spec_file)


@dataclass
class Nested:
    home: Settings
    kafka: KafkaResource  # with the registry, for Avro and JSON topics alike
    table: str
    database: str  # the MariaDB database of this module
    specs_dir: Path
    mirrors: list[Mirror]

    def execute(self, server: str, sql: str) -> None:
        if server == "mariadb":
            sources.mariadb_execute(self.home, sql, self.database)
        else:
            sources.postgres_execute(self.home, sql, "shop")


def _doc(n: int) -> str:
    doc = (
        f'{{"color": "c{n % 3}", "size": {n}, "tags": ["t{n}", "u{n}"], '
        f'"dims": {{"w": {n}.5, "h": 2}}, "extra": [1, {{"x": null}}]}}'
    )
    return doc if n % 4 else '{"color": null, "tags": []}'


def _pg_row(n: int) -> str:
    scores = "NULL" if n % 5 == 0 else f"'{{{n}, {n + 1}, NULL}}'"
    return (
        f"({n}, ARRAY['a{n}', 'b,{n}', 'qu\"ote'], {scores}, ARRAY[{n}.25, -1e10]::float8[], "
        f"ARRAY[true, NULL], ARRAY['2026-0{1 + n % 9}-0{1 + n % 9}'::date], '{_doc(n)}', "
        f"'{'sad' if n % 2 else 'ok'}')"
    )


def _maria_row(n: int) -> str:
    toppings = ["", "ham", "ham,egg", "egg,chive"][n % 4]
    return f"({n}, '{toppings}', '{_doc(n)}', '{'sml'[n % 3]}', {n * 10}, 'k{n}')"


@pytest.fixture(scope="module")
def nested(
    sources_home: Settings, sources_stack: StackState, spark: Any, tmp_path_factory: Any
) -> Iterator[Nested]:
    tag = uuid.uuid4().hex[:6]
    table, database = f"gadgets_{tag}", f"nested_{tag}"
    registry = schema_registry.start(sources_home)
    kafka = KafkaResource(
        bootstrap_servers=sources_stack.bootstrap_servers,
        home=str(sources_home.home),
        schema_registry_url=registry.url,
    )
    sources.postgres_execute(
        sources_home,
        f"CREATE TYPE mood_{tag} AS ENUM ('ok', 'sad', 'it''s fine');"
        f"CREATE TABLE public.{table} (id bigint PRIMARY KEY, tags text[], scores integer[], "
        f"ratios double precision[], flags boolean[], days date[], doc jsonb, mood mood_{tag});"
        f"GRANT SELECT ON public.{table} TO {sources.CDC_USER};"
        f"CREATE PUBLICATION pub_{tag} FOR TABLE public.{table};"
        f"INSERT INTO public.{table} VALUES {', '.join(_pg_row(n) for n in range(1, 9))};",
        "shop",
    )
    sources.mariadb_execute(
        sources_home,
        f"CREATE DATABASE `{database}`; USE `{database}`; CREATE TABLE {table} ("
        "id BIGINT NOT NULL PRIMARY KEY, toppings SET('ham','egg','chive'), doc JSON, "
        "size ENUM('s','m','l'), qty INT, code CHAR(6));"
        f"INSERT INTO {table} VALUES {', '.join(_maria_row(n) for n in range(1, 9))};",
    )
    specs_dir = tmp_path_factory.mktemp("nested-specs")
    urls = {
        "mariadb": sources.mariadb_jdbc_url(sources_home, database),
        "postgres": next(
            u
            for db, kind, u in sources.jdbc_urls(sources_home)
            if (db, kind) == ("shop", "postgres")
        ),
    }
    started: list[extra_connector.ExtraConnector] = []
    mirrors = []
    try:
        for n, fmt in enumerate(FORMATS):
            for server in ("mariadb", "postgres"):
                overrides = connect.avro_converters(registry.native_url) if fmt == "avro" else {}
                if server == "postgres":
                    overrides["publication.name"] = f"pub_{tag}"
                qualified = f"{database}.{table}" if server == "mariadb" else f"public.{table}"
                extra = extra_connector.register(
                    sources_home,
                    sources_stack.bootstrap_servers,
                    server,  # type: ignore[arg-type]
                    f"{tag}{n}",
                    [qualified],
                    schema_changes=server == "mariadb",
                    overrides=overrides,
                )
                started.append(extra)
                source = (
                    SourceTable("mariadb", database, table)
                    if server == "mariadb"
                    else SourceTable("postgresql", "shop", table, "public")
                )
                spec, _ = import_source_spec(
                    spark,
                    urls[server],
                    source,
                    topic_prefix=extra.prefix,
                    namespace=f"nested_{fmt}_{tag}",
                    name=f"{server}_{fmt}",
                )
                spec = _read_documents_as_structs(spec)
                spec_file = specs_dir / f"{spec.name}.yaml"
                write_spec(spec, spec_file)
                ensure_tables(spark, "lake", spec)
                mirrors.append(Mirror(server, fmt, spec_file, urls[server], extra.name))
        yield Nested(sources_home, kafka, table, database, specs_dir, mirrors)
    finally:
        for extra in started:
            extra_connector.remove(sources_home, extra, kafka.admin())


def _read_documents_as_structs(spec: TableSpec) -> TableSpec:
    """The imported spec, its JSON column read as a struct and a SET stored as a list."""
    columns = []
    for c in spec.columns:
        kind = c.source_type(spec.source.connector).kind
        if kind in ("JSON", "JSONB"):
            c = c.model_copy(update={"sink": SinkMapping(type=DOC)})
        elif kind == "SET":
            c = c.model_copy(update={"sink": SinkMapping(type="list<string>")})
        columns.append(c)
    return spec.model_copy(update={"columns": columns})


def converge(nested: Nested, spark: Any, iceberg: IcebergCatalogResource) -> None:
    """Ingest and upsert each mirror until its base equals its source table; on a timeout, say
    what the ingests read and how the connector stands."""
    for mirror in nested.mirrors:
        deadline = time.monotonic() + WAIT_S
        ingests = []
        while True:
            spec = mirror.spec()
            result = ingest_incremental(spark, "lake", iceberg.load_catalog(), nested.kafka, spec)
            ingests.append((spec.spec_version, result.read, result.dead, result.dead_reasons))
            build_bucketed(spark, "lake", iceberg.load_catalog(), spec)
            merge_base(spark, "lake", iceberg.load_catalog(), spec)
            diff = compare_source(spark, "lake", spec, mirror.url)
            if diff.equal and diff.source_rows > 0:
                break
            restart_failed_tasks(nested)
            if time.monotonic() > deadline:
                _, status = connect.rest(
                    extra_connector._port(nested.home),
                    "GET",
                    f"/connectors/{mirror.connector}/status",
                )
                raise AssertionError(
                    f"{spec.name}: {diff.summary()}\ningests (version, read, dead, reasons): "
                    f"{[i for i in ingests if i[1]]}\nconnector: {status}"
                )
            time.sleep(2)


def restart_failed_tasks(nested: Nested) -> None:
    """Restart the tasks of this module's connectors that failed. The stack's schema registry
    (Apicurio's in-memory store) can fail a registration when converters register at once on a
    loaded machine, and the task dies with it; restarted, Debezium resumes from its offsets."""
    port = extra_connector._port(nested.home)
    for mirror in nested.mirrors:
        _, status = connect.rest(port, "GET", f"/connectors/{mirror.connector}/status")
        tasks = status.get("tasks", []) if isinstance(status, dict) else []
        if any(t.get("state") == "FAILED" for t in tasks):
            path = f"/connectors/{mirror.connector}/restart?includeTasks=true&onlyFailed=true"
            connect.rest(port, "POST", path)


def defs_for(nested: Nested, resources: dict[str, Any]) -> dg.Definitions:
    urls = {
        source_url_variable(m.spec().source.database, m.spec().source.server_name): m.url
        for m in nested.mirrors
    }
    settings = replace(nested.home, specs_dir=nested.specs_dir, source_urls=urls)
    return build_defs(settings=settings, resource_overrides={**resources, "kafka": nested.kafka})


def evolve_through_the_sensor(
    nested: Nested, resources: dict[str, Any], instance: Any, cursor: list[str | None]
) -> set[str]:
    """Tick the schema_changes sensor and run what it starts, as Dagster runs it, until it
    starts nothing; the tables evolved."""
    evolved: set[str] = set()
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        defs = defs_for(nested, resources)
        requests = tick(defs, instance, cursor)
        if not requests and len(evolved) == len(nested.mirrors):
            return evolved
        restart_failed_tasks(nested)
        for request in requests:
            run = defs.resolve_job_def("evolve_schemas").execute_in_process(
                instance=instance,
                run_config=request.run_config,
                asset_selection=list(request.asset_selection or []),
            )
            assert run.success
            evolved.add(request.tags["cdc/table"])
        time.sleep(1)
    return evolved


def test_nested_values_from_real_debezium_round_trip_and_evolve(
    nested: Nested, spark: Any, iceberg: IcebergCatalogResource, resources: dict[str, Any]
) -> None:
    for mirror in nested.mirrors:
        if mirror.fmt == "avro":
            topic = nested.kafka.topic_schemas(mirror.spec().source.topic)
            assert topic.schemas, f"{mirror.spec().name}: no writer schema in the registry"
    converge(nested, spark, iceberg)  # the snapshots

    t = nested.table
    nested.execute(
        "postgres",
        f"UPDATE public.{t} SET tags = array_append(tags, 'new'), scores = '{{}}' WHERE id = 1;"
        f"UPDATE public.{t} SET scores = NULL, flags = ARRAY[false], mood = 'it''s fine' "
        "WHERE id = 2;"
        f'UPDATE public.{t} SET doc = \'{{"size": 7, "dims": {{"w": 1}}}}\' WHERE id = 3;'
        f"DELETE FROM public.{t} WHERE id = 4;"
        f"INSERT INTO public.{t} VALUES {_pg_row(20)};",
    )
    nested.execute(
        "mariadb",
        f"UPDATE {t} SET toppings = 'ham,egg,chive', size = 'l' WHERE id = 1;"
        f"UPDATE {t} SET doc = JSON_SET(doc, '$.size', 99) WHERE id = 2;"
        f"UPDATE {t} SET toppings = '' WHERE id = 3;"
        f"DELETE FROM {t} WHERE id = 4;"
        f"INSERT INTO {t} VALUES {_maria_row(20)};",
    )

    # Mid-stream, before the pipeline has read those changes: a column added, one widened, an
    # enum label added; rows that need them.
    big = 3_000_000_000
    nested.execute(
        "postgres",
        f"ALTER TABLE public.{t} ADD COLUMN note varchar(40);"
        f"ALTER TABLE public.{t} ALTER COLUMN scores TYPE bigint[];"
        f"UPDATE public.{t} SET scores = ARRAY[{big}, 1], note = 'wide' WHERE id = 1;"
        f"INSERT INTO public.{t} (id, scores, note) VALUES (21, ARRAY[{big}], 'new');",
    )
    nested.execute(
        "mariadb",
        f"ALTER TABLE {t} ADD COLUMN note VARCHAR(40), MODIFY qty BIGINT, "
        "MODIFY size ENUM('s','m','l','xl');"
        f"UPDATE {t} SET qty = {big}, note = 'wide', size = 'xl' WHERE id = 1;"
        f"INSERT INTO {t} (id, qty, note, size) VALUES (21, {big}, 'new', 'xl');",
    )
    instance = dg.DagsterInstance.ephemeral()
    evolved = evolve_through_the_sensor(nested, resources, instance, [None])
    assert evolved == {m.spec().name for m in nested.mirrors}
    for mirror in nested.mirrors:
        spec = mirror.spec()
        assert spec.spec_version == 2, spec.name
        types = {c.name: c.type for c in spec.columns}
        assert "note" in types
        if mirror.server == "postgres":
            assert types["scores"].startswith("bigint"), types
        else:
            assert types["qty"] == "bigint", types
            assert "'xl'" in types["size"], types
        doc = next(c for c in spec.columns if c.name == "doc")
        assert doc.sink.type == DOC  # the document's declared type survives the evolution
    converge(nested, spark, iceberg)

    # A bootstrap from the live table (Spark's JDBC source) loads the same values the stream
    # did: documents parsed into their struct, SETs split, arrays, enums and CHAR(n) unpadded.
    for mirror in nested.mirrors:
        if mirror.fmt != "json":
            continue
        spec = mirror.spec()
        result = bootstrap_from_source(
            spark, "lake", iceberg.load_catalog(), spec, mirror.url, replace=True, progress=False
        )
        assert result.rows == 9, spec.name
        diff = compare_source(spark, "lake", spec, mirror.url)
        assert diff.equal, f"{spec.name} after a bootstrap from the source: {diff.summary()}"
