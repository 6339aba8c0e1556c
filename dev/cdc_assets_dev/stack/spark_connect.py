"""A Spark Connect server on loopback for the local stack (`cdc-assets stack up --spark-connect`).

Every Dagster run is a process of its own; with a driver of its own each run pays a JVM start and
a cold JIT (7 s idle, 30 s on 2 busy cores) before any work. A Spark Connect server is one
long-lived driver with the project's Spark configuration (Iceberg, the catalog, the jar cache);
runs connect to it as thin clients (``SparkResource.remote``) and each gets a session of its own.
It is started with pyspark's own ``spark-submit`` and the Connect server jar pyspark ships.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from cdc_assets.errors import StackError
from cdc_assets.jars.maven import require_tool
from cdc_assets.local_servers import state as stack_state
from cdc_assets.local_servers.endpoints import SPARK_CONNECT_MARKER as MARKER_CONF
from cdc_assets.local_servers.endpoints import spark_connect_port, spark_connect_url
from cdc_assets.settings import Settings
from cdc_assets_dev.stack import local_process
from cdc_assets_dev.stack.kafka_broker import HOST, pick_free_port, port_is_free

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
READY_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ServerFiles:
    base: Path
    log_file: Path


def server_files(settings: Settings) -> ServerFiles:
    base = settings.stack_dir / "spark-connect"
    return ServerFiles(base=base, log_file=settings.stack_dir / "logs" / "spark.log")


def spark_submit() -> str:
    """pyspark's spark-submit (the pip package is a Spark distribution with its jars)."""
    import pyspark

    path = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    return str(path) if path.exists() else require_tool("spark-submit")


def server_command(
    conf: dict[str, str], *, port: int, marker: str, properties_file: Path
) -> list[str]:
    """spark-submit running the Connect server with ``conf``, listening on loopback ``port``.
    The configuration goes into ``properties_file`` (owner-only), not onto the command line,
    which every user of the machine can read: it holds the catalog's and the object store's
    credentials. Only the marker that identifies the stack's process stays there."""
    full = {
        **conf,
        "spark.connect.grpc.binding.address": HOST,
        "spark.connect.grpc.binding.port": str(port),
    }
    fd = os.open(properties_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        for key, value in sorted(full.items()):
            handle.write(f"{key}={_properties_value(value)}\n")
    return [
        spark_submit(),
        "--class",
        SERVER_CLASS,
        "--name",
        "cdc-assets Spark Connect",
        "--properties-file",
        str(properties_file),
        "--conf",
        f"{MARKER_CONF}={marker}",
        # no application jar: the server class is on Spark's own classpath
        "spark-internal",
    ]


def _properties_value(value: str) -> str:
    """A value for a Java properties file (backslashes and line breaks escaped)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def remote_url(port: int) -> str:
    return spark_connect_url(port)


def running_port(settings: Settings) -> int | None:
    """The port of this stack's running server, None when it does not run."""
    return spark_connect_port(settings)


def start_server(settings: Settings, conf: dict[str, str]) -> int:
    """Start the server (or keep the running one of the same master); its port."""
    port = running_port(settings)
    recorded = stack_state.section(settings, "spark_connect")
    master = recorded.get("master")
    if port is not None and master == conf.get("spark.master") and _accepts(port):
        return port
    stop_server(settings)
    files = server_files(settings)
    files.base.mkdir(parents=True, exist_ok=True)
    # A server started again (after a crash, a stop) keeps its port where it can: clients hold
    # its sc:// URL, a continuous worker for as long as it runs.
    before = recorded.get("port")
    port = before if isinstance(before, int) and port_is_free(before) else pick_free_port()
    if files.log_file.exists():  # keep the previous run's log, as the broker does
        files.log_file.replace(files.log_file.with_name(files.log_file.name + ".1"))
    command = server_command(
        conf,
        port=port,
        marker=str(settings.stack_dir),
        properties_file=files.base / "spark-connect.properties",
    )
    pid = local_process.start_detached(command, files.log_file, cwd=files.base)
    entry: dict[str, object] = {"pid": pid, "port": port, "master": conf.get("spark.master")}
    if conf.get("spark.ui.enabled") == "true" and conf.get("spark.ui.port"):
        entry["ui"] = int(conf["spark.ui.port"])  # the driver's REST API (where tasks ran)
    stack_state.put(settings, spark_connect=entry)
    try:
        _wait_ready(pid, port, files.log_file)
    except BaseException:
        stop_server(settings)
        raise
    return port


def stop_server(settings: Settings) -> None:
    """Stop this stack's server (recorded or stray)."""
    marker = f"{MARKER_CONF}={settings.stack_dir}"
    pids = set(local_process.find_pids("java", marker))
    for pid in sorted(pids):
        local_process.stop(pid, "Spark Connect server", sig=signal.SIGTERM, timeout=STOP_TIMEOUT_S)
    if settings.stack_dir.exists():
        stack_state.put(settings, spark_connect=None)


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1.0):
            return True
    except OSError:
        return False


def _wait_ready(pid: int, port: int, log_file: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if not local_process.pid_alive(pid):
            raise StackError(local_process.died_message("the Spark Connect server", pid, log_file))
        if _accepts(port):
            return
        time.sleep(0.5)
    raise StackError(
        f"the Spark Connect server (pid {pid}) did not listen on {HOST}:{port} within "
        f"{READY_TIMEOUT_S:.0f} s; see {log_file}"
    )
