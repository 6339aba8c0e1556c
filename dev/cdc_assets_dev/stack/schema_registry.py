"""The local stack's schema registry: Apicurio Registry on loopback, for Avro records.

Why Apicurio: it is the one open registry whose artifacts come from Maven Central (Confluent's
are not published there; Karapace is not on PyPI), it serves the Confluent-compatible API that
Python's Confluent client speaks (``/apis/ccompat/v7``), and Kafka Connect gets its Avro
converter from Maven Central too. Its Quarkus application is built once with Maven from
``cdc_assets/jvm/registry/pom.xml`` into the jar cache (``jars/registry``, about 130 MiB; the
first build downloads about 210 MB and takes a minute), the way the other jars come. Schemas
live in the registry's memory: a restarted registry starts empty, as does a restarted stack.

The state file's ``schema_registry`` section records its pid and port; ``url`` is the
Confluent-compatible base URL, ``native_url`` the registry's own v2 API (the Connect converter's).
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from cdc_assets.errors import JarSetupError, StackError
from cdc_assets.jars.maven import JVM_DIR, STAMP_NAME, locked, require_tool, run_quietly, swap_in
from cdc_assets.local_servers import state as stack_state
from cdc_assets.local_servers.endpoints import REGISTRY_SECTION as SECTION
from cdc_assets.local_servers.endpoints import Registry, running_registry
from cdc_assets.local_servers.endpoints import registry_app_dir as app_dir
from cdc_assets.settings import Settings
from cdc_assets_dev.stack import local_process
from cdc_assets_dev.stack.kafka_broker import HOST, pick_free_port, port_is_free

POM = JVM_DIR / "registry" / "pom.xml"
HEAP = "-Xmx256m"
READY_TIMEOUT_S = 90.0
# Build-time Quarkus settings: the app jar has no Jandex index of its own, and its production
# profile would package a legacy jar.
BUILD_PROPERTIES = (
    "-D%prod.quarkus.package.type=fast-jar",
    "-Dquarkus.index-dependency.registry-app.group-id=io.apicurio",
    "-Dquarkus.index-dependency.registry-app.artifact-id=apicurio-registry-app",
)


def ensure_built(settings: Settings, *, quiet: bool = False) -> Path:
    """The runnable registry (``quarkus-run.jar``), built with Maven on first use."""
    digest = hashlib.sha256(POM.read_bytes()).hexdigest()
    target = app_dir(settings)
    runner = target / "quarkus-run.jar"

    def current() -> bool:
        stamp = target / STAMP_NAME
        return runner.exists() and stamp.exists() and stamp.read_text().strip() == digest

    if current():
        return runner
    settings.jars_dir.mkdir(parents=True, exist_ok=True)
    with locked(settings.jars_dir / ".registry.lock"):
        if current():
            return runner
        require_tool("java")
        mvn = require_tool("mvn")
        scratch = Path(tempfile.mkdtemp(prefix=".registry-build-", dir=settings.jars_dir))
        try:
            if not quiet:
                print("building the schema registry (Apicurio) with Maven ...", flush=True)
            shutil.copyfile(POM, scratch / "pom.xml")
            command = [mvn, "-B", "-q", "-Dstyle.color=never", *BUILD_PROPERTIES, "package"]
            command[1:1] = ["-f", str(scratch / "pom.xml")]
            returncode, tail = run_quietly(command, "Maven for the schema registry")
            built = scratch / "target" / "quarkus-app"
            if returncode != 0 or not (built / "quarkus-run.jar").exists():
                raise JarSetupError(
                    f"Maven failed (exit {returncode}) building the schema registry:\n{tail}"
                )
            (built / STAMP_NAME).write_text(digest + "\n", encoding="utf-8")
            built.chmod(0o755)
            swap_in(built, target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return runner


def running(settings: Settings) -> Registry | None:
    """The stack's registry while its process runs, else None."""
    return running_registry(settings)


def start(settings: Settings) -> Registry:
    """Start (or keep) the registry on a loopback port; wait until its API answers."""
    found = running(settings)
    if found is not None:
        return found
    stop(settings)
    runner = ensure_built(settings)
    previous = stack_state.section(settings, SECTION)
    port = int(previous.get("port") or 0) or pick_free_port()
    if not port_is_free(port):
        port = pick_free_port()
    log = settings.stack_dir / "logs" / "schema-registry.log"
    command = [
        require_tool("java"),
        HEAP,
        f"-Dquarkus.http.host={HOST}",
        f"-Dquarkus.http.port={port}",
        "-jar",
        str(runner),
    ]
    work = settings.stack_dir / "schema-registry"
    work.mkdir(parents=True, exist_ok=True)
    pid = local_process.start_detached(command, log, cwd=work)
    registry = Registry(port)
    stack_state.put(
        settings,
        **{
            SECTION: {
                "pid": pid,
                "port": port,
                "url": registry.url,
                "native_url": registry.native_url,
            }
        },
    )
    try:
        _wait_ready(pid, registry, log)
    except BaseException:
        stop(settings)
        raise
    return registry


def stop(settings: Settings) -> None:
    """Stop the registry (recorded or stray); its schemas go with it."""
    for pid in local_process.find_pids("java", str(app_dir(settings))):
        local_process.stop(pid, "schema registry", timeout=15)
    stack_state.put(settings, **{SECTION: None})


def _wait_ready(pid: int, registry: Registry, log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if not local_process.pid_alive(pid):
            raise StackError(local_process.died_message("schema registry", pid, log))
        try:
            with urllib.request.urlopen(f"{registry.url}/subjects", timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.3)
    raise StackError(f"the schema registry did not answer on {registry.url} in {READY_TIMEOUT_S} s")
