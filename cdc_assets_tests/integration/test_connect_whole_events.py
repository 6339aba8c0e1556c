"""A Kafka Connect worker that dies between the records of one source event loses none of them.

A primary-key update on MariaDB becomes three records that share one offset: a delete, its
tombstone and a create. Debezium's own offsets let Connect commit "after the update" once the
delete is acknowledged; a worker that dies before the create is sent then resumes after the
update, and the row under its new key never reaches Kafka (debezium/dbz#2549; it failed a
clean-clone CI run of this project). The project's connectors (`jvm/connect`,
``WholeEventOffsets``) give every record but an event's last the offset of the event before.

The connectors' test hook makes the crash deterministic: while a file exists, the task cuts its
batch after a primary-key update's delete, waits for an offset commit and halts the worker's JVM.
With the project's offsets the restarted worker sends the update again; with Debezium's
(``cdc.assets.whole.event.offsets=false``) the create is lost, which shows the test can fail.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from cdc_assets.settings import Settings
from cdc_assets.stack import connect, local_process, sources
from cdc_assets.stack.local_stack import StackState
from cdc_assets_tests.support import extra_connector

pytestmark = pytest.mark.integration

ENABLED = "cdc.assets.whole.event.offsets"
HALT_FILE = "cdc.assets.test.halt.after.moved.delete"
MARKER = 999
TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def admin(sources_stack: StackState) -> AdminClient:
    return AdminClient({"bootstrap.servers": sources_stack.bootstrap_servers})


@pytest.fixture(params=["whole", "debezium"])
def moved(
    request: pytest.FixtureRequest,
    sources_home: Settings,
    sources_stack: StackState,
    admin: AdminClient,
    tmp_path: Path,
) -> Iterator[tuple[str, extra_connector.ExtraConnector, Path]]:
    """(offsets kind, a connector of its own on a table of its own, the halt file)."""
    tag = uuid.uuid4().hex[:6]
    table = f"moves_{tag}"
    sources.mariadb_execute(
        sources_home,
        f"CREATE TABLE app.{table} (id INT PRIMARY KEY, v VARCHAR(16) NOT NULL); "
        f"INSERT INTO app.{table} VALUES (1, 'one'), (2, 'two'), (3, 'three');",
    )
    halt = tmp_path / "halt"
    extra = extra_connector.register(
        sources_home,
        sources_stack.bootstrap_servers,
        "mariadb",
        tag,
        [f"app.{table}"],
        overrides={ENABLED: str(request.param == "whole").lower(), HALT_FILE: str(halt)},
    )
    try:
        yield request.param, extra, halt
    finally:
        halt.unlink(missing_ok=True)
        extra_connector.remove(sources_home, extra, admin)
        sources.mariadb_execute(sources_home, f"DROP TABLE app.{table};")


def wait_dead(settings: Settings, pid: int) -> None:
    marker = str(connect.connect_files(settings).worker_properties)
    deadline = time.monotonic() + TIMEOUT_S
    while local_process.runs(pid, marker):
        assert time.monotonic() < deadline, f"the worker {pid} did not halt"
        time.sleep(0.5)


def events(bootstrap: str, topic: str, until_key: int) -> list[dict[str, Any]]:
    """The topic's change events (payloads) up to the create of key ``until_key``."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"moves-{uuid.uuid4().hex[:8]}"}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None or msg.value() is None:
                continue
            payload = json.loads(msg.value())["payload"]
            out.append(payload)
            if payload["op"] == "c" and payload["after"]["id"] == until_key:
                return out
    finally:
        consumer.close()
    raise AssertionError(f"no create of key {until_key} on {topic} within {TIMEOUT_S:.0f} s")


def test_a_worker_halted_inside_a_primary_key_update(
    moved: tuple[str, extra_connector.ExtraConnector, Path],
    sources_home: Settings,
    sources_stack: StackState,
) -> None:
    kind, extra, halt = moved
    table = extra.config["table.include.list"].split(".")[1]
    pid, _ = connect.running_worker(sources_home)
    halt.touch()
    sources.mariadb_execute(sources_home, f"UPDATE app.{table} SET id = 10 WHERE id = 1;")
    wait_dead(sources_home, pid)
    assert not halt.exists(), "the worker died, but not by the connector's test hook"
    connect.restart_worker(sources_home, sources_stack.bootstrap_servers)
    # A later change: once its create is on the topic, everything before it is too.
    sources.mariadb_execute(sources_home, f"INSERT INTO app.{table} VALUES ({MARKER}, 'm');")

    changes = events(sources_stack.bootstrap_servers, extra.topic("app", table), MARKER)
    deletes = [e for e in changes if e["op"] == "d" and e["before"]["id"] == 1]
    creates = [e for e in changes if e["op"] == "c" and e["after"]["id"] == 10]
    assert deletes, "the update's delete was sent before the halt"
    if kind == "whole":
        # Sent again after the restart, and this time whole.
        assert len(deletes) == 2, changes
        assert [e["after"]["v"] for e in creates] == ["one"], changes
    else:
        # Debezium's offsets: the restarted task resumed after the update.
        assert (len(deletes), len(creates)) == (1, 0), changes
