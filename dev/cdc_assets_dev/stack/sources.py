"""The local stack's source databases: a private MariaDB server and a private PostgreSQL cluster.

Both come from Debian's packages (`make sources-setup`), keep their data under the stack dir
(``mariadb/``, ``postgres/``), listen on 127.0.0.1 on ports picked free at start, and are set up
once for Debezium: MariaDB with a ROW binlog and strict GTIDs, PostgreSQL with logical WAL and a
pgoutput publication, a ``cdc`` user with replication rights, and the example tables created from
the DDL files in ``dev/cdc_assets_dev/sources/sql/``. The ``sources`` section of the stack's state
file
(``local_servers/state.py``) records ports, pids and the ``cdc`` password (also read by the
Kafka Connect module).
"""

from __future__ import annotations

import json
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cdc_assets.errors import StackError
from cdc_assets.local_servers import state as stack_state
from cdc_assets.settings import Settings, source_url_variable
from cdc_assets_dev.stack import local_process
from cdc_assets_dev.stack.kafka_broker import (
    HOST,
    pick_free_port,
    port_answers,
    port_is_free,
)
from cdc_assets_dev.stack.local_process import log_tail

SOURCES_DIR = Path(__file__).parent.parent / "sources"
CONNECTORS_DIR = SOURCES_DIR / "connectors"
# The connector names a spec may give for each kind of local server.
CONNECTOR_NAMES = {"mariadb": ("mariadb", "mysql"), "postgres": ("postgresql",)}
SQL_DIR = SOURCES_DIR / "sql"
SETUP_MARKER = "setup.done"
CDC_USER = "cdc"
PG_SUPERUSER = "postgres"
# initdb and postgres refuse to run as root: as root they run as the package's system user.
PG_SYSTEM_USER = "postgres"
PUBLICATION = "cdc_publication"
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
INSTALL_HINT = "run `make sources-setup` (as root), or `apt-get install -y {packages}`"

ServerName = Literal["mariadb", "postgres"]
MARIADB = "mariadb"  # the stack's own MariaDB server (further ones have names of their own)
RunState = Literal["running", "dead", "stopped"]


@dataclass(frozen=True)
class ExampleTable:
    """One example table: its spec, the server and database it lives in, its DDL file."""

    spec_name: str
    server: ServerName
    database: str
    schema: str | None = None

    @property
    def ddl_file(self) -> Path:
        return SQL_DIR / f"{self.spec_name}.sql"

    def ddl(self) -> str:
        return self.ddl_file.read_text(encoding="utf-8")


EXAMPLE_TABLES = (
    ExampleTable("users", "mariadb", "app"),
    ExampleTable("order_items", "mariadb", "shop"),
    ExampleTable("orders", "postgres", "shop", schema="public"),
)


@dataclass(frozen=True)
class ServerStatus:
    name: str  # "mariadb" (or a further "mariadb-..."), "postgres" or "connect"
    state: RunState
    pid: int | None
    port: int | None
    reason: str
    log_tail: list[str] = field(default_factory=list)


# --- state file ------------------------------------------------------------------------------


def load_state(settings: Settings) -> dict[str, Any]:
    """The ``sources`` section of the stack's state file ({} when never started)."""
    return stack_state.section(settings, "sources")


def update_state(settings: Settings, **entries: Any) -> dict[str, Any]:
    """Set (or, with None, remove) entries of the ``sources`` section; return the new section."""
    return stack_state.update(settings, "sources", **entries)


def started(settings: Settings) -> bool:
    """Whether `stack up --sources` ran (and `stack down` has not reset it since)."""
    return stack_state.has_section(settings, "sources")


def cdc_password(settings: Settings) -> str:
    """The ``cdc`` user's password, generated once per stack and kept in the state file."""
    data = load_state(settings)
    password = data.get("password")
    if not isinstance(password, str) or not password:
        password = secrets.token_hex(16)
        update_state(settings, password=password)
    return password


def choose_port(settings: Settings, name: str) -> int:
    """A port for server ``name``: its previous one if free, else a free one that no other
    server of the stack remembers."""
    ports = load_state(settings).get("ports")
    ports = ports if isinstance(ports, dict) else {}
    previous = ports.get(name)
    avoid = {p for k, p in ports.items() if k != name and isinstance(p, int)}
    if isinstance(previous, int) and previous not in avoid and port_is_free(previous):
        return previous
    return pick_free_port(avoid)


def remember_port(settings: Settings, name: str, port: int) -> None:
    ports = load_state(settings).get("ports")
    known: dict[str, Any] = ports if isinstance(ports, dict) else {}
    update_state(settings, ports={**known, name: port})


# --- tools -----------------------------------------------------------------------------------


def _admin_user() -> str:
    """The OS user, who is MariaDB's socket-authenticated admin after mariadb-install-db."""
    return pwd.getpwuid(os.geteuid()).pw_name


def _find(name: str, *fallbacks: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    return next((f for f in fallbacks if os.access(f, os.X_OK)), None)


@dataclass(frozen=True)
class MariaDbTools:
    server: str
    install_db: str
    client: str


def mariadb_tools() -> MariaDbTools:
    server = _find("mariadbd", "/usr/sbin/mariadbd")
    install_db = _find("mariadb-install-db", "/usr/bin/mariadb-install-db")
    client = _find("mariadb", "/usr/bin/mariadb")
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


def postgres_bindir() -> Path:
    """The bin directory of the newest PostgreSQL on this machine (Debian: /usr/lib/postgresql)."""

    def version(path: Path) -> tuple[int, ...]:
        return tuple(int(p) for p in re.findall(r"\d+", path.parent.name))

    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version, reverse=True)
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).parent)
    for bindir in candidates:
        if all((bindir / tool).is_file() for tool in ("initdb", "postgres", "psql", "pg_isready")):
            return bindir
    raise StackError(
        "PostgreSQL is not installed (initdb, postgres, psql, pg_isready not found under "
        "/usr/lib/postgresql/*/bin or on PATH): " + INSTALL_HINT.format(packages="postgresql")
    )


# --- MariaDB ---------------------------------------------------------------------------------


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
    return _run_client(f"MariaDB {name}", mariadb_client_command(settings, database, name), sql)


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
    running = _running_entry(settings, name, files.marker)
    if running is not None:
        _record_addresses(settings, name, running, files.marker)
        return running
    _stop_server(settings, name, files.marker, signal.SIGTERM)
    fresh = not (files.base / SETUP_MARKER).exists()
    if fresh:
        shutil.rmtree(files.base, ignore_errors=True)  # a half-finished setup starts over
        files.base.mkdir(parents=True)
        _run_tool(
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
    _record_server(settings, name, pid, port, files.marker, socket=str(files.socket))
    try:
        _wait_ready(
            "MariaDB",
            pid,
            files.log_file,
            lambda: port_answers(port) and files.socket.exists(),
        )
        if fresh:
            _setup_mariadb(settings, name)
            (files.base / SETUP_MARKER).write_text("ok\n", encoding="utf-8")
    except BaseException:
        _stop_server(settings, name, files.marker, signal.SIGTERM)
        raise
    return port


def stop_mariadb(
    settings: Settings, name: str = MARIADB, sig: signal.Signals = signal.SIGTERM
) -> None:
    """Stop one local MariaDB server (SIGKILL: as a crashed server stops); its data stays."""
    _stop_server(settings, name, mariadb_files(settings, name).marker, sig)


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


# --- PostgreSQL ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PostgresFiles:
    base: Path
    data_dir: Path
    socket_dir: Path
    log_file: Path

    @property
    def marker(self) -> str:
        return str(self.data_dir)


def postgres_files(settings: Settings) -> PostgresFiles:
    base = settings.stack_dir / "postgres"
    return PostgresFiles(
        base=base,
        data_dir=base / "data",
        socket_dir=base / "run",
        log_file=settings.stack_dir / "logs" / "postgres.log",
    )


def _pg_user() -> str | None:
    """The user to run initdb and postgres as: the package's system user when we are root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(PG_SYSTEM_USER)
    except KeyError:
        raise StackError(
            f"running as root, the local PostgreSQL needs the system user {PG_SYSTEM_USER!r} "
            "(created by Debian's postgresql package): "
            + INSTALL_HINT.format(packages="postgresql")
        ) from None
    return PG_SYSTEM_USER


def postgres_command(bindir: Path, files: PostgresFiles, port: int) -> list[str]:
    """postgres on loopback with logical WAL for Debezium's pgoutput."""
    settings = {
        "listen_addresses": HOST,
        "port": str(port),
        "unix_socket_directories": str(files.socket_dir),
        "wal_level": "logical",
        "max_replication_slots": "4",
        "max_wal_senders": "4",
        "max_connections": "40",
        "shared_buffers": "32MB",
        "TimeZone": "UTC",
        "log_timezone": "UTC",
        "logging_collector": "off",
    }
    command = [str(bindir / "postgres"), "-D", str(files.data_dir)]
    for key, value in settings.items():
        command += ["-c", f"{key}={value}"]
    return command


def psql_command(settings: Settings, database: str = "postgres") -> list[str]:
    """psql as the superuser over the cluster's socket (SQL on stdin, stop at the first error)."""
    files = postgres_files(settings)
    port = port_of(settings, "postgres")
    if port is None:
        raise StackError(
            "the local PostgreSQL was never started: run `cdc-assets stack up --sources`"
        )
    return [
        str(postgres_bindir() / "psql"),
        "-X",
        "-q",
        "-A",
        "-t",
        "-v",
        "ON_ERROR_STOP=1",
        # stdin read as a file: an error names its line ("psql:<stdin>:12: ERROR: ...").
        "-f",
        "-",
        "-h",
        str(files.socket_dir),
        "-p",
        str(port),
        "-U",
        PG_SUPERUSER,
        "-d",
        database,
    ]


def postgres_execute(settings: Settings, sql: str, database: str = "postgres") -> str:
    """Run SQL on the local PostgreSQL as superuser; its unaligned output."""
    return _run_client("PostgreSQL", psql_command(settings, database), sql)


def start_postgres(settings: Settings) -> int:
    """Start (initialising once) the private PostgreSQL cluster; return its port."""
    bindir = postgres_bindir()
    files = postgres_files(settings)
    run_as = _pg_user()
    running = _running_entry(settings, "postgres", files.marker)
    if running is not None:
        _record_addresses(settings, "postgres", running, files.marker)
        return running
    _stop_server(settings, "postgres", files.marker, signal.SIGINT)
    fresh = not (files.base / SETUP_MARKER).exists()
    if fresh:
        shutil.rmtree(files.base, ignore_errors=True)
        files.base.mkdir(parents=True)
        files.data_dir.mkdir(mode=0o700)
        files.socket_dir.mkdir()
        if run_as is not None:
            account = pwd.getpwnam(run_as)
            for path in (files.data_dir, files.socket_dir):
                os.chown(path, account.pw_uid, account.pw_gid)
            _check_reachable(files.data_dir, run_as)
        _run_tool(
            "initdb",
            [
                str(bindir / "initdb"),
                "-D",
                str(files.data_dir),
                "-U",
                PG_SUPERUSER,
                "-E",
                "UTF8",
                "--locale=C",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--no-instructions",
            ],
            files.log_file,
            user=run_as,
        )
    elif run_as is not None:
        _check_reachable(files.data_dir, run_as)
    port = choose_port(settings, "postgres")
    pid = local_process.start_detached(
        postgres_command(bindir, files, port), files.log_file, cwd=files.base, user=run_as
    )
    _record_server(settings, "postgres", pid, port, files.marker, socket=str(files.socket_dir))
    isready = [str(bindir / "pg_isready"), "-q", "-h", str(files.socket_dir), "-p", str(port)]
    try:
        _wait_ready(
            "PostgreSQL",
            pid,
            files.log_file,
            lambda: subprocess.run(isready, check=False).returncode == 0,
        )
        if fresh:
            _setup_postgres(settings)
            (files.base / SETUP_MARKER).write_text("ok\n", encoding="utf-8")
    except BaseException:
        _stop_server(settings, "postgres", files.marker, signal.SIGINT)
        raise
    return port


def stop_postgres(settings: Settings) -> None:
    """Stop the PostgreSQL server (fast shutdown); its data and port stay for the next start."""
    _stop_server(settings, "postgres", postgres_files(settings).marker, signal.SIGINT)


def _setup_postgres(settings: Settings) -> None:
    password = cdc_password(settings)
    tables = [t for t in EXAMPLE_TABLES if t.server == "postgres"]
    postgres_execute(
        settings, f"CREATE ROLE {CDC_USER} WITH LOGIN REPLICATION PASSWORD '{password}';"
    )
    for database in sorted({t.database for t in tables}):
        postgres_execute(settings, f'CREATE DATABASE "{database}";')
        in_db = [t for t in tables if t.database == database]
        names = ", ".join(f"{t.schema or 'public'}.{t.spec_name}" for t in in_db)
        statements = [t.ddl() for t in in_db]
        statements += [
            f"GRANT SELECT ON {names} TO {CDC_USER};",
            # Created here so that the connector needs no ownership of the tables.
            f"CREATE PUBLICATION {PUBLICATION} FOR TABLE {names};",
        ]
        postgres_execute(settings, "\n".join(statements), database)


def _check_reachable(path: Path, user: str) -> None:
    done = subprocess.run(["test", "-w", str(path)], user=user, check=False)
    if done.returncode != 0:
        raise StackError(
            f"PostgreSQL runs as the system user {user!r} (initdb and postgres refuse root), "
            f"which cannot reach {path}: allow others to traverse the directories above it "
            "(chmod o+x) or set CDC_ASSETS_HOME to a directory it can reach"
        )


# --- both ------------------------------------------------------------------------------------


def start_sources(settings: Settings) -> dict[str, int]:
    """Start MariaDB and PostgreSQL (set up on first start); their ports."""
    settings.stack_dir.mkdir(parents=True, exist_ok=True)
    (settings.stack_dir / "logs").mkdir(exist_ok=True)
    cdc_password(settings)
    return {"mariadb": start_mariadb(settings), "postgres": start_postgres(settings)}


def stop_sources(settings: Settings) -> None:
    """Stop every server (recorded or stray); their data stays."""
    for name in mariadb_servers(settings):
        _stop_server(settings, name, mariadb_files(settings, name).marker, signal.SIGTERM)
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


def server_status(settings: Settings, name: str, marker: str, log_file: Path) -> ServerStatus:
    entry = load_state(settings).get(name)
    if not isinstance(entry, dict):
        return ServerStatus(name, "stopped", None, None, "not running")
    pid, port = entry.get("pid"), entry.get("port")
    if not isinstance(pid, int) or not local_process.runs(pid, marker):
        return ServerStatus(
            name,
            "dead",
            pid if isinstance(pid, int) else None,
            port,
            f"process {pid} is not running; `cdc-assets stack up --sources` restarts it",
            log_tail(log_file, 10),
        )
    if not isinstance(port, int) or not port_answers(port):
        return ServerStatus(
            name,
            "dead",
            pid,
            port,
            f"pid {pid} is alive but port {port} does not answer",
            log_tail(log_file, 10),
        )
    return ServerStatus(name, "running", pid, port, f"pid {pid} on {HOST}:{port}")


def port_of(settings: Settings, name: str) -> int | None:
    entry = load_state(settings).get(name)
    port = entry.get("port") if isinstance(entry, dict) else None
    if isinstance(port, int):
        return port
    remembered = load_state(settings).get("ports", {}).get(name)
    return remembered if isinstance(remembered, int) else None


def _running_entry(settings: Settings, name: str, marker: str) -> int | None:
    """The port of the recorded server when it runs and answers, else None."""
    entry = load_state(settings).get(name)
    if not isinstance(entry, dict):
        return None
    pid, port = entry.get("pid"), entry.get("port")
    alive = isinstance(pid, int) and local_process.runs(pid, marker)
    return port if alive and isinstance(port, int) and port_answers(port) else None


def _record_server(
    settings: Settings, name: str, pid: int, port: int, marker: str, **extra: str
) -> None:
    remember_port(settings, name, port)
    update_state(settings, **{name: {"pid": pid, "port": port, **extra}})
    _record_addresses(settings, name, port, marker)


def _record_addresses(settings: Settings, name: str, port: int, marker: str) -> None:
    """What the product reads of a running server (``local_servers.endpoints``): the marker
    that tells its process from a reused pid, and the JDBC URL of each example database on it
    under the variables a spec's source resolves (``CDC_ASSETS_SOURCE_URL_<CONNECTOR>_<DB>``
    and ``..._<SERVER>_<DB>``, the server being the connector's logical name)."""
    entry = load_state(settings).get(name)
    if not isinstance(entry, dict):
        return
    update_state(
        settings, **{name: {**entry, "marker": marker, "jdbc": jdbc_urls_of(settings, name, port)}}
    )


def jdbc_urls_of(settings: Settings, name: str, port: int) -> dict[str, str]:
    """``CDC_ASSETS_SOURCE_URL_...`` -> JDBC URL (as the cdc user) of each example database on
    server ``name`` listening on ``port`` ({} for a server without example tables)."""
    scheme = {"mariadb": "jdbc:mariadb", "postgres": "jdbc:postgresql"}
    databases = sorted({t.database for t in EXAMPLE_TABLES if t.server == name})
    if not databases:
        return {}
    kind: ServerName = "postgres" if name == "postgres" else "mariadb"
    qualifiers = (*CONNECTOR_NAMES[kind], logical_name(kind))
    password = cdc_password(settings)
    urls = {}
    for database in databases:
        url = f"{scheme[kind]}://{HOST}:{port}/{database}?user={CDC_USER}&password={password}"
        for qualifier in qualifiers:
            urls[source_url_variable(database, qualifier)] = url
    return urls


def logical_name(kind: ServerName) -> str:
    """The local connector's ``topic.prefix`` for a server kind (the specs' default server)."""
    path = CONNECTORS_DIR / ("postgres.json" if kind == "postgres" else "mariadb.json")
    config = json.loads(path.read_text(encoding="utf-8"))["config"]
    return str(config["topic.prefix"])


def _stop_server(settings: Settings, name: str, marker: str, sig: signal.Signals) -> None:
    program = "postgres" if name == "postgres" else "mariadbd"
    pids = set(local_process.find_pids(program, marker))
    entry = load_state(settings).get(name)
    recorded = entry.get("pid") if isinstance(entry, dict) else None
    if isinstance(recorded, int) and local_process.runs(recorded, marker):
        pids.add(recorded)
    for pid in sorted(pids):
        local_process.stop(pid, f"local {name}", sig=sig, timeout=STOP_TIMEOUT_S)
    if started(settings):
        update_state(settings, **{name: None})


def _wait_ready(what: str, pid: int, log_file: Path, ready: Any) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if not local_process.pid_alive(pid):
            raise StackError(local_process.died_message(what, pid, log_file))
        if ready():
            return
        time.sleep(0.2)
    raise StackError(
        f"{what} (pid {pid}) was not ready within {READY_TIMEOUT_S:.0f} s; last 30 lines of "
        f"{log_file}:\n" + "\n".join(log_tail(log_file, 30))
    )


def _run_tool(what: str, command: list[str], log_file: Path, *, user: str | None = None) -> None:
    log_file.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
        user=user,
        group=user,
        extra_groups=[] if user else None,
        cwd=log_file.parent,
    )
    with log_file.open("a", encoding="utf-8") as log:
        log.write(done.stdout)
    if done.returncode != 0:
        tail = "\n".join(done.stdout.splitlines()[-30:])
        raise StackError(f"{what} failed (exit {done.returncode}):\n{tail}")


# Where the clients say a script failed: "ERROR 1062 (23000) at line 4: ..." (mariadb) and
# "psql:<stdin>:4: ERROR: ..." (psql).
_FAILED_LINE = re.compile(r"(?: at line |<stdin>:)(\d+)")
_SQL_SHOWN_LINES = 40


def _run_client(what: str, command: list[str], sql: str) -> str:
    """Run a script through a database client, which stops at the first failing statement; a
    failure raises StackError with the client's message and the script around that line."""
    done = subprocess.run(command, input=sql, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise StackError(
            f"{what} client failed (exit {done.returncode}): {done.stderr.strip()}\n"
            + _script_excerpt(sql, done.stderr)
        )
    return done.stdout


def _script_excerpt(sql: str, stderr: str) -> str:
    """A short script whole; of a long one (a workload of thousands of statements) the lines
    around the one the client names."""
    lines = sql.splitlines()
    if len(lines) <= _SQL_SHOWN_LINES:
        return "SQL:\n" + sql
    match = _FAILED_LINE.search(stderr)
    if match is None:
        head = "\n".join(lines[:_SQL_SHOWN_LINES])
        return f"first {_SQL_SHOWN_LINES} of {len(lines)} lines of SQL:\n{head}"
    failed = int(match.group(1))
    first = max(failed - 3, 1)
    shown = "\n".join(
        f"{n:>6}: {line[:2_000]}" for n, line in enumerate(lines[first - 1 : failed + 2], first)
    )
    return f"lines {first}-{min(failed + 2, len(lines))} of {len(lines)} of SQL:\n{shown}"
