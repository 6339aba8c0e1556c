"""The pipeline's jobs and sensors run in this process, in the order the Dagster daemon would run
them: used by the demo on real sources, by tests and by the freshness benchmark.

One cycle = ingest every table's new offsets into its ledger, tick the ``schema_changes`` sensor
and run the evolutions it requests, then upsert every table. The definitions are rebuilt from the
spec directory whenever an evolution wrote a new spec version, as a code-location reload would.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import dagster as dg

from cdc_assets.assets.keys import asset_key, node_name
from cdc_assets.definitions import build_defs
from cdc_assets.sensors.new_offsets import current_hour_key
from cdc_assets.settings import Settings
from cdc_assets.spec import load_specs
from cdc_assets.spec.models import TableSpec

# Runs log warnings and errors only: the caller prints its own summaries.
QUIET: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


@dataclass
class CycleResult:
    """What one cycle did: records read per table, evolutions run, upsert metadata per table."""

    read: dict[str, int] = field(default_factory=dict)
    evolved: list[tuple[str, bool]] = field(default_factory=list)  # (table, run succeeded)
    ingest: dict[str, dict[str, Any]] = field(default_factory=dict)
    upsert: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def quiet(self) -> bool:
        """Nothing new was read and nothing evolved: the pipeline has caught up."""
        return not any(self.read.values()) and not self.evolved


def last_metadata(result: Any, node: str) -> dict[str, Any]:
    """The newest materialization metadata of ``node`` in a run result, as plain values."""
    mats = result.asset_materializations_for_node(node)
    return {k: v.value for k, v in mats[-1].metadata.items()} if mats else {}


@dataclass
class PipelineDriver:
    """Runs the jobs of the definitions built from ``settings`` on ``instance``."""

    settings: Settings
    instance: Any
    resource_overrides: Mapping[str, Any] | None = None
    run_config: dict[str, Any] = field(default_factory=lambda: dict(QUIET))
    _cursors: dict[str, str | None] = field(default_factory=dict)
    _defs: dg.Definitions | None = None

    def specs(self) -> list[TableSpec]:
        return load_specs(self.settings.specs_dir)

    def defs(self, *, reload: bool = False) -> dg.Definitions:
        if self._defs is None or reload:
            self._defs = build_defs(
                settings=self.settings, resource_overrides=self.resource_overrides
            )
        return self._defs

    def onboard(self) -> list[str]:
        result = (
            self.defs()
            .resolve_job_def("onboard_tables")
            .execute_in_process(instance=self.instance, run_config=self.run_config)
        )
        created: list[str] = result.output_for_node("create_spec_tables")
        return created

    def ingest(self) -> dict[str, dict[str, Any]]:
        """One ``ingest_ledgers`` run over every table; metadata of each cdc asset."""
        specs = self.specs()
        result = (
            self.defs()
            .resolve_job_def("ingest_ledgers")
            .execute_in_process(
                instance=self.instance,
                run_config=self.run_config,
                partition_key=current_hour_key(datetime.now(UTC)),
                asset_selection=[asset_key("cdc", s.name) for s in specs],
            )
        )
        return {s.name: last_metadata(result, node_name("cdc", s.name)) for s in specs}

    def evolve(self) -> list[tuple[str, bool]]:
        """One tick of the ``schema_changes`` sensor and the evolution runs it requests."""
        defs = self.defs()
        sensor = defs.resolve_sensor_def("schema_changes")
        resources = dict(defs.resources or {})
        context = dg.build_sensor_context(
            instance=self.instance,
            resources={"kafka": resources["kafka"]},
            cursor=self._cursors.get("schema_changes"),
        )
        tick = sensor(context)
        if isinstance(tick, dg.SensorResult):
            self._cursors["schema_changes"] = tick.cursor
            requests = list(tick.run_requests or [])
        else:
            requests = []
        done = []
        for request in requests:
            run = defs.resolve_job_def("evolve_schemas").execute_in_process(
                instance=self.instance,
                run_config={**self.run_config, **(request.run_config or {})},
                asset_selection=list(request.asset_selection or []),
                tags=dict(request.tags or {}),
                raise_on_error=False,
            )
            done.append((str(request.tags.get("cdc/table", "?")), run.success))
        if done:
            self.defs(reload=True)  # new spec versions: the next runs use them
        return done

    def upsert(self) -> dict[str, dict[str, Any]]:
        """One ``upsert_bases`` run over every table; metadata of each base asset."""
        specs = self.specs()
        result = (
            self.defs()
            .resolve_job_def("upsert_bases")
            .execute_in_process(
                instance=self.instance,
                run_config=self.run_config,
                asset_selection=[
                    asset_key(layer, s.name) for s in specs for layer in ("bucketed", "base")
                ],
            )
        )
        out = {}
        for s in specs:
            meta = last_metadata(result, node_name("base", s.name))
            meta["changed_keys"] = last_metadata(result, node_name("bucketed", s.name)).get(
                "changed_keys", 0
            )
            out[s.name] = meta
        return out

    def refresh_views(self) -> dict[str, dict[str, Any]]:
        """One ``refresh_views`` run over every consumer view (none: nothing runs); metadata
        of each view asset, or ``{"error": ...}`` for a view that failed."""
        defs = self.defs()
        keys = [k for k in defs.resolve_asset_graph().get_all_asset_keys() if k.path[0] == "view"]
        if not keys:
            return {}
        result = defs.resolve_job_def("refresh_views").execute_in_process(
            instance=self.instance,
            run_config=self.run_config,
            asset_selection=keys,
            raise_on_error=False,
        )
        out = {}
        for key in keys:
            node = "__".join(key.path)
            meta = last_metadata(result, node)
            out[".".join(key.path[1:])] = meta or {"error": "not created: see the run's logs"}
        return out

    def cycle(self) -> CycleResult:
        ingest = self.ingest()
        evolved = self.evolve()
        return CycleResult(
            read={t: int(m.get("records_read", 0) or 0) for t, m in ingest.items()},
            evolved=evolved,
            ingest=ingest,
            upsert=self.upsert(),
        )

    def converge(self, max_cycles: int = 5) -> list[CycleResult]:
        """Cycles until one reads nothing new and evolves nothing (at most ``max_cycles``)."""
        cycles = []
        for _ in range(max_cycles):
            cycles.append(self.cycle())
            if cycles[-1].quiet:
                break
        return cycles
