"""A spec added to (or removed from) the spec directory of a running deployment is picked up
without a restart: the definitions are built from the directory when the code location loads,
so this sensor compares the directory with what was loaded and reloads the code location through
the webserver's GraphQL API (``CDC_ASSETS_WEBSERVER``, which `make dev` sets). A new table's
Iceberg tables are created by its first ingest. Without a webserver to ask, it says what to do.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from cdc_assets.spec.models import TableSpec

CODE_LOCATION = "cdc_assets.definitions"  # the python_module of workspace.yaml


def directory_changes(loaded: list[str], specs_dir: Path) -> tuple[list[str], list[str]]:
    """(added, removed) spec names: the directory's ``*.yaml`` against the loaded specs."""
    present = {p.stem for p in specs_dir.glob("*.yaml")}
    return sorted(present - set(loaded)), sorted(set(loaded) - present)


def build_spec_directory_sensor(
    specs: list[TableSpec], specs_dir: Path, webserver: str | None
) -> dg.SensorDefinition:
    loaded = [s.name for s in specs]

    @dg.sensor(
        name="spec_directory",
        minimum_interval_seconds=15,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Reloads the code location when a spec is added to or removed from the "
        "spec directory (through the webserver named by CDC_ASSETS_WEBSERVER).",
    )
    def spec_directory(context: dg.SensorEvaluationContext) -> dg.SkipReason:
        added, removed = directory_changes(loaded, specs_dir)
        if not added and not removed:
            return dg.SkipReason("the loaded specs are the directory's")
        change = f"added {added or '-'}, removed {removed or '-'}"
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
