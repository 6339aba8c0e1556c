"""Two MariaDB servers that both hold ``inventory.users`` (issue 20's bug, on real Debezium).

The session's real-sources stack runs its own MariaDB; this module starts a second one beside
it, creates the same database and table on both, and registers one Debezium connector per server
(topic prefixes ``a<tag>`` and ``b<tag>``, each writing its schema-change topic). Two specs in one
spec directory mirror them into two base tables. An ``ALTER TABLE users ADD COLUMN phone`` on
server b must start, through the ``schema_changes`` sensor, the evolution of ``b_users`` only, and
the pull side (``check_schema_drift`` with a source URL per server) must see drift on b only; then
the same ALTER on server a evolves ``a_users`` through pull detection (the drift job and the
``schema_drift_detected`` sensor). After each step both bases equal their sources.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from confluent_kafka import Consumer, TopicPartition

from cdc_assets.assets.keys import table_or_name
from cdc_assets.definitions import build_defs
from cdc_assets.pipeline.bootstrap.source_compare import compare_source
from cdc_assets.pipeline.ingest.ingest import ingest_incremental
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.pipeline.upsert.upsert import build_bucketed, merge_base
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.settings import Settings, source_url_variable
from cdc_assets.spec import load_specs
from cdc_assets.spec.load import load_spec
from cdc_assets.spec.models import TableSpec
from cdc_assets.spec.versions import write_spec
from cdc_assets_dev.stack import sources
from cdc_assets_dev.stack.local_stack import StackState
from cdc_assets_tests.support import extra_connector

pytestmark = pytest.mark.integration

SECOND = "mariadb-b"
SERVERS = {"a": sources.MARIADB, "b": SECOND}  # spec prefix -> local MariaDB server
DELIVERY_TIMEOUT_S = 120.0


@dataclass
class TwoServers:
    home: Settings
    bootstrap: str
    tag: str
    database: str
    specs_dir: Path
    urls: dict[str, str]  # a/b -> JDBC URL of that server's database
    kafka: KafkaResource
    markers: Iterator[int]

    def spec(self, server: str) -> TableSpec:
        return load_spec(self.specs_dir / f"{server}_users.yaml")

    def execute(self, server: str, sql: str) -> None:
        sources.mariadb_execute(self.home, sql, self.database, name=SERVERS[server])

    def prefix(self, server: str) -> str:
        return f"{server}{self.tag}"


def _spec(two: TwoServers, server: str) -> TableSpec:
    return TableSpec.model_validate(
        {
            "spec_version": 1,
            "name": f"{server}_users",
            "source": {
                "connector": "mariadb",
                "database": two.database,
                "table": "users",
                "topic": f"{two.prefix(server)}.{two.database}.users",
            },
            "columns": [
                {"id": 1, "name": "id", "type": "bigint", "nullable": False},
                {"id": 2, "name": "email", "type": "varchar(255)", "nullable": False},
                {"id": 3, "name": "score", "type": "int"},
            ],
            "primary_key": ["id"],
            "sink": {"namespace": f"srv_{two.tag}", "table": f"{server}_users"},
            "base": {"buckets": 2},
        }
    )


@pytest.fixture(scope="module")
def two(
    sources_home: Settings, sources_stack: StackState, spark: Any, tmp_path_factory: Any
) -> Iterator[TwoServers]:
    tag = uuid.uuid4().hex[:6]
    database = f"inventory_{tag}"
    sources.start_mariadb(sources_home, SECOND)
    for server in SERVERS.values():
        sources.mariadb_execute(
            sources_home,
            f"CREATE DATABASE `{database}`; USE `{database}`; CREATE TABLE users ("
            "id BIGINT NOT NULL PRIMARY KEY, email VARCHAR(255) NOT NULL, score INT);",
            name=server,
        )
    specs_dir = tmp_path_factory.mktemp("two-servers-specs")
    kafka = KafkaResource(
        bootstrap_servers=sources_stack.bootstrap_servers, home=str(sources_home.home)
    )
    two = TwoServers(
        home=sources_home,
        bootstrap=sources_stack.bootstrap_servers,
        tag=tag,
        database=database,
        specs_dir=specs_dir,
        urls={
            s: sources.mariadb_jdbc_url(sources_home, database, name) for s, name in SERVERS.items()
        },
        kafka=kafka,
        markers=iter(range(9_000_000, 2**62)),
    )
    # Rows before the connectors start: their snapshots read them (op r).
    two.execute("a", "INSERT INTO users VALUES (1, 'a1@x', 10), (2, 'a2@x', 20);")
    two.execute("b", "INSERT INTO users VALUES (1, 'b1@x', 11), (3, 'b3@x', 33);")
    connectors = []
    admin = kafka.admin()
    try:
        for server, name in SERVERS.items():
            connectors.append(
                extra_connector.register(
                    sources_home,
                    two.bootstrap,
                    "mariadb",
                    f"{tag}{'a' if server == 'a' else 'b'}",
                    [f"{database}.users"],
                    prefix=two.prefix(server),
                    mariadb_name=name,
                    schema_changes=True,
                )
            )
        for server in SERVERS:
            spec = _spec(two, server)
            write_spec(spec, specs_dir / f"{spec.name}.yaml")
            ensure_tables(spark, "lake", spec)
        assert [s.name for s in load_specs(specs_dir)] == ["a_users", "b_users"]
        yield two
    finally:
        for extra in connectors:
            extra_connector.remove(sources_home, extra, admin)


def wait_delivered(two: TwoServers) -> None:
    """Insert and delete a marker row on both servers; return when both deletes are on the
    topics (everything written before them was streamed)."""
    pending = {}
    for server in SERVERS:
        key = next(two.markers)
        two.execute(
            server,
            f"INSERT INTO users (id, email, score) VALUES ({key}, 'marker', 0);"
            f"DELETE FROM users WHERE id = {key};",
        )
        pending[two.spec(server).source.topic] = key
    consumer = Consumer(
        {
            "bootstrap.servers": two.bootstrap,
            "group.id": f"two-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(t, 0, 0) for t in pending])
    deadline = time.monotonic() + DELIVERY_TIMEOUT_S
    try:
        while pending and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None or msg.value() is None:
                continue
            event = json.loads(msg.value())["payload"]
            if event.get("op") == "d" and (event.get("before") or {}).get("id") == pending.get(
                msg.topic()
            ):
                del pending[msg.topic()]
    finally:
        consumer.close()
    assert not pending, f"markers not delivered within {DELIVERY_TIMEOUT_S:.0f} s: {pending}"


def converge(two: TwoServers, spark: Any, iceberg: IcebergCatalogResource) -> None:
    """Ingest and upsert both tables with their current specs; each base equals its source."""
    wait_delivered(two)
    for server in SERVERS:
        spec = two.spec(server)
        result = ingest_incremental(spark, "lake", iceberg.load_catalog(), two.kafka, spec)
        assert result.dead == 0, (spec.name, result.dead_reasons)
        build_bucketed(spark, "lake", iceberg.load_catalog(), spec)
        merge_base(spark, "lake", iceberg.load_catalog(), spec)
    for server in SERVERS:
        diff = compare_source(spark, "lake", two.spec(server), two.urls[server])
        assert diff.equal, f"{server}_users: {diff.summary()}"


def defs_for(two: TwoServers, resources: dict[str, Any]) -> dg.Definitions:
    """The project's definitions over the two specs, with a source URL per server."""
    urls = {
        source_url_variable(two.database, two.prefix(server)): url
        for server, url in two.urls.items()
    }
    settings = replace(two.home, specs_dir=two.specs_dir, source_urls=urls)
    return build_defs(settings=settings, resource_overrides={**resources, "kafka": two.kafka})


def tick(defs: dg.Definitions, instance: Any, cursor: list[str | None]) -> list[dg.RunRequest]:
    sensor = defs.get_sensor_def("schema_changes")
    context = dg.build_sensor_context(
        instance=instance, resources={"kafka": defs.resources["kafka"]}, cursor=cursor[0]
    )
    result = sensor(context)
    assert isinstance(result, dg.SensorResult)
    cursor[0] = result.cursor
    return list(result.run_requests or [])


def drift(defs: dg.Definitions, instance: Any) -> dict[str, bool]:
    run = defs.resolve_job_def("check_schema_drift").execute_in_process(instance=instance)
    assert run.success
    found = {}
    for event in run.all_events:
        if event.event_type == dg.DagsterEventType.ASSET_OBSERVATION:
            observation = event.event_specific_data.asset_observation  # type: ignore[union-attr]
            found[table_or_name(observation.asset_key)] = bool(observation.metadata["drift"].value)
    return found


def evolve_through_the_sensor(
    two: TwoServers, resources: dict[str, Any], instance: Any, cursor: list[str | None], server: str
) -> None:
    """One tick starts exactly one evolution, of ``<server>_users``; run it as Dagster does."""
    defs = defs_for(two, resources)
    (request,) = tick(defs, instance, cursor)
    assert request.tags["cdc/table"] == f"{server}_users"
    run = defs.resolve_job_def("evolve_schemas").execute_in_process(
        instance=instance,
        run_config=request.run_config,
        asset_selection=list(request.asset_selection or []),
    )
    assert run.success


def evolve_through_pull(
    two: TwoServers, resources: dict[str, Any], instance: Any, server: str
) -> None:
    """Pull detection end to end: the drift job reads each server's information_schema through
    its server-qualified URL; the schema_drift_detected sensor, given that run, starts exactly
    one evolution, of ``<server>_users``; it runs as Dagster runs it."""
    defs = defs_for(two, resources)
    requests = drift_detected(defs, instance)
    (request,) = requests
    assert request.tags["cdc/table"] == f"{server}_users"
    assert request.tags["cdc/trigger"] == "schema_drift_detected"
    run = defs.resolve_job_def("evolve_schemas").execute_in_process(
        instance=instance,
        run_config=request.run_config,
        asset_selection=list(request.asset_selection or []),
    )
    assert run.success


def drift_detected(
    defs: dg.Definitions, instance: Any, *, maintain_when_clean: bool = False
) -> list[dg.RunRequest]:
    """Run check_schema_drift, then evaluate the schema_drift_detected sensor on that run."""
    config = {"maintain_when_clean": maintain_when_clean}
    run = defs.resolve_job_def("check_schema_drift").execute_in_process(
        instance=instance, run_config={"ops": {"check_drift": {"config": config}}}
    )
    assert run.success
    sensor = defs.get_sensor_def("schema_drift_detected")
    context = dg.build_run_status_sensor_context(
        sensor_name="schema_drift_detected",
        dagster_event=dg.DagsterEvent(
            event_type_value=dg.DagsterEventType.RUN_SUCCESS.value,
            job_name="check_schema_drift",
        ),
        dagster_instance=instance,
        dagster_run=instance.get_run_by_id(run.run_id),
    )
    requests = sensor(context)  # type: ignore[call-arg]
    return list(requests or [])


def test_an_alter_on_each_server_evolves_its_own_spec(
    two: TwoServers, spark: Any, iceberg: IcebergCatalogResource, resources: dict[str, Any]
) -> None:
    instance = dg.DagsterInstance.ephemeral()
    cursor: list[str | None] = [None]
    two.execute(
        "a", "UPDATE users SET score = 12 WHERE id = 1; INSERT INTO users VALUES (4, 'a4@x', 4);"
    )
    two.execute("b", "DELETE FROM users WHERE id = 3; INSERT INTO users VALUES (5, 'b5@x', 5);")
    converge(two, spark, iceberg)
    # The snapshots' CREATE TABLE records are the specs' own shape: nothing to start.
    assert tick(defs_for(two, resources), instance, cursor) == []
    assert drift(defs_for(two, resources), instance) == {"a_users": False, "b_users": False}

    # Server b gains a column; server a, holding the same database.table, does not.
    two.execute("b", "ALTER TABLE users ADD COLUMN phone VARCHAR(32);")
    two.execute(
        "b",
        "UPDATE users SET phone = '+1-555-0101' WHERE id = 1;"
        "INSERT INTO users VALUES (6, 'b6@x', 6, '+1-555-0106');",
    )
    two.execute("a", "INSERT INTO users VALUES (7, 'a7@x', 7);")
    wait_delivered(two)
    assert drift(defs_for(two, resources), instance) == {"a_users": False, "b_users": True}
    evolve_through_the_sensor(two, resources, instance, cursor, "b")
    assert two.spec("b").spec_version == 2
    assert [c.name for c in two.spec("b").columns] == ["id", "email", "score", "phone"]
    assert two.spec("a").spec_version == 1
    converge(two, spark, iceberg)
    assert drift(defs_for(two, resources), instance) == {"a_users": False, "b_users": False}

    # The same ALTER on server a now evolves a_users, and leaves b_users alone: this time
    # through pull detection (information_schema), as the daily drift check finds it.
    two.execute("a", "ALTER TABLE users ADD COLUMN phone VARCHAR(32);")
    two.execute("a", "UPDATE users SET phone = '+44-20-0002' WHERE id = 2;")
    two.execute("b", "UPDATE users SET phone = '+1-555-0103', score = 99 WHERE id = 6;")
    wait_delivered(two)
    evolve_through_pull(two, resources, instance, "a")
    assert (two.spec("a").spec_version, two.spec("b").spec_version) == (2, 2)
    converge(two, spark, iceberg)
    # push then sees a change the spec already has; pull sees no drift anywhere
    assert tick(defs_for(two, resources), instance, cursor) == []
    assert drift_detected(defs_for(two, resources), instance) == []
