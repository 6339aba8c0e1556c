"""What the local stack's source servers share: the example tables, the ``sources`` section of
the stack's state file (ports, pids, the ``cdc`` password, also read by the Kafka Connect
module), a server's status and recorded addresses, and starting, waiting for and stopping a
server process and running SQL through its client. ``mariadb_server.py`` and
``postgres_server.py`` build on it; ``sources.py`` starts and stops both.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cdc_assets.errors import StackError
from cdc_assets.local_servers import state as stack_state
from cdc_assets.settings import Settings, source_url_variable
from cdc_assets_dev.stack import local_process
from cdc_assets_dev.stack.kafka_broker import HOST, pick_free_port, port_answers, port_is_free
from cdc_assets_dev.stack.local_process import log_tail

SOURCES_DIR = Path(__file__).parent.parent / "sources"
CONNECTORS_DIR = SOURCES_DIR / "connectors"
# The connector names a spec may give for each kind of local server.
CONNECTOR_NAMES = {"mariadb": ("mariadb", "mysql"), "postgres": ("postgresql",)}
SQL_DIR = SOURCES_DIR / "sql"
SETUP_MARKER = "setup.done"
CDC_USER = "cdc"
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


def find_tool(name: str, *fallbacks: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    return next((f for f in fallbacks if os.access(f, os.X_OK)), None)


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


def running_entry(settings: Settings, name: str, marker: str) -> int | None:
    """The port of the recorded server when it runs and answers, else None."""
    entry = load_state(settings).get(name)
    if not isinstance(entry, dict):
        return None
    pid, port = entry.get("pid"), entry.get("port")
    alive = isinstance(pid, int) and local_process.runs(pid, marker)
    return port if alive and isinstance(port, int) and port_answers(port) else None


def record_server(
    settings: Settings, name: str, pid: int, port: int, marker: str, **extra: str
) -> None:
    remember_port(settings, name, port)
    update_state(settings, **{name: {"pid": pid, "port": port, **extra}})
    record_addresses(settings, name, port, marker)


def record_addresses(settings: Settings, name: str, port: int, marker: str) -> None:
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


def stop_server(settings: Settings, name: str, marker: str, sig: signal.Signals) -> None:
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


def wait_ready(what: str, pid: int, log_file: Path, ready: Any) -> None:
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


def run_tool(what: str, command: list[str], log_file: Path, *, user: str | None = None) -> None:
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


def run_client(what: str, command: list[str], sql: str) -> str:
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
