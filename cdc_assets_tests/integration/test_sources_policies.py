"""A table's ``evolution.policy`` on a live MariaDB and a live PostgreSQL through Debezium (issue
54 item 7): on each server three tables, one per policy other than the default, take the same
real ALTERs (``RENAME COLUMN`` and ``ADD COLUMN``) with rows changed after them. The ingest
meets the new shape with the old spec first, then the schema-change sensor's evolution runs, as
in a deployment.

- ``lenient``: the renamed column is added under its new name, the old one soft-dropped, and
  base equals the live source.
- ``freeze``: the evolution is refused with the policy as its reason; every row still lands,
  the new fields only in ``_row_json``; ``schema_converged`` warns.
- ``fail``: the ingest commits nothing of the batch that carries the change, again and again,
  until a person changes the spec file.
(``evolve``, the default, is what the other modules on the live sources run.)
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import dagster as dg
import pytest

from cdc_assets.assets.keys import asset_key
from cdc_assets.assets.schema import evolve_run_config
from cdc_assets.checks.runner import run_checks
from cdc_assets.errors import SchemaChangeStopError
from cdc_assets.pipeline.bootstrap.source_compare import compare_source
from cdc_assets.pipeline.bootstrap.source_schema import import_source_spec
from cdc_assets.pipeline.shared.offsets import ledger_mark
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.layers import base_layout, ledger_layout
from cdc_assets.settings import Settings
from cdc_assets.spec.information_schema import SourceTable
from cdc_assets.spec.models import TableSpec
from cdc_assets.spec.versions import render_spec_yaml, write_spec
from cdc_assets_dev.stack import sources
from cdc_assets_dev.stack.local_stack import StackState
from cdc_assets_tests.integration.test_pull_postgres import PgTable, wait_delivered
from cdc_assets_tests.integration.test_sources_renames import (
    Source,
    cycle,
    wait_marker,
    wait_schema_record,
)
from cdc_assets_tests.support import extra_connector

pytestmark = pytest.mark.integration

POLICIES = ("lenient", "freeze", "fail")
MARKER = "(id, email) VALUES ({key}, 'marker')"


@dataclass
class Live:
    """One live table, whichever its server: what the tests below do with it."""

    name: str  # the source table's, and its spec's
    spec: Callable[[], TableSpec]
    execute: Callable[[str], None]
    defs: Callable[[dict[str, Any]], dg.Definitions]
    url: str
    kafka: KafkaResource
    wait: Callable[[], None]  # a marker row's delete is on the topic
    recorded: Callable[[str], None]  # the connector has recorded this DDL (MariaDB)


def of_mariadb(source: Source) -> Live:
    return Live(
        source.name,
        source.spec,
        source.execute,
        source.defs,
        source.url,
        source.kafka,
        lambda: wait_marker(source, source.name, MARKER),
        lambda ddl: wait_schema_record(source, ddl),
    )


def of_postgres(table: PgTable) -> Live:
    return Live(
        table.table,
        table.spec,
        table.execute,
        table.defs,
        table.url,
        table.kafka,
        lambda: wait_delivered(table),
        lambda ddl: None,  # PostgreSQL records no DDL: the newest events show the shape
    )


@pytest.fixture(params=["mariadb", "postgresql"])
def live(request: pytest.FixtureRequest) -> dict[str, Live]:
    if request.param == "mariadb":
        return {p: of_mariadb(s) for p, s in request.getfixturevalue("maria").items()}
    return {p: of_postgres(t) for p, t in request.getfixturevalue("postgres").items()}


@pytest.fixture(scope="module")
def postgres(
    sources_home: Settings, sources_stack: StackState, spark: Any, tmp_path_factory: Any
) -> Iterator[dict[str, PgTable]]:
    """The same three tables on PostgreSQL, onboarded from its information_schema (so renames
    are proved by column numbers), each under its policy."""
    home, tag = sources_home, uuid.uuid4().hex[:6]
    names = {p: f"t_{p}_{tag}" for p in POLICIES}
    sources.postgres_execute(
        home,
        "".join(
            f"CREATE TABLE public.{t} (id bigint PRIMARY KEY, email text, note varchar(32), "
            f"score integer); GRANT SELECT ON public.{t} TO {sources.CDC_USER};"
            f"INSERT INTO public.{t} VALUES (1, 'a@x', 'n1', 1), (2, 'b@x', NULL, 2), "
            "(3, 'c@x', 'n3', 3);"
            for t in names.values()
        )
        + f"CREATE PUBLICATION pub_{tag} FOR TABLE "
        + ", ".join(f"public.{t}" for t in names.values())
        + ";",
        "shop",
    )
    url = next(u for db, kind, u in sources.jdbc_urls(home) if (db, kind) == ("shop", "postgres"))
    connector = extra_connector.register(
        home,
        sources_stack.bootstrap_servers,
        "postgres",
        tag,
        [f"public.{t}" for t in names.values()],
        overrides={"publication.name": f"pub_{tag}"},
    )
    kafka = KafkaResource(bootstrap_servers=sources_stack.bootstrap_servers, home=str(home.home))
    try:
        out = {}
        for policy, table in names.items():
            spec, _ = import_source_spec(
                spark,
                url,
                SourceTable("postgresql", "shop", table, "public"),
                topic_prefix=connector.prefix,
                namespace=table,
            )
            spec = spec.model_copy(
                update={"evolution": spec.evolution.model_copy(update={"policy": policy})}
            )
            specs_dir = tmp_path_factory.mktemp(f"policy-pg-{policy}")
            write_spec(spec, specs_dir / f"{table}.yaml")
            ensure_tables(spark, "lake", spec)
            out[policy] = PgTable(
                home,
                sources_stack.bootstrap_servers,
                table,
                url,
                specs_dir,
                kafka,
                connector,
                iter(range(9_000_000, 2**62)),
            )
        yield out
    finally:
        extra_connector.remove(home, connector, kafka.admin())
        sources.postgres_execute(
            home,
            f"DROP PUBLICATION pub_{tag};"
            + "".join(f"DROP TABLE public.{t};" for t in names.values()),
            "shop",
        )


@pytest.fixture(scope="module")
def maria(
    sources_home: Settings, sources_stack: StackState, spark: Any, tmp_path_factory: Any
) -> Iterator[dict[str, Source]]:
    """One table per policy in a database of the module's own, a connector capturing them, and
    each table's spec in a directory of its own (a sensor or a check sees only its table)."""
    tag = uuid.uuid4().hex[:6]
    database = f"policies_{tag}"
    create = "".join(
        f"CREATE TABLE t_{p} (id BIGINT NOT NULL PRIMARY KEY, email VARCHAR(64) NOT NULL, "
        f"note VARCHAR(32), score INT);"
        f"INSERT INTO t_{p} VALUES (1, 'a@x', 'n1', 1), (2, 'b@x', NULL, 2), (3, 'c@x', 'n3', 3);"
        for p in POLICIES
    )
    sources.mariadb_execute(
        sources_home, f"CREATE DATABASE `{database}`; USE `{database}`;{create}"
    )
    prefix = f"pol{tag}"
    kafka = KafkaResource(
        bootstrap_servers=sources_stack.bootstrap_servers, home=str(sources_home.home)
    )
    connector = extra_connector.register(
        sources_home,
        sources_stack.bootstrap_servers,
        "mariadb",
        tag,
        [f"{database}.t_{p}" for p in POLICIES],
        prefix=prefix,
        schema_changes=True,
    )
    try:
        out = {}
        markers = iter(range(9_000_000, 2**62))
        for policy in POLICIES:
            name = f"t_{policy}"
            spec = TableSpec.model_validate(
                {
                    "spec_version": 1,
                    "name": name,
                    "source": {
                        "connector": "mariadb",
                        "database": database,
                        "table": name,
                        "topic": f"{prefix}.{database}.{name}",
                    },
                    "columns": [
                        {"id": 1, "name": "id", "type": "bigint", "nullable": False},
                        {"id": 2, "name": "email", "type": "varchar(64)", "nullable": False},
                        {"id": 3, "name": "note", "type": "varchar(32)"},
                        {"id": 4, "name": "score", "type": "int"},
                    ],
                    "primary_key": ["id"],
                    "sink": {"namespace": f"pol_{tag}"},
                    "base": {"buckets": 2},
                    "evolution": {"policy": policy},
                }
            )
            specs_dir = tmp_path_factory.mktemp(f"policy-{policy}")
            write_spec(spec, specs_dir / f"{name}.yaml")
            ensure_tables(spark, "lake", spec)
            out[policy] = Source(
                sources_home,
                sources_stack.bootstrap_servers,
                database,
                sources.mariadb_jdbc_url(sources_home, database),
                specs_dir,
                kafka,
                prefix,
                markers,
                name,
            )
        yield out
    finally:
        extra_connector.remove(sources_home, connector, kafka.admin())


def alter_and_change(source: Live) -> None:
    """The same real schema change on each table, with every row changed after it."""
    t = source.name
    ddl = f"ALTER TABLE {t} RENAME COLUMN note TO memo"
    source.execute(
        f"{ddl}; ALTER TABLE {t} ADD COLUMN tier VARCHAR(16);"
        f"UPDATE {t} SET memo = CONCAT('m', id), tier = 'gold', score = score + 10;"
        f"INSERT INTO {t} (id, email, memo, score, tier) VALUES (4, 'd@x', 'm4', 4, 'new');"
        f"DELETE FROM {t} WHERE id = 2;"
    )
    source.recorded(ddl)
    source.wait()


def evolve(source: Live, resources: dict[str, Any]) -> dg.ExecuteInProcessResult:
    """The schema-change sensor's one request for the table, run."""
    defs = source.defs(resources)
    instance = dg.DagsterInstance.ephemeral()
    result = defs.get_sensor_def("schema_changes")(
        dg.build_sensor_context(instance=instance, resources={"kafka": source.kafka})
    )
    assert isinstance(result, dg.SensorResult)
    (request,) = result.run_requests or []
    return defs.resolve_job_def("evolve_schemas").execute_in_process(
        instance=instance,
        run_config=request.run_config,
        asset_selection=list(request.asset_selection or []),
        raise_on_error=False,
    )


def failure_of(run: dg.ExecuteInProcessResult) -> str:
    return " ".join(
        str(e.event_specific_data.error.message)  # type: ignore[union-attr]
        for e in run.all_events
        if e.event_type_value == "STEP_FAILURE"
    )


def base_rows(spark: Any, spec: TableSpec) -> dict[int, dict[str, Any]]:
    layout = base_layout(spec)
    rows = spark.sql(f"SELECT * FROM lake.`{layout.namespace}`.`{layout.name}`").collect()
    return {r["id"]: r.asDict() for r in rows}


def test_lenient_adds_the_renamed_column_and_base_equals_the_source(
    live: dict[str, Live], spark: Any, iceberg: IcebergCatalogResource, resources: dict[str, Any]
) -> None:
    source = live["lenient"]
    source.wait()
    assert cycle(source, spark, iceberg) == 0
    alter_and_change(source)
    assert cycle(source, spark, iceberg) == 0  # the old spec first: memo, tier unknown
    run = evolve(source, resources)
    assert run.success, failure_of(run)
    evolved = source.spec()
    by_name = evolved.columns_by_name
    assert by_name["note"].dropped  # nothing renamed in Iceberg
    assert not by_name["memo"].dropped
    assert by_name["memo"].id != by_name["note"].id
    assert "tier" in by_name
    assert cycle(source, spark, iceberg) == 0
    diff = compare_source(spark, "lake", evolved, source.url)
    assert diff.equal, diff.summary()
    rows = base_rows(spark, evolved)
    # the old column stops being written: every row changed since the rename holds null there
    assert {k: r["note"] for k, r in rows.items()} == {1: None, 3: None, 4: None}
    assert (rows[1]["memo"], rows[4]["tier"]) == ("m1", "new")


def test_freeze_refuses_the_change_and_every_row_still_lands(
    live: dict[str, Live], spark: Any, iceberg: IcebergCatalogResource, resources: dict[str, Any]
) -> None:
    source = live["freeze"]
    source.wait()
    assert cycle(source, spark, iceberg) == 0
    alter_and_change(source)
    run = evolve(source, resources)
    assert not run.success
    assert "evolution.policy is freeze" in failure_of(run)
    spec = source.spec()
    assert spec.spec_version == 1
    assert cycle(source, spark, iceberg) == 0  # no dead letter: rows land
    rows = base_rows(spark, spec)
    assert sorted(rows) == [1, 3, 4]
    assert {k: (r["email"], r["score"]) for k, r in rows.items()} == {
        1: ("a@x", 11),
        3: ("c@x", 13),
        4: ("d@x", 4),
    }
    # the new fields wait in the ledger's row images, not in base
    layout = ledger_layout(spec)
    images = spark.sql(
        f"SELECT _row_json FROM lake.`{layout.namespace}`.`{layout.name}` WHERE id = 4"
    ).collect()
    assert any(json.loads(r["_row_json"]).get("tier") == "new" for r in images)
    (converged,) = run_checks(
        source.defs(resources), dg.DagsterInstance.ephemeral(), checks=["schema_converged"]
    )[0]
    assert (converged.passed, converged.severity) == (False, "WARN")
    assert "evolution.policy is freeze" in converged.description


def test_fail_stops_the_table_until_a_person_changes_the_spec(
    live: dict[str, Live], spark: Any, iceberg: IcebergCatalogResource, resources: dict[str, Any]
) -> None:
    source = live["fail"]
    source.wait()
    assert cycle(source, spark, iceberg) == 0
    spec = source.spec()
    layout = ledger_layout(spec)
    ledger = f"{layout.namespace}.{layout.name}"
    before = ledger_mark(iceberg.load_catalog().load_table(ledger))
    alter_and_change(source)
    for _ in range(2):  # stopped, not skipped past
        with pytest.raises(SchemaChangeStopError, match=r"memo"):
            cycle(source, spark, iceberg)
        assert ledger_mark(iceberg.load_catalog().load_table(ledger)) == before
    run = evolve(source, resources)
    assert not run.success
    assert "evolution.policy is fail" in failure_of(run)
    # a person reviews and applies it (`cdc-assets evolve --spec`: any policy applies a
    # reviewed spec)
    data = spec.model_dump(mode="json", by_alias=True)
    data["spec_version"] = 2
    data["columns"][2]["name"] = "memo"
    data["columns"][2]["former_names"] = ["note"]  # the person's proof of the rename
    data["columns"][2]["sink"] = {**data["columns"][2].get("sink", {}), "name": "note"}
    data["columns"].append({"id": 5, "name": "tier", "type": "varchar(16)"})
    reviewed = TableSpec.model_validate(data)
    defs = source.defs(resources)
    applied = defs.resolve_job_def("evolve_schemas").execute_in_process(
        instance=dg.DagsterInstance.ephemeral(),
        run_config=evolve_run_config(source.name, proposed_spec=render_spec_yaml(reviewed)),
        asset_selection=[asset_key("schema", source.name)],
    )
    assert applied.success
    evolved = source.spec()
    assert evolved.spec_version == 2
    assert (evolved.columns_by_name["memo"].id, evolved.columns_by_name["memo"].sink_name) == (
        3,
        "note",
    )
    assert cycle(source, spark, iceberg) == 0
    diff = compare_source(spark, "lake", evolved, source.url)
    assert diff.equal, diff.summary()
