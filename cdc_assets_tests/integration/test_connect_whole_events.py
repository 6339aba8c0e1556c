"""A Kafka Connect worker that dies between the records of one source event loses none of them.

A primary-key update becomes three records that share one offset: a delete, its tombstone and a
create. Debezium's own offsets let Connect commit "after the update" once the delete is
acknowledged; a worker that dies before the create is sent then resumes after the update, and the
row under its new key never reaches Kafka (debezium/dbz#2549; it failed a clean-clone CI run of
this project). The project's connectors (`java/connect`, ``WholeEventOffsets``) give every record
but an event's last the offset of the event before.

The connectors' test hook makes the crash deterministic: while a file exists, the task cuts its
batch after a primary-key update's delete, lets Connect commit offsets and halts the worker's
JVM. On MariaDB and on PostgreSQL, with the project's offsets the restarted worker sends the
update again; with Debezium's (``cdc.assets.whole.event.offsets=false``) the create is lost,
which shows the test can fail.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from cdc_assets.settings import Settings
from cdc_assets_dev.stack import connect, local_process, sources
from cdc_assets_dev.stack.local_stack import StackState
from cdc_assets_tests.support import extra_connector

pytestmark = pytest.mark.integration

ENABLED = "cdc.assets.whole.event.offsets"
HALT_FILE = "cdc.assets.test.halt.after.moved.delete"
MARKER = 999
TIMEOUT_S = 120.0


@dataclass
class Moves:
    server: sources.ServerName
    offsets: str  # "whole" (the project's) or "debezium" (Debezium's own)
    container: str  # database (MariaDB) or schema (PostgreSQL)
    table: str
    halt: Path
    topic: str = ""

    def execute(self, settings: Settings, sql: str) -> None:
        if self.server == "mariadb":
            sources.mariadb_execute(settings, sql)
        else:
            sources.postgres_execute(settings, sql, "shop")


@pytest.fixture(scope="module")
def admin(sources_stack: StackState) -> AdminClient:
    return AdminClient({"bootstrap.servers": sources_stack.bootstrap_servers})


@pytest.fixture(
    params=[
        ("mariadb", "whole"),
        ("mariadb", "debezium"),
        ("postgres", "whole"),
        ("postgres", "debezium"),
    ],
    ids=lambda p: "-".join(p),
)
def moved(
    request: pytest.FixtureRequest,
    sources_home: Settings,
    sources_stack: StackState,
    admin: AdminClient,
    tmp_path: Path,
) -> Iterator[Moves]:
    """A connector of its own on a table of its own, and the halt file of its test hook."""
    server, offsets = request.param
    tag = uuid.uuid4().hex[:6]
    table = f"moves_{tag}"
    create = (
        f"CREATE TABLE {{}}.{table} (id INT PRIMARY KEY, v VARCHAR(16) NOT NULL); "
        f"INSERT INTO {{}}.{table} VALUES (1, 'one'), (2, 'two'), (3, 'three');"
    )
    overrides = {ENABLED: str(offsets == "whole").lower()}
    if server == "mariadb":
        moves = Moves(server, offsets, "app", table, tmp_path / "halt")
        sources.mariadb_execute(sources_home, create.format("app", "app"))
    else:
        moves = Moves(server, offsets, "public", table, tmp_path / "halt")
        sources.postgres_execute(
            sources_home,
            create.format("public", "public")
            + f"GRANT SELECT ON public.{table} TO {sources.CDC_USER};"
            f"CREATE PUBLICATION pub_{tag} FOR TABLE public.{table};",
            "shop",
        )
        overrides["publication.name"] = f"pub_{tag}"
    overrides[HALT_FILE] = str(moves.halt)
    extra = extra_connector.register(
        sources_home,
        sources_stack.bootstrap_servers,
        server,
        tag,
        [f"{moves.container}.{table}"],
        overrides=overrides,
    )
    moves.topic = extra.topic(moves.container, table)
    try:
        yield moves
    finally:
        moves.halt.unlink(missing_ok=True)
        extra_connector.remove(sources_home, extra, admin)
        if server == "mariadb":
            sources.mariadb_execute(sources_home, f"DROP TABLE app.{table};")
        else:
            sources.postgres_execute(
                sources_home, f"DROP PUBLICATION pub_{tag}; DROP TABLE public.{table};", "shop"
            )


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
    moved: Moves, sources_home: Settings, sources_stack: StackState
) -> None:
    name = f"{moved.container}.{moved.table}"
    pid, _ = connect.running_worker(sources_home)
    moved.halt.touch()
    moved.execute(sources_home, f"UPDATE {name} SET id = 10 WHERE id = 1;")
    wait_dead(sources_home, pid)
    assert not moved.halt.exists(), "the worker died, but not by the connector's test hook"
    connect.restart_worker(sources_home, sources_stack.bootstrap_servers)
    # A later change: once its create is on the topic, everything before it is too.
    moved.execute(sources_home, f"INSERT INTO {name} VALUES ({MARKER}, 'm');")

    changes = events(sources_stack.bootstrap_servers, moved.topic, MARKER)
    deletes = [e for e in changes if e["op"] == "d" and e["before"]["id"] == 1]
    creates = [e for e in changes if e["op"] == "c" and e["after"]["id"] == 10]
    assert deletes, "the update's delete was sent before the halt"
    if moved.offsets == "whole":
        # Sent again after the restart, and this time whole.
        assert len(deletes) == 2, changes
        assert [e["after"]["v"] for e in creates] == ["one"], changes
    else:
        # Debezium's offsets: the restarted task resumed after the update.
        assert (len(deletes), len(creates)) == (1, 0), changes


def test_a_worker_of_another_classpath_is_restarted(
    sources_home: Settings, sources_stack: StackState, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`stack up --sources` keeps a running worker only when it runs the current classpath: one
    started before an upgrade lacks the connector classes the configs now name."""
    bootstrap = sources_stack.bootstrap_servers
    pid, port = connect.running_worker(sources_home)
    assert connect.start_worker(sources_home, bootstrap) == port  # current: kept
    assert connect.running_worker(sources_home)[0] == pid

    real = connect.connect_classpath(sources_home)
    with monkeypatch.context() as m:
        m.setattr(connect, "connect_classpath", lambda settings: real + os.pathsep + "upgraded")
        connect.restart_worker(sources_home, bootstrap)
    upgraded, _ = connect.running_worker(sources_home)
    assert upgraded != pid
    assert "upgraded" in " ".join(local_process.cmdline(upgraded))
    # And back: the session's other tests find the worker as the stack starts it.
    connect.restart_worker(sources_home, bootstrap)
    assert connect.running_worker(sources_home)[0] != upgraded
