"""The pipeline's jobs and sensors run in this process, as the Dagster daemon would run them:
used by the demo on real sources, `cdc-assets sync` and the benchmarks.

One cycle = a tick of the ``new_kafka_offsets`` sensor and the ingest half of the run it asks
for (the tables whose topics grew), a tick of ``schema_changes`` and the evolutions it asks for,
then one upsert of the tables those runs wrote to (the sensor's run's upsert half, and the
``ledger_updated`` sensor's rule), with the checks each sensor's request carries. The daemon runs
the ingest and its upsert in one ``sync_tables`` run to pay one run launch, not two; in this
process a run costs no launch, and the evolutions go between the two halves so that a cycle's
upsert already applies a schema change the cycle saw. An idle table costs nothing but its share
of the offsets request. The definitions are rebuilt from the spec directory whenever an
evolution wrote a new spec version, as a code-location reload would.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from cdc_assets.assets.keys import asset_key, table_of
from cdc_assets.definitions import build_defs
from cdc_assets.jobs.checks import CHECK_JOB
from cdc_assets.jobs.upsert import upsert_assets
from cdc_assets.sensors.runs import table_tags
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
    seconds: dict[str, float] = field(default_factory=dict)  # wall time per phase

    @property
    def quiet(self) -> bool:
        """Nothing new was read and nothing evolved: the pipeline has caught up."""
        return not any(self.read.values()) and not self.evolved


def metadata_by_key(result: Any) -> dict[dg.AssetKey, dict[str, Any]]:
    """The newest materialization metadata of each asset of a run result, as plain values, in
    one pass over the run's events (a ledger's other hours come before its run's own)."""
    out: dict[dg.AssetKey, dict[str, Any]] = {}
    for event in result.get_asset_materialization_events():
        materialization = event.event_specific_data.materialization
        out[materialization.asset_key] = {k: v.value for k, v in materialization.metadata.items()}
    return out


@dataclass
class PipelineDriver:
    """Runs the jobs of the definitions built from ``settings`` on ``instance``."""

    settings: Settings
    instance: Any
    resource_overrides: Mapping[str, Any] | None = None
    run_config: dict[str, Any] = field(default_factory=lambda: dict(QUIET))
    _cursors: dict[str, str | None] = field(default_factory=dict)
    # Tables an ingest or evolution wrote to since their last upsert.
    _pending: set[str] = field(default_factory=set)
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

    def _tick(self, name: str, resources: Mapping[str, Any]) -> tuple[list[dg.RunRequest], Any]:
        """One evaluation of sensor ``name`` from its stored cursor: its run requests and the
        cursor it moved to (stored by the caller once the runs succeeded)."""
        sensor = self.defs().resolve_sensor_def(name)
        context = dg.build_sensor_context(
            instance=self.instance, resources=dict(resources), cursor=self._cursors.get(name)
        )
        tick = sensor(context)
        if isinstance(tick, dg.SensorResult):
            return list(tick.run_requests or []), tick.cursor
        return [], self._cursors.get(name)

    def _run(
        self,
        job: str,
        assets: Sequence[dg.AssetKey],
        checks: Sequence[dg.AssetCheckKey],
        **kwargs: Any,
    ) -> Any:
        """A run of ``job`` over exactly ``assets`` and ``checks`` (Dagster would otherwise add
        every check of the selected assets), in this process."""
        subset = (
            self.defs()
            .resolve_job_def(job)
            .get_subset(asset_selection=set(assets), asset_check_selection=set(checks))
        )
        # The job's own executor is Dagster's in-process one: a run's tables go at once inside
        # its steps (assets/tables.py), so execute_in_process runs them as the daemon's run does.
        return subset.execute_in_process(
            instance=self.instance, run_config=self.run_config, **kwargs
        )

    def _kafka(self) -> dict[str, Any]:
        return {"kafka": dict(self.defs().resources or {})["kafka"]}

    def ingest(self) -> dict[str, dict[str, Any]]:
        """One tick of the ``new_kafka_offsets`` sensor and the ingest run it requests, as the
        daemon runs it: only the tables whose topics grew, with only the accounting check (the
        others run on the ``table_checks`` schedule, or ``run_checks``). No run when no topic
        grew. Metadata of each table's cdc asset ({} for the tables not ingested).

        The sensor's cursor moves only once the run succeeded: a failed run is asked for again
        on the next cycle even when its topics did not grow since."""
        out: dict[str, dict[str, Any]] = {s.name: {} for s in self.specs()}
        requests, cursor = self._tick("new_kafka_offsets", self._kafka())
        for request in requests:
            result = self._run(
                "ingest_ledgers",
                [k for k in request.asset_selection or [] if table_of(k, ("cdc",))],
                request.asset_check_keys or [],
                partition_key=request.partition_key,
                tags=dict(request.tags or {}),
            )
            tables = _tables(request)
            self._pending.update(tables)
            metadata = metadata_by_key(result)
            for table in tables:
                out[table] = metadata.get(asset_key("cdc", table), {})
        self._cursors["new_kafka_offsets"] = cursor
        return out

    def evolve(self) -> list[tuple[str, bool]]:
        """One tick of the ``schema_changes`` sensor and the evolution runs it requests; the
        tables of a successful one wait for the next upsert (the ``ledger_updated`` sensor's
        rule: a backfill leaves ledger rows only an upsert brings to base)."""
        requests, cursor = self._tick("schema_changes", self._kafka())
        self._cursors["schema_changes"] = cursor
        defs = self.defs()
        done = []
        for request in requests:
            run = defs.resolve_job_def("evolve_schemas").execute_in_process(
                instance=self.instance,
                run_config={**self.run_config, **(request.run_config or {})},
                asset_selection=list(request.asset_selection or []),
                tags=dict(request.tags or {}),
                raise_on_error=False,
            )
            if run.success:
                self._pending.update(_tables(request))
            done.append((str(request.tags.get("cdc/table", "?")), run.success))
        if done:
            self.defs(reload=True)  # new spec versions: the next runs use them
        return done

    def upsert(self) -> dict[str, dict[str, Any]]:
        """One ``upsert_bases`` run over the tables an ingest or evolution touched since the
        last upsert, without checks (the ``ledger_updated`` sensor's request); no run when
        there are none. Metadata of each upserted table's base asset. A failed run leaves its
        tables waiting for the next cycle's upsert."""
        specs = {s.name: s for s in self.specs()}
        tables = sorted(self._pending & set(specs))
        if not tables:
            return {}
        result = self._run(
            "upsert_bases",
            upsert_assets(specs[t] for t in tables),
            [],
            tags={**table_tags(tables), "cdc/trigger": "driver"},
        )
        self._pending.difference_update(tables)
        out = {}
        metadata = metadata_by_key(result)
        for table in tables:
            meta = metadata.get(asset_key("base", table), {})
            bucketed = metadata.get(asset_key("bucketed", table), {})
            meta["changed_keys"] = bucketed.get("changed_keys", 0)
            meta["bucketed_seconds"] = bucketed.get("seconds", 0.0)
            out[table] = meta
        return out

    def run_checks(self) -> dict[str, bool]:
        """Every asset check of every table once (the ``table_checks`` schedule's run):
        ``{"<asset>:<check>": passed}``."""
        keys = list(self.defs().resolve_asset_graph().asset_check_keys)
        if not keys:
            return {}
        result = self._run(CHECK_JOB, [], keys, raise_on_error=False)
        return {
            f"{e.asset_key.to_user_string()}:{e.check_name}": e.passed
            for e in result.get_asset_check_evaluations()
        }

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
        metadata = metadata_by_key(result)
        for key in keys:
            meta = metadata.get(key, {})
            out[".".join(key.path[1:])] = meta or {"error": "not created: see the run's logs"}
        return out

    def cycle(self) -> CycleResult:
        seconds: dict[str, float] = {}
        started = time.monotonic()
        ingest = self.ingest()
        seconds["ingest"] = time.monotonic() - started
        evolved = self.evolve()
        seconds["evolve"] = time.monotonic() - started - seconds["ingest"]
        upsert = self.upsert()
        seconds["upsert"] = time.monotonic() - started - seconds["ingest"] - seconds["evolve"]
        return CycleResult(
            read={t: int(m.get("records_read", 0) or 0) for t, m in ingest.items()},
            evolved=evolved,
            ingest=ingest,
            upsert=upsert,
            seconds=seconds,
        )

    def converge(self, max_cycles: int = 5) -> list[CycleResult]:
        """Cycles until one reads nothing new and evolves nothing (at most ``max_cycles``)."""
        cycles = []
        for _ in range(max_cycles):
            cycles.append(self.cycle())
            if cycles[-1].quiet:
                break
        return cycles


def _tables(request: dg.RunRequest) -> set[str]:
    """The tables whose assets a run request selects."""
    return {t for k in request.asset_selection or [] if (t := table_of(k)) is not None}
