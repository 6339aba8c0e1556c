"""One Apache Kafka broker in KRaft mode (combined broker and controller) as a local process.

Config rendering, storage formatting, start, stop and liveness; local_stack decides where files go.
"""

from __future__ import annotations

import base64
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient

from cdc_assets.errors import StackError
from cdc_assets.stack.jars import require_tool

HOST = "127.0.0.1"
MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL_CLASS = "kafka.tools.StorageTool"
BROKER_HEAP = "-Xmx512m"
LOG4J_TEMPLATE = Path(__file__).with_name("kafka-log4j2.properties")

# Popen objects of brokers this process started: polling them reaps a broker that died, which
# would otherwise linger as a zombie that os.kill(pid, 0) still reports as alive.
_STARTED: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class BrokerFiles:
    """Where one broker keeps its config, data and log."""

    server_properties: Path
    log4j_config: Path
    data_dir: Path
    log_file: Path

    @property
    def meta_properties(self) -> Path:
        return self.data_dir / "meta.properties"


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, base64url without padding (as Kafka's own tool)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(secrets.token_bytes(16)).decode("ascii").rstrip("=")
        # One id in 64 starts with "-", which the storage tool parses as an option (Kafka's own
        # generator skips those for the same reason).
        if not cluster_id.startswith("-"):
            return cluster_id


def render_server_properties(*, port: int, controller_port: int, data_dir: Path) -> str:
    """server.properties for a single node that is both broker and controller on 127.0.0.1."""
    lines = [
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@{HOST}:{controller_port}",
        f"listeners=PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
        f"advertised.listeners=PLAINTEXT://{HOST}:{port}",
        "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name=PLAINTEXT",
        f"log.dirs={data_dir}",
        "num.partitions=1",
        "auto.create.topics.enable=true",
        # A single node cannot hold more than one replica of the internal topics.
        "offsets.topic.replication.factor=1",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        # Nobody else will join, so a new consumer group should not wait for more members.
        "group.initial.rebalance.delay.ms=0",
    ]
    return "\n".join(lines) + "\n"


def write_config(files: BrokerFiles, *, port: int, controller_port: int) -> None:
    """Write server.properties and the log4j2 config, creating their directories."""
    files.server_properties.parent.mkdir(parents=True, exist_ok=True)
    files.data_dir.mkdir(parents=True, exist_ok=True)
    files.log_file.parent.mkdir(parents=True, exist_ok=True)
    files.server_properties.write_text(
        render_server_properties(
            port=port, controller_port=controller_port, data_dir=files.data_dir
        ),
        encoding="utf-8",
    )
    shutil.copyfile(LOG4J_TEMPLATE, files.log4j_config)


def format_storage(files: BrokerFiles, classpath: str) -> bool:
    """Format the data dir with a new cluster id once; False when it was already formatted."""
    if files.meta_properties.exists():
        return False
    command = [
        require_tool("java"),
        "-Xmx256m",
        "-cp",
        classpath,
        f"-Dlog4j2.configurationFile={files.log4j_config}",
        STORAGE_TOOL_CLASS,
        "format",
        "-t",
        new_cluster_id(),
        "-c",
        str(files.server_properties),
    ]
    done = subprocess.run(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    with files.log_file.open("a", encoding="utf-8") as log:
        log.write(done.stdout)
    if done.returncode != 0:
        tail = "\n".join(done.stdout.splitlines()[-30:])
        raise StackError(
            f"formatting Kafka storage in {files.data_dir} failed (exit {done.returncode}):\n{tail}"
        )
    return True


def start_broker(files: BrokerFiles, classpath: str) -> int:
    """Start the broker detached in its own session, output appended to the log; return its pid."""
    command = [
        require_tool("java"),
        BROKER_HEAP,
        "-cp",
        classpath,
        f"-Dlog4j2.configurationFile={files.log4j_config}",
        MAIN_CLASS,
        str(files.server_properties),
    ]
    with files.log_file.open("ab") as log:
        # A session of its own keeps the broker alive when the starting terminal closes and lets
        # stop_broker signal its whole process group.
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=files.server_properties.parent,
        )
    _STARTED[proc.pid] = proc
    return proc.pid


def exit_code(pid: int) -> int | None:
    """Exit status of a broker this process started and that has ended, else None."""
    proc = _STARTED.get(pid)
    return None if proc is None else proc.poll()


def pid_alive(pid: int) -> bool:
    """True when ``pid`` is a running (not zombie) process."""
    proc = _STARTED.get(pid)
    if proc is not None:
        return proc.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _is_zombie(pid)


def is_broker_process(pid: int, server_properties: Path) -> bool:
    """True when ``pid`` runs kafka.Kafka with exactly this server.properties (guards pid reuse)."""
    if not pid_alive(pid):
        return False
    args = _cmdline(pid)
    return MAIN_CLASS in args and str(server_properties) in args


def find_broker_pids(server_properties: Path) -> list[int]:
    """Every live process running a broker on ``server_properties``, recorded or not."""
    proc_root = Path("/proc")
    if not proc_root.is_dir():
        return []
    found = []
    for entry in proc_root.iterdir():
        if entry.name.isdigit() and is_broker_process(int(entry.name), server_properties):
            found.append(int(entry.name))
    return sorted(found)


def stop_broker(pid: int, *, timeout: float = 30.0) -> None:
    """SIGTERM the broker's process group, SIGKILL it after ``timeout`` seconds; wait until gone."""
    _signal_group(pid, signal.SIGTERM)
    if _wait_gone(pid, timeout):
        return
    _signal_group(pid, signal.SIGKILL)
    if not _wait_gone(pid, 10.0):
        raise StackError(f"Kafka broker process {pid} survived SIGKILL")


def port_is_free(port: int) -> bool:
    """True when a listener could bind 127.0.0.1:``port`` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # The JVM sets SO_REUSEADDR too, so a port in TIME_WAIT after a stop counts as free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def pick_free_port(avoid: set[int] | None = None) -> int:
    """A port on 127.0.0.1 that the kernel considers free, not in ``avoid``."""
    avoid = avoid or set()
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((HOST, 0))
            port: int = sock.getsockname()[1]
        if port not in avoid:
            return port


def port_answers(port: int, *, timeout: float = 1.0) -> bool:
    """True when something accepts TCP connections on 127.0.0.1:``port``."""
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_until_ready(pid: int, port: int, log_file: Path, *, timeout: float = 90.0) -> None:
    """Block until the broker serves metadata; StackError with the log tail if it dies or stalls."""
    bootstrap = f"{HOST}:{port}"
    deadline = time.monotonic() + timeout
    last_error = "port not open yet"
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            code = exit_code(pid)
            how = f"exited with code {code}" if code is not None else "exited"
            raise StackError(
                f"Kafka broker (pid {pid}) {how} during startup; last 30 lines of {log_file}:\n"
                + "\n".join(log_tail(log_file, 30))
            )
        # Probing the port first keeps librdkafka from logging connection-refused errors.
        if port_answers(port):
            try:
                admin = AdminClient({"bootstrap.servers": bootstrap})
                admin.list_topics(timeout=min(5.0, max(0.5, deadline - time.monotonic())))
                return
            except Exception as exc:  # KafkaException until metadata is served
                last_error = str(exc)
        time.sleep(0.25)
    raise StackError(
        f"Kafka broker (pid {pid}) did not answer on {bootstrap} within {timeout:.0f} s "
        f"({last_error}); last 30 lines of {log_file}:\n" + "\n".join(log_tail(log_file, 30))
    )


def log_tail(log_file: Path, lines: int) -> list[str]:
    """The last ``lines`` lines of ``log_file`` (empty if there is none)."""
    try:
        with log_file.open(encoding="utf-8", errors="replace") as handle:
            return [line.rstrip("\n") for line in deque(handle, maxlen=lines)]
    except FileNotFoundError:
        return []


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        if Path("/proc").is_dir():
            return []
        # No procfs (macOS): ask ps; splitting on spaces is enough to spot our arguments.
        done = subprocess.run(
            ["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True, check=False
        )
        return done.stdout.split()
    except (PermissionError, ProcessLookupError):
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    # The command name in parentheses may itself contain spaces, so read after the last ')'.
    fields = stat.rsplit(")", 1)[-1].split()
    return bool(fields) and fields[0] in ("Z", "X")


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if not pid_alive(pid):
            _STARTED.pop(pid, None)
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
