"""The local stack's MariaDB servers: its own (with the example tables) and any further one
(a second server of a schema, a replica), each with its own data directory, port and server id,
a ROW binlog with strict GTIDs for Debezium and a ``cdc`` user with replication rights.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdc_assets.errors import StackError
from cdc_assets.settings import Settings
from cdc_assets_dev.stack import local_process
from cdc_assets_dev.stack.kafka_broker import HOST, port_answers
from cdc_assets_dev.stack.source_servers import (
    CDC_USER,
    EXAMPLE_TABLES,
    INSTALL_HINT,
    MARIADB,
    SETUP_MARKER,
    cdc_password,
    choose_port,
    find_tool,
    load_state,
    port_of,
    record_addresses,
    record_server,
    run_client,
    run_tool,
    running_entry,
    stop_server,
    update_state,
    wait_ready,
)


def _admin_user() -> str:
    """The OS user, who is MariaDB's socket-authenticated admin after mariadb-install-db."""
    return pwd.getpwuid(os.geteuid()).pw_name


@dataclass(frozen=True)
class MariaDbTools:
    server: str
    install_db: str
    client: str


def mariadb_tools() -> MariaDbTools:
    server = find_tool("mariadbd", "/usr/sbin/mariadbd")
    install_db = find_tool("mariadb-install-db", "/usr/bin/mariadb-install-db")
    client = find_tool("mariadb", "/usr/bin/mariadb")
    if server is None or install_db is None or client is None:
        missing = [
            n for n, p in (("mariadbd", server), ("mariadb-install-db", install_db)) if not p
        ]
        missing += [] if client else ["mariadb"]
        raise StackError(
            f"MariaDB is not installed ({', '.join(missing)} not found): "
            + INSTALL_HINT.format(packages="mariadb-server mariadb-client")
        )
    return MariaDbTools(server, install_db, client)


@dataclass(frozen=True)
class MariaDbFiles:
    base: Path
    data_dir: Path
    socket: Path
    pid_file: Path
    log_file: Path

    @property
    def marker(self) -> str:
        return f"--datadir={self.data_dir}"


def mariadb_files(settings: Settings, name: str = MARIADB) -> MariaDbFiles:
    base = settings.stack_dir / name
    return MariaDbFiles(
        base=base,
        data_dir=base / "data",
        socket=base / "mysqld.sock",
        pid_file=base / "mariadbd.pid",
        log_file=settings.stack_dir / "logs" / f"{name}.log",
    )


def mariadb_server_id(name: str) -> int:
    """The replication server id of a local MariaDB server: 1 for the stack's own, a stable
    different one for each further server (replicas and connectors need them distinct)."""
    return 1 if name == MARIADB else 100 + zlib.crc32(name.encode()) % 4000


def mariadb_command(
    tools: MariaDbTools, files: MariaDbFiles, port: int, server_id: int = 1
) -> list[str]:
    """mariadbd on loopback with what the Debezium MariaDB connector needs from the binlog."""
    command = [
        tools.server,
        "--no-defaults",  # /etc/mysql/ belongs to the system service, not to this server
        f"--datadir={files.data_dir}",
        f"--socket={files.socket}",
        f"--pid-file={files.pid_file}",
        f"--bind-address={HOST}",
        f"--port={port}",
        "--skip-name-resolve",
        f"--server-id={server_id}",
        "--log-bin=mariadb-bin",
        "--binlog-format=ROW",
        "--binlog-row-image=FULL",
        "--gtid-strict-mode=ON",
        "--log-slave-updates=ON",
        "--character-set-server=utf8mb4",
        "--collation-server=utf8mb4_general_ci",
        "--default-time-zone=+00:00",
        "--innodb-buffer-pool-size=64M",
        "--performance-schema=OFF",
        "--max-connections=60",
    ]
    if os.geteuid() == 0:
        command.append("--user=root")
    return command


def mariadb_client_command(
    settings: Settings, database: str | None = None, name: str = MARIADB
) -> list[str]:
    """The `mariadb` client as the admin user over the server's socket (SQL on stdin)."""
    tools = mariadb_tools()
    files = mariadb_files(settings, name)
    command = [
        tools.client,
        "--no-defaults",
        f"--socket={files.socket}",
        f"--user={_admin_user()}",
        # The client's own default is utf8mb3, which cannot carry 4-byte characters (emoji).
        "--default-character-set=utf8mb4",
        "--batch",
        "--skip-column-names",
    ]
    return [*command, database] if database else command


def mariadb_execute(
    settings: Settings, sql: str, database: str | None = None, name: str = MARIADB
) -> str:
    """Run SQL on a local MariaDB server (the stack's own by default) as admin; its output
    (tab-separated rows)."""
    return run_client(f"MariaDB {name}", mariadb_client_command(settings, database, name), sql)


def mariadb_jdbc_url(settings: Settings, database: str, name: str = MARIADB) -> str:
    """The JDBC URL of a database on a running local MariaDB server, as the cdc user."""
    port = port_of(settings, name)
    if port is None:
        raise StackError(f"the local MariaDB server {name!r} was never started")
    password = cdc_password(settings)
    return f"jdbc:mariadb://{HOST}:{port}/{database}?user={CDC_USER}&password={password}"


def mariadb_servers(settings: Settings) -> list[str]:
    """The names of the local MariaDB servers this stack started: its own and any further one
    (a second server of the same schema, a replica), each with its own directory and port."""
    extra = load_state(settings).get("mariadb_servers")
    names = [n for n in extra if isinstance(n, str)] if isinstance(extra, list) else []
    return [MARIADB, *sorted(set(names) - {MARIADB})]


def start_mariadb(settings: Settings, name: str = MARIADB) -> int:
    """Start (initialising once) a private MariaDB server; return its port. ``name`` other than
    the default starts a further server (own data directory, port, server id, ``cdc`` user)
    without the example tables, stopped with the others by ``stop_sources``."""
    if not re.fullmatch(r"mariadb[a-z0-9-]*", name):
        raise StackError(f"{name!r}: a local MariaDB server's name starts with 'mariadb'")
    tools = mariadb_tools()
    files = mariadb_files(settings, name)
    if name != MARIADB and name not in mariadb_servers(settings):
        settings.stack_dir.mkdir(parents=True, exist_ok=True)
        update_state(settings, mariadb_servers=[*mariadb_servers(settings)[1:], name])
    running = running_entry(settings, name, files.marker)
    if running is not None:
        record_addresses(settings, name, running, files.marker)
        return running
    stop_server(settings, name, files.marker, signal.SIGTERM)
    fresh = not (files.base / SETUP_MARKER).exists()
    if fresh:
        shutil.rmtree(files.base, ignore_errors=True)  # a half-finished setup starts over
        files.base.mkdir(parents=True)
        run_tool(
            "mariadb-install-db",
            [
                tools.install_db,
                "--no-defaults",
                f"--datadir={files.data_dir}",
                "--skip-test-db",
                "--skip-name-resolve",
                *(["--user=root"] if os.geteuid() == 0 else []),
            ],
            files.log_file,
        )
    port = choose_port(settings, name)
    files.socket.unlink(missing_ok=True)
    files.log_file.parent.mkdir(parents=True, exist_ok=True)
    pid = local_process.start_detached(
        mariadb_command(tools, files, port, mariadb_server_id(name)), files.log_file, cwd=files.base
    )
    record_server(settings, name, pid, port, files.marker, socket=str(files.socket))
    try:
        wait_ready(
            "MariaDB",
            pid,
            files.log_file,
            lambda: port_answers(port) and files.socket.exists(),
        )
        if fresh:
            _setup_mariadb(settings, name)
            (files.base / SETUP_MARKER).write_text("ok\n", encoding="utf-8")
    except BaseException:
        stop_server(settings, name, files.marker, signal.SIGTERM)
        raise
    return port


def stop_mariadb(
    settings: Settings, name: str = MARIADB, sig: signal.Signals = signal.SIGTERM
) -> None:
    """Stop one local MariaDB server (SIGKILL: as a crashed server stops); its data stays."""
    stop_server(settings, name, mariadb_files(settings, name).marker, sig)


def remove_mariadb(settings: Settings, name: str) -> None:
    """Stop a further MariaDB server, delete its data and forget it (its port, its place among
    the stack's servers): a drill's servers leave nothing behind in the stack's status."""
    if name == MARIADB:
        raise StackError("the stack's own MariaDB server is stopped with the stack, not removed")
    stop_mariadb(settings, name)
    shutil.rmtree(mariadb_files(settings, name).base, ignore_errors=True)
    ports = load_state(settings).get("ports")
    known: dict[str, Any] = ports if isinstance(ports, dict) else {}
    update_state(
        settings,
        ports={k: v for k, v in known.items() if k != name},
        mariadb_servers=[n for n in mariadb_servers(settings)[1:] if n != name],
    )


def _setup_mariadb(settings: Settings, name: str) -> None:
    password = cdc_password(settings)
    statements = [
        f"CREATE USER '{CDC_USER}'@'{HOST}' IDENTIFIED BY '{password}';",
        # What the Debezium MariaDB connector needs for a snapshot and the binlog stream.
        "GRANT SELECT, RELOAD, SHOW DATABASES, LOCK TABLES, REPLICATION SLAVE, BINLOG MONITOR "
        f"ON *.* TO '{CDC_USER}'@'{HOST}';",
    ]
    for table in EXAMPLE_TABLES:
        if table.server == "mariadb" and name == MARIADB:
            statements += [
                f"CREATE DATABASE IF NOT EXISTS `{table.database}`;",
                f"USE `{table.database}`;",
                table.ddl(),
            ]
    mariadb_execute(settings, "\n".join(statements), name=name)
