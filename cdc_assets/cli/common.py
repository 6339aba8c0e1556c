"""Shared by the commands: the console they print to, the Dagster home and instance, finding a
spec."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from cdc_assets.errors import CdcAssetsError
from cdc_assets.settings import Settings

# Wide enough for the report table when output is piped (CI logs, `make run | tee`).
console = Console(highlight=False, width=None if sys.stdout.isatty() else 140)


def read_text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise CdcAssetsError(f"cannot read {path}: {err.strerror}") from None


def print_plain(text: str) -> None:
    # Plans carry brackets that rich would take for markup; long reasons stay on one line.
    console.print(text, markup=False, highlight=False, soft_wrap=True)


# Dagster's per-step DEBUG events would bury the summary; the runs keep them in the instance.
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}

# Every table's schema evolves in a pool of its own (cdc_evolve/<table>); a limit of one per pool
# serializes the evolutions of one table without holding back the others. Runs go through
# Dagster's default run launcher.
DAGSTER_YAML = """concurrency:
  pools:
    default_limit: 1
  # Every run starts a Spark driver: more than two at once thrash a laptop-sized machine.
  runs:
    max_concurrent_runs: 2
# A queued run starts within a second, not the default five: the sensors' micro-batches queue a
# run every few seconds and the wait is part of every change's way into base.
run_queue:
  dequeue_interval_seconds: 1
# The sensors' ingest and upsert runs carry a dagster/max_retries tag: a run that fails (a broker
# or catalog restart) is started again by the daemon, so a table whose topic then stays quiet is
# not left behind until its next change.
run_retries:
  enabled: true
# Nothing leaves this machine: no usage statistics.
telemetry:
  enabled: false
"""


# Homes made before the project dropped its own run launcher name it in their dagster.yaml.
RETIRED_LAUNCHER = "cdc_assets.run_launcher"


def ensure_dagster_home(settings: Settings) -> Path:
    """The Dagster home under the CDC home, with the pool limit configured (created once; a
    home that names the retired run launcher gets Dagster's default one)."""
    home = settings.home / "dagster"
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text(DAGSTER_YAML, encoding="utf-8")
        return home
    current = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
    launcher = current.get("run_launcher")
    if isinstance(launcher, dict) and launcher.get("module") == RETIRED_LAUNCHER:
        del current["run_launcher"]
        config.write_text(yaml.safe_dump(current, sort_keys=False), encoding="utf-8")
        console.print(f"{config}: run_launcher {RETIRED_LAUNCHER} removed (Dagster's default now)")
    return home


def dagster_instance(settings: Settings) -> Any:
    """A persistent instance under the home, so runs from here show up in `dagster dev`."""
    from dagster import DagsterInstance

    if not os.environ.get("DAGSTER_HOME"):
        os.environ["DAGSTER_HOME"] = str(ensure_dagster_home(settings))
    return DagsterInstance.get()


def find_spec(settings: Settings, name: str) -> Any:
    from cdc_assets.spec import load_specs

    specs = {s.name: s for s in load_specs(settings.specs_dir)}
    if name not in specs:
        raise CdcAssetsError(f"no table spec {name!r}; known: {sorted(specs)}")
    return specs[name]


def cell(value: object) -> str:
    text = "NULL" if value is None else str(value)
    return text if len(text) <= 28 else text[:25] + "..."


def materializations(result: Any, key: Any) -> list[Any]:
    """The materializations of asset ``key`` in a run's result, in the order they were made
    (several assets share an op: Dagster's lookup by node would return all of theirs)."""
    return [
        event.event_specific_data.materialization
        for event in result.get_asset_materialization_events()
        if event.asset_key == key
    ]


def last_metadata(result: Any, key: Any) -> dict[str, Any]:
    """The newest materialization metadata of asset ``key`` in a run's result, as plain values."""
    mats = materializations(result, key)
    return {k: v.value for k, v in mats[-1].metadata.items()} if mats else {}
