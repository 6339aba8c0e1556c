"""The local stack: a Kafka broker, an Iceberg SQLite catalog and a warehouse directory.

Everything lives under ``settings.stack_dir``; state.json tells any process what runs there.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from cdc_assets.errors import StackError
from cdc_assets.jars.maven import kafka_classpath
from cdc_assets.local_servers import endpoints
from cdc_assets.local_servers import state as stack_state
from cdc_assets.settings import (
    ENV_CLUSTER_CATALOG,
    ENV_KAFKA_PORT,
    Settings,
)
from cdc_assets_dev.stack import (
    catalog_server,
    kafka_broker,
    kafka_tls,
    local_process,
    object_store,
    rest_catalog,
    schema_registry,
    source_stack,
    spark_cluster,
    spark_connect,
)

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog

# What `stack up` records of the broker and the lake (top-level entries of the state file).
BROKER_ENTRIES = ("kafka", "ports", "catalog_name", "catalog_file", "warehouse")
LOCK_FILE = ".lock"
READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0
STATUS_LOG_LINES = 10

KafkaRunState = Literal["running", "dead", "stopped"]


@dataclass(frozen=True)
class StackState:
    """What `stack_up` started, as recorded in state.json."""

    bootstrap_servers: str
    kafka_pid: int
    catalog_file: Path
    warehouse: Path
    state_dir: Path
    kafka_port: int
    controller_port: int
    started_at: str
    # The secured listeners (kafka_broker.SecuredListeners); None for a stack started before
    # they existed (`stack down` and `stack up` add them).
    sasl_ssl_port: int | None = None
    ssl_port: int | None = None

    @property
    def sasl_ssl_bootstrap(self) -> str | None:
        return None if self.sasl_ssl_port is None else f"{kafka_broker.HOST}:{self.sasl_ssl_port}"

    @property
    def ssl_bootstrap(self) -> str | None:
        return None if self.ssl_port is None else f"{kafka_broker.HOST}:{self.ssl_port}"


@dataclass(frozen=True)
class KafkaStatus:
    state: KafkaRunState
    pid: int | None
    bootstrap: str | None
    reason: str
    log_tail: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CatalogStatus:
    file: Path
    exists: bool
    namespaces: list[str] = field(default_factory=list)
    table_count: int = 0
    error: str | None = None


@dataclass(frozen=True)
class WarehouseStatus:
    path: Path
    exists: bool
    size_bytes: int


@dataclass(frozen=True)
class StackStatus:
    """Per-component health of the local stack."""

    state_dir: Path
    kafka: KafkaStatus
    catalog: CatalogStatus
    warehouse: WarehouseStatus
    # MariaDB, PostgreSQL, Kafka Connect: only when once started with `stack up --sources`.
    sources: source_stack.SourcesStatus = field(default_factory=source_stack.SourcesStatus)
    # Only when started with `stack up --spark-connect` (or --cluster).
    spark_connect_port: int | None = None
    # Only when started with `stack up --cluster`: the master's URL and its workers' count,
    # the shared catalog's JDBC URL and the object store's endpoint (None: stopped).
    spark_cluster: tuple[str, int] | None = None
    catalog_server: str | None = None
    object_store: str | None = None
    # Only when started with `stack up --rest-catalog` or the cluster profile on REST: its URL.
    rest_catalog: str | None = None

    @property
    def healthy(self) -> bool:
        return (
            self.kafka.state == "running"
            and self.catalog.exists
            and self.catalog.error is None
            and self.warehouse.exists
            and self.sources.healthy
        )

    def render(self) -> str:
        """A few lines for a terminal."""
        lines = [f"local stack in {self.state_dir}: {'healthy' if self.healthy else 'UNHEALTHY'}"]
        kafka = self.kafka
        lines.append(f"  kafka:     {kafka.state} - {kafka.reason}")
        catalog = self.catalog
        if self.catalog_server is not None:
            pass  # the cluster profile's catalog and warehouse are listed below
        elif not catalog.exists:
            lines.append(f"  catalog:   missing ({catalog.file})")
        elif catalog.error is not None:
            lines.append(f"  catalog:   {catalog.file} unreadable: {catalog.error}")
        else:
            names = ", ".join(catalog.namespaces) or "none"
            lines.append(
                f"  catalog:   {catalog.file} ({len(catalog.namespaces)} namespaces: {names}; "
                f"{catalog.table_count} tables)"
            )
        warehouse = self.warehouse
        if self.catalog_server is not None:
            pass
        elif warehouse.exists:
            lines.append(f"  warehouse: {warehouse.path} ({_human_bytes(warehouse.size_bytes)})")
        else:
            lines.append(f"  warehouse: missing ({warehouse.path})")
        if kafka.state == "dead" and kafka.log_tail:
            lines.append(f"  last {len(kafka.log_tail)} lines of the Kafka log:")
            lines.extend(f"    {line}" for line in kafka.log_tail)
        lines.extend(self.sources.render())
        if self.spark_connect_port is not None:
            url = spark_connect.remote_url(self.spark_connect_port)
            lines.append(f"  spark:     Spark Connect server at {url} (runs use it)")
        if self.spark_cluster is not None:
            master, workers = self.spark_cluster
            lines.append(
                f"  cluster:   Spark master {master}, {workers} workers (Connect drives them)"
            )
        if self.rest_catalog is not None:
            lines.append(f"  catalog:   Iceberg REST catalog at {self.rest_catalog} (runs use it)")
        if self.catalog_server is not None:
            use = "the REST catalog's backend" if self.rest_catalog else "runs use it"
            lines.append(f"  catalog:   shared JDBC catalog {self.catalog_server} ({use})")
        if self.object_store is not None:
            lines.append(f"  objects:   S3 object store at {self.object_store} (the warehouse)")
        return "\n".join(lines)


def stack_up(
    settings: Settings,
    *,
    sources: bool = False,
    spark_connect: bool = False,
    cluster: bool = False,
    registry: bool = False,
    avro: tuple[str, ...] = (),
    rest: bool = False,
) -> StackState:
    """Start the local stack, or return the running one; a dead broker is cleaned and restarted.

    ``sources`` also starts MariaDB, PostgreSQL, Kafka Connect and the Debezium connectors
    (source_stack.up; what it started is in the state file's ``sources`` section, see
    source_stack.status).
    ``spark_connect`` also starts a Spark Connect server, which runs then use (spark_connect).
    ``cluster`` (or ``CDC_ASSETS_CLUSTER=1``) also starts a Spark standalone master and two
    workers and makes the Connect server their driver (spark_cluster).
    ``registry`` also starts the schema registry (schema_registry), for Avro records; the
    connectors of the servers named in ``avro`` (``mariadb``, ``postgres``) then write Avro
    through it (the registry is started for them).
    ``rest`` also starts an Iceberg REST catalog server over the stack's catalog, which runs
    then use (rest_catalog). The cluster profile runs one over its PostgreSQL catalog and object
    store unless ``CDC_ASSETS_CLUSTER_CATALOG=jdbc``."""
    cluster = cluster or settings.cluster
    if rest and cluster and settings.cluster_catalog == "jdbc":
        raise StackError(
            f"--rest-catalog with the cluster profile, but {ENV_CLUSTER_CATALOG}=jdbc asks for "
            "its JDBC catalog: unset it (the profile's default is its REST catalog)"
        )
    settings.stack_dir.mkdir(parents=True, exist_ok=True)
    with _locked(settings):
        classpath = kafka_classpath(settings)
        files = _broker_files(settings)
        for directory in (files.data_dir, files.log_file.parent, settings.local_warehouse):
            directory.mkdir(parents=True, exist_ok=True)
        _init_catalog(settings)

        existing = read_state(settings)
        if existing is not None and _serving(existing, files):
            if settings.kafka_port and settings.kafka_port != existing.kafka_port:
                raise StackError(
                    f"the local stack already runs Kafka on port {existing.kafka_port} but "
                    f"{ENV_KAFKA_PORT} asks for {settings.kafka_port}: run `cdc-assets stack down` "
                    "first"
                )
            converters = _avro_connectors(settings, registry, avro)
            if sources:
                source_stack.up(settings, existing.bootstrap_servers, avro=converters)
            if spark_connect or cluster:
                _start_spark_connect(settings, cluster=cluster)
            if rest and not cluster:
                rest_catalog.start(settings, embedded_catalog_properties(settings))
            return existing
        _stop_brokers(settings, files)

        data = stack_state.read(settings)
        previous_ports = data.get("ports")
        port, controller_port, sasl_ssl_port, ssl_port = _choose_ports(
            settings, previous_ports if isinstance(previous_ports, dict) else {}
        )
        material = tls_material(settings)
        secured = kafka_broker.SecuredListeners(sasl_ssl_port, ssl_port, material)
        kafka_broker.write_config(
            files, port=port, controller_port=controller_port, secured=secured
        )
        _rotate_log(files.log_file)
        kafka_broker.format_storage(files, classpath)
        pid = kafka_broker.start_broker(files, classpath)
        # Recorded before waiting, so `stack down` can find a broker whose startup was interrupted.
        data["kafka"] = {
            "bootstrap": f"{kafka_broker.HOST}:{port}",
            "port": port,
            "controller_port": controller_port,
            "sasl_ssl_port": sasl_ssl_port,
            "ssl_port": ssl_port,
            "pid": pid,
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        data["ports"] = {
            "kafka": port,
            "controller": controller_port,
            "sasl_ssl": sasl_ssl_port,
            "ssl": ssl_port,
        }
        data["catalog_name"] = settings.catalog_name
        data["catalog_file"] = str(settings.local_catalog_file)
        data["warehouse"] = str(settings.local_warehouse)
        stack_state.put(
            settings,
            **{k: data[k] for k in ("kafka", "ports", "catalog_name", "catalog_file", "warehouse")},
        )
        try:
            kafka_broker.wait_until_ready(pid, port, files.log_file, timeout=READY_TIMEOUT_S)
            bootstrap = f"{kafka_broker.HOST}:{port}"
            kafka_broker.ensure_scram_user(bootstrap, material.username, material.password)
        except BaseException:
            _stop_brokers(settings, files)
            raise
        state = read_state(settings)
        if state is None:
            raise StackError(f"{stack_state.state_path(settings)} lost the broker while it started")
        converters = _avro_connectors(settings, registry, avro)
        if sources:
            source_stack.up(settings, state.bootstrap_servers, avro=converters)
        if spark_connect or cluster:
            _start_spark_connect(settings, cluster=cluster)
        if rest and not cluster:
            rest_catalog.start(settings, embedded_catalog_properties(settings))
        return state


def embedded_catalog_properties(settings: Settings) -> dict[str, str]:
    """The embedded catalog (SQLite file, warehouse directory) as Iceberg catalog properties,
    for a REST server over it; the busy timeout and WAL journal as the engines open it."""
    from cdc_assets.resources.config import SQLITE_BUSY_TIMEOUT_S

    return {
        "catalog-name": settings.catalog_name,  # the JDBC catalog's tables are kept per name
        "uri": f"jdbc:sqlite:{settings.local_catalog_file}",
        "warehouse": settings.local_warehouse.as_uri(),
        "jdbc.busy_timeout": str(SQLITE_BUSY_TIMEOUT_S * 1000),
        "jdbc.journal_mode": "WAL",
    }


def cluster_catalog_properties(
    settings: Settings, server: endpoints.CatalogServer, store: endpoints.ObjectStore
) -> dict[str, str]:
    """The cluster profile's JDBC catalog on PostgreSQL with its warehouse in the object store,
    as Iceberg catalog properties for the REST server over it (S3FileIO on the server's side).
    The engines' catalog name: with ``CDC_ASSETS_CLUSTER_CATALOG=jdbc`` they see the same
    tables directly."""
    return {
        "catalog-name": settings.catalog_name,
        "uri": server.jdbc_url,
        "warehouse": store.warehouse,
        **server.properties(),
        **store.catalog_properties(),
    }


def _avro_connectors(settings: Settings, registry: bool, avro: tuple[str, ...]) -> dict[str, str]:
    """Start the registry when asked for (or needed by Avro connectors); the registry URL of
    each server kind whose connector writes Avro."""
    unknown = sorted(set(avro) - {"mariadb", "postgres"})
    if unknown:
        raise StackError(f"--avro names {', '.join(unknown)}; known servers: mariadb, postgres")
    if not (registry or avro):
        return {}
    started = schema_registry.start(settings)
    return {kind: started.native_url for kind in avro}


def _start_spark_connect(settings: Settings, *, cluster: bool = False) -> int:
    from cdc_assets.jars.own import spark_jars
    from cdc_assets.resources import build_resources

    spark_jars(settings)
    if cluster:
        # Before the driver's configuration is rendered: it names this catalog and warehouse.
        server = catalog_server.start(settings)
        store = object_store.start(settings)
        if settings.cluster_catalog == "rest":
            rest_catalog.start(settings, cluster_catalog_properties(settings, server, store))
        else:
            rest_catalog.stop(settings)  # runs open the JDBC catalog directly
    conf = build_resources(settings)["spark"].conf()
    if cluster:
        running = spark_cluster.start_cluster(settings)
        conf.update(spark_cluster.driver_conf(running, kafka_broker.pick_free_port()))
    return spark_connect.start_server(settings, conf)


def stack_down(settings: Settings, *, purge: bool = False) -> None:
    """Stop the broker (SIGTERM, then SIGKILL after 30 s); ``purge`` also deletes the stack dir.

    Sources started by `stack up --sources` stop first (the worker needs the broker to stop)."""
    if not settings.stack_dir.exists():
        return
    with _locked(settings):
        spark_connect.stop_server(settings)
        rest_catalog.stop(settings)
        spark_cluster.stop_cluster(settings)
        object_store.stop(settings)
        schema_registry.stop(settings)
        source_stack.down(settings)
        _stop_brokers(settings, _broker_files(settings))
        if purge:
            _remove_tree(settings.stack_dir)


def _remove_tree(path: Path, attempts: int = 5) -> None:
    """Delete ``path``; a file another process adds while it goes (a server's last log line)
    only costs a retry."""
    for attempt in range(attempts):
        try:
            shutil.rmtree(path)
        except OSError:
            if not path.exists():
                return
            if attempt == attempts - 1:
                raise
            time.sleep(0.2)
        else:
            return


def lake_description(settings: Settings) -> str:
    """Where runs commit: the catalog and warehouse the resources use (the cluster profile's
    catalog server and object store when they are recorded, else the SQLite file and directory)."""
    from cdc_assets.resources import build_resources

    catalog = build_resources(settings)["iceberg"]
    uri = catalog.uri.removeprefix("jdbc:sqlite:")
    return f"catalog {uri}, warehouse {catalog.warehouse}"


def stack_status(settings: Settings) -> StackStatus:
    """Inspect each component without starting or changing anything."""
    warehouse = settings.local_warehouse
    return StackStatus(
        state_dir=settings.stack_dir,
        kafka=_kafka_status(settings),
        catalog=_catalog_status(settings),
        warehouse=WarehouseStatus(
            path=warehouse, exists=warehouse.is_dir(), size_bytes=_dir_size(warehouse)
        ),
        sources=source_stack.status(settings),
        spark_connect_port=spark_connect.running_port(settings),
        spark_cluster=(
            (found.master_url, len(found.worker_uis))
            if (found := spark_cluster.running(settings)) is not None
            else None
        ),
        catalog_server=(
            server.jdbc_url if (server := catalog_server.running(settings)) is not None else None
        ),
        object_store=(
            f"{store.endpoint}, bucket {store.bucket}"
            if (store := object_store.running(settings)) is not None
            else None
        ),
        rest_catalog=(rest.url if (rest := rest_catalog.running(settings)) is not None else None),
    )


def read_state(settings: Settings) -> StackState | None:
    """The broker recorded in state.json, or None when no stack was started (or it was stopped)."""
    data = stack_state.read(settings)
    kafka = data.get("kafka")
    if not isinstance(kafka, dict):
        return None
    try:
        return StackState(
            bootstrap_servers=str(kafka["bootstrap"]),
            kafka_pid=int(kafka["pid"]),
            catalog_file=Path(data.get("catalog_file", settings.local_catalog_file)),
            warehouse=Path(data.get("warehouse", settings.local_warehouse)),
            state_dir=settings.stack_dir,
            kafka_port=int(kafka["port"]),
            controller_port=int(kafka["controller_port"]),
            started_at=str(kafka.get("started_at", "")),
            sasl_ssl_port=_optional_port(kafka.get("sasl_ssl_port")),
            ssl_port=_optional_port(kafka.get("ssl_port")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise StackError(
            f"{stack_state.state_path(settings)} is damaged ({exc!r}); "
            "run `cdc-assets stack down` to reset it"
        ) from exc


def _broker_files(settings: Settings) -> kafka_broker.BrokerFiles:
    kafka_dir = settings.stack_dir / "kafka"
    return kafka_broker.BrokerFiles(
        server_properties=kafka_dir / "server.properties",
        log4j_config=kafka_dir / "log4j2.properties",
        data_dir=kafka_dir / "data",
        log_file=settings.stack_dir / "logs" / "kafka.log",
    )


def _recorded_pid(settings: Settings) -> int | None:
    """The broker pid in the state file, also when the file is damaged elsewhere."""
    try:
        kafka = stack_state.read(settings).get("kafka")
    except StackError:
        return None
    pid = kafka.get("pid") if isinstance(kafka, dict) else None
    return pid if isinstance(pid, int) else None


def _serving(state: StackState, files: kafka_broker.BrokerFiles) -> bool:
    return endpoints.is_broker_process(
        state.kafka_pid, files.server_properties
    ) and kafka_broker.port_answers(state.kafka_port)


def _stop_brokers(settings: Settings, files: kafka_broker.BrokerFiles) -> None:
    """Stop every broker on our config, recorded or stray, and forget the running broker."""
    pids = set(kafka_broker.find_broker_pids(files.server_properties))
    recorded = _recorded_pid(settings)
    if recorded is not None and endpoints.is_broker_process(recorded, files.server_properties):
        pids.add(recorded)
    for pid in sorted(pids):
        kafka_broker.stop_broker(pid, timeout=STOP_TIMEOUT_S)
    try:
        stack_state.put(settings, kafka=None)
    except StackError:
        # damaged beyond use: stopping is how the user resets it
        stack_state.state_path(settings).unlink(missing_ok=True)


def _optional_port(value: object) -> int | None:
    return int(value) if isinstance(value, int) else None


def tls_material(settings: Settings) -> kafka_tls.TlsMaterial:
    """The local broker's certificates and SASL user (made on first use)."""
    return kafka_tls.ensure_material(kafka_tls.stack_directory(settings.stack_dir))


def _choose_ports(settings: Settings, previous: dict[str, Any]) -> tuple[int, int, int, int]:
    """Kafka, controller, SASL_SSL and SSL ports: the configured Kafka one, else the previous
    ones if free, else any."""
    if settings.kafka_port:
        port = settings.kafka_port
        if not kafka_broker.port_is_free(port):
            raise StackError(
                f"Kafka port {port} on {kafka_broker.HOST} is already in use by another process: "
                f"stop it or choose another port with {ENV_KAFKA_PORT}"
            )
    else:
        port = _previous_if_free(previous.get("kafka"), set()) or kafka_broker.pick_free_port()
    taken = {port}
    others = []
    for name in ("controller", "sasl_ssl", "ssl"):
        chosen = _previous_if_free(previous.get(name), taken) or kafka_broker.pick_free_port(taken)
        taken.add(chosen)
        others.append(chosen)
    return port, others[0], others[1], others[2]


def _previous_if_free(candidate: object, avoid: set[int]) -> int | None:
    if not isinstance(candidate, int) or candidate <= 0 or candidate in avoid:
        return None
    return candidate if kafka_broker.port_is_free(candidate) else None


def _rotate_log(log_file: Path) -> None:
    """Keep one previous broker log, so the log starts with this run but the last crash remains."""
    if log_file.exists():
        os.replace(log_file, log_file.with_name(log_file.name + ".1"))


def _catalog(settings: Settings, *, create: bool) -> SqlCatalog:
    # Imported here: pyiceberg and SQLAlchemy are slow to import and only some commands need them.
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog(
        settings.catalog_name,
        uri=f"sqlite:///{settings.local_catalog_file}",
        warehouse=settings.local_warehouse.as_uri(),
        init_catalog_tables="true" if create else "false",
    )


def _init_catalog(settings: Settings) -> None:
    try:
        catalog = _catalog(settings, create=True)
    except Exception as exc:  # SQLAlchemy and pyiceberg raise many kinds; all mean the same here
        raise StackError(
            f"cannot initialise the Iceberg catalog {settings.local_catalog_file}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    catalog.engine.dispose()


def _kafka_status(settings: Settings) -> KafkaStatus:
    files = _broker_files(settings)
    try:
        state = read_state(settings)
    except StackError as exc:
        return KafkaStatus(state="dead", pid=None, bootstrap=None, reason=str(exc))
    pid = state.kafka_pid if state is not None else None
    if pid is None:
        strays = kafka_broker.find_broker_pids(files.server_properties)
        if strays:
            return KafkaStatus(
                state="dead",
                pid=strays[0],
                bootstrap=None,
                reason=f"broker process {strays[0]} is not in the state file; "
                "run `cdc-assets stack down` and `stack up`",
            )
        return KafkaStatus(state="stopped", pid=None, bootstrap=None, reason="not started")
    bootstrap = state.bootstrap_servers if state is not None else None
    tail = local_process.log_tail(files.log_file, STATUS_LOG_LINES)
    if not endpoints.is_broker_process(pid, files.server_properties):
        return KafkaStatus(
            state="dead",
            pid=pid,
            bootstrap=bootstrap,
            reason=f"broker process {pid} is not running (stale entry in "
            f"{stack_state.state_path(settings)}); `cdc-assets stack up` restarts it",
            log_tail=tail,
        )
    if state is None or not kafka_broker.port_answers(state.kafka_port):
        return KafkaStatus(
            state="dead",
            pid=pid,
            bootstrap=bootstrap,
            reason=f"broker process {pid} is alive but {bootstrap or 'its port'} does not answer",
            log_tail=tail,
        )
    return KafkaStatus(
        state="running", pid=pid, bootstrap=bootstrap, reason=f"pid {pid} serving {bootstrap}"
    )


def _catalog_status(settings: Settings) -> CatalogStatus:
    path = settings.local_catalog_file
    if not path.is_file():
        return CatalogStatus(file=path, exists=False)
    try:
        catalog = _catalog(settings, create=False)
        try:
            namespaces: list[tuple[str, ...]] = []
            pending: list[tuple[str, ...]] = [tuple(ns) for ns in catalog.list_namespaces()]
            while pending:
                namespace = pending.pop()
                namespaces.append(namespace)
                pending.extend(tuple(ns) for ns in catalog.list_namespaces(namespace))
            tables = sum(len(catalog.list_tables(ns)) for ns in namespaces)
        finally:
            catalog.engine.dispose()
    except Exception as exc:  # any catalog failure is a status to report, not a crash
        return CatalogStatus(file=path, exists=True, error=f"{type(exc).__name__}: {exc}")
    return CatalogStatus(
        file=path,
        exists=True,
        namespaces=sorted(".".join(ns) for ns in namespaces),
        table_count=tables,
    )


def _dir_size(path: Path) -> int:
    total = 0
    for root, _dirs, names in os.walk(path):
        for name in names:
            try:
                total += (Path(root) / name).stat().st_size
            except FileNotFoundError:
                continue  # written and removed by a running job while walking
    return total


def _human_bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


def _locked(settings: Settings) -> Any:
    # Serialises up/down of one stack across processes; the broker itself is not affected.
    return stack_state.file_lock(settings.stack_dir / LOCK_FILE)


def running_registry(settings: Settings) -> str | None:
    """The Confluent-compatible URL of the local stack's schema registry while it runs, else
    None (see `stack.schema_registry`)."""
    registry = endpoints.running_registry(settings)
    return registry.url if registry is not None else None
