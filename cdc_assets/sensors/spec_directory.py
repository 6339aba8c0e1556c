"""A spec added to (or removed from) the spec directory of a running deployment, or a newer spec
version that an evolution stored in the catalog (``pipeline.evolution.spec_store``; the run may
have been on
another machine), is picked up without a restart: the definitions are built when the code
location loads, so this sensor compares the directory and the stored versions with what was
loaded and reloads the code location through the webserver's GraphQL API
(``CDC_ASSETS_WEBSERVER``, which `make dev` sets). A new table's Iceberg tables are created by
its first ingest. Without a webserver to ask, it says what to do. Runs load the definitions
afresh, so they use a new version before the reload too.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg

from cdc_assets.pipeline.evolution.spec_store import Stored, current_of, stored_specs
from cdc_assets.spec.models import TableSpec

CODE_LOCATION = "cdc_assets.definitions"  # the python_module of workspace.yaml


def directory_changes(loaded: list[str], specs_dir: Path) -> tuple[list[str], list[str]]:
    """(added, removed) spec names: the directory's ``*.yaml`` against the loaded specs."""
    present = {p.stem for p in specs_dir.glob("*.yaml")}
    return sorted(present - set(loaded)), sorted(set(loaded) - present)


def newer_versions(specs: list[TableSpec], stored: Stored) -> list[str]:
    """``name vA -> vB`` for each loaded spec with a newer stored version."""
    out = []
    for spec in specs:
        current = current_of(spec, stored)
        if current.spec_version > spec.spec_version:
            out.append(f"{spec.name} v{spec.spec_version} -> v{current.spec_version}")
    return out


def build_spec_directory_sensor(
    specs: list[TableSpec],
    specs_dir: Path,
    webserver: str | None,
    load_catalog: Callable[[], Any] | None = None,
) -> dg.SensorDefinition:
    """``load_catalog``: the pyiceberg catalog holding stored spec versions (None: files only)."""
    loaded = [s.name for s in specs]

    def stored_changes(context: dg.SensorEvaluationContext) -> list[str]:
        if load_catalog is None:
            return []
        try:
            catalog = load_catalog()
            return newer_versions(specs, stored_specs(catalog) if catalog is not None else {})
        except Exception as exc:  # the catalog is down: the files still count
            context.log.warning(f"stored spec versions not read: {exc}")
            return []

    @dg.sensor(
        name="spec_directory",
        minimum_interval_seconds=15,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Reloads the code location when a spec is added to or removed from the "
        "spec directory, or an evolution stored a newer version (through the webserver named by "
        "CDC_ASSETS_WEBSERVER).",
    )
    def spec_directory(context: dg.SensorEvaluationContext) -> dg.SkipReason:
        added, removed = directory_changes(loaded, specs_dir)
        evolved = stored_changes(context)
        if not added and not removed and not evolved:
            return dg.SkipReason("the loaded specs are the directory's and the newest stored")
        change = f"added {added or '-'}, removed {removed or '-'}"
        if evolved:
            change += f", stored {', '.join(evolved)}"  # e.g. "stored users v1 -> v2"
        if webserver is None:
            context.log.warning(
                f"{specs_dir}: specs {change} since the code location loaded; reload it (UI: "
                "Deployment, Reload) or set CDC_ASSETS_WEBSERVER=host:port to reload on its own"
            )
            return dg.SkipReason(f"specs {change}; no webserver to reload through")
        from dagster_graphql import DagsterGraphQLClient

        host, _, port = webserver.rpartition(":")
        try:
            info = DagsterGraphQLClient(
                host, port_number=int(port), timeout=60
            ).reload_repository_location(CODE_LOCATION)
        except Exception as exc:  # the webserver is down or unreachable: say so, try next tick
            context.log.warning(f"reloading {CODE_LOCATION} through {webserver} failed: {exc}")
            return dg.SkipReason(f"specs {change}; the reload failed: {exc}")
        context.log.info(f"specs {change}: reloaded {CODE_LOCATION} ({info.status})")
        return dg.SkipReason(f"specs {change}: reloaded the code location ({info.status})")

    return spec_directory
