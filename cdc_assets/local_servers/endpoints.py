"""Where the local stack's servers listen, as its state file records them: what the product's
resources connect to when no other server is configured.

The stack (``dev/cdc_assets_dev/stack``) starts each server and records it in its section of the
state
file; this module reads the sections. A reader of a server the runs must find running (the Kafka
broker, the schema registry, the Spark Connect server) also checks that the recorded pid runs that
server (the marker on its command line guards pid reuse). A catalog or an object store is taken as
recorded, running or not: a run whose catalog is down fails naming it, never writes to another.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from cdc_assets.errors import StackError
from cdc_assets.local_servers import state
from cdc_assets.local_servers.processes import cmdline, pid_alive, runs
from cdc_assets.settings import ENV_KAFKA_BOOTSTRAP, Settings

HOST = "127.0.0.1"  # every server of the stack listens on loopback only

# Sections of the state file, and how the stack marks its processes' command lines.
KAFKA_SECTION = "kafka"
KAFKA_MAIN_CLASS = "kafka.Kafka"
REGISTRY_SECTION = "schema_registry"
REGISTRY_CCOMPAT_PATH = "/apis/ccompat/v7"
REGISTRY_NATIVE_PATH = "/apis/registry/v2"
SPARK_CONNECT_SECTION = "spark_connect"
SPARK_CONNECT_MARKER = "spark.cdc_assets.stack"  # a Spark conf on the server's command line
REST_CATALOG_SECTION = "rest_catalog"
REST_CLIENT_ID = "cdc-assets"
CATALOG_SERVER_SECTION = "catalog_server"
OBJECT_STORE_SECTION = "object_store"
OBJECT_STORE_REGION = "us-east-1"
SOURCES_SECTION = "sources"


def kafka_server_properties(settings: Settings) -> Path:
    """The broker's properties file: on its command line, it names the stack's broker."""
    return settings.stack_dir / "kafka" / "server.properties"


def is_broker_process(pid: int, server_properties: Path) -> bool:
    """True when ``pid`` runs kafka.Kafka with exactly this server.properties (guards pid reuse)."""
    if not pid_alive(pid):
        return False
    args = cmdline(pid)
    return KAFKA_MAIN_CLASS in args and str(server_properties) in args


def running_bootstrap(settings: Settings) -> str | None:
    """The bootstrap servers of the stack's broker while it runs, else None."""
    entry = state.section(settings, KAFKA_SECTION)
    try:
        bootstrap, pid = str(entry["bootstrap"]), int(entry["pid"])
    except (KeyError, TypeError, ValueError):
        return None
    return bootstrap if is_broker_process(pid, kafka_server_properties(settings)) else None


def require_bootstrap(settings: Settings) -> str:
    """Kafka bootstrap servers: the configured ones, else the running local stack's."""
    if settings.kafka_bootstrap:
        return settings.kafka_bootstrap
    found = running_bootstrap(settings)
    if found is not None:
        return found
    raise StackError(
        "Kafka is not configured and the local stack is not running: run `cdc-assets stack up` "
        f"or set {ENV_KAFKA_BOOTSTRAP}"
    )


@dataclass(frozen=True)
class Registry:
    port: int

    @property
    def url(self) -> str:
        """The Confluent-compatible API (what ``CDC_ASSETS_SCHEMA_REGISTRY_URL`` names)."""
        return f"http://{HOST}:{self.port}{REGISTRY_CCOMPAT_PATH}"

    @property
    def native_url(self) -> str:
        """The registry's own v2 API, which Kafka Connect's Apicurio converter speaks."""
        return f"http://{HOST}:{self.port}{REGISTRY_NATIVE_PATH}"


def registry_app_dir(settings: Settings) -> Path:
    """Where the registry's build lives: on its command line, it names the stack's registry."""
    return settings.jars_dir / "registry"


def running_registry(settings: Settings) -> Registry | None:
    """The stack's schema registry while its process runs, else None."""
    entry = state.section(settings, REGISTRY_SECTION)
    try:
        pid, port = int(entry["pid"]), int(entry["port"])
    except (KeyError, TypeError, ValueError):
        return None
    return Registry(port) if runs(pid, str(registry_app_dir(settings))) else None


def spark_connect_url(port: int) -> str:
    return f"sc://{HOST}:{port}"


def spark_connect_port(settings: Settings) -> int | None:
    """The port of the stack's Spark Connect server while it runs, else None."""
    entry = state.section(settings, SPARK_CONNECT_SECTION)
    pid, port = entry.get("pid"), entry.get("port")
    if not isinstance(pid, int) or not isinstance(port, int):
        return None
    if not runs(pid, f"{SPARK_CONNECT_MARKER}={settings.stack_dir}"):
        return None
    return port


@dataclass(frozen=True)
class RestCatalog:
    port: int
    token: str | None = None
    client_secret: str | None = None  # of REST_CLIENT_ID, for the client credentials flow

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def client_properties(self) -> dict[str, str]:
        """What a client (Spark's RESTCatalog, pyiceberg's) needs beyond the URI: the token."""
        return {"token": self.token} if self.token else {}

    def credential(self) -> str | None:
        """The catalog property ``credential`` of the client credentials flow (``id:secret``)."""
        return f"{REST_CLIENT_ID}:{self.client_secret}" if self.client_secret else None


def recorded_rest_catalog(settings: Settings) -> RestCatalog | None:
    """The REST catalog the stack started and has not stopped, running or not."""
    entry = state.section(settings, REST_CATALOG_SECTION)
    try:
        int(entry["pid"])
        return RestCatalog(
            int(entry["port"]), entry.get("token") or None, entry.get("client_secret") or None
        )
    except (KeyError, TypeError, ValueError):
        return None


@dataclass(frozen=True)
class CatalogServer:
    jdbc_url: str  # jdbc:postgresql://127.0.0.1:<port>/iceberg_catalog
    user: str
    password: str

    def properties(self) -> dict[str, str]:
        """Catalog properties both engines need (Spark passes ``jdbc.*`` to the driver;
        pyiceberg's SQL catalog takes them into its SQLAlchemy URL, see resources.config)."""
        return {"jdbc.user": self.user, "jdbc.password": self.password}


def recorded_catalog_server(settings: Settings) -> CatalogServer | None:
    """The JDBC catalog server the state file names (running or not)."""
    entry = state.section(settings, CATALOG_SERVER_SECTION)
    try:
        return CatalogServer(entry["jdbc_url"], entry["user"], entry["password"])
    except (KeyError, TypeError):
        return None


@dataclass(frozen=True)
class ObjectStore:
    endpoint: str  # http://127.0.0.1:<port>
    access_key: str
    secret_key: str
    bucket: str

    @property
    def warehouse(self) -> str:
        return f"s3://{self.bucket}/"

    def catalog_properties(self) -> dict[str, str]:
        """Catalog properties that give Spark (S3FileIO, on the driver and every executor) and
        pyiceberg (PyArrow) the same view of the store."""
        return {
            "io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
            "s3.endpoint": self.endpoint,
            "s3.path-style-access": "true",
            "s3.access-key-id": self.access_key,
            "s3.secret-access-key": self.secret_key,
            "client.region": OBJECT_STORE_REGION,
            "s3.region": OBJECT_STORE_REGION,
        }


def recorded_object_store(settings: Settings) -> ObjectStore | None:
    """The object store the state file names, running or not."""
    entry = state.section(settings, OBJECT_STORE_SECTION)
    try:
        return ObjectStore(
            entry["endpoint"], entry["access_key"], entry["secret_key"], entry["bucket"]
        )
    except (KeyError, TypeError):
        return None


def local_source_urls(settings: Settings) -> dict[str, str]:
    """``CDC_ASSETS_SOURCE_URL_<CONNECTOR>_<DATABASE>`` and ``..._<SERVER>_<DATABASE>`` -> JDBC
    URL of each example database on the local source servers that run now ({} when none does):
    so the drift job and the source checks reach the local databases without configuration.
    The stack records each server's URLs and marker when it starts it."""
    urls: dict[str, str] = {}
    for entry in state.section(settings, SOURCES_SECTION).values():
        if not isinstance(entry, dict) or not isinstance(entry.get("jdbc"), dict):
            continue
        pid, marker = entry.get("pid"), entry.get("marker")
        if isinstance(pid, int) and isinstance(marker, str) and runs(pid, marker):
            urls.update({str(k): str(v) for k, v in entry["jdbc"].items()})
    return urls


def with_local_sources(settings: Settings) -> Settings:
    """``settings`` with the local sources' URLs when it configures none of its own."""
    if settings.source_urls:
        return settings
    urls = local_source_urls(settings)
    return replace(settings, source_urls=urls) if urls else settings
