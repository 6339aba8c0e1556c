"""The ``tables`` op: every table's ledger (cdc), bucketed, base and history assets as one
subsettable multi-asset, whose run executes the selected tables on a pool of threads.

Every step needs the Spark driver, and a small table's step mostly waits on the driver's round
trips (planning, Iceberg commits, catalog reads); with several tables at once the round trips of
one overlap the work of another (``benchmarks/fleet_threads.py``). Dagster's executors run a
run's steps one after another in one process, or each in a process (and a driver) of its own,
and the executor API is not public. So the concurrency lives inside one step: a run's selected
tables, up to ``tables_at_once`` at once, each in a thread with a Spark session of its own
(``resources.spark.own_session_per_thread``: a commit's snapshot properties are session
settings and must not leak into another table's), under Dagster's own in-process executor.

- A table's layers go in order, ledger, bucketed, base, history, in its thread: in a
  micro-batch (``sync_tables``) each table reaches base right after its own ingest.
- Each layer's materialization is reported as soon as it is committed.
- A table that fails stops its own later layers, not the other tables: the step reports every
  other table's materializations, then fails naming the tables that failed, so that the run
  fails and its retry takes them again.
- A termination stops new tables and lets the running ones finish (each commit is atomic).

Two runs never interleave on one table's commits: the ledger's commit checks its offsets, and
base refuses a bucketed table built from another base state (``pipeline.upsert``), so a table
taken by two runs at once (a run started by hand beside a sensor's) wastes work, not rows.

A spec of AssetSpecs and one op also keeps the definitions cheap: at a thousand tables, building
an op per asset was most of a run worker's start (``benchmarks/definitions_load.py``).
"""

import queue
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import dagster as dg
from pydantic import Field

from cdc_assets.assets.history import history_table
from cdc_assets.assets.keys import asset_key, layer_and_table
from cdc_assets.assets.ledger import choose_mode, empty_hour_events, ingest_table
from cdc_assets.assets.upsert import base_table, bucketed_table
from cdc_assets.resources.iceberg import IcebergCatalogResource
from cdc_assets.resources.kafka import KafkaResource
from cdc_assets.resources.spark import SparkResource, own_session_per_thread
from cdc_assets.spec.models import TableSpec

TABLES_OP = "tables"
# The layers of a table this op materializes, in the order a table's thread runs them.
TABLE_STEP_LAYERS = ("cdc", "bucketed", "base", "history")
_POLL_S = 0.5  # how often the step's thread looks up from the queue (and can be interrupted)
_STATUS_S = 5.0  # how often it looks whether the run is being terminated
# After a termination, how long the step waits for the tables running to end their commit.
TERMINATION_GRACE_S = 60.0


def tables_config(default_width: int) -> type[dg.Config]:
    """The ``tables`` op's config class, ``tables_at_once`` defaulting to ``default_width``."""

    class TablesConfig(dg.Config):
        mode: Literal["auto", "incremental", "rebuild"] = Field(
            default="auto",
            description="the ledger's ingest: auto: incremental for the current hour, rebuild "
            "for earlier hours",
        )
        tables_at_once: int = Field(
            default=default_width,
            ge=1,
            description="how many of the run's tables execute at once, each on a Spark session "
            "of its own (1: one after another)",
        )

    return TablesConfig


@dataclass
class _Failed:
    table: str
    layer: str
    error: BaseException
    text: str


_DONE = object()  # a table's thread put everything it will


def build_tables_asset(
    specs: Sequence[TableSpec],
    asset_specs: Sequence[dg.AssetSpec],
    specs_dir: Path,
    default_width: int,
) -> dg.AssetsDefinition:
    """The ``tables`` multi-asset over ``asset_specs`` (each a cdc, bucketed, base or history
    key of one of ``specs``); ``default_width``: ``tables_at_once`` when the run sets none."""
    by_name = {s.name: s for s in specs}
    TablesConfig = tables_config(default_width)  # noqa: N806 (a class)

    @dg.multi_asset(
        name=TABLES_OP,
        specs=list(asset_specs),
        can_subset=True,
        description="Kafka -> ledger -> bucketed -> MERGE into base (-> history) of the selected "
        "tables, several at once on one Spark driver.",
    )
    def tables(
        context: dg.AssetExecutionContext,
        config: TablesConfig,  # type: ignore[valid-type]
        spark: SparkResource,
        iceberg: IcebergCatalogResource,
        kafka: KafkaResource,
    ) -> Iterator[dg.MaterializeResult]:  # type: ignore[type-arg]
        selected = selected_layers(context.selected_asset_keys)
        work = _TableWork(context, config.mode, specs_dir, spark, iceberg, kafka)  # type: ignore[attr-defined]
        yield from _run_tables(
            context,
            [(by_name[t], ls) for t, ls in selected.items()],
            work,
            config.tables_at_once,  # type: ignore[attr-defined]
        )

    return tables


def selected_layers(keys: Sequence[dg.AssetKey] | Any) -> dict[str, list[str]]:
    """Table -> its selected layers, in the order a table's thread runs them."""
    out: dict[str, list[str]] = {}
    for key in keys:
        parsed = layer_and_table(key)
        if parsed is not None and parsed[0] in TABLE_STEP_LAYERS:
            out.setdefault(parsed[1], []).append(parsed[0])
    return {t: sorted(ls, key=TABLE_STEP_LAYERS.index) for t, ls in sorted(out.items())}


@dataclass
class _TableWork:
    """What a table's thread needs from the step: its context, the ingest mode and resources."""

    context: dg.AssetExecutionContext
    mode: str
    specs_dir: Path
    spark: SparkResource
    iceberg: IcebergCatalogResource
    kafka: KafkaResource

    def run(self, spec: TableSpec, layers: Sequence[str], out: queue.Queue[Any]) -> None:
        """``spec``'s selected layers in order, each result put on ``out`` once committed."""
        own_session_per_thread()
        layer = layers[0]
        try:
            session = self.spark.get_session()
            catalog_name = self.spark.catalog.name
            catalog = self.iceberg.load_catalog()
            log = self.context.log
            for layer in layers:
                if layer == "cdc":
                    for event in self._ingest(spec, session, catalog_name, catalog):
                        out.put(event)
                    continue
                if layer == "bucketed":
                    meta = bucketed_table(spec, session, catalog_name, catalog, log)
                elif layer == "base":
                    meta = base_table(spec, self.specs_dir, session, catalog_name, catalog, log)
                else:
                    meta = history_table(spec, session, catalog_name, catalog, log)
                out.put(dg.MaterializeResult(asset_key=asset_key(layer, spec.name), metadata=meta))
        except Exception as exc:  # this table stops here; the others go on
            out.put(_Failed(spec.name, layer, exc, traceback.format_exc()))
        finally:
            out.put(_DONE)

    def _ingest(
        self, spec: TableSpec, session: Any, catalog_name: str, catalog: Any
    ) -> Iterator[Any]:
        """The ledger's ingest: the run's partition last, after the other hours it wrote and,
        for an incremental run, the hours it found empty."""
        context = self.context
        started_at = datetime.now(UTC)
        key = context.partition_key if context.has_partition_key else _hour(started_at)
        mode = choose_mode(self.mode, key, started_at)
        result, metadata = ingest_table(
            spec,
            self.specs_dir,
            session,
            catalog_name,
            catalog,
            self.kafka,
            mode=mode,
            partition_key=key,
            started_at=started_at,
            log=context.log,
        )
        cdc = asset_key("cdc", spec.name)
        for hour in result.hours:
            if hour != key:
                yield dg.AssetMaterialization(asset_key=cdc, partition=hour, metadata=metadata)
        if mode == "incremental":
            partitions = context.assets_def.specs_by_key[cdc].partitions_def
            assert partitions is not None
            yield from empty_hour_events(
                context.instance, cdc, partitions, key, result.hours, started_at, context.log
            )
        yield dg.MaterializeResult(asset_key=cdc, metadata=metadata)


def _hour(now: datetime) -> str:
    return now.strftime("%Y-%m-%d-%H:00")


class _Threads:
    """Up to ``width`` daemon threads that take the tables in turn. Daemon threads, not a
    ``ThreadPoolExecutor``: after a termination the step waits ``TERMINATION_GRACE_S`` for the
    running tables' commits, and a table stuck past that (a Spark server gone) must not keep the
    run's process alive; a commit is atomic, so ending mid-way loses nothing."""

    def __init__(
        self,
        work_items: Sequence[tuple[TableSpec, Sequence[str]]],
        work: _TableWork,
        width: int,
        out: queue.Queue[Any],
    ) -> None:
        self._todo: queue.Queue[tuple[TableSpec, Sequence[str]]] = queue.Queue()
        for item in work_items:
            self._todo.put(item)
        self._work = work
        self._out = out
        self._lock = threading.Lock()
        self.started = 0  # tables taken by a thread
        self.stopping = threading.Event()
        for n in range(width):
            threading.Thread(target=self._loop, name=f"cdc-table_{n}", daemon=True).start()

    def _loop(self) -> None:
        while not self.stopping.is_set():
            try:
                spec, layers = self._todo.get_nowait()
            except queue.Empty:
                return
            with self._lock:
                if self.stopping.is_set():
                    return
                self.started += 1
            self._work.run(spec, layers, self._out)


def _run_tables(
    context: dg.AssetExecutionContext,
    work_items: Sequence[tuple[TableSpec, Sequence[str]]],
    work: _TableWork,
    width: int,
) -> Iterator[dg.MaterializeResult]:  # type: ignore[type-arg]
    """Each table's layers in one of ``width`` threads; their results yielded (or logged) in
    this thread, in the order they were committed."""
    if not work_items:
        return
    width = max(1, min(width, len(work_items)))
    if len(work_items) > 1:
        context.log.info(
            f"{len(work_items)} tables, up to {width} at once: "
            + ", ".join(s.name for s, _ in work_items)
        )
    out: queue.Queue[Any] = queue.Queue()
    failed: list[_Failed] = []
    done = 0
    threads = _Threads(work_items, work, width, out)
    last_look = time.monotonic()
    try:
        while done < len(work_items):
            try:
                item = out.get(timeout=_POLL_S)
            except queue.Empty:
                if time.monotonic() - last_look >= _STATUS_S:
                    last_look = time.monotonic()
                    if _terminating(context):
                        raise dg.DagsterExecutionInterruptedError(
                            "the run is being terminated"
                        ) from None
                continue
            if item is _DONE:
                done += 1
            elif isinstance(item, _Failed):
                failed.append(item)
                context.log.error(f"{item.table}: {item.layer} failed:\n{item.text}")
            elif isinstance(item, dg.AssetMaterialization):
                context.log_event(item)
            else:
                yield item
    except BaseException:
        # A termination (Dagster raises it here on SIGINT or SIGTERM; the UI's Terminate also
        # marks the run canceling): no table starts any more, and the running ones get a grace
        # period to finish their commit.
        threads.stopping.set()
        _drain(context, out, threads, done, TERMINATION_GRACE_S)
        raise
    if len(failed) == 1:
        raise failed[0].error
    if failed:
        raise dg.Failure(
            description=f"{len(failed)} of {len(work_items)} tables failed: "
            + "; ".join(
                f"{f.table} ({f.layer}): {type(f.error).__name__}: {f.error}" for f in failed
            ),
            metadata={"failed_tables": [f.table for f in failed]},
        ) from failed[0].error


def _terminating(context: dg.AssetExecutionContext) -> bool:
    run = context.instance.get_run_by_id(context.run_id)
    return run is not None and run.status in (
        dg.DagsterRunStatus.CANCELING,
        dg.DagsterRunStatus.CANCELED,
    )


def _drain(
    context: dg.AssetExecutionContext,
    out: queue.Queue[Any],
    threads: _Threads,
    done: int,
    grace_s: float,
) -> None:
    """Wait up to ``grace_s`` for the tables the threads took to end. What they commit meanwhile
    is recorded as materializations outside the run: an interrupted step can no longer report
    its own, and the asset's newest metadata (offsets, watermark) must stay true."""
    deadline = time.monotonic() + grace_s
    while done < threads.started and time.monotonic() < deadline:
        try:
            item = out.get(timeout=_POLL_S)
        except queue.Empty:
            continue
        if item is _DONE:
            done += 1
        elif isinstance(item, _Failed):
            context.log.error(f"{item.table}: {item.layer} failed:\n{item.text}")
        else:
            partitioned = item.asset_key.path[0] == "cdc" and context.has_partition_key
            context.instance.report_runless_asset_event(
                dg.AssetMaterialization(
                    asset_key=item.asset_key,
                    partition=item.partition
                    if isinstance(item, dg.AssetMaterialization)
                    else context.partition_key
                    if partitioned
                    else None,
                    description=f"committed while run {context.run_id} was being terminated",
                    metadata=item.metadata,
                )
            )
