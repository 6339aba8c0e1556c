"""The Dagster UI on the demo's instance: `dagster-webserver` with the project's `workspace.yaml`
lists every asset, check, sensor, job and schedule of the definitions, and shows the check results
the demo's runs recorded (read through the webserver's GraphQL API)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from cdc_assets.definitions import build_defs
from cdc_assets.settings import ENV_HOME, ENV_SPECS, Settings
from cdc_assets_tests.conftest import PROJECT_ROOT
from cdc_assets_tests.integration.conftest import DemoRun

STARTUP_TIMEOUT = 180.0

LOCATIONS = """
{
  workspaceOrError {
    __typename
    ... on Workspace {
      locationEntries {
        name
        loadStatus
        locationOrLoadError {
          __typename
          ... on PythonError { message stack }
        }
      }
    }
    ... on PythonError { message }
  }
}
"""

ASSETS = """
{
  assetNodes {
    assetKey { path }
    groupName
    assetChecksOrError {
      __typename
      ... on AssetChecks {
        checks {
          name
          assetKey { path }
          executionForLatestMaterialization { runId status evaluation { success } }
        }
      }
    }
  }
}
"""

REPOSITORIES = """
{
  repositoriesOrError {
    __typename
    ... on RepositoryConnection {
      nodes {
        name
        location { name }
        jobs { name }
        sensors { name sensorState { status } }
        schedules { name }
      }
    }
    ... on PythonError { message }
  }
}
"""

CHECK_EXECUTIONS = """
query CheckExecutions($assetKey: AssetKeyInput!, $checkName: String!) {
  assetCheckExecutions(assetKey: $assetKey, checkName: $checkName, limit: 1) {
    runId
    status
    evaluation { success }
  }
}
"""


class Webserver:
    def __init__(self, url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.url = url
        self.proc = proc
        self.log = log

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-chars:]

    def graphql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        request = urllib.request.Request(
            f"{self.url}/graphql", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            payload: dict[str, Any] = json.loads(response.read())
        assert not payload.get("errors"), payload["errors"]
        data: dict[str, Any] = payload["data"]
        return data


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_until_loaded(server: Webserver) -> None:
    """/server_info answers, then the code location has finished loading (or failed)."""
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while True:
        if server.proc.poll() is not None:
            code = server.proc.returncode
            pytest.fail(f"dagster-webserver exited with {code}:\n{server.log_tail()}")
        if time.monotonic() > deadline:
            limit = f"{STARTUP_TIMEOUT:.0f}s"
            pytest.fail(f"dagster-webserver not ready in {limit}:\n{server.log_tail()}")
        try:
            with urllib.request.urlopen(f"{server.url}/server_info", timeout=5) as response:
                json.loads(response.read())
            workspace = server.graphql(LOCATIONS)["workspaceOrError"]
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(1)
            continue
        assert workspace["__typename"] == "Workspace", workspace
        entries = workspace["locationEntries"]
        if entries and all(e["loadStatus"] == "LOADED" for e in entries):
            for entry in entries:
                loaded = entry["locationOrLoadError"]
                assert loaded["__typename"] == "RepositoryLocation", loaded
            return
        time.sleep(1)


@pytest.fixture(scope="module")
def webserver(
    demo_home: DemoRun, it_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Webserver]:
    """`dagster-webserver -w workspace.yaml` on loopback, on the demo's Dagster home and stack."""
    port = _free_port()
    log = tmp_path_factory.mktemp("webserver") / "webserver.log"
    env = {
        **os.environ,
        "DAGSTER_HOME": str(demo_home.dagster_home),
        ENV_HOME: str(it_settings.home),
        ENV_SPECS: str(it_settings.specs_dir),
    }
    command = [sys.executable, "-m", "dagster_webserver"]
    command += ["-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)]
    with log.open("wb") as out:
        # A session of its own: the webserver starts a code server; stop both together.
        proc = subprocess.Popen(
            command,
            cwd=PROJECT_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = Webserver(f"http://127.0.0.1:{port}", proc, log)
    try:
        _wait_until_loaded(server)
        yield server
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture(scope="module")
def defs(it_settings: Settings) -> dg.Definitions:
    return build_defs(settings=it_settings)


def test_every_asset_and_check_is_listed(webserver: Webserver, defs: dg.Definitions) -> None:
    graph = defs.resolve_asset_graph()
    nodes = webserver.graphql(ASSETS)["assetNodes"]
    listed_assets = {tuple(n["assetKey"]["path"]) for n in nodes}
    assert {tuple(k.path) for k in graph.get_all_asset_keys()} <= listed_assets

    listed_checks = set()
    for node in nodes:
        checks = node["assetChecksOrError"]
        assert checks["__typename"] == "AssetChecks", checks
        for c in checks["checks"]:
            assert c["assetKey"] == node["assetKey"]
            listed_checks.add((tuple(c["assetKey"]["path"]), c["name"]))
    expected = {(tuple(k.asset_key.path), k.name) for k in graph.asset_check_keys}
    assert expected
    assert expected <= listed_checks


def test_jobs_sensors_and_schedules_are_listed(webserver: Webserver, defs: dg.Definitions) -> None:
    repos = webserver.graphql(REPOSITORIES)["repositoriesOrError"]
    assert repos["__typename"] == "RepositoryConnection", repos
    listed: dict[str, set[str]] = {"jobs": set(), "sensors": set(), "schedules": set()}
    for repo in repos["nodes"]:
        for kind, names in listed.items():
            names.update(item["name"] for item in repo[kind])
    repo_def = defs.get_repository_def()
    assert {j.name for j in repo_def.get_all_jobs()} <= listed["jobs"]
    assert {"onboard_tables", "ingest_ledgers", "upsert_bases"} <= listed["jobs"]
    assert {s.name for s in repo_def.sensor_defs} == listed["sensors"]
    assert {s.name for s in repo_def.schedule_defs} == listed["schedules"]
    assert listed["sensors"]
    assert listed["schedules"]


def test_check_results_of_the_demo_are_shown(
    webserver: Webserver, defs: dg.Definitions, demo_home: DemoRun
) -> None:
    graph = defs.resolve_asset_graph()
    # What the demo's runs recorded, read from the instance itself ...
    instance = dg.DagsterInstance.from_config(str(demo_home.dagster_home))
    try:
        recorded = {}
        for key in graph.asset_check_keys:
            history = instance.event_log_storage.get_asset_check_execution_history(key, limit=1)
            if history:
                recorded[(tuple(key.asset_key.path), key.name)] = history[0]
    finally:
        instance.dispose()

    # ... is what the UI shows for each check: its latest execution, run and outcome.
    for (path, name), record in recorded.items():
        variables = {"assetKey": {"path": list(path)}, "checkName": name}
        shown = webserver.graphql(CHECK_EXECUTIONS, variables)["assetCheckExecutions"]
        assert len(shown) == 1, (path, name)
        assert shown[0]["runId"] == record.run_id, (path, name)
        event = record.event.dagster_event if record.event else None
        if event is not None and event.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION:
            passed = getattr(event.event_specific_data, "passed", None)
            assert shown[0]["evaluation"]["success"] is passed, (path, name)

    # The ledger's accounting check ran in the demo's ingest, on the latest materialization of
    # every ledger, and passed: the asset's checks show it green.
    nodes = webserver.graphql(ASSETS)["assetNodes"]
    accounting = {
        tuple(c["assetKey"]["path"]): c["executionForLatestMaterialization"]
        for n in nodes
        for c in n["assetChecksOrError"]["checks"]
        if c["name"] == "offsets_accounted"
    }
    ledgers = {tuple(k.path) for k in graph.get_all_asset_keys() if k.path[0] == "cdc"}
    assert ledgers
    assert set(accounting) == ledgers
    for key, execution in accounting.items():
        assert execution is not None, key
        assert execution["status"] == "SUCCEEDED", (key, execution)
        assert execution["evaluation"]["success"] is True, (key, execution)
        assert execution["runId"] == recorded[(key, "offsets_accounted")].run_id


LEDGER_PARTITIONS = """
{
  assetNodes {
    assetKey { path }
    partitionStats { numMaterialized numPartitions numFailed }
  }
}
"""


def test_the_ledgers_partition_view_is_filled(webserver: Webserver, demo_home: DemoRun) -> None:
    """What a person sees per ledger: the partitions start a week back (not at a fixed date
    months ago), and the demo's ingest recorded the hours without records as empty, so the
    view is (nearly) full rather than '0% filled'. Missing may be: the hours since the demo's
    last ingest (the session runs for about half an hour), one that ended within the late-record
    grace, and one at the start if the demo's home first loaded in an earlier hour."""
    nodes = webserver.graphql(LEDGER_PARTITIONS)["assetNodes"]
    ledgers = {
        tuple(n["assetKey"]["path"]): n["partitionStats"]
        for n in nodes
        if n["assetKey"]["path"][0] == "cdc"
    }
    assert ledgers
    for key, stats in ledgers.items():
        assert 7 * 24 <= stats["numPartitions"] <= 7 * 24 + 48, (key, stats)
        assert stats["numFailed"] == 0, (key, stats)
        assert stats["numMaterialized"] >= stats["numPartitions"] - 4, (key, stats)
        assert key[-1].endswith("_cdc"), key
