"""The local stack's PostgreSQL cluster: logical WAL and a pgoutput publication of the example
tables for Debezium, a ``cdc`` role with replication rights; as root, it runs as the package's
system user (initdb and postgres refuse root).
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cdc_assets.errors import StackError
from cdc_assets.settings import Settings
from cdc_assets_dev.stack import local_process
from cdc_assets_dev.stack.kafka_broker import HOST
from cdc_assets_dev.stack.source_servers import (
    CDC_USER,
    EXAMPLE_TABLES,
    INSTALL_HINT,
    SETUP_MARKER,
    cdc_password,
    choose_port,
    port_of,
    record_addresses,
    record_server,
    run_client,
    run_tool,
    running_entry,
    stop_server,
    wait_ready,
)

PG_SUPERUSER = "postgres"
# initdb and postgres refuse to run as root: as root they run as the package's system user.
PG_SYSTEM_USER = "postgres"
PUBLICATION = "cdc_publication"


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
    return run_client("PostgreSQL", psql_command(settings, database), sql)


def start_postgres(settings: Settings) -> int:
    """Start (initialising once) the private PostgreSQL cluster; return its port."""
    bindir = postgres_bindir()
    files = postgres_files(settings)
    run_as = _pg_user()
    running = running_entry(settings, "postgres", files.marker)
    if running is not None:
        record_addresses(settings, "postgres", running, files.marker)
        return running
    stop_server(settings, "postgres", files.marker, signal.SIGINT)
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
        run_tool(
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
    record_server(settings, "postgres", pid, port, files.marker, socket=str(files.socket_dir))
    isready = [str(bindir / "pg_isready"), "-q", "-h", str(files.socket_dir), "-p", str(port)]
    try:
        wait_ready(
            "PostgreSQL",
            pid,
            files.log_file,
            lambda: subprocess.run(isready, check=False).returncode == 0,
        )
        if fresh:
            _setup_postgres(settings)
            (files.base / SETUP_MARKER).write_text("ok\n", encoding="utf-8")
    except BaseException:
        stop_server(settings, "postgres", files.marker, signal.SIGINT)
        raise
    return port


def stop_postgres(settings: Settings) -> None:
    """Stop the PostgreSQL server (fast shutdown); its data and port stay for the next start."""
    stop_server(settings, "postgres", postgres_files(settings).marker, signal.SIGINT)


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
