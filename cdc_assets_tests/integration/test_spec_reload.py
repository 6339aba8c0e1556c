"""A spec added to the spec directory of a running deployment is picked up without a restart
(issue 27): `dagster-webserver` serves a directory with one spec; a second spec file appears; one
evaluation of the `spec_directory` sensor reloads the code location through the webserver's
GraphQL API, and the webserver then lists the new table's assets. Without a webserver to ask, the
sensor says what to do."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import dagster as dg

from cdc_assets.assets.keys import asset_key
from cdc_assets.definitions import build_defs
from cdc_assets.settings import ENV_HOME, ENV_SPECS, Settings
from cdc_assets_tests.conftest import PROJECT_ROOT
from cdc_assets_tests.integration.test_webserver import (
    ASSETS,
    Webserver,
    _free_port,
    _wait_until_loaded,
)


def _assets(server: Webserver) -> set[tuple[str, ...]]:
    return {tuple(n["assetKey"]["path"]) for n in server.graphql(ASSETS)["assetNodes"]}


def _tick(settings: Settings) -> dg.SkipReason:
    sensor = build_defs(settings=settings).get_sensor_def("spec_directory")
    result = sensor(dg.build_sensor_context(instance=dg.DagsterInstance.ephemeral()))
    assert isinstance(result, dg.SkipReason), result
    return result


def test_a_new_spec_reloads_the_code_location(it_settings: Settings, tmp_path: Path) -> None:
    specs_dir = tmp_path / "specs"
    specs_dir.mkdir()
    shutil.copy(PROJECT_ROOT / "table_specs" / "users.yaml", specs_dir)
    port = _free_port()
    log = tmp_path / "webserver.log"
    env = {
        **os.environ,
        "DAGSTER_HOME": str(tmp_path),
        ENV_HOME: str(it_settings.home),
        ENV_SPECS: str(specs_dir),
    }
    command = [sys.executable, "-m", "dagster_webserver", "-w", "workspace.yaml"]
    command += ["-h", "127.0.0.1", "-p", str(port)]
    with log.open("wb") as out:
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
        assert ("base", "users") in _assets(server)
        assert ("base", "orders") not in _assets(server)
        settings = replace(it_settings, specs_dir=specs_dir, webserver=f"127.0.0.1:{port}")
        assert "the loaded specs are the directory's" in (_tick(settings).skip_message or "")

        loaded_before = build_defs(settings=settings)  # what the running location holds
        shutil.copy(PROJECT_ROOT / "table_specs" / "orders.yaml", specs_dir)
        sensor = loaded_before.get_sensor_def("spec_directory")
        result = sensor(dg.build_sensor_context(instance=dg.DagsterInstance.ephemeral()))
        assert isinstance(result, dg.SkipReason)
        assert "reloaded the code location" in (result.skip_message or ""), result
        _wait_until_loaded(server)
        wanted = {tuple(asset_key(layer, "orders").path) for layer in ("raw", "cdc", "base")}
        assert wanted <= _assets(server)

        # No webserver configured: the sensor names the change and the way to apply it.
        (specs_dir / "orders.yaml").unlink()
        alone = replace(settings, webserver=None)
        stale = build_defs(settings=replace(alone, specs_dir=specs_dir))
        shutil.copy(PROJECT_ROOT / "table_specs" / "order_items.yaml", specs_dir)
        message = stale.get_sensor_def("spec_directory")(
            dg.build_sensor_context(instance=dg.DagsterInstance.ephemeral())
        )
        assert isinstance(message, dg.SkipReason)
        assert "no webserver to reload through" in (message.skip_message or "")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
