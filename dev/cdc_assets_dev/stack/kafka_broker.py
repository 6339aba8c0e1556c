"""One Apache Kafka broker in KRaft mode (combined broker and controller) as a local process.

Config rendering, storage formatting, start, stop and liveness; local_stack decides where files go.
"""

from __future__ import annotations

import base64
import os
import random
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient

from cdc_assets.errors import StackError
from cdc_assets.jars.maven import require_tool
from cdc_assets.local_servers.endpoints import HOST as HOST  # the stack's servers import it here
from cdc_assets.local_servers.endpoints import KAFKA_MAIN_CLASS as MAIN_CLASS
from cdc_assets.local_servers.endpoints import is_broker_process
from cdc_assets_dev.stack import local_process
from cdc_assets_dev.stack.kafka_tls import TlsMaterial
from cdc_assets_dev.stack.local_process import log_tail

STORAGE_TOOL_CLASS = "kafka.tools.StorageTool"
BROKER_HEAP = "-Xmx512m"
LOG4J_TEMPLATE = Path(__file__).with_name("kafka-log4j2.properties")


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


@dataclass(frozen=True)
class SecuredListeners:
    """The broker's two secured listeners besides PLAINTEXT: SASL_SSL (SCRAM-SHA-512 and PLAIN)
    and SSL with required client certificates (mutual TLS), both with ``material``'s stores."""

    sasl_ssl_port: int
    ssl_port: int
    material: TlsMaterial


def render_server_properties(
    *, port: int, controller_port: int, data_dir: Path, secured: SecuredListeners | None = None
) -> str:
    """server.properties for a single node that is both broker and controller on 127.0.0.1;
    with ``secured``, also the SASL_SSL and SSL listeners."""
    listeners = {"PLAINTEXT": port}
    if secured is not None:
        listeners["SASL_SSL"] = secured.sasl_ssl_port
        listeners["SSL"] = secured.ssl_port
    advertised = ",".join(f"{name}://{HOST}:{p}" for name, p in listeners.items())
    protocols = ",".join(f"{name}:{name}" for name in listeners)
    lines = [
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@{HOST}:{controller_port}",
        f"listeners={advertised},CONTROLLER://{HOST}:{controller_port}",
        f"advertised.listeners={advertised}",
        "controller.listener.names=CONTROLLER",
        f"listener.security.protocol.map={protocols},CONTROLLER:PLAINTEXT",
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
    if secured is not None:
        lines += _secured_lines(secured.material)
    return "\n".join(lines) + "\n"


def _secured_lines(material: TlsMaterial) -> list[str]:
    """The secured listeners' settings: the broker's key store, the stack's CA as trust store
    (for client certificates), SCRAM users kept in the cluster's metadata (`ensure_scram_user`),
    one PLAIN user with the same password."""
    user, password = material.username, material.password
    return [
        "sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config="
        "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "listener.name.sasl_ssl.plain.sasl.jaas.config="
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'user_{user}="{password}";',
        "listener.name.ssl.ssl.client.auth=required",
        "ssl.keystore.type=PKCS12",
        f"ssl.keystore.location={material.broker_store}",
        f"ssl.keystore.password={material.store_password}",
        f"ssl.key.password={material.store_password}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={material.ca}",
    ]


def write_config(
    files: BrokerFiles, *, port: int, controller_port: int, secured: SecuredListeners | None = None
) -> None:
    """Write server.properties (only its owner may read it: it holds the key store's password)
    and the log4j2 config, creating their directories."""
    files.server_properties.parent.mkdir(parents=True, exist_ok=True)
    files.data_dir.mkdir(parents=True, exist_ok=True)
    files.log_file.parent.mkdir(parents=True, exist_ok=True)
    text = render_server_properties(
        port=port, controller_port=controller_port, data_dir=files.data_dir, secured=secured
    )
    fd = os.open(files.server_properties, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
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


def start_broker(files: BrokerFiles, classpath: str, jvm_options: Sequence[str] = ()) -> int:
    """Start the broker detached in its own session, output appended to the log; return its pid.
    ``jvm_options``: more options for its JVM (system properties)."""
    command = [
        require_tool("java"),
        BROKER_HEAP,
        *jvm_options,
        "-cp",
        classpath,
        f"-Dlog4j2.configurationFile={files.log4j_config}",
        MAIN_CLASS,
        str(files.server_properties),
    ]
    # A session of its own keeps the broker alive when the starting terminal closes and lets
    # stop_broker signal its whole process group.
    return local_process.start_detached(command, files.log_file, cwd=files.server_properties.parent)


exit_code = local_process.exit_code
pid_alive = local_process.pid_alive


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
    local_process.stop(pid, "Kafka broker", timeout=timeout)


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


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's range for the local ports of outgoing connections."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[:2]
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def pick_free_port(avoid: set[int] | None = None) -> int:
    """A free port on 127.0.0.1, not in ``avoid``, below the ephemeral range when there is room:
    a server's port must still be free when it restarts, and a port in the ephemeral range may
    meanwhile be the local end of any client's connection (seen: a broker killed and restarted
    under load found its port taken and moved, stranding its clients)."""
    avoid = avoid or set()
    low, _ = _ephemeral_range()
    rng = random.Random()
    if low > 20_000:
        for _ in range(200):
            port = rng.randrange(15_000, low)
            if port not in avoid and port_is_free(port):
                return port
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((HOST, 0))
            found: int = sock.getsockname()[1]
        if found not in avoid:
            return found


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


def ensure_scram_user(bootstrap: str, username: str, password: str, timeout: float = 30.0) -> None:
    """Create or update a SCRAM-SHA-512 user through the PLAINTEXT listener (Kafka's
    AlterUserScramCredentials; KRaft keeps it in the cluster's metadata)."""
    # Public names of confluent_kafka.admin that its type stubs do not declare re-exported.
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    upsert = UserScramCredentialUpsertion(
        username, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), password.encode()
    )
    futures = admin.alter_user_scram_credentials([upsert], request_timeout=timeout)
    for future in futures.values():
        future.result()
