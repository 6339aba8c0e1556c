"""A Kafka Connect worker with the Debezium connectors, against the local stack's broker.

One distributed worker (Apache Kafka's own jars and Debezium's, fetched by Maven into the jar
cache as the "connect" kind) whose REST API listens on 127.0.0.1 on a free port; its internal
topics have one replica. The connectors are registered from the JSON files in
``dev/cdc_assets_dev/sources/connectors/``, whose ``{{placeholders}}`` (host, ports, user, password,
bootstrap) are filled at registration; then each connector's task must be RUNNING.

The worker reaches the stack's broker as a company's worker reaches a secured Kafka: through the
SASL_SSL listener as the stack's SCRAM user, with the properties `kafka_security` renders for a
worker (and for Debezium's schema history clients, which do not inherit them). Secrets (the SASL
login, the source database password) are not in the worker's or the connectors' configs: those
name them through Kafka's FileConfigProvider (``${file:<path>:<key>}``), and the file is the
owner's only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdc_assets.errors import StackError
from cdc_assets.jars.maven import ensure_jars, require_tool
from cdc_assets.kafka_security import KafkaSecurity
from cdc_assets.local_servers import state as stack_state
from cdc_assets.settings import Settings
from cdc_assets_dev.stack import kafka_tls, local_process, sources
from cdc_assets_dev.stack.kafka_broker import HOST
from cdc_assets_dev.stack.local_process import log_tail

CONNECTORS_DIR = sources.CONNECTORS_DIR
CONNECTOR_FILES = ("mariadb.json", "postgres.json")
MAIN_CLASS = "org.apache.kafka.connect.cli.ConnectDistributed"
WORKER_HEAP = "-Xmx512m"
GROUP_ID = "cdc-assets-connect"
LOG4J_TEMPLATE = Path(__file__).with_name("connect-log4j2.properties")
READY_TIMEOUT_S = 120.0
RUNNING_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")
SECRETS_NAME = "secrets.properties"
FILE_PROVIDER = "org.apache.kafka.common.config.provider.FileConfigProvider"
JAAS_KEY = "sasl.jaas.config"
DATABASE_PASSWORD_KEY = "database.password"


@dataclass(frozen=True)
class ConnectFiles:
    base: Path
    worker_properties: Path
    log4j_config: Path
    log_file: Path


def connect_files(settings: Settings) -> ConnectFiles:
    base = settings.stack_dir / "connect"
    return ConnectFiles(
        base=base,
        worker_properties=base / "worker.properties",
        log4j_config=base / "log4j2.properties",
        log_file=settings.stack_dir / "logs" / "connect.log",
    )


def connect_classpath(settings: Settings) -> str:
    """Java ``-cp`` value for the worker: Kafka Connect, the Debezium connectors and the
    project's connectors around them (`own_jars.CONNECT_EXT`)."""
    from cdc_assets.jars.own import ensure_connect_jar

    ensure_jars("connect", settings)
    extensions = ensure_connect_jar(settings)
    return os.pathsep.join([str(settings.jars_dir / "connect" / "*"), str(extensions)])


@dataclass(frozen=True)
class WorkerKafka:
    """How the worker and its connectors reach a broker."""

    bootstrap: str
    security: KafkaSecurity


def worker_kafka(settings: Settings, bootstrap: str) -> WorkerKafka:
    """The stack's own broker (``bootstrap``, its plaintext address) through its SASL_SSL
    listener as the stack's SCRAM user; another broker as given."""
    kafka = stack_state.read(settings).get("kafka")
    if (
        isinstance(kafka, dict)
        and kafka.get("bootstrap") == bootstrap
        and isinstance(kafka.get("sasl_ssl_port"), int)
    ):
        material = kafka_tls.ensure_material(kafka_tls.stack_directory(settings.stack_dir))
        security = KafkaSecurity(
            protocol="SASL_SSL",
            mechanism="SCRAM-SHA-512",
            username=material.username,
            password=material.password,
            ca=str(material.ca),
        )
        return WorkerKafka(f"{HOST}:{kafka['sasl_ssl_port']}", security)
    return WorkerKafka(bootstrap, KafkaSecurity())


def write_secrets(settings: Settings, kafka: WorkerKafka) -> Path:
    """The file the worker's FileConfigProvider reads the secrets from (owner-only)."""
    path = connect_files(settings).base / SECRETS_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    values = {DATABASE_PASSWORD_KEY: sources.cdc_password(settings)}
    if JAAS_KEY in (java := kafka.security.java()):
        values[JAAS_KEY] = java[JAAS_KEY]
    text = "".join(f"{k}={_properties_value(v)}\n" for k, v in sorted(values.items()))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path


def secret_reference(secrets: Path, key: str) -> str:
    """A FileConfigProvider reference to ``key`` of the secrets file."""
    return "${file:" + str(secrets) + ":" + key + "}"


def _client_properties(properties: Mapping[str, str], secrets: Path) -> dict[str, str]:
    """Client properties with the SASL login replaced by its reference in the secrets file."""
    return {
        k: secret_reference(secrets, JAAS_KEY) if k.endswith(JAAS_KEY) else v
        for k, v in properties.items()
    }


def _properties_value(value: str) -> str:
    """A value for a Java properties file (backslashes and line breaks escaped)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def render_worker_properties(
    *, bootstrap: str, port: int, client: Mapping[str, str] | None = None
) -> str:
    """A distributed worker alone in its group, JSON with schemas for keys and values;
    ``client``: the security properties of its clients (`KafkaSecurity.connect_worker`, secrets
    as FileConfigProvider references)."""
    lines = [
        "config.providers=file",
        f"config.providers.file.class={FILE_PROVIDER}",
        f"bootstrap.servers={bootstrap}",
        f"group.id={GROUP_ID}",
        "key.converter=org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable=true",
        "value.converter=org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable=true",
        # A column with a default that is set to NULL must arrive as null: Kafka's converter
        # otherwise writes the column's default in its place (KIP-581), and the mirror would
        # hold a value the source does not.
        "key.converter.replace.null.with.default=false",
        "value.converter.replace.null.with.default=false",
        "config.storage.topic=_cdc-connect-configs",
        "offset.storage.topic=_cdc-connect-offsets",
        "status.storage.topic=_cdc-connect-status",
        # A single broker holds one replica; one partition is plenty for one worker.
        "config.storage.replication.factor=1",
        "offset.storage.replication.factor=1",
        "offset.storage.partitions=1",
        "status.storage.replication.factor=1",
        "status.storage.partitions=1",
        f"listeners=http://{HOST}:{port}",
        f"rest.advertised.host.name={HOST}",
        f"rest.advertised.port={port}",
        # The connectors are on the classpath and declare themselves in ServiceLoader manifests.
        "plugin.discovery=service_load",
        "offset.flush.interval.ms=1000",
        # Nobody else joins: a restarted worker takes its connectors back at once instead of
        # waiting five minutes for the member that left.
        "scheduled.rebalance.max.delay.ms=0",
        "task.shutdown.graceful.timeout.ms=5000",
    ]
    lines += [f"{k}={_properties_value(v)}" for k, v in sorted((client or {}).items())]
    return "\n".join(lines) + "\n"


def worker_command(classpath: str, files: ConnectFiles) -> list[str]:
    return [
        require_tool("java"),
        "-Xms64m",
        WORKER_HEAP,
        "-Djava.awt.headless=true",
        "-cp",
        classpath,
        f"-Dlog4j2.configurationFile={files.log4j_config}",
        MAIN_CLASS,
        str(files.worker_properties),
    ]


def start_worker(settings: Settings, bootstrap: str) -> int:
    """Start the worker (or keep the running one on the same broker); its REST port."""
    files = connect_files(settings)
    entry = sources.load_state(settings).get("connect")
    marker = str(files.worker_properties)
    classpath = connect_classpath(settings)
    kafka = worker_kafka(settings, bootstrap)
    if (
        isinstance(entry, dict)
        and entry.get("bootstrap") == bootstrap
        and entry.get("client") == kafka.bootstrap
    ):
        pid, port = entry.get("pid"), entry.get("port")
        # A worker started before an upgrade lacks the connector classes the configs now name.
        current = (
            isinstance(pid, int)
            and local_process.runs(pid, marker)
            and classpath in local_process.cmdline(pid)
        )
        if current and isinstance(port, int) and _healthy(port):
            return port
    stop_worker(settings)
    files.base.mkdir(parents=True, exist_ok=True)
    port = sources.choose_port(settings, "connect")
    secrets = write_secrets(settings, kafka)
    files.worker_properties.write_text(
        render_worker_properties(
            bootstrap=kafka.bootstrap,
            port=port,
            client=_client_properties(kafka.security.connect_worker(), secrets),
        ),
        encoding="utf-8",
    )
    shutil.copyfile(LOG4J_TEMPLATE, files.log4j_config)
    if files.log_file.exists():  # keep the previous run's log, as the broker does
        files.log_file.replace(files.log_file.with_name(files.log_file.name + ".1"))
    pid = local_process.start_detached(
        worker_command(classpath, files), files.log_file, cwd=files.base
    )
    sources.remember_port(settings, "connect", port)
    sources.update_state(
        settings,
        connect={"pid": pid, "port": port, "bootstrap": bootstrap, "client": kafka.bootstrap},
    )
    try:
        _wait_healthy(pid, port, files.log_file)
    except BaseException:
        stop_worker(settings)
        raise
    return port


def stop_worker(settings: Settings) -> None:
    """Stop the worker (recorded or stray); connector configs and offsets stay in Kafka."""
    marker = str(connect_files(settings).worker_properties)
    pids = set(local_process.find_pids("java", marker))
    entry = sources.load_state(settings).get("connect") if sources.started(settings) else None
    recorded = entry.get("pid") if isinstance(entry, dict) else None
    if isinstance(recorded, int) and local_process.runs(recorded, marker):
        pids.add(recorded)
    for pid in sorted(pids):
        local_process.stop(pid, "Kafka Connect worker", sig=signal.SIGTERM, timeout=STOP_TIMEOUT_S)
    if sources.started(settings):
        sources.update_state(settings, connect=None)


def running_worker(settings: Settings) -> tuple[int, int]:
    """(pid, REST port) of the running worker; StackError when it does not run."""
    entry = sources.load_state(settings).get("connect")
    pid = entry.get("pid") if isinstance(entry, dict) else None
    port = entry.get("port") if isinstance(entry, dict) else None
    marker = str(connect_files(settings).worker_properties)
    if not isinstance(pid, int) or not isinstance(port, int) or not local_process.runs(pid, marker):
        raise StackError("the Kafka Connect worker does not run: `cdc-assets stack up --sources`")
    return pid, port


def kill_worker(settings: Settings) -> int:
    """Kill the worker with SIGKILL, as a crash of its machine would: no task stops, no offset
    is committed, so on restart each connector resumes from its last committed offsets and sends
    again what it sent since (Debezium is at-least-once). Returns the pid that was killed."""
    pid, _ = running_worker(settings)
    local_process.stop(pid, "Kafka Connect worker", sig=signal.SIGKILL, timeout=STOP_TIMEOUT_S)
    return pid


def restart_worker(settings: Settings, bootstrap: str) -> int:
    """Start the worker again (after ``kill_worker`` or a crash) and wait until every registered
    connector and its tasks run again; the worker's REST port. The connectors' configs and
    offsets are in Kafka, so nothing is registered again."""
    port = start_worker(settings, bootstrap)
    for name in sources.load_state(settings).get("connectors", []):
        wait_running(port, name, log_file=connect_files(settings).log_file)
    return port


def restart_connector(port: int, name: str) -> None:
    """Restart a connector and its tasks through the REST API and wait until they run again.
    The tasks stop gracefully and commit their offsets first, so few or no events repeat."""
    path = f"/connectors/{name}/restart?includeTasks=true&onlyFailed=false"
    status, body = rest(port, "POST", path)
    if status not in (200, 202, 204):
        raise StackError(f"Kafka Connect POST {path}: HTTP {status} {body}")
    wait_running(port, name)


def worker_status(settings: Settings) -> sources.ServerStatus:
    files = connect_files(settings)
    return sources.server_status(settings, "connect", str(files.worker_properties), files.log_file)


# --- connectors ------------------------------------------------------------------------------


def connector_configs(values: dict[str, str]) -> list[dict[str, Any]]:
    """The connector definitions kept in the repo, placeholders filled from ``values``."""
    definitions = []
    for name in CONNECTOR_FILES:
        path = CONNECTORS_DIR / name
        definition = json.loads(path.read_text(encoding="utf-8"))
        config = {}
        for key, value in definition["config"].items():
            text = str(value)
            unknown = [p for p in _PLACEHOLDER.findall(text) if p not in values]
            if unknown:
                raise StackError(f"{path}: {key} uses unknown placeholder {unknown[0]!r}")
            config[key] = _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)
        definitions.append({"name": definition["name"], "config": config})
    return definitions


def placeholder_values(settings: Settings, bootstrap: str) -> dict[str, str]:
    """The connector files' placeholders: the password as a reference into the secrets file,
    the broker as the worker reaches it."""
    data = sources.load_state(settings)
    ports = data.get("ports", {})
    kafka = worker_kafka(settings, bootstrap)
    secrets = write_secrets(settings, kafka)
    return {
        "host": HOST,
        "user": sources.CDC_USER,
        "password": secret_reference(secrets, DATABASE_PASSWORD_KEY),
        "bootstrap": kafka.bootstrap,
        "mariadb_port": str(ports.get("mariadb", "")),
        "postgres_port": str(ports.get("postgres", "")),
    }


def register_connectors(
    settings: Settings, bootstrap: str, port: int, *, avro: dict[str, str] | None = None
) -> list[str]:
    """PUT every connector's config (idempotent) and wait until each task is RUNNING.
    ``avro`` maps server kinds (``mariadb``, ``postgres``) to the registry (its v2 API) whose
    Avro converter their connector uses; the others write JSON."""
    definitions = connector_configs(placeholder_values(settings, bootstrap))
    for definition in definitions:
        config = definition["config"]
        config.update(history_security(settings, bootstrap, config))
        kind = "postgres" if "postgres" in config["connector.class"].lower() else "mariadb"
        if avro and kind in avro:
            config.update(avro_converters(avro[kind]))
        _request_retrying(
            port, "PUT", f"/connectors/{definition['name']}/config", definition["config"]
        )
    names = [d["name"] for d in definitions]
    for name in names:
        wait_running(port, name, log_file=connect_files(settings).log_file)
    sources.update_state(settings, connectors=names)
    wait_snapshots_done(bootstrap, [heartbeat_topic(d["config"]) for d in definitions])
    return names


def capture_config(
    settings: Settings,
    bootstrap: str,
    server: sources.ServerName,
    *,
    prefix: str,
    tables: list[str],
    mariadb_name: str = sources.MARIADB,
    server_id: int | None = None,
    slot: str | None = None,
    schema_changes: bool = False,
    overrides: dict[str, str] | None = None,
) -> dict[str, str]:
    """The repository's connector config for ``server`` made into a connector of its own: topic
    prefix ``prefix`` (topics ``<prefix>.<database or schema>.<table>``, no routing), capturing
    ``tables`` (``db.table`` or ``schema.table``) from the local MariaDB server ``mariadb_name``
    with replication id ``server_id`` (distinct per connector of one server), or from PostgreSQL
    through replication slot ``slot``. ``schema_changes``: a MariaDB connector writes its
    schema-change topic (named as its prefix). ``overrides``: further connector settings."""
    values = placeholder_values(settings, bootstrap)
    config = next(
        dict(d["config"])
        for d in connector_configs(values)
        if ("postgres" in d["config"]["connector.class"].lower()) == (server == "postgres")
    )
    for key in [k for k in config if k.startswith("transforms")]:
        del config[key]  # topics keep Debezium's own names under the prefix
    if server == "mariadb" and mariadb_name != sources.MARIADB:
        config["database.port"] = str(sources.port_of(settings, mariadb_name))
    config.update(
        {
            "topic.prefix": prefix,
            "table.include.list": ",".join(tables),
            "snapshot.mode": "initial",
            "provide.transaction.metadata": "false",
        }
    )
    if server == "mariadb":
        if server_id is None:
            raise StackError(f"a MariaDB connector of its own needs a server id ({prefix})")
        config["database.include.list"] = ",".join(sorted({t.split(".")[0] for t in tables}))
        config["database.server.id"] = str(server_id)
        config["schema.history.internal.kafka.topic"] = f"_cdc-schema-history.{prefix}"
        config["include.schema.changes"] = "true" if schema_changes else "false"
    else:
        if slot is None:
            raise StackError(
                f"a PostgreSQL connector of its own needs a replication slot ({prefix})"
            )
        config["slot.name"] = slot
    config.update(history_security(settings, bootstrap, config))
    config.update(overrides or {})
    return config


def history_security(
    settings: Settings, bootstrap: str, config: Mapping[str, str]
) -> dict[str, str]:
    """The security properties of a MariaDB connector's schema history clients (none for a
    connector without a schema history, or a plaintext broker)."""
    if "schema.history.internal.kafka.bootstrap.servers" not in config:
        return {}
    kafka = worker_kafka(settings, bootstrap)
    secrets = connect_files(settings).base / SECRETS_NAME
    return _client_properties(kafka.security.debezium_history(), secrets)


def register_capture(
    settings: Settings,
    bootstrap: str,
    name: str,
    config: dict[str, str],
    *,
    snapshot_timeout: float = RUNNING_TIMEOUT_S,
) -> None:
    """PUT connector ``name`` (idempotent: an existing one keeps its offsets) and return once it
    runs and its snapshot is done (its first heartbeat, within ``snapshot_timeout`` seconds: a
    connector over many tables takes longer); `stack status` lists it."""
    port = running_worker(settings)[1]
    _request_retrying(port, "PUT", f"/connectors/{name}/config", config)
    wait_running(port, name, log_file=connect_files(settings).log_file)
    known = sources.load_state(settings).get("connectors", [])
    names = [n for n in known if isinstance(n, str)] if isinstance(known, list) else []
    if name not in names:
        sources.update_state(settings, connectors=[*names, name])
    wait_snapshots_done(bootstrap, [heartbeat_topic(config)], timeout=snapshot_timeout)


AVRO_CONVERTER = "io.apicurio.registry.utils.converter.AvroConverter"


def avro_converters(registry_native_url: str) -> dict[str, str]:
    """Connector settings that make one connector write keys and values as Avro through a
    registry (Apicurio's converter, its v2 API), in the Confluent wire format the ingest decodes:
    the schema id in the payload (not in headers), 4 bytes, and the content id that the
    registry's Confluent-compatible API serves. Other connectors keep the worker's JSON."""
    out = {}
    for side in ("key", "value"):
        prefix = f"{side}.converter"
        out[prefix] = AVRO_CONVERTER
        out[f"{prefix}.apicurio.registry.url"] = registry_native_url
        out[f"{prefix}.apicurio.registry.auto-register"] = "true"
        out[f"{prefix}.apicurio.registry.headers.enabled"] = "false"
        out[f"{prefix}.apicurio.registry.as-confluent"] = "true"
        out[f"{prefix}.apicurio.registry.use-id"] = "contentId"
    return out


def heartbeat_topic(config: dict[str, str]) -> str:
    """Where a connector writes its heartbeats (Debezium's default naming)."""
    prefix = config.get("topic.heartbeat.prefix", "__debezium-heartbeat")
    return f"{prefix}.{config['topic.prefix']}"


def wait_snapshots_done(
    bootstrap: str, topics: list[str], *, timeout: float = RUNNING_TIMEOUT_S
) -> None:
    """Block until every heartbeat topic holds a record. A task is RUNNING before its snapshot
    starts; the first heartbeat comes when the snapshot is done (MariaDB) or streaming runs
    (PostgreSQL), so a change made after this returns is streamed (op c/u/d), not read (r)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "cdc-assets-stack",
            "enable.auto.commit": False,
        }
    )
    pending = list(topics)
    deadline = time.monotonic() + timeout
    try:
        while pending:
            topic = pending[0]
            try:
                _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)
            except KafkaException:
                high = 0  # the topic does not exist before the first heartbeat
            if high > 0:
                pending.pop(0)
                continue
            if time.monotonic() >= deadline:
                raise StackError(
                    f"no Debezium heartbeat on {', '.join(pending)} within {timeout:.0f} s: "
                    "a connector's snapshot did not finish; see the Kafka Connect log"
                )
            time.sleep(0.5)
    finally:
        consumer.close()


def connector_status(port: int, name: str) -> dict[str, Any]:
    """Kafka Connect's status of one connector (state of the connector and of each task)."""
    status, body = rest(port, "GET", f"/connectors/{name}/status")
    if status != 200 or not isinstance(body, dict):
        raise StackError(f"status of connector {name}: HTTP {status} {body}")
    return body


def wait_running(
    port: int, name: str, *, timeout: float = RUNNING_TIMEOUT_S, log_file: Path | None = None
) -> None:
    """Block until the connector and all its tasks are RUNNING; StackError with the trace if one
    FAILED or when the time is up."""
    deadline = time.monotonic() + timeout
    last: object = "no status yet"
    while time.monotonic() < deadline:
        status, body = rest(port, "GET", f"/connectors/{name}/status")
        if status == 200 and isinstance(body, dict):
            last = body
            connector = body.get("connector", {})
            tasks = body.get("tasks", [])
            failed = [t for t in [connector, *tasks] if t.get("state") == "FAILED"]
            if failed:
                trace = failed[0].get("trace", "(no trace)")
                raise StackError(f"connector {name} FAILED:\n{trace}")
            if (
                connector.get("state") == "RUNNING"
                and tasks
                and all(t.get("state") == "RUNNING" for t in tasks)
            ):
                return
        time.sleep(0.5)
    tail = "\n".join(log_tail(log_file, 30)) if log_file else ""
    raise StackError(
        f"connector {name} not RUNNING within {timeout:.0f} s (last status: {last})"
        + (f"; last 30 lines of {log_file}:\n{tail}" if tail else "")
    )


def connectors_summary(settings: Settings) -> list[str]:
    """One line per registered connector (for `stack status`); empty when the worker is down."""
    entry = sources.load_state(settings).get("connect")
    port = entry.get("port") if isinstance(entry, dict) else None
    if not isinstance(port, int) or not _healthy(port):
        return []
    lines = []
    for name in sources.load_state(settings).get("connectors", []):
        try:
            body = connector_status(port, name)
        except StackError as exc:
            lines.append(f"{name}: {exc}")
            continue
        tasks = ", ".join(f"task {t.get('id')} {t.get('state')}" for t in body.get("tasks", []))
        lines.append(f"{name}: {body.get('connector', {}).get('state')} ({tasks or 'no tasks'})")
    return lines


def rest(port: int, method: str, path: str, body: object = None) -> tuple[int, Any]:
    """One call of the worker's REST API: (HTTP status, parsed JSON or text); (0, error) when
    nothing answers."""
    data = None if body is None else json.dumps(body).encode("utf-8")
    request = urllib.request.Request(
        f"http://{HOST}:{port}{path}",
        data=data,
        method=method,
        headers={"Content-Type": "application/json", "Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, _parse(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, _parse(exc.read())
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc)


def _parse(raw: bytes) -> Any:
    text = raw.decode("utf-8", errors="replace")
    try:
        return json.loads(text) if text else None
    except json.JSONDecodeError:
        return text


def _healthy(port: int) -> bool:
    status, _ = rest(port, "GET", "/health")
    return status == 200


def _wait_healthy(pid: int, port: int, log_file: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    last: object = "REST API not listening yet"
    while time.monotonic() < deadline:
        if not local_process.pid_alive(pid):
            raise StackError(local_process.died_message("Kafka Connect worker", pid, log_file))
        status, body = rest(port, "GET", "/health")
        if status == 200:
            return
        last = body if status else last
        time.sleep(0.5)
    raise StackError(
        f"Kafka Connect worker (pid {pid}) not healthy on {HOST}:{port} within "
        f"{READY_TIMEOUT_S:.0f} s ({last}); last 30 lines of {log_file}:\n"
        + "\n".join(log_tail(log_file, 30))
    )


def _request_retrying(port: int, method: str, path: str, body: object) -> Any:
    """A config change; retried while the worker rebalances (409) or its herder is busy (5xx)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        status, answer = rest(port, method, path, body)
        if 200 <= status < 300:
            return answer
        if status not in (0, 409, 500, 503) or time.monotonic() >= deadline:
            raise StackError(f"Kafka Connect {method} {path}: HTTP {status} {answer}")
        time.sleep(1.0)
