"""The local stack's source databases: a private MariaDB server and a private PostgreSQL cluster.

Both come from Debian's packages (`make sources-setup`), keep their data under the stack dir
(``mariadb/``, ``postgres/``), listen on 127.0.0.1 on ports picked free at start, and are set up
once for Debezium: MariaDB with a ROW binlog and strict GTIDs, PostgreSQL with logical WAL and a
pgoutput publication, a ``cdc`` user with replication rights, and the example tables created from
the DDL files in ``dev/cdc_assets_dev/sources/sql/``. The ``sources`` section of the stack's
state file (``local_servers/state.py``) records ports, pids and the ``cdc`` password (also read
by the Kafka Connect module).

This module starts, stops and reports both (``mariadb_server.py``, ``postgres_server.py``, on
``source_servers.py``), and is where the rest of the project finds them.
"""

from __future__ import annotations

import signal

from cdc_assets.errors import StackError
from cdc_assets.settings import Settings
from cdc_assets_dev.stack.kafka_broker import HOST
from cdc_assets_dev.stack.mariadb_server import (
    mariadb_execute,
    mariadb_files,
    mariadb_jdbc_url,
    mariadb_servers,
    remove_mariadb,
    start_mariadb,
    stop_mariadb,
)
from cdc_assets_dev.stack.postgres_server import (
    PUBLICATION,
    postgres_execute,
    postgres_files,
    start_postgres,
    stop_postgres,
)
from cdc_assets_dev.stack.source_servers import (
    CDC_USER,
    CONNECTORS_DIR,
    EXAMPLE_TABLES,
    MARIADB,
    ExampleTable,
    ServerName,
    ServerStatus,
    cdc_password,
    choose_port,
    load_state,
    port_of,
    remember_port,
    server_status,
    started,
    stop_server,
    update_state,
)

__all__ = [
    "CDC_USER",
    "CONNECTORS_DIR",
    "EXAMPLE_TABLES",
    "MARIADB",
    "PUBLICATION",
    "ExampleTable",
    "ServerName",
    "ServerStatus",
    "cdc_password",
    "choose_port",
    "jdbc_urls",
    "load_state",
    "mariadb_execute",
    "mariadb_jdbc_url",
    "mariadb_servers",
    "port_of",
    "postgres_execute",
    "remember_port",
    "remove_mariadb",
    "server_status",
    "sources_status",
    "start_mariadb",
    "start_postgres",
    "start_sources",
    "started",
    "stop_mariadb",
    "stop_postgres",
    "stop_sources",
    "update_state",
]


def start_sources(settings: Settings) -> dict[str, int]:
    """Start MariaDB and PostgreSQL (set up on first start); their ports."""
    settings.stack_dir.mkdir(parents=True, exist_ok=True)
    (settings.stack_dir / "logs").mkdir(exist_ok=True)
    cdc_password(settings)
    return {"mariadb": start_mariadb(settings), "postgres": start_postgres(settings)}


def stop_sources(settings: Settings) -> None:
    """Stop every server (recorded or stray); their data stays."""
    for name in mariadb_servers(settings):
        stop_server(settings, name, mariadb_files(settings, name).marker, signal.SIGTERM)
    # SIGINT is PostgreSQL's fast shutdown; SIGTERM would wait for clients to disconnect.
    stop_postgres(settings)


def sources_status(settings: Settings) -> list[ServerStatus]:
    """Status of each server that was ever started in this stack."""
    try:
        data = load_state(settings)
    except StackError as exc:
        return [ServerStatus("mariadb", "dead", None, None, str(exc))]
    statuses = []
    markers = {
        name: (mariadb_files(settings, name).marker, mariadb_files(settings, name).log_file)
        for name in mariadb_servers(settings)
    }
    markers["postgres"] = (postgres_files(settings).marker, postgres_files(settings).log_file)
    for name, (marker, log_file) in markers.items():
        if name not in data.get("ports", {}):
            continue
        statuses.append(server_status(settings, name, marker, log_file))
    return statuses


def jdbc_urls(settings: Settings) -> list[tuple[str, ServerName, str]]:
    """(database, server, JDBC URL as the cdc user) of each example database, for
    ``CDC_ASSETS_SOURCE_URL_<DATABASE>``. Note: ``shop`` is on both servers."""
    password = cdc_password(settings)
    scheme = {"mariadb": "jdbc:mariadb", "postgres": "jdbc:postgresql"}
    urls = []
    for server, database in sorted({(t.server, t.database) for t in EXAMPLE_TABLES}):
        port = port_of(settings, server)
        if port is not None:
            url = f"{scheme[server]}://{HOST}:{port}/{database}?user={CDC_USER}&password={password}"
            urls.append((database, server, url))
    return urls
