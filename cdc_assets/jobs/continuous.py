"""Continuous mode: one long-running run per worker that ingests and upserts its tables in a loop
on one warm Spark session (``pipeline.worker`` in a spec names the worker).

A sensor's micro-batch pays a run's launch (a process, the definitions, a Spark driver) before
each batch; the worker pays it once and then commits every few seconds. It is a Dagster run of
the ``continuous_tables`` op job, so the UI shows it, stops it (terminate the run) and starts it;
each commit is reported as a materialization of the table's cdc, bucketed, base (and history)
asset with the metadata a run's step reports, from the same functions.

Nothing here is needed for correctness against the other runs: every commit it makes is the one
a run would make (ledger offsets checked at commit, base refusing a bucketed table built from
another state), so a worker and a run on the same table never lose or double a record; the
``new_kafka_offsets`` sensor only leaves a table to its live worker to avoid wasted work. Each
cycle reads the table's newest spec (an evolution committed since is never decoded stale), and a
cycle that fails is retried by the next, after a backoff; ``max_failures`` failed cycles in a row
of one table end the run, which the ``continuous_workers`` sensor starts again. A table whose
pause an evolution or maintenance holds (``pipeline.shared.pause``) is left alone until it ends;
base is
compacted here once it holds more than ``base.maintenance.compact_files_per_bucket`` files per
bucket, since a commit every few seconds adds files faster than a daily maintenance removes them.
"""

import os
import queue
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import Field

from cdc_assets.assets.history import history_table
from cdc_assets.assets.keys import asset_key
from cdc_assets.assets.ledger import ingest_table
from cdc_assets.assets.upsert import base_table, bucketed_table
from cdc_assets.pipeline.evolution.spec_store import with_stored_versions
from cdc_assets.pipeline.maintenance.maintenance import (
    FILE_TOTALS,
    MaintenanceConflictError,
    compact_tables,
    needs_compaction,
    summary_count,
)
from cdc_assets.pipeline.shared.pause import Pause, table_pause
from cdc_assets.resources.iceberg import IcebergCatalogResource
from cdc_assets.resources.kafka import KafkaResource
from cdc_assets.resources.spark import SparkResource, own_session_per_thread
from cdc_assets.schema.layers import base_layout
from cdc_assets.spec.load import load_spec
from cdc_assets.spec.models import TableSpec

CONTINUOUS_JOB = "continuous_tables"
WORKER_OP = "run_worker"
WORKER_TAG = "cdc/worker"
HEARTBEAT_TAG = "cdc/heartbeat"  # epoch seconds of the worker's last finished cycle
# The process of the worker, beside its heartbeat: where an operator looks (py-spy, a stack
# dump) when a worker stops beating.
WORKER_PID_TAG = "cdc/worker_pid"
# A started worker whose heartbeat is older than this many heartbeat intervals is dead (a killed
# process leaves its run STARTED); a new one has this long to start Spark before its first beat.
STALE_BEATS = 6
START_GRACE_S = 180.0
# After a failed cycle: 1, 2, 4... seconds before the next, at most RETRY_MAX_S.
RETRY_BASE_S = 1.0
RETRY_MAX_S = 30.0
_UNFINISHED = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


class WorkerConfig(dg.Config):
    worker: str = Field(description="the worker's name (pipeline.worker of its tables)")
    tables: list[str] = Field(description="the tables it keeps fresh")
    idle_seconds: float = Field(
        default=1.0, ge=0, description="pause after a cycle that read nothing new"
    )
    commit_interval_seconds: float = Field(
        default=0.0,
        ge=0,
        description="least time from the start of a cycle that read something to the start of "
        "the next: at most one commit per table per interval, so fewer and larger files "
        "(0: the next cycle starts at once)",
    )
    ledger_files_per_commit: int = Field(
        default=1,
        ge=0,
        description="most ledger data files a commit writes per hour partition (0: one per "
        "Kafka partition read, as runs write); base's MERGE writes one per bucket it touches, "
        "bounded by base.maintenance.compact_files_per_bucket",
    )
    heartbeat_seconds: float = Field(
        default=10.0,
        gt=0,
        description="how often it records that it is alive (and looks at the ledger for "
        "changes it did not write: an evolution's backfill, a redrive)",
    )
    run_for_seconds: float = Field(
        default=0.0, ge=0, description="stop after this long (0: until the run is terminated)"
    )
    tables_at_once: int = Field(
        default=1,
        ge=1,
        description="how many of its tables run a cycle at the same time; each table has a "
        "loop, a Spark session and a cadence of its own, so a busy table never waits for "
        "another's cycle beyond this bound",
    )
    max_failures: int = Field(
        default=6,
        ge=1,
        description="failed cycles in a row of one table that end the run; after a failed "
        "cycle the next waits 1, 2, 4... seconds (at most 30), so the default rides out about "
        "half a minute of a broker or catalog outage",
    )


def worker_run_config(worker: str, tables: Sequence[str], **config: Any) -> dict[str, Any]:
    return {"ops": {WORKER_OP: {"config": {"worker": worker, "tables": list(tables), **config}}}}


def workers_of(specs: Sequence[TableSpec]) -> dict[str, list[str]]:
    """Worker name -> its tables, from the specs' ``pipeline.worker``."""
    out: dict[str, list[str]] = {}
    for spec in sorted(specs, key=lambda s: s.name):
        if spec.pipeline.worker is not None:
            out.setdefault(spec.pipeline.worker, []).append(spec.name)
    return out


def heartbeat_age(run: dg.DagsterRun, started: float | None, now: float) -> float:
    """Seconds since the worker's last heartbeat (or, before its first, since the run started)."""
    beat = run.tags.get(HEARTBEAT_TAG)
    since = float(beat) if beat else started if started is not None else now
    return now - since


def is_stale(run: dg.DagsterRun, started: float | None, now: float) -> bool:
    """Whether a started worker run stopped beating (its process died without ending the run)."""
    if run.status != dg.DagsterRunStatus.STARTED:
        return False
    ops: Any = run.run_config.get("ops", {})
    config = ops.get(WORKER_OP, {}).get("config", {})
    interval = float(config.get("heartbeat_seconds", 10.0))
    limit = STALE_BEATS * interval if run.tags.get(HEARTBEAT_TAG) else START_GRACE_S
    return heartbeat_age(run, started, now) > limit


def live_worker_tables(instance: dg.DagsterInstance, now: float | None = None) -> set[str]:
    """Tables that a worker run which is alive (queued, starting, or beating) keeps fresh."""
    now = time.time() if now is None else now
    records = instance.get_run_records(
        filters=dg.RunsFilter(job_name=CONTINUOUS_JOB, statuses=_UNFINISHED), limit=100
    )
    tables: set[str] = set()
    for record in records:
        run = record.dagster_run
        started = record.start_time or record.create_timestamp.timestamp()
        if not is_stale(run, started, now):
            tables.update(worker_tables_of(run.tags))
    return tables


def worker_tables_of(run_tags: Mapping[str, str]) -> list[str]:
    return [t for t in run_tags.get("cdc/tables", "").split(",") if t]


def _current_specs(tables: Sequence[str], specs_dir: Path, catalog: Any) -> list[TableSpec]:
    """The specs the tables run with now: each file, or its stored version where newer."""
    return with_stored_versions([load_spec(specs_dir / f"{t}.yaml") for t in tables], catalog)


def _hour(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%d-%H:00")


class _Cycle:
    """One table's share of a cycle: ingest, then the upsert (and history) when there is
    something to apply. Yields the materializations; ``read`` says whether it found records."""

    def __init__(self, spec: TableSpec, look_at_ledger: bool, files: int = 0) -> None:
        self.spec = spec
        self.look_at_ledger = look_at_ledger
        self.files = files
        self.read = 0
        self.paused: Pause | None = None

    def run(
        self,
        log: Any,
        specs_dir: Path,
        session: Any,
        catalog_name: str,
        catalog: Any,
        kafka: KafkaResource,
    ) -> Iterator[dg.AssetMaterialization | dg.AssetObservation]:
        spec = self.spec
        # An evolution or a maintenance run is committing: left alone until it has (its commits
        # would win anyway, at the cost of a retry on either side).
        self.paused = table_pause(catalog, spec)
        if self.paused is not None:
            return
        started = datetime.now(UTC)
        hour = _hour(started)
        result, meta = ingest_table(
            spec,
            specs_dir,
            session,
            catalog_name,
            catalog,
            kafka,
            mode="incremental",
            partition_key=hour,
            started_at=started,
            log=log,
            files_per_commit=self.files,
        )
        self.read = result.read
        if result.read:
            for partition in sorted({hour, *result.hours}):
                yield dg.AssetMaterialization(
                    asset_key=asset_key("cdc", spec.name), partition=partition, metadata=meta
                )
        if not (result.read or self.look_at_ledger):
            return
        # A look at the ledger at a heartbeat mostly finds nothing: not worth a line each time.
        bucketed = bucketed_table(
            spec, session, catalog_name, catalog, log if result.read else _WarningsOnly(log)
        )
        if bucketed["up_to_date"]:
            return
        yield dg.AssetMaterialization(asset_key=asset_key("bucketed", spec.name), metadata=bucketed)
        base = base_table(spec, specs_dir, session, catalog_name, catalog, log)
        yield dg.AssetMaterialization(asset_key=asset_key("base", spec.name), metadata=base)
        compacted = _compact_if_due(spec, session, catalog_name, catalog, log)
        if compacted is not None:
            yield dg.AssetObservation(asset_key=asset_key("base", spec.name), metadata=compacted)
        if spec.history.enabled:
            history = history_table(spec, session, catalog_name, catalog, log)
            yield dg.AssetMaterialization(
                asset_key=asset_key("history", spec.name), metadata=history
            )


def _compact_if_due(
    spec: TableSpec, session: Any, catalog_name: str, catalog: Any, log: Any
) -> dict[str, Any] | None:
    """Compact base and its tombstones when base holds more files per bucket than the spec's
    ``base.maintenance.compact_files_per_bucket``: the maintenance rewrites, in this worker's
    thread (its own commits cannot race them); the compaction's numbers, or None."""
    layout = base_layout(spec)
    snapshot = catalog.load_table(f"{layout.namespace}.{layout.name}").current_snapshot()
    summary = snapshot.summary if snapshot is not None else {}
    bound = spec.base.maintenance.compact_files_per_bucket
    if not needs_compaction(summary, spec.base.buckets, bound):
        return None
    before = [summary_count(summary, k) for k in FILE_TOTALS]
    try:
        result = compact_tables(session, catalog_name, catalog, spec, log=log.info)
    except MaintenanceConflictError as exc:
        # Another writer (a run, maintenance) kept winning: the next cycle tries again, and the
        # commits of this one stand.
        log.warning(str(exc))
        result = exc.result
    log.info(
        f"{spec.name}: compacted base at {before[0]} data and {before[1]} delete files "
        f"(over {bound} per bucket) in {result.seconds:.1f}s"
    )
    return {
        "compaction": "continuous worker",
        "data_files_before": before[0],
        "delete_files_before": before[1],
        **result.totals(),
        "seconds": round(result.seconds, 2),
    }


class _WarningsOnly:
    """A log that passes warnings on and drops info lines."""

    def __init__(self, log: Any) -> None:
        self._log = log

    def info(self, message: str) -> None:
        pass

    def warning(self, message: str) -> None:
        self._log.warning(message)


def _say_pause(log: Any, table: str, pause: Pause | None, paused: set[str]) -> None:
    """Log when a table's pause starts and ends (not every cycle of it)."""
    if pause is not None and table not in paused:
        paused.add(table)
        log.info(f"{table}: {pause.describe(time.time())}; left alone until then")
    elif pause is None and table in paused:
        paused.discard(table)
        log.info(f"{table}: the pause ended; resumed")


def _stopping(context: dg.OpExecutionContext) -> bool:
    """Whether the run is being terminated (the UI's Terminate, or a deployment scaling in)."""
    run = context.instance.get_run_by_id(context.run_id)
    return run is not None and run.status in (
        dg.DagsterRunStatus.CANCELING,
        dg.DagsterRunStatus.CANCELED,
    )


class _FairGate:
    """At most ``slots`` holders at a time, the waiters served in the order they came. A
    ``threading.Semaphore`` is not fair: a table whose cycle read something loops straight back
    and takes it again before the others wake (measured: one table of three made 41 commits,
    the other two 11 and 12, and their p95 went from 15 s to 80 s)."""

    def __init__(self, slots: int) -> None:
        self._free = slots
        self._waiting: deque[object] = deque()
        self._changed = threading.Condition()

    def __enter__(self) -> None:
        me = object()
        with self._changed:
            self._waiting.append(me)
            while self._waiting[0] is not me or self._free == 0:
                self._changed.wait()
            self._waiting.popleft()
            self._free -= 1
            self._changed.notify_all()

    def __exit__(self, *exc: object) -> None:
        with self._changed:
            self._free += 1
            self._changed.notify_all()


class _TableLoop:
    """One table's loop, in a thread of its own: cycles at the table's own cadence, on a Spark
    session of its own (a commit's snapshot properties are session state), at most
    ``tables_at_once`` of the worker's tables in a cycle at a time (``gate``). What it
    materializes, and its end, go to the run's thread through ``events``: only that thread
    yields to Dagster."""

    def __init__(
        self,
        table: str,
        config: WorkerConfig,
        specs_dir: Path,
        events: queue.Queue[tuple[str, Any]],
        gate: _FairGate,
        stop: threading.Event,
    ) -> None:
        self.table = table
        self.config = config
        self.specs_dir = specs_dir
        self.events = events
        self.gate = gate
        self.stop = stop
        self.cycles = 0  # finished, failed ones included: the run's heartbeat waits for them
        self.records = 0
        self.failures = 0

    def run(self, log: Any, spark: SparkResource, catalog: Any, kafka: KafkaResource) -> None:
        try:
            self._loop(log, spark, catalog, kafka)
        except BaseException as exc:  # the run's thread raises it
            self.events.put(("failed", exc))
        finally:
            self.events.put(("done", self.table))

    def _loop(self, log: Any, spark: SparkResource, catalog: Any, kafka: KafkaResource) -> None:
        config = self.config
        own_session_per_thread()
        last_look = float("-inf")  # the first cycle looks at the ledger
        while not self.stop.is_set():
            started = time.monotonic()
            look = started - last_look >= config.heartbeat_seconds
            cycle: _Cycle | None = None
            with self.gate:
                try:
                    # Asked every cycle: after a Spark Connect server restart the resource
                    # hands out a new session (below), and the loop must take it.
                    session = spark.get_session()
                    (spec,) = _current_specs([self.table], self.specs_dir, catalog)
                    cycle = _Cycle(spec, look_at_ledger=look, files=config.ledger_files_per_commit)
                    for event in cycle.run(
                        log, self.specs_dir, session, spark.catalog.name, catalog, kafka
                    ):
                        self.events.put(("event", event))
                except Exception as exc:
                    # The next cycle starts from what is committed: nothing of this one is half
                    # written (each commit is atomic), so trying again is safe.
                    self.failures += 1
                    log.warning(
                        f"{self.table}: cycle failed ({self.failures} in a row): "
                        f"{type(exc).__name__}: {exc}"
                    )
                    if spark.forget_lost_session(exc):
                        log.warning(
                            f"{self.table}: the Spark Connect server lost this worker's "
                            "session (it was started again); the next cycle opens a new one"
                        )
                    if self.failures >= config.max_failures:
                        raise
                    cycle = None
            self.cycles += 1
            if cycle is None:
                # A broker or catalog away: back off, rather than spending the failures the run
                # may take in a second.
                self.stop.wait(min(RETRY_BASE_S * 2 ** (self.failures - 1), RETRY_MAX_S))
                continue
            self.failures = 0
            if look:
                last_look = started
            self.records += cycle.read
            self.events.put(("cycle", (self.table, cycle.paused)))
            if not cycle.read:
                self.stop.wait(config.idle_seconds)
            elif (wait := started + config.commit_interval_seconds - time.monotonic()) > 0:
                self.stop.wait(wait)


def build_continuous_job(specs_dir: Path) -> dg.JobDefinition:
    @dg.op(name=WORKER_OP, tags={"kind": "spark"})
    def run_worker(
        context: dg.OpExecutionContext,
        config: WorkerConfig,
        spark: SparkResource,
        iceberg: IcebergCatalogResource,
        kafka: KafkaResource,
    ) -> Iterator[Any]:
        catalog = iceberg.load_catalog()
        began = time.monotonic()
        events: queue.Queue[tuple[str, Any]] = queue.Queue()
        stop = threading.Event()
        gate = _FairGate(config.tables_at_once)
        loops = [_TableLoop(t, config, specs_dir, events, gate, stop) for t in config.tables]
        threads = [
            threading.Thread(
                target=loop.run,
                args=(context.log, spark, catalog, kafka),
                name=f"worker-{loop.table}",
                daemon=True,
            )
            for loop in loops
        ]
        for thread in threads:
            thread.start()
        paused: set[str] = set()
        failed: BaseException | None = None
        running = len(threads)
        last_beat, beat_cycles = float("-inf"), [0] * len(loops)
        while running:
            try:
                kind, value = events.get(timeout=0.5)
            except queue.Empty:
                kind, value = "", None
            if kind == "event":
                yield value
            elif kind == "cycle":
                _say_pause(context.log, value[0], value[1], paused)
            elif kind == "failed":
                failed = failed or value
                stop.set()
            elif kind == "done":
                running -= 1
            now = time.monotonic()
            # Alive: every table finished a cycle (or a failed one) since the last beat, so a
            # table stuck in Spark stops the beats and the sensor replaces the run.
            done = [loop.cycles for loop in loops]
            if now - last_beat >= config.heartbeat_seconds and all(
                c > b for c, b in zip(done, beat_cycles, strict=True)
            ):
                last_beat, beat_cycles = now, done
                context.instance.add_run_tags(
                    context.run_id,
                    {HEARTBEAT_TAG: f"{time.time():.0f}", WORKER_PID_TAG: str(os.getpid())},
                )
                if _stopping(context):
                    stop.set()
            if config.run_for_seconds and now - began >= config.run_for_seconds:
                stop.set()
        for thread in threads:
            thread.join()
        if failed is not None:
            raise failed
        most = max((loop.cycles for loop in loops), default=0)
        records = sum(loop.records for loop in loops)
        context.log.info(f"worker {config.worker}: {most} cycles, {records} records")
        yield dg.Output({"cycles": most, "records": records})

    @dg.job(
        name=CONTINUOUS_JOB,
        description=(
            "A continuous worker (run config names it and its tables): ingests and upserts its "
            "tables in a loop on one Spark session until the run is terminated; each commit is "
            "a materialization of the table's assets. Started by the continuous_workers sensor."
        ),
        tags={"cdc/job": "continuous"},
    )
    def continuous_tables() -> None:
        run_worker()

    return continuous_tables


def build_workers_sensor(
    specs: Sequence[TableSpec],
    job: dg.JobDefinition,
    heartbeat_seconds: float = 10.0,
    tables_at_once: int = 1,
) -> dg.SensorDefinition:
    """Keeps one live run per worker the specs name: starts a missing one (beating every
    ``heartbeat_seconds``, ``tables_at_once`` of its tables in a cycle at a time), fails a
    started one whose heartbeat stopped (its process died) so that the same tick replaces it,
    and stops the runs of workers the specs no longer name or name with other tables."""
    workers = workers_of(specs)

    @dg.sensor(
        name="continuous_workers",
        job=job,
        minimum_interval_seconds=15,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Keeps a run of continuous_tables alive for each pipeline.worker the specs "
        "name; a worker whose heartbeat stopped is marked failed and started again, one the "
        "specs no longer name (or name with other tables) is stopped.",
    )
    def continuous_workers(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        now = time.time()
        # Runs of workers the specs no longer name, or name with other tables: stopped (the
        # worker ends at its next heartbeat), and the changed ones started anew below.
        stopped = _stop_unnamed(context.instance, workers)
        if not workers:
            reason = "no spec names a pipeline.worker"
            return dg.SensorResult(
                skip_reason=f"{reason}; stopped {stopped}" if stopped else reason
            )
        requests, notes = [], [f"stopped {', '.join(stopped)}"] if stopped else []
        for name, tables in workers.items():
            state = _worker_state(context.instance, name, tables, now)
            if state == "alive":
                continue
            if state == "waiting":
                notes.append(f"{name}: failed less than {RESTART_DELAY_S:.0f} s ago")
                continue
            requests.append(
                dg.RunRequest(
                    run_config=worker_run_config(
                        name,
                        tables,
                        heartbeat_seconds=heartbeat_seconds,
                        tables_at_once=tables_at_once,
                    ),
                    tags={WORKER_TAG: name, "cdc/tables": ",".join(tables)},
                )
            )
        if not requests:
            return dg.SensorResult(skip_reason="; ".join(notes) or "every worker is alive")
        return dg.SensorResult(run_requests=requests)

    return continuous_workers


def _stop_unnamed(instance: dg.DagsterInstance, workers: Mapping[str, list[str]]) -> list[str]:
    """Cancel the unfinished worker runs whose worker the specs no longer name, or name with
    other tables (as the UI's Terminate does); their names."""
    stopped = []
    records = instance.get_run_records(
        filters=dg.RunsFilter(job_name=CONTINUOUS_JOB, statuses=_UNFINISHED), limit=100
    )
    for record in records:
        run = record.dagster_run
        name = run.tags.get(WORKER_TAG, "")
        if worker_tables_of(run.tags) != workers.get(name):
            # A run not launched yet has no process to stop: marked canceled outright.
            if not instance.run_coordinator.cancel_run(run.run_id) and run.status != (
                dg.DagsterRunStatus.STARTED
            ):
                instance.report_run_canceled(run, f"worker {name}: the specs changed")
            stopped.append(name)
    return stopped


# The least time between two starts of a worker whose run failed (no restart loop).
RESTART_DELAY_S = 60.0


def _worker_state(instance: dg.DagsterInstance, name: str, tables: list[str], now: float) -> str:
    """``alive``, ``waiting`` (it failed a moment ago) or ``missing`` (start one). A run of the
    worker with other tables (being stopped) does not count."""
    records = instance.get_run_records(
        filters=dg.RunsFilter(job_name=CONTINUOUS_JOB, tags={WORKER_TAG: name}), limit=5
    )
    for record in records:  # newest first
        run = record.dagster_run
        started = record.start_time or record.create_timestamp.timestamp()
        if (
            run.is_finished
            or run.status == dg.DagsterRunStatus.CANCELING
            or worker_tables_of(run.tags) != tables
        ):
            continue
        if not is_stale(run, started, now):
            return "alive"
        instance.report_run_failed(
            run, f"worker {name}: no heartbeat for {heartbeat_age(run, started, now):.0f} s"
        )
    if records and records[0].dagster_run.status == dg.DagsterRunStatus.FAILURE:
        # At most one start per RESTART_DELAY_S: a worker that failed soon after it started (it
        # cannot start) waits; one that ran longer (killed, out of memory) is replaced at once.
        latest = records[0]
        started = latest.start_time or latest.create_timestamp.timestamp()
        if now - started < RESTART_DELAY_S:
            return "waiting"
    return "missing"
