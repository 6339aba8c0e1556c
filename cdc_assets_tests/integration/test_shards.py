"""Two MariaDB shards of one table into one Iceberg table (issue 20, part 2), on real Debezium.

Both servers hold ``shard_<tag>.users`` with overlapping keys. One spec lists them as shards (each
its own connector, topic prefix and schema-change topic); base holds every shard's rows, told apart
by the shard column that leads the key. Shard b joins the live spec and is bootstrapped from its
source without touching shard a's rows or state. The runs go through the project's own jobs
(``ingest_ledgers``, ``upsert_bases`` with every asset check, ``evolve_schemas`` started by the
``schema_changes`` sensor). An ADD COLUMN on one shard evolves the table once while the other shard
keeps decoding; the same ALTER on the other shard then finds it applied. After each step every
shard's rows in base equal its source, row for row.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from confluent_kafka import Consumer, TopicPartition

from cdc_assets.assets.keys import asset_key
from cdc_assets.cli.common import materializations
from cdc_assets.definitions import build_defs
from cdc_assets.pipeline.bootstrap.bootstrap import BootstrapError, bootstrap_from_source
from cdc_assets.pipeline.bootstrap.source_compare import compare_source
from cdc_assets.pipeline.maintenance.maintenance import maintain_table
from cdc_assets.pipeline.shared.offsets import table_offsets
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.pipeline.shared.watermark import base_state
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.sensors.new_offsets import current_hour_key
from cdc_assets.settings import Settings, source_url_variable
from cdc_assets.spec.load import load_spec
from cdc_assets.spec.models import TableSpec
from cdc_assets.spec.versions import write_spec
from cdc_assets_dev.stack import sources
from cdc_assets_dev.stack.local_stack import StackState
from cdc_assets_tests.support import extra_connector

pytestmark = pytest.mark.integration

# shard name -> local MariaDB server: servers of the module's own, removed at its end, so the
# stack's own server and its connector's schema-change topic never see the shards' tables.
SHARDS = {"a": "mariadb-sa", "b": "mariadb-sb"}
DELIVERY_TIMEOUT_S = 120.0
NAME = "users_sharded"


@dataclass
class Shards:
    home: Settings
    bootstrap: str
    tag: str
    database: str
    specs_dir: Path
    urls: dict[str, str]  # shard -> JDBC URL of its database
    kafka: KafkaResource
    markers: Iterator[int]

    def spec(self) -> TableSpec:
        return load_spec(self.specs_dir / f"{NAME}.yaml")

    def view(self, shard: str) -> TableSpec:
        return next(v for v in self.spec().shard_specs() if v.shard and v.shard.name == shard)

    def execute(self, shard: str, sql: str) -> None:
        sources.mariadb_execute(self.home, sql, self.database, name=SHARDS[shard])

    def prefix(self, shard: str) -> str:
        return f"s{shard}{self.tag}"


def _spec(s: Shards, shards: list[str]) -> TableSpec:
    return TableSpec.model_validate(
        {
            "spec_version": 1,
            "name": NAME,
            "source": {
                "connector": "mariadb",
                "database": s.database,
                "table": "users",
                "shards": [
                    {
                        "server": s.prefix(shard),
                        "topic": f"{s.prefix(shard)}.{s.database}.users",
                        "name": shard,
                    }
                    for shard in shards
                ],
            },
            "columns": [
                {"id": 1, "name": "id", "type": "bigint", "nullable": False},
                {"id": 2, "name": "email", "type": "varchar(255)", "nullable": False},
                {"id": 3, "name": "score", "type": "int"},
            ],
            "primary_key": ["id"],
            "sink": {"namespace": f"shards_{s.tag}"},
            # Maintenance keeps no snapshot beyond what the pipeline's state needs.
            "base": {"buckets": 2, "maintenance": {"retain_last_snapshots": 1}},
        }
    )


@pytest.fixture(scope="module")
def shards(
    sources_home: Settings, sources_stack: StackState, spark: Any, tmp_path_factory: Any
) -> Iterator[Shards]:
    tag = uuid.uuid4().hex[:6]
    database = f"shard_{tag}"
    connectors: list[Any] = []
    try:
        for server in SHARDS.values():
            sources.start_mariadb(sources_home, server)
        for server in SHARDS.values():
            sources.mariadb_execute(
                sources_home,
                f"CREATE DATABASE `{database}`; USE `{database}`; CREATE TABLE users ("
                "id BIGINT NOT NULL PRIMARY KEY, email VARCHAR(255) NOT NULL, score INT);",
                name=server,
            )
        s = Shards(
            home=sources_home,
            bootstrap=sources_stack.bootstrap_servers,
            tag=tag,
            database=database,
            specs_dir=tmp_path_factory.mktemp("shard-specs"),
            urls={
                k: sources.mariadb_jdbc_url(sources_home, database, v) for k, v in SHARDS.items()
            },
            kafka=KafkaResource(
                bootstrap_servers=sources_stack.bootstrap_servers, home=str(sources_home.home)
            ),
            markers=iter(range(9_000_000, 2**62)),
        )
        # Rows before the connectors start (snapshot reads, op r); key 1 is on both shards.
        s.execute("a", "INSERT INTO users VALUES (1, 'a1@x', 10), (2, 'a2@x', 20);")
        s.execute("b", "INSERT INTO users VALUES (1, 'b1@x', 11), (3, 'b3@x', 33);")
        for shard, server in SHARDS.items():
            connectors.append(
                extra_connector.register(
                    sources_home,
                    s.bootstrap,
                    "mariadb",
                    f"{tag}c{shard}",  # hex: it seeds the connector's server id
                    [f"{database}.users"],
                    prefix=s.prefix(shard),
                    mariadb_name=server,
                    schema_changes=True,
                )
            )
        # The table starts with shard a; shard b joins the live spec in the test.
        spec = _spec(s, ["a"])
        write_spec(spec, s.specs_dir / f"{NAME}.yaml")
        ensure_tables(spark, "lake", spec)
        yield s
    finally:
        for extra in connectors:
            extra_connector.remove(
                sources_home,
                extra,
                KafkaResource(
                    bootstrap_servers=sources_stack.bootstrap_servers, home=str(sources_home.home)
                ).admin(),
            )
        for server in SHARDS.values():
            sources.remove_mariadb(sources_home, server)


def wait_delivered(s: Shards) -> None:
    """A marker row inserted and deleted on each shard; return once both deletes are on the
    topics (everything written before them was streamed)."""
    pending = {}
    for shard in [v.shard.name for v in s.spec().shard_specs() if v.shard and v.shard.name]:
        key = next(s.markers)
        s.execute(
            shard,
            f"INSERT INTO users (id, email, score) VALUES ({key}, 'marker', 0);"
            f"DELETE FROM users WHERE id = {key};",
        )
        pending[s.view(shard).source.topic] = key
    consumer = Consumer(
        {"bootstrap.servers": s.bootstrap, "group.id": f"sh-{uuid.uuid4().hex[:8]}"}
        | {"enable.auto.commit": False}
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


def defs_for(s: Shards, resources: dict[str, Any]) -> dg.Definitions:
    """The project's definitions over the spec, with a source URL per shard's server: the
    source comparisons (row count, drift) run per shard."""
    urls = {source_url_variable(s.database, s.prefix(k)): url for k, url in s.urls.items()}
    settings = replace(s.home, specs_dir=s.specs_dir, source_urls=urls)
    return build_defs(settings=settings, resource_overrides={**resources, "kafka": s.kafka})


def _checks(run: Any) -> dict[str, Any]:
    found = {}
    for event in run.all_events:
        if event.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION:
            evaluation = event.event_specific_data
            found[evaluation.check_name] = evaluation
    return found


def cycle(
    s: Shards, resources: dict[str, Any], instance: Any, failing: dict[str, str] | None = None
) -> dict[str, Any]:
    """The ingest and upsert jobs as the daemon runs them; every check they run passes but
    those in ``failing`` (check -> text its description holds). Returns the ledger asset's
    metadata."""
    wait_delivered(s)
    defs = defs_for(s, resources)
    ingest = defs.resolve_job_def("ingest_ledgers").execute_in_process(
        instance=instance, partition_key=current_hour_key(datetime.now(UTC))
    )
    assert ingest.success
    upsert = defs.resolve_job_def("upsert_bases").execute_in_process(instance=instance)
    assert upsert.success
    checks = {**_checks(ingest), **_checks(upsert)}
    assert "source_row_count" in checks
    failing = failing or {}
    for name, evaluation in checks.items():
        assert evaluation.passed == (name not in failing), (name, evaluation.description)
        if name in failing:
            assert failing[name] in (evaluation.description or ""), evaluation.description
    mats = materializations(ingest, asset_key("cdc", NAME))
    assert mats
    return {k: v.value for k, v in mats[-1].metadata.items()}


def drift_observation(defs: dg.Definitions, instance: Any) -> dict[str, Any]:
    """What a run of the drift check (pull detection) observed of the table."""
    run = defs.resolve_job_def("check_schema_drift").execute_in_process(
        instance=instance, run_config={"ops": {"check_drift": {"config": {"tables": [NAME]}}}}
    )
    (observation,) = [
        e.event_specific_data.asset_observation  # type: ignore[union-attr]
        for e in run.all_events
        if e.event_type_value == "ASSET_OBSERVATION"
    ]
    return {k: v.value for k, v in observation.metadata.items()}


def assert_mirrors(s: Shards, spark: Any, shards: list[str]) -> None:
    for shard in shards:
        diff = compare_source(spark, "lake", s.view(shard), s.urls[shard])
        assert diff.equal, f"shard {shard}: {diff.summary()}"


def tick(defs: dg.Definitions, instance: Any, cursor: list[str | None]) -> list[dg.RunRequest]:
    sensor = defs.get_sensor_def("schema_changes")
    context = dg.build_sensor_context(
        instance=instance, resources={"kafka": defs.resources["kafka"]}, cursor=cursor[0]
    )
    result = sensor(context)
    assert isinstance(result, dg.SensorResult)
    cursor[0] = result.cursor
    return list(result.run_requests or [])


def test_two_shards_into_one_table_with_an_alter_on_each(
    shards: Shards, spark: Any, iceberg: IcebergCatalogResource, resources: dict[str, Any]
) -> None:
    s = shards
    instance = dg.DagsterInstance.ephemeral()
    cursor: list[str | None] = [None]
    s.execute(
        "a", "UPDATE users SET score = 12 WHERE id = 1; INSERT INTO users VALUES (4, 'a4@x', 4);"
    )
    cycle(s, resources, instance)
    assert_mirrors(s, spark, ["a"])

    # Shard b joins the live table: bootstrapped from its source (the dump stitched by a
    # watermark), shard a's rows and upsert state untouched, then both stream.
    base = f"lake.shards_{s.tag}.{NAME}"
    a_before = sorted(tuple(r) for r in spark.sql(f"SELECT * FROM {base}").collect())
    state_a = base_state(iceberg.load_catalog().load_table(f"shards_{s.tag}.{NAME}"), "a")
    write_spec(_spec(s, ["a", "b"]), s.specs_dir / f"{NAME}.yaml")
    ensure_tables(spark, "lake", s.spec())
    boot = bootstrap_from_source(
        spark, "lake", iceberg.load_catalog(), s.view("b"), s.urls["b"], progress=False
    )
    assert boot.rows == 2
    after = iceberg.load_catalog().load_table(f"shards_{s.tag}.{NAME}")
    assert base_state(after, "a").token() == state_a.token()
    assert base_state(after, "b").floor == boot.position
    a_rows = spark.sql(f"SELECT * FROM {base} WHERE _shard = 'a'").collect()
    assert sorted(tuple(r) for r in a_rows) == a_before
    assert_mirrors(s, spark, ["a", "b"])
    with pytest.raises(BootstrapError, match="base already holds 2 rows"):
        bootstrap_from_source(
            spark, "lake", iceberg.load_catalog(), s.view("b"), s.urls["b"], progress=False
        )

    # Same keys on both shards, changed differently; a delete on one shard only.
    s.execute("b", "DELETE FROM users WHERE id = 3; INSERT INTO users VALUES (4, 'b4@x', 44);")
    s.execute("b", "UPDATE users SET email = 'b1-new@x' WHERE id = 1;")
    meta = cycle(s, resources, instance)
    assert set(meta["shards"]) == {"a", "b"}
    assert_mirrors(s, spark, ["a", "b"])
    rows = spark.sql(
        f"SELECT _shard, id, email FROM {base} WHERE id IN (1, 4) ORDER BY 1, 2"
    ).collect()
    assert [tuple(r) for r in rows] == [
        ("a", 1, "a1@x"),
        ("a", 4, "a4@x"),
        ("b", 1, "b1-new@x"),
        ("b", 4, "b4@x"),
    ]
    # The snapshots' CREATE TABLE records are the spec's own shape: nothing to start.
    assert tick(defs_for(s, resources), instance, cursor) == []

    # Shard b gains a column; shard a has not changed yet and keeps streaming.
    s.execute("b", "ALTER TABLE users ADD COLUMN phone VARCHAR(32);")
    s.execute(
        "b",
        "UPDATE users SET phone = '+1-555-0101' WHERE id = 1;"
        "INSERT INTO users VALUES (6, 'b6@x', 6, '+1-555-0106');",
    )
    s.execute(
        "a", "INSERT INTO users VALUES (7, 'a7@x', 7); UPDATE users SET score = 3 WHERE id = 2;"
    )
    wait_delivered(s)
    defs = defs_for(s, resources)
    (request,) = tick(defs, instance, cursor)
    assert request.tags["cdc/table"] == NAME
    run = defs.resolve_job_def("evolve_schemas").execute_in_process(
        instance=instance,
        run_config=request.run_config,
        asset_selection=list(request.asset_selection or []),
    )
    assert run.success
    assert s.spec().spec_version == 2
    assert [c.name for c in s.spec().columns] == ["id", "email", "score", "phone"]
    # Shard a's source has no phone yet: the drift check says so, naming the shard.
    behind = {"schema_drift": "shard a: column phone of spec v2 is not in the source"}
    meta = cycle(s, resources, instance, failing=behind)
    assert meta["dead_letters"] == 0
    assert_mirrors(s, spark, ["b"])
    phones = spark.sql(f"SELECT _shard, id, phone FROM {base} WHERE phone IS NOT NULL").collect()
    assert sorted(tuple(r) for r in phones) == [("b", 1, "+1-555-0101"), ("b", 6, "+1-555-0106")]
    a_rows = spark.sql(f"SELECT id, score FROM {base} WHERE _shard = 'a' ORDER BY id").collect()
    assert [tuple(r) for r in a_rows] == [(1, 12), (2, 3), (4, 4), (7, 7)]
    # Pull detection reads both shards' information_schema: shard a lacking phone is behind,
    # not a drop, so nothing drifted and no evolution would start.
    pulled = drift_observation(defs_for(s, resources), instance)
    assert pulled["servers_compared"] == [s.prefix("a"), s.prefix("b")]
    assert pulled["source"].endswith(f"on {s.prefix('b')}")
    assert not pulled["drift"], pulled

    # The same ALTER on shard a finds the table evolved: no second evolution.
    s.execute("a", "ALTER TABLE users ADD COLUMN phone VARCHAR(32);")
    s.execute("a", "UPDATE users SET phone = '+44-20-0002' WHERE id = 2;")
    s.execute("b", "UPDATE users SET phone = '+1-555-0103', score = 99 WHERE id = 6;")
    wait_delivered(s)
    assert tick(defs_for(s, resources), instance, cursor) == []
    cycle(s, resources, instance)
    assert s.spec().spec_version == 2
    assert_mirrors(s, spark, ["a", "b"])

    # Maintenance two weeks on: every snapshot old enough goes but those holding each shard's
    # upsert state and ledger offsets; both shards then stream on from where they were.
    catalog = iceberg.load_catalog()
    table = f"shards_{s.tag}.{NAME}"
    states = {k: base_state(catalog.load_table(table), k).token() for k in SHARDS}
    offsets = table_offsets(catalog, s.spec())
    maintained = maintain_table(
        spark, "lake", catalog, s.spec(), now=datetime.now(UTC) + timedelta(days=14)
    )
    assert not maintained.failed
    catalog = iceberg.load_catalog()
    assert {k: base_state(catalog.load_table(table), k).token() for k in SHARDS} == states
    assert table_offsets(catalog, s.spec()) == offsets
    s.execute("a", "UPDATE users SET score = 5 WHERE id = 4;")
    s.execute("b", "DELETE FROM users WHERE id = 1;")
    cycle(s, resources, instance)
    assert_mirrors(s, spark, ["a", "b"])
