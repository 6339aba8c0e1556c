"""Screenshot of the Dagster UI's global asset lineage, taken with headless Chromium.

    .venv/bin/python scripts/screenshot_asset_graph.py                 # after `make run`
    .venv/bin/python scripts/screenshot_asset_graph.py --url http://127.0.0.1:3000
    .venv/bin/python scripts/screenshot_asset_graph.py --asset cdc/users_cdc \
        --out docs/ledger-partitions.png

Without --url it starts `dagster-webserver -w workspace.yaml` on a free loopback port, on
$DAGSTER_HOME or else the Dagster home of `cdc-assets run` (so the graph shows the demo's
materializations), and stops it afterwards. The local stack does not need to be running.
Every asset group is shown expanded, and the instance's one-time "Join the Dagster community"
dialog is dismissed first (as its Skip button does), so that it does not cover the graph.
Chromium is Debian's `chromium` package; when it is missing the script installs it with apt-get
if it runs as root, and otherwise says how to install it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
GRAPH_ROUTE = "/asset-groups"  # "Global asset lineage" in Dagster 1.13
LOCATIONS = "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus } } } }"
GROUPS = "{ assetNodes { groupName } }"
SKIP_NUX = "mutation { setNuxSeen }"


def find_chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    if os.name == "posix" and os.geteuid() == 0 and shutil.which("apt-get"):
        print("chromium not found: installing Debian's chromium package", flush=True)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], check=True, env=env)
        found = shutil.which("chromium")
        if found:
            return found
    sys.exit("chromium not found: install it with `sudo apt-get install -y chromium` (Debian)")


def dagster_home() -> str:
    if os.environ.get("DAGSTER_HOME"):
        return os.environ["DAGSTER_HOME"]
    sys.path.insert(0, str(ROOT))
    from cdc_assets.cli import ensure_dagster_home
    from cdc_assets.settings import load_settings

    return str(ensure_dagster_home(load_settings()))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def graphql(url: str, query: str) -> Any:
    body = json.dumps({"query": query}).encode()
    request = urllib.request.Request(
        f"{url}/graphql", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        payload = json.loads(response.read())
    if payload.get("errors"):
        raise RuntimeError(f"GraphQL errors: {payload['errors']}")
    return payload["data"]


def wait_until_loaded(url: str, proc: subprocess.Popen[bytes] | None, timeout: float) -> None:
    """Until the webserver answers and every code location has loaded."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            sys.exit(f"dagster-webserver exited with {proc.returncode}")
        try:
            data = graphql(url, LOCATIONS)["workspaceOrError"]
            entries = data.get("locationEntries") or []
            if entries and all(e["loadStatus"] == "LOADED" for e in entries):
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError, KeyError, TypeError):
            pass
        time.sleep(1)
    sys.exit(f"dagster-webserver at {url} not ready in {timeout:.0f}s")


@contextmanager
def webserver(home: str, timeout: float) -> Iterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "DAGSTER_HOME": home}
    command = [sys.executable, "-m", "dagster_webserver", "-w", "workspace.yaml"]
    command += ["-h", "127.0.0.1", "-p", str(port)]
    print(f"dagster-webserver on {url} (DAGSTER_HOME={home})", flush=True)
    proc = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True)
    try:
        wait_until_loaded(url, proc, timeout)
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def graph_url(base: str) -> str:
    """The global lineage with every group expanded (the UI keeps that in `expanded`)."""
    groups = sorted({n["groupName"] for n in graphql(base, GROUPS)["assetNodes"]})
    expanded = ",".join(f"global@global:{g}" for g in groups)
    return f"{base}{GRAPH_ROUTE}?expanded={quote(expanded, safe='@:,')}"


def partitions_url(base: str, asset: str) -> str:
    """The partitions tab of one asset, e.g. ``cdc/users_cdc``."""
    return f"{base}/assets/{quote(asset)}?view=partitions"


def screenshot(
    chromium: str, base: str, out: Path, size: str, budget_ms: int, asset: str | None = None
) -> None:
    graphql(base, SKIP_NUX)
    url = partitions_url(base, asset) if asset else graph_url(base)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        command = [
            chromium,
            "--headless",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            f"--user-data-dir={profile}",
            f"--window-size={size}",
            f"--virtual-time-budget={budget_ms}",
            f"--screenshot={out.resolve()}",
        ]
        if os.name == "posix" and os.geteuid() == 0:
            command.append("--no-sandbox")  # Chromium refuses to run as root with its sandbox
        subprocess.run([*command, url], check=True, capture_output=True, timeout=300)
    if not out.exists() or out.stat().st_size == 0:
        sys.exit(f"chromium wrote no screenshot to {out}")
    print(f"{out}: {out.stat().st_size / 1024:.0f} KiB", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="a running webserver (default: start one)")
    parser.add_argument("--out", default="docs/asset-graph.png", help="PNG to write")
    parser.add_argument("--window-size", default="1600,1000", help="width,height in pixels")
    parser.add_argument("--budget-ms", type=int, default=20000, help="virtual time to render")
    parser.add_argument("--timeout", type=float, default=180, help="seconds to wait for the UI")
    parser.add_argument(
        "--asset", help="the partitions tab of this asset (e.g. cdc/users_cdc), not the graph"
    )
    args = parser.parse_args()
    chromium = find_chromium()
    out = Path(args.out) if Path(args.out).is_absolute() else ROOT / args.out
    if args.url:
        base = args.url.rstrip("/")
        wait_until_loaded(base, None, args.timeout)
        screenshot(chromium, base, out, args.window_size, args.budget_ms, args.asset)
        return
    with webserver(dagster_home(), args.timeout) as base:
        screenshot(chromium, base, out, args.window_size, args.budget_ms, args.asset)


if __name__ == "__main__":
    main()
