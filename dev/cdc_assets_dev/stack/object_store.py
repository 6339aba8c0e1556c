"""An S3-compatible object store on loopback for the cluster profile: the Versity S3 Gateway
(Apache-2.0, a Go program) over a directory of the stack, built once from its Go module with the
Go toolchain into the jar cache (``jars/bin/versitygw``), the way the jars come from Maven.
With ``CDC_ASSETS_S3_ACCESS_LOG=1`` it logs every request to ``logs/object-store-access.log``.

The stack records its port, the root credentials it made up and the warehouse bucket in the state
file's ``object_store`` section; the catalog properties for Iceberg's ``S3FileIO`` (Spark, the
executors) and pyiceberg's PyArrow file IO come from ``catalog_properties``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from cdc_assets.errors import StackError
from cdc_assets.jars.maven import locked, require_tool
from cdc_assets.local_servers import state as stack_state
from cdc_assets.local_servers.endpoints import OBJECT_STORE_REGION as REGION
from cdc_assets.local_servers.endpoints import OBJECT_STORE_SECTION as SECTION
from cdc_assets.local_servers.endpoints import ObjectStore, recorded_object_store
from cdc_assets.settings import Settings
from cdc_assets_dev.stack import local_process
from cdc_assets_dev.stack.kafka_broker import HOST, pick_free_port, port_is_free

MODULE = "github.com/versity/versitygw/cmd/versitygw"
VERSION = "v1.8.0"
BUCKET = "warehouse"
ACCESS_KEY = "cdcassets"
READY_TIMEOUT_S = 60.0
# 1: the gateway writes an S3 access log (benchmarks/cluster_profile.py counts requests in it).
ENV_ACCESS_LOG = "CDC_ASSETS_S3_ACCESS_LOG"
BUILD_TIMEOUT_S = 900


def binary(settings: Settings) -> Path:
    return settings.jars_dir / "bin" / "versitygw"


def ensure_binary(settings: Settings, *, quiet: bool = False) -> Path:
    """The gateway's executable, built with ``go install MODULE@VERSION`` on first use."""
    target = binary(settings)
    stamp = target.with_name(".versitygw.version")
    if target.exists() and stamp.exists() and stamp.read_text().strip() == VERSION:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with locked(target.parent / ".versitygw.lock"):
        if target.exists() and stamp.exists() and stamp.read_text().strip() == VERSION:
            return target
        go = require_tool("go")
        if not quiet:
            print(f"building the object store ({MODULE}@{VERSION}) with Go ...", flush=True)
        scratch = target.parent / ".versitygw-build"
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir()
        env = {**os.environ, "GOBIN": str(scratch), "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
        try:
            done = subprocess.run(
                [go, "install", f"{MODULE}@{VERSION}"],
                env=env,
                cwd=scratch,
                capture_output=True,
                text=True,
                timeout=BUILD_TIMEOUT_S,
                check=False,
            )
            if done.returncode != 0:
                tail = "\n".join((done.stderr or done.stdout).splitlines()[-30:])
                raise StackError(f"go install {MODULE}@{VERSION} failed:\n{tail}")
            (scratch / "versitygw").replace(target)
            stamp.write_text(VERSION + "\n", encoding="utf-8")
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return target


def _marker_dir(settings: Settings) -> Path:
    # The gateway's data directory is on its command line: it identifies the stack's process.
    return settings.stack_dir / "objects"


def running(settings: Settings) -> ObjectStore | None:
    """The stack's object store when its process runs, else None."""
    entry = stack_state.section(settings, SECTION)
    try:
        store = ObjectStore(
            entry["endpoint"], entry["access_key"], entry["secret_key"], entry["bucket"]
        )
        pid = int(entry["pid"])
    except (KeyError, TypeError, ValueError):
        return None
    return store if local_process.runs(pid, str(_marker_dir(settings))) else None


def recorded(settings: Settings) -> ObjectStore | None:
    """The object store the state file names, running or not (runs use it; a stopped store is a
    failed request, named by the S3 client, not another warehouse)."""
    return recorded_object_store(settings)


def start(settings: Settings) -> ObjectStore:
    """Start (or keep) the gateway and make sure the warehouse bucket exists."""
    found = running(settings)
    if found is not None:
        return found
    stop(settings)
    exe = ensure_binary(settings)
    data = _marker_dir(settings)
    data.mkdir(parents=True, exist_ok=True)
    previous = stack_state.section(settings, SECTION)
    secret = str(previous.get("secret_key") or secrets.token_urlsafe(24))
    port = int(previous.get("port") or 0) or pick_free_port()
    # The same port as before when free: a running driver's configuration names the endpoint.
    if not port_is_free(port):
        port = pick_free_port()
    log = settings.stack_dir / "logs" / "object-store.log"
    env = {**os.environ, "ROOT_ACCESS_KEY": ACCESS_KEY, "ROOT_SECRET_KEY": secret}
    command = [str(exe), "--port", f"{HOST}:{port}", "--region", REGION, "--quiet"]
    if os.environ.get(ENV_ACCESS_LOG, "").strip() in ("1", "true", "yes"):
        # One line per S3 request (operation, object, status): what a run costs the store. Off
        # by default: about a megabyte per pipeline cycle of a busy table, never rotated.
        command += ["--access-log", str(access_log(settings))]
    command += ["posix", str(data)]
    pid = local_process.start_detached(command, log, cwd=data, env=env)
    store = ObjectStore(f"http://{HOST}:{port}", ACCESS_KEY, secret, BUCKET)
    entry: dict[str, Any] = {
        "pid": pid,
        "port": port,
        "endpoint": store.endpoint,
        "access_key": ACCESS_KEY,
        "secret_key": secret,
        "bucket": BUCKET,
    }
    stack_state.put(settings, **{SECTION: entry})
    try:
        _wait_ready(pid, port, log)
        filesystem(store).create_dir(BUCKET)
    except BaseException:
        stop(settings)
        raise
    return store


def access_log(settings: Settings) -> Path:
    """The gateway's S3 access log (one line per request)."""
    return settings.stack_dir / "logs" / "object-store-access.log"


def stop(settings: Settings) -> None:
    """Stop the gateway (recorded or stray); the objects and the credentials stay."""
    marker = str(_marker_dir(settings))
    for pid in local_process.find_pids("versitygw", marker):
        local_process.stop(pid, "object store", timeout=15)


def filesystem(store: ObjectStore) -> Any:
    """A PyArrow S3 file system on the store (bucket creation allowed)."""
    from pyarrow import fs

    return fs.S3FileSystem(
        access_key=store.access_key,
        secret_key=store.secret_key,
        endpoint_override=store.endpoint,
        region=REGION,
        allow_bucket_creation=True,
        connect_timeout=5,
        request_timeout=30,
    )


def catalog_properties(store: ObjectStore) -> dict[str, str]:
    """Catalog properties that give Spark (S3FileIO) and pyiceberg (PyArrow) the same view of
    the store."""
    return store.catalog_properties()


def _wait_ready(pid: int, port: int, log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if not local_process.pid_alive(pid):
            raise StackError(local_process.died_message("object store", pid, log))
        try:
            with socket.create_connection((HOST, port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise StackError(f"the object store did not listen on {HOST}:{port} in {READY_TIMEOUT_S} s")
