"""A MariaDB primary fails over to its replica mid-workload, and the connector moves with it
(issue 20, part 3), on real servers and real Debezium.

Two further MariaDB servers of the real-sources stack: a primary and a GTID replica of it. The
primary rotates its binlog a few times before the workload (as a server that has run for a
while has), so its binlog file numbers are ahead of the replica's, whose binlog starts with the
replication. A Debezium connector snapshots and streams the primary; the primary is killed
(SIGKILL) once the replica has caught up, the replica is promoted, the connector is pointed at
it and resumes from its GTID offset; the workload goes on, on the same keys.

Two specs read the same topic: one ordered by binlog coordinates (the default), one by GTID
(``source.order: gtid``). The GTID-ordered base equals the new primary row for row; the
binlog-ordered one keeps older values, because the new primary's coordinates are below the old
primary's — the bug this order exists for. A third GTID-ordered spec is bootstrapped from a JDBC
dump of the new primary (a watermark in GTID terms) and converges as well.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from cdc_assets.pipeline.bootstrap.bootstrap import bootstrap_from_source
from cdc_assets.pipeline.bootstrap.source_compare import compare_source
from cdc_assets.pipeline.ingest.gtid_floor import SNAPSHOT_MINOR
from cdc_assets.pipeline.ingest.ingest import ingest_incremental
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.pipeline.upsert.upsert import build_bucketed, merge_base
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.settings import Settings
from cdc_assets.spec.models import TableSpec
from cdc_assets_dev.stack import connect, replication, sources
from cdc_assets_dev.stack.local_process import log_tail
from cdc_assets_dev.stack.local_stack import StackState
from cdc_assets_tests.support import extra_connector

pytestmark = pytest.mark.integration

PRIMARY, REPLICA = "mariadb-fo1", "mariadb-fo2"
KEYS = range(1, 31)
DELIVERY_TIMEOUT_S = 120.0


@dataclass
class Failover:
    home: Settings
    bootstrap: str
    database: str
    kafka: KafkaResource
    connector: extra_connector.ExtraConnector
    server: str  # the server that is primary now

    @property
    def topic(self) -> str:
        return self.connector.topic(self.database, "items")

    def execute(self, sql: str) -> None:
        sources.mariadb_execute(self.home, sql, self.database, name=self.server)

    def url(self) -> str:
        return sources.mariadb_jdbc_url(self.home, self.database, self.server)


def _spec(f: Failover, name: str, order: str) -> TableSpec:
    return TableSpec.model_validate(
        {
            "spec_version": 1,
            "name": name,
            "source": {
                "connector": "mariadb",
                "database": f.database,
                "table": "items",
                "topic": f.topic,
                "order": order,
            },
            "columns": [
                {"id": 1, "name": "id", "type": "bigint", "nullable": False},
                {"id": 2, "name": "v", "type": "int"},
                {"id": 3, "name": "note", "type": "varchar(64)"},
            ],
            "primary_key": ["id"],
            "sink": {"namespace": f"fo_{f.database[-6:]}", "table": name},
            "base": {"buckets": 2},
        }
    )


@pytest.fixture(scope="module")
def failover(sources_home: Settings, sources_stack: StackState) -> Iterator[Failover]:
    tag = uuid.uuid4().hex[:6]
    database = f"fo_{tag}"
    for name in (PRIMARY, REPLICA):
        sources.start_mariadb(sources_home, name)
    replication.replicate(sources_home, REPLICA, PRIMARY)
    # A primary that has run for a while is some binlog files ahead of a fresh replica; rotating
    # without writing to the binlog keeps the rotation off the replica.
    sources.mariadb_execute(sources_home, "FLUSH NO_WRITE_TO_BINLOG BINARY LOGS;" * 3, name=PRIMARY)
    sources.mariadb_execute(
        sources_home,
        f"CREATE DATABASE `{database}`; USE `{database}`; CREATE TABLE items ("
        "id BIGINT NOT NULL PRIMARY KEY, v INT, note VARCHAR(64));"
        + "".join(f"INSERT INTO items VALUES ({k}, {k}, 'seed');" for k in KEYS),
        name=PRIMARY,
    )
    kafka = KafkaResource(
        bootstrap_servers=sources_stack.bootstrap_servers, home=str(sources_home.home)
    )
    connector = extra_connector.register(
        sources_home,
        sources_stack.bootstrap_servers,
        "mariadb",
        tag,
        [f"{database}.items"],
        mariadb_name=PRIMARY,
    )
    f = Failover(sources_home, sources_stack.bootstrap_servers, database, kafka, connector, PRIMARY)
    try:
        yield f
    finally:
        extra_connector.remove(sources_home, f.connector, kafka.admin())
        for name in (PRIMARY, REPLICA):
            sources.remove_mariadb(sources_home, name)


def wait_delivered(f: Failover, marker: int) -> None:
    """Insert and delete a marker row; return once the delete is on the topic."""
    f.execute(
        f"INSERT INTO items VALUES ({marker}, 0, 'marker'); DELETE FROM items WHERE id = {marker};"
    )
    consumer = Consumer(
        {"bootstrap.servers": f.bootstrap, "group.id": f"fo-{uuid.uuid4().hex[:8]}"}
    )
    consumer.assign([TopicPartition(f.topic, 0, 0)])
    deadline = time.monotonic() + DELIVERY_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None or msg.value() is None:
                continue
            event = json.loads(msg.value())["payload"]
            if event.get("op") == "d" and (event.get("before") or {}).get("id") == marker:
                return
    finally:
        consumer.close()
    log = connect.connect_files(f.home).log_file
    status = connect.connector_status(extra_connector._port(f.home), f.connector.name)
    tail = "\n".join(log_tail(log, 60))
    raise AssertionError(
        f"marker {marker} not delivered within {DELIVERY_TIMEOUT_S:.0f} s; connector {status}; "
        f"Kafka Connect log:\n{tail}"
    )


def mirror(spark: Any, iceberg: IcebergCatalogResource, f: Failover, spec: TableSpec) -> None:
    result = ingest_incremental(spark, "lake", iceberg.load_catalog(), f.kafka, spec)
    assert result.dead == 0, (spec.name, result.dead_reasons)
    build_bucketed(spark, "lake", iceberg.load_catalog(), spec)
    merge_base(spark, "lake", iceberg.load_catalog(), spec)


def workload(f: Failover, step: int) -> None:
    """Every key changes; a few are deleted and come back; new keys arrive."""
    f.execute(
        "".join(
            f"UPDATE items SET v = {step * 1000 + k}, note = 's{step}' WHERE id = {k};"
            for k in KEYS
        )
        + f"DELETE FROM items WHERE id IN ({step}, {step + 10});"
        + f"INSERT INTO items VALUES ({step}, {step}, 'back{step}');"
        + f"INSERT INTO items VALUES ({100 + step}, {step}, 'new');"
    )


def test_gtid_order_survives_a_failover_and_binlog_order_does_not(
    failover: Failover, spark: Any, iceberg: IcebergCatalogResource
) -> None:
    f = failover
    gtid, binlog, dumped = (
        _spec(f, "items_gtid", "gtid"),
        _spec(f, "items_binlog", "binlog"),
        _spec(f, "items_dumped", "gtid"),
    )
    for spec in (gtid, binlog, dumped):
        ensure_tables(spark, "lake", spec)

    for step in (1, 2):
        workload(f, step)
    wait_delivered(f, 90_001)
    for spec in (gtid, binlog):
        mirror(spark, iceberg, f, spec)
        assert compare_source(spark, "lake", spec, f.url()).equal, spec.name

    # Fail over: the replica has everything, the primary dies, the replica takes over and the
    # connector follows it.
    replication.wait_caught_up(f.home, REPLICA, PRIMARY)
    replication.kill(f.home, PRIMARY)
    replication.promote(f.home, REPLICA)
    f.server = REPLICA
    f.connector = extra_connector.move(f.home, f.connector, REPLICA)
    for step in (3, 4):
        workload(f, step)
    wait_delivered(f, 90_002)

    bootstrap_from_source(spark, "lake", iceberg.load_catalog(), dumped, f.url(), progress=False)
    for spec in (gtid, binlog, dumped):
        mirror(spark, iceberg, f, spec)

    # The snapshot's reads carry no GTID: stamped from their place in Kafka, before the stream.
    ledger = spark.sql(
        f"SELECT _op, _seq_major, _seq_minor FROM lake.{gtid.sink.namespace}.items_gtid_cdc"
    ).collect()
    reads = [r for r in ledger if r["_op"] == "r"]
    assert len(reads) == len(KEYS)
    assert {(r["_seq_major"], r["_seq_minor"]) for r in reads} == {(0, SNAPSHOT_MINOR)}
    assert all(r["_seq_major"] > 0 for r in ledger if r["_op"] != "r")

    for spec in (gtid, dumped):
        diff = compare_source(spark, "lake", spec, f.url())
        assert diff.equal, f"{spec.name}: {diff.summary()}"
    # Binlog coordinates of the new primary are below the old primary's: older values win.
    stale = compare_source(spark, "lake", binlog, f.url())
    assert not stale.equal
