"""An Iceberg REST catalog server on loopback: Iceberg's reference REST implementation over a
JDBC catalog (`java/rest`, jars from the ``rest-catalog`` pom), what every managed lakehouse
catalog speaks (Polaris, Unity, Glue, S3 Tables, Lakekeeper, Nessie).

Why this server: it installs from Maven Central like the other jars (the alternatives named in
the issue, SeaweedFS and Nessie's server, are not served by the registries this project uses),
it is the code Iceberg's own REST fixture image runs, and it adds one small JVM process. Its
backend is the catalog a properties file describes (the stack's SQLite file or PostgreSQL
catalog, or for the cluster profile the JDBC catalog on the stack's PostgreSQL with the warehouse
in its object store, written through Iceberg's S3FileIO). It requires a bearer token that the
stack makes up at the first start (clients pass it as the catalog property ``token``), and hands
it out at the protocol's OAuth2 token endpoint to the client whose id and secret the stack made
up with it (the client credentials flow: the catalog property ``credential``, ``id:secret``).

The state file's ``rest_catalog`` section records its pid, port, token and client credentials.
"""

from __future__ import annotations

import os
import secrets
import time
import urllib.error
import urllib.request
from pathlib import Path

from cdc_assets.errors import StackError
from cdc_assets.jars.maven import ensure_jars, require_tool
from cdc_assets.local_servers import state as stack_state
from cdc_assets.local_servers.endpoints import REST_CATALOG_SECTION as SECTION
from cdc_assets.local_servers.endpoints import REST_CLIENT_ID as CLIENT_ID
from cdc_assets.local_servers.endpoints import RestCatalog, recorded_rest_catalog
from cdc_assets.settings import Settings
from cdc_assets_dev.stack import local_process
from cdc_assets_dev.stack.kafka_broker import HOST, pick_free_port, port_is_free

MAIN_CLASS = "io.cdcassets.rest.LoopbackRestCatalog"
HEAP = "-Xmx256m"
READY_TIMEOUT_S = 60.0


TOKEN_PROPERTY = "rest.auth.token"  # the server's properties (java/rest), not a client's
CLIENT_ID_PROPERTY = "rest.auth.client-id"
CLIENT_SECRET_PROPERTY = "rest.auth.client-secret"


def _directory(settings: Settings) -> Path:
    return settings.stack_dir / "rest-catalog"


def classpath(settings: Settings) -> str:
    """The server's jars, the project's main class, and the installed pyspark's shaded Hadoop
    client (HadoopFileIO for a ``file:`` warehouse)."""
    import pyspark

    from cdc_assets.jars.own import ensure_rest_jar

    jars = ensure_jars("rest-catalog", settings)
    hadoop = sorted((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-*.jar"))
    if not hadoop:
        raise StackError("the installed pyspark has no hadoop-client jars for the REST catalog")
    entries = [str(jars[0].parent / "*"), str(ensure_rest_jar(settings)), *map(str, hadoop)]
    return os.pathsep.join(entries)


def recorded(settings: Settings) -> RestCatalog | None:
    """The REST catalog the stack started and has not stopped, running or not: runs keep using
    it while it is down (a failed request, named by the client), never another catalog."""
    return recorded_rest_catalog(settings)


def running(settings: Settings) -> RestCatalog | None:
    """The REST catalog while its process runs, else None."""
    found = recorded(settings)
    if found is None:
        return None
    pid = int(stack_state.section(settings, SECTION)["pid"])
    return found if local_process.runs(pid, MAIN_CLASS) else None


def start(settings: Settings, backend: dict[str, str]) -> RestCatalog:
    """Start (or keep) the server over the catalog ``backend`` describes (``catalog-name``,
    ``uri``, ``warehouse``, ``jdbc.user``, ``io-impl``, ``s3.*``, ...) on its previous port when
    that is free, with the token it had (or a new one); wait until it answers."""
    found = running(settings)
    if found is not None:
        return found
    kept = stack_state.section(settings, SECTION)
    stop(settings)
    token = str(kept.get("token") or secrets.token_urlsafe(24))
    client_secret = str(kept.get("client_secret") or secrets.token_urlsafe(24))
    directory = _directory(settings)
    directory.mkdir(parents=True, exist_ok=True)
    properties = directory / "catalog.properties"
    # Only the owner may read it: it holds the backend's credentials.
    fd = os.open(properties, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        auth = {
            TOKEN_PROPERTY: token,
            CLIENT_ID_PROPERTY: CLIENT_ID,
            CLIENT_SECRET_PROPERTY: client_secret,
        }
        for key, value in sorted({**backend, **auth}.items()):
            handle.write(f"{_escape(key)}={_escape(value)}\n")
    previous = int(stack_state.section(settings, SECTION).get("port") or 0)
    port = previous if previous and port_is_free(previous) else pick_free_port()
    log = settings.stack_dir / "logs" / "rest-catalog.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    command = [
        require_tool("java"),
        HEAP,
        # Warnings and errors only: a line per request would fill the log.
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        "-cp",
        classpath(settings),
        MAIN_CLASS,
        HOST,
        str(port),
        str(properties),
    ]
    pid = local_process.start_detached(command, log, cwd=directory)
    entry = {"pid": pid, "port": port, "token": token, "client_secret": client_secret}
    stack_state.put(settings, **{SECTION: entry})
    server = RestCatalog(port, token, client_secret)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if not local_process.pid_alive(pid):
            tail = "\n".join(local_process.log_tail(log, 30))
            raise StackError(f"the REST catalog exited during startup; the end of {log}:\n{tail}")
        request = urllib.request.Request(
            f"{server.url}/v1/config", headers={"Authorization": f"Bearer {token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=2):
                return server
        except (urllib.error.URLError, OSError):
            time.sleep(0.3)
    stop(settings)
    raise StackError(f"the REST catalog did not answer on {server.url} within {READY_TIMEOUT_S} s")


def stop(settings: Settings, *, outage: bool = False) -> None:
    """Stop the server if it runs; its port and token stay recorded for the next start.
    ``outage`` (tests) keeps it recorded as the stack's catalog, as a crash would."""
    entry = stack_state.section(settings, SECTION)
    pid = entry.get("pid")
    if isinstance(pid, int) and local_process.runs(pid, MAIN_CLASS):
        local_process.stop(pid, "REST catalog")
    if entry and not outage:
        kept = {k: entry[k] for k in ("port", "token", "client_secret") if k in entry}
        stack_state.put(settings, **{SECTION: kept})


def _escape(text: str) -> str:
    """A value for a Java properties file (backslashes, line breaks, and ``=``/``:`` in keys)."""
    out = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    return out.replace("=", "\\=").replace(":", "\\:")
