"""A Debezium connector of a test's own on the real-sources stack: the repository's connector
config for that database with another name, topic prefix, server id or replication slot, its
topics under that prefix (no routing), registered while the tables already hold rows so that its
snapshot reads them (op ``r``). Removing it deletes the connector, drops its PostgreSQL
replication slot (an abandoned slot keeps WAL forever) and deletes its topics.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from cdc_assets.errors import StackError
from cdc_assets.settings import Settings
from cdc_assets_dev.stack import connect, sources

TIMEOUT_S = 120.0


@dataclass(frozen=True)
class ExtraConnector:
    name: str
    prefix: str  # Debezium topic.prefix: topics are <prefix>.<database or schema>.<table>
    server: sources.ServerName
    config: dict[str, str]
    slot: str | None = None  # PostgreSQL replication slot

    def topic(self, middle: str, table: str) -> str:
        return f"{self.prefix}.{middle}.{table}"

    @property
    def topics(self) -> list[str]:
        """Every topic the connector writes (table topics are found by prefix)."""
        extra = [connect.heartbeat_topic(self.config)]
        history = self.config.get("schema.history.internal.kafka.topic")
        if self.config.get("include.schema.changes") == "true":
            extra.append(self.prefix)  # the schema-change topic is named as the prefix
        return extra + ([history] if history else [])


def _port(settings: Settings) -> int:
    entry = sources.load_state(settings).get("connect")
    port = entry.get("port") if isinstance(entry, dict) else None
    if not isinstance(port, int):
        raise StackError("Kafka Connect is not running: `stack up --sources` first")
    return port


def register(
    settings: Settings,
    bootstrap: str,
    server: sources.ServerName,
    tag: str,
    tables: list[str],
    *,
    prefix: str | None = None,
    mariadb_name: str = sources.MARIADB,
    schema_changes: bool = False,
    overrides: dict[str, str] | None = None,
) -> ExtraConnector:
    """Register a connector capturing ``tables`` (``db.table`` or ``schema.table``) with its own
    name, prefix and server id or slot; return once its snapshot is done (first heartbeat).
    ``mariadb_name`` picks a further local MariaDB server; ``schema_changes`` makes the
    connector write its schema-change topic (named as its prefix); ``overrides`` are further
    connector settings (a publication of the test's own, say)."""
    name = f"it-{server}-{tag}"
    prefix = prefix or f"it{server[0]}{tag}"
    slot = None if server == "mariadb" else f"it_{tag}"
    # The slot's publication: the stack's, which covers the example table.
    config = connect.capture_config(
        settings,
        bootstrap,
        server,
        prefix=prefix,
        tables=tables,
        mariadb_name=mariadb_name,
        server_id=6000 + int(tag, 16) % 3000,
        slot=slot,
        schema_changes=schema_changes,
        overrides=overrides,
    )
    port = _port(settings)
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        status, answer = connect.rest(port, "PUT", f"/connectors/{name}/config", config)
        if 200 <= status < 300:
            break
        if status not in (0, 409, 500, 503) or time.monotonic() > deadline:
            raise StackError(f"registering {name}: HTTP {status} {answer}")
        time.sleep(1.0)  # the worker is rebalancing
    extra = ExtraConnector(name, prefix, server, config, slot)
    connect.wait_running(port, name, log_file=connect.connect_files(settings).log_file)
    connect.wait_snapshots_done(bootstrap, [connect.heartbeat_topic(config)])
    return extra


def remove(settings: Settings, extra: ExtraConnector, admin: Any) -> None:
    """Delete the connector, then its replication slot and its topics."""
    port = _port(settings)
    connect.rest(port, "DELETE", f"/connectors/{extra.name}")
    deadline = time.monotonic() + TIMEOUT_S
    while connect.rest(port, "GET", f"/connectors/{extra.name}")[0] != 404:
        if time.monotonic() > deadline:
            raise StackError(f"connector {extra.name} still exists after its DELETE")
        time.sleep(0.5)
    if extra.slot is not None:
        drop_slot(settings, extra.slot)
    topics = [t for t in admin.list_topics(timeout=15).topics if t.startswith(extra.prefix + ".")]
    topics += [t for t in extra.topics if t in admin.list_topics(timeout=15).topics]
    if topics:
        for future in admin.delete_topics(topics).values():
            future.result(30)


def slot_exists(settings: Settings, slot: str) -> bool:
    out = sources.postgres_execute(
        settings, f"SELECT count(*) FROM pg_replication_slots WHERE slot_name = '{slot}';"
    )
    return out.strip() != "0"


def drop_slot(settings: Settings, slot: str) -> None:
    """Drop the slot once its walsender has let go of it (shortly after the task stops)."""
    deadline = time.monotonic() + TIMEOUT_S
    while slot_exists(settings, slot):
        sources.postgres_execute(
            settings,
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            f"WHERE slot_name = '{slot}' AND NOT active;",
        )
        if time.monotonic() > deadline:
            raise StackError(f"replication slot {slot} is still active")
        time.sleep(0.5)


def move(settings: Settings, extra: ExtraConnector, mariadb_name: str) -> ExtraConnector:
    """Point a MariaDB connector at another local server (a promoted replica), as an operator
    does after a failover: same name, so it resumes from its stored offsets (a GTID position
    the new server's binlog also holds). Returns once the connector streams from the new server
    (its log says it connected there): Debezium checks the stored GTID against the server's
    ``gtid_binlog_pos``, which names the last writer of each domain, so the connector must be
    on the new primary before the new primary's first write."""
    target = sources.port_of(settings, mariadb_name)
    config = {**extra.config, "database.port": str(target)}
    log_file = connect.connect_files(settings).log_file
    seen = log_file.stat().st_size if log_file.exists() else 0
    port = _port(settings)
    status, answer = connect.rest(port, "PUT", f"/connectors/{extra.name}/config", config)
    if not 200 <= status < 300:
        raise StackError(f"moving {extra.name} to {mariadb_name}: HTTP {status} {answer}")
    connected = re.compile(rf"Connected to .*:{target}\b")
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        with log_file.open(encoding="utf-8", errors="replace") as handle:
            handle.seek(seen)
            if connected.search(handle.read()):
                break
        state = connect.connector_status(port, extra.name)
        failed = [t for t in state.get("tasks", []) if t.get("state") == "FAILED"]
        if failed:
            raise StackError(f"{extra.name} failed on {mariadb_name}:\n{failed[0].get('trace')}")
        if time.monotonic() > deadline:
            raise StackError(f"{extra.name} did not connect to {mariadb_name} in time")
        time.sleep(0.5)
    return ExtraConnector(extra.name, extra.prefix, extra.server, config, extra.slot)
