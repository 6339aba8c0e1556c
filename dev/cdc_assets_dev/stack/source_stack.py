"""The opt-in part of the local stack (`cdc-assets stack up --sources`): MariaDB, PostgreSQL, a
Kafka Connect worker and the Debezium connectors, in that order; stopped in the reverse order.

local_stack calls these under its lock; the broker must be running for `up`.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field

from cdc_assets.local_servers import state as stack_state
from cdc_assets.settings import Settings
from cdc_assets_dev.stack import connect, sources


@dataclass(frozen=True)
class SourcesUp:
    """What `up` started or found running."""

    mariadb_port: int
    postgres_port: int
    connect_port: int
    connectors: list[str]


@dataclass(frozen=True)
class SourcesStatus:
    servers: list[sources.ServerStatus] = field(default_factory=list)
    connectors: list[str] = field(default_factory=list)

    @property
    def started(self) -> bool:
        return bool(self.servers)

    @property
    def healthy(self) -> bool:
        # Servers that were stopped (plain `stack up` after `stack down`) are not a failure.
        return all(s.state != "dead" for s in self.servers) and not any(
            "RUNNING" not in line for line in self.connectors
        )

    def render(self) -> list[str]:
        lines = []
        for server in self.servers:
            lines.append(f"  {server.name + ':':<10} {server.state} - {server.reason}")
        lines.extend(f"  connector: {line}" for line in self.connectors)
        for server in self.servers:
            if server.state == "dead" and server.log_tail:
                lines.append(f"  last {len(server.log_tail)} lines of the {server.name} log:")
                lines.extend(f"    {line}" for line in server.log_tail)
        return lines


def up(settings: Settings, bootstrap: str, *, avro: dict[str, str] | None = None) -> SourcesUp:
    """Start (or keep) both databases and the worker, register the connectors, wait for them.
    ``avro``: server kind -> registry URL (v2 API) of the connectors that write Avro."""
    ports = sources.start_sources(settings)
    connect_port = connect.start_worker(settings, bootstrap)
    names = connect.register_connectors(settings, bootstrap, connect_port, avro=avro)
    return SourcesUp(ports["mariadb"], ports["postgres"], connect_port, names)


def down(settings: Settings, *, purge: bool = False) -> None:
    """Stop the worker first (it holds replication connections), then the databases."""
    connect.stop_worker(settings)
    mariadb_servers = sources.mariadb_servers(settings)
    sources.stop_sources(settings)
    if purge:
        for directory in (*mariadb_servers, "postgres", "connect"):
            shutil.rmtree(settings.stack_dir / directory, ignore_errors=True)
        stack_state.put(settings, sources=None)


def status(settings: Settings) -> SourcesStatus:
    servers = sources.sources_status(settings)
    if not servers:
        return SourcesStatus()
    entry = sources.load_state(settings).get("ports", {})
    if "connect" in entry:
        servers.append(connect.worker_status(settings))
    return SourcesStatus(servers, connect.connectors_summary(settings))
