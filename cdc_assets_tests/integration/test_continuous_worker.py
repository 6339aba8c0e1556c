"""The continuous worker (issue 58): a long-running run of ``continuous_tables`` that ingests and
upserts its table in a loop (and compacts base when it holds too many files), while ordinary
micro-batch runs of the same table run at the same time. Base must equal the replay of the
topic and the ledger hold every record once; the worker's commits are materializations of the
table's assets, it beats, and it stops when its run is terminated."""

import os
import random
import signal
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
from pyiceberg.table import StaticTable

from cdc_assets.assets.keys import asset_key
from cdc_assets.definitions import build_defs
from cdc_assets.jobs.continuous import (
    CONTINUOUS_JOB,
    HEARTBEAT_TAG,
    WORKER_PID_TAG,
    WORKER_TAG,
    live_worker_tables,
    worker_run_config,
)
from cdc_assets.jobs.sync import SYNC_JOB, sync_selection
from cdc_assets.pipeline.evolution.converge import converge
from cdc_assets.pipeline.maintenance.maintenance import maintain_table, summary_count
from cdc_assets.pipeline.shared.offsets import KIND_PROPERTY
from cdc_assets.pipeline.shared.pause import PAUSED_BY, table_pause, table_paused
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.layers import base_layout, ledger_layout
from cdc_assets.sensors.new_offsets import current_hour_key
from cdc_assets.settings import Settings
from cdc_assets.spec.models import ColumnSpec, TableSpec
from cdc_assets.spec.versions import render_spec_yaml, write_spec
from cdc_assets_dev.demo.events import workload
from cdc_assets_dev.demo.events.produce import produce
from cdc_assets_dev.stack.local_stack import stack_up
from cdc_assets_tests.integration.test_broker_restart import kill_broker
from cdc_assets_tests.integration.test_ingest import isolated
from cdc_assets_tests.integration.test_schema_evolution_flow import with_column
from cdc_assets_tests.integration.test_spark_cluster import assert_ledger_exact
from cdc_assets_tests.integration.test_upsert import (
    assert_base_matches,
    example_spec,
    expected_base,
)
from cdc_assets_tests.support.daemon import dagster_home, running_daemon, wait_until

CATCH_UP_S = 240.0


def test_a_worker_and_micro_batch_runs_at_once_lose_and_double_nothing(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    resources: dict[str, Any],
    tmp_path: Path,
) -> None:
    hot = worker_spec(it_settings, kafka, "hot")
    # A low bound: the worker also compacts base while the runs race it.
    maintenance = hot.base.maintenance.model_copy(update={"compact_files_per_bucket": 2})
    spec = hot.model_copy(update={"base": hot.base.model_copy(update={"maintenance": maintenance})})
    specs_dir = tmp_path / "specs"
    specs_dir.mkdir()
    write_spec(spec, specs_dir / f"{spec.name}.yaml")
    settings = replace(it_settings, specs_dir=specs_dir, tables_at_once=1)
    defs = build_defs(specs=[spec], settings=settings, resource_overrides=resources)
    ensure_tables(spark, "lake", spec)
    bootstrap = kafka.resolved_bootstrap()
    events = workload(spec, random.Random(58), keys=150, events=1600)
    slices = [events[i : i + 400] for i in range(0, len(events), 400)]

    with dg.instance_for_test() as instance:
        worker, outcome = _start_worker(
            defs, instance, "hot", spec.name, heartbeat_seconds=2, commit_interval_seconds=1.0
        )
        # Micro-batch runs of the same table (another instance: the runs the daemon would start
        # for a table whose worker it does not see), one per slice, racing the worker's cycles.
        runs = dg.DagsterInstance.ephemeral()
        sync = defs.resolve_job_def(SYNC_JOB).get_subset(
            asset_selection=set(sync_selection([spec.name])), asset_check_selection=set()
        )
        outcomes = []
        for part in slices:
            produce(part, spec.source.topic, bootstrap)
            result = sync.execute_in_process(
                instance=runs,
                partition_key=current_hour_key(datetime.now(UTC)),
                raise_on_error=False,
            )
            outcomes.append(result.success)
        # The last slice alone: only the worker reads it.
        tail = workload(spec, random.Random(59), keys=150, events=300)
        produce(tail, spec.source.topic, bootstrap)
        want = expected_base(spec, kafka)

        def alive() -> None:
            assert worker.is_alive(), outcome

        until_base_matches(spec, iceberg, want, alive)
        [record] = instance.get_run_records(dg.RunsFilter(job_name=CONTINUOUS_JOB))
        run = record.dagster_run
        assert HEARTBEAT_TAG in instance.get_run_by_id(run.run_id).tags  # type: ignore[union-attr]
        assert live_worker_tables(instance) == {spec.name}
        # Terminating the run stops the worker at its next heartbeat.
        instance.report_run_canceling(run)
        worker.join(120)
        assert not worker.is_alive()

    # A micro-batch that lost a race to the worker builds its changes again
    # (merge_base_again); one that lost every attempt fails, and says so. None may have
    # written anything twice or left anything out.
    print(f"micro-batch runs that succeeded: {sum(outcomes)} of {len(outcomes)}")
    assert_base_matches(spec, iceberg, want)
    assert_ledger_exact(spec, iceberg, kafka)
    result = outcome["result"]
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    materialized = {
        e.asset_key
        for e in result.all_events
        if e.event_type == dg.DagsterEventType.ASSET_MATERIALIZATION
    }
    assert {asset_key(layer, spec.name) for layer in ("cdc", "bucketed", "base")} <= materialized
    cycles = result.output_for_node("run_worker")
    assert cycles["records"] > 0, cycles
    compactions = [
        e.event_specific_data.asset_observation.metadata  # type: ignore[union-attr]
        for e in result.all_events
        if e.event_type == dg.DagsterEventType.ASSET_OBSERVATION
    ]
    assert compactions, "base went over 2 files per bucket: the worker should have compacted it"
    assert all(m["compaction"].value == "continuous worker" for m in compactions)


def test_a_worker_leaves_a_table_alone_while_maintenance_or_an_evolution_holds_its_pause(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    resources: dict[str, Any],
    tmp_path: Path,
) -> None:
    """A pause on the table (as an evolution or maintenance takes it): the worker commits
    nothing to it until it ends, then catches up, while the worker's other table (its tables in
    loops of their own, two at once) goes on. Maintenance holds the pause over its rewrites (not
    over expiry and orphan removal), an evolution over its commits, and both give it back."""
    spec = worker_spec(it_settings, kafka, "calm")
    second = worker_spec(it_settings, kafka, "calm")
    other = TableSpec.model_validate(
        {**second.model_dump(mode="json", by_alias=True), "name": "orders_b"}
    )
    specs_dir = tmp_path / "specs"
    specs_dir.mkdir()
    for s in (spec, other):
        write_spec(s, specs_dir / f"{s.name}.yaml")
        ensure_tables(spark, "lake", s)
    settings = replace(it_settings, specs_dir=specs_dir)
    defs = build_defs(specs=[spec, other], settings=settings, resource_overrides=resources)
    bootstrap = kafka.resolved_bootstrap()
    catalog = iceberg.load_catalog()
    ledger, base = ledger_layout(spec), base_layout(spec)

    def snapshots() -> tuple[Any, Any]:
        return tuple(  # type: ignore[return-value]
            catalog.load_table(f"{t.namespace}.{t.name}").current_snapshot() for t in (ledger, base)
        )

    with dg.instance_for_test() as instance:
        worker, outcome = _start_worker(
            defs, instance, "calm", [spec.name, other.name], heartbeat_seconds=1, tables_at_once=2
        )

        def alive() -> None:
            assert worker.is_alive(), outcome

        produce(
            workload(spec, random.Random(61), keys=80, events=300), spec.source.topic, bootstrap
        )
        until_base_matches(spec, iceberg, expected_base(spec, kafka), alive)

        # Paused: new changes wait in the topic, ledger and base stay where they are.
        with table_paused(catalog, spec, "maintenance"):
            before = snapshots()
            produce(
                workload(spec, random.Random(62), keys=80, events=300), spec.source.topic, bootstrap
            )
            # The worker's other table is not held up by this one's pause.
            produce(
                workload(other, random.Random(65), keys=80, events=300),
                other.source.topic,
                bootstrap,
            )
            until_base_matches(other, iceberg, expected_base(other, kafka), alive)
            time.sleep(3)  # more cycles and heartbeats of the worker
            assert [s.snapshot_id for s in snapshots()] == [s.snapshot_id for s in before]
            alive()
        until_base_matches(spec, iceberg, expected_base(spec, kafka), alive)
        assert table_pause(catalog, spec) is None

        # Maintenance while the worker runs: the rewrites under the pause, the rest not.
        produce(
            workload(spec, random.Random(63), keys=80, events=300), spec.source.topic, bootstrap
        )
        held: list[tuple[str, str | None]] = []

        def seen(message: str) -> None:
            pause = table_pause(catalog, spec)
            held.append((message, pause.by if pause else None))

        maintain_table(spark, "lake", catalog, spec, log=seen)
        rewrites = [by for m, by in held if "rewrite_data_files" in m or "purge_tombstones" in m]
        tidy = [by for m, by in held if "expire_snapshots" in m or "remove_orphan_files" in m]
        assert rewrites, held
        assert all(by and by.startswith("maintenance ") for by in rewrites), held
        assert tidy, held
        assert not any(tidy), held
        assert table_pause(catalog, spec) is None

        # An evolution while the worker runs: its commits under a pause it gives back.
        extra = ColumnSpec(id=max(c.id for c in spec.columns) + 1, name="coupon", type="text")
        evolved = with_column(spec, extra, spec.columns[-1].name)
        converge(
            lambda: spark,
            "lake",
            catalog,
            specs_dir,
            spec.name,
            proposed_yaml=render_spec_yaml(evolved),
        )
        assert table_pause(catalog, spec) is None
        assert any(by.startswith("evolution ") for by in _pauses_in_history(catalog, spec))
        produce(
            workload(spec, random.Random(64), keys=80, events=300), spec.source.topic, bootstrap
        )
        until_base_matches(evolved, iceberg, expected_base(evolved, kafka), alive)

        [record] = instance.get_run_records(dg.RunsFilter(job_name=CONTINUOUS_JOB))
        messages = [e.user_message for e in instance.all_logs(record.dagster_run.run_id)]
        assert any("paused by maintenance" in m for m in messages), messages[-20:]
        assert any("the pause ended; resumed" in m for m in messages), messages[-20:]
        instance.report_run_canceling(record.dagster_run)
        worker.join(120)
        assert not worker.is_alive()
    assert outcome["result"].success
    assert_ledger_exact(evolved, iceberg, kafka)
    # Its ledger commits wrote one file each (ledger_files_per_commit: 1) though the topic has
    # two partitions; one commit may cross an hour and write two.
    ledger_table = catalog.load_table(f"{ledger.namespace}.{ledger.name}")
    added = [
        summary_count(s.summary, "added-data-files")
        for s in ledger_table.snapshots()
        if s.summary.get(KIND_PROPERTY) == "incremental"
    ]
    assert len(added) >= 4, added
    assert sum(1 for n in added if n > 1) <= 1, added


def test_a_broker_killed_under_a_worker_and_started_again_loses_and_doubles_nothing(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    resources: dict[str, Any],
    broker: Settings,
    tmp_path: Path,
) -> None:
    """The worker's broker (this test's own; the session's catalog) is killed with SIGKILL in
    the middle of a stream and started again 8 s later on the same port and data. The worker's
    cycles fail while it is away and back off; the run survives, and base equals the replay of
    the topic with the ledger holding every record once."""
    state = stack_up(broker)
    kafka = KafkaResource(bootstrap_servers=state.bootstrap_servers, home=str(broker.home))
    spec = worker_spec(it_settings, kafka, "steady")
    specs_dir = tmp_path / "specs"
    specs_dir.mkdir()
    write_spec(spec, specs_dir / f"{spec.name}.yaml")
    defs = build_defs(
        specs=[spec],
        settings=replace(it_settings, specs_dir=specs_dir),
        resource_overrides={**resources, "kafka": kafka},
    )
    ensure_tables(spark, "lake", spec)
    events = workload(spec, random.Random(65), keys=120, events=1200)
    slices = [events[i : i + 200] for i in range(0, len(events), 200)]

    with dg.instance_for_test() as instance:
        worker, outcome = _start_worker(defs, instance, "steady", spec.name, heartbeat_seconds=2)

        def alive() -> None:
            assert worker.is_alive(), outcome

        for part in slices[:3]:
            produce(part, spec.source.topic, state.bootstrap_servers)
            time.sleep(1.0)
        kill_broker(state)  # mid-stream: the worker is reading or committing a slice
        time.sleep(8)
        alive()
        back = stack_up(broker)
        assert back.bootstrap_servers == state.bootstrap_servers  # same port, same data
        for part in slices[3:]:
            produce(part, spec.source.topic, back.bootstrap_servers)
        until_base_matches(spec, iceberg, expected_base(spec, kafka), alive)
        [record] = instance.get_run_records(dg.RunsFilter(job_name=CONTINUOUS_JOB))
        messages = [e.user_message for e in instance.all_logs(record.dagster_run.run_id)]
        instance.report_run_canceling(record.dagster_run)
        worker.join(120)
        assert not worker.is_alive()
    assert outcome["result"].success
    assert_ledger_exact(spec, iceberg, kafka)
    # Shown with -s: how the outage looked from the worker.
    print("\n".join(m for m in messages if "cycle failed" in m))


def _pauses_in_history(catalog: Any, spec: Any) -> list[str]:
    """The holders of the pauses that base's earlier metadata versions show, oldest first."""
    layout = base_layout(spec)
    table = catalog.load_table(f"{layout.namespace}.{layout.name}")
    holders: list[str] = []
    for entry in table.metadata.metadata_log:
        by = StaticTable.from_metadata(entry.metadata_file).properties.get(PAUSED_BY)
        if by and by not in holders:
            holders.append(by)
    return holders


def _start_worker(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    name: str,
    table: str | list[str],
    **config: Any,
) -> tuple[threading.Thread, dict[str, Any]]:
    """A run of ``continuous_tables`` in a thread (idle 0.2 s, ``config`` on top); the dict
    gets its result under ``"result"`` once the run ends."""
    outcome: dict[str, Any] = {}
    tables = [table] if isinstance(table, str) else table

    def work() -> None:
        outcome["result"] = defs.resolve_job_def(CONTINUOUS_JOB).execute_in_process(
            instance=instance,
            run_config=worker_run_config(name, tables, **{"idle_seconds": 0.2, **config}),
            tags={WORKER_TAG: name, "cdc/tables": ",".join(tables)},
            raise_on_error=False,
        )

    worker = threading.Thread(target=work, name="worker")
    worker.start()
    return worker, outcome


def beating_workers(runs: list[Any]) -> list[Any]:
    """The worker runs among ``runs`` that are started and have beaten at least once."""
    return [
        r
        for r in runs
        if r.job_name == CONTINUOUS_JOB
        and r.status == dg.DagsterRunStatus.STARTED
        and HEARTBEAT_TAG in r.tags
    ]


def worker_spec(settings: Settings, kafka: KafkaResource, worker: str) -> Any:
    plain = isolated(example_spec(settings, "orders"), partitions=2, kafka=kafka)
    return plain.model_copy(
        update={"pipeline": plain.pipeline.model_copy(update={"worker": worker})}
    )


def until_base_matches(spec: Any, iceberg: IcebergCatalogResource, want: Any, alive: Any) -> None:
    deadline = time.monotonic() + CATCH_UP_S
    while True:
        alive()
        try:
            assert_base_matches(spec, iceberg, want)
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(2)


def test_the_daemon_keeps_a_worker_alive_and_replaces_a_killed_one_losing_nothing(
    it_settings: Settings,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    tmp_path: Path,
) -> None:
    """Through a real dagster-daemon: the continuous_workers sensor starts the worker of a new
    spec (which onboards its table), the worker brings base to the replay; SIGKILL of its process
    mid-stream leaves its run STARTED, the sensor fails it when its heartbeat stops and starts
    another, and base again equals the replay with every record in the ledger once."""
    spec = worker_spec(it_settings, kafka, "w1")
    specs_dir = tmp_path / "specs"
    specs_dir.mkdir()
    write_spec(spec, specs_dir / f"{spec.name}.yaml")
    bootstrap = kafka.resolved_bootstrap()
    events = workload(spec, random.Random(158), keys=120, events=1800)
    env = {
        "CDC_ASSETS_HOME": str(it_settings.home),
        "CDC_ASSETS_SPECS": str(specs_dir),
        "CDC_ASSETS_WORKER_HEARTBEAT_S": "2",
    }
    home = dagster_home(tmp_path)
    log = tmp_path / "daemon.log"
    instance = dg.DagsterInstance.from_config(str(home))

    produce(events[:600], spec.source.topic, bootstrap)
    with running_daemon(home, env, log) as daemon:

        def alive() -> None:
            assert daemon.poll() is None, log.read_text()[-4000:]

        runs = wait_until(
            instance, daemon, log, lambda runs: bool(beating_workers(runs)), "a beating worker", 300
        )
        # Other runs may be there too (a micro-batch before the worker started, the checks).
        [first] = beating_workers(runs)
        assert first.tags[WORKER_TAG] == "w1"
        until_base_matches(spec, iceberg, expected_base(spec, kafka), alive)
        produce(events[600:1200], spec.source.topic, bootstrap)
        time.sleep(1.5)  # mid-stream: the worker is reading or committing this slice
        os.kill(int(first.tags[WORKER_PID_TAG]), signal.SIGKILL)
        produce(events[1200:], spec.source.topic, bootstrap)
        wait_until(
            instance,
            daemon,
            log,
            lambda runs: any(r.run_id != first.run_id for r in beating_workers(runs)),
            "a second worker",
            300,
        )
        until_base_matches(spec, iceberg, expected_base(spec, kafka), alive)
        killed = instance.get_run_by_id(first.run_id)
        assert killed is not None
        assert killed.status == dg.DagsterRunStatus.FAILURE
        states = [(r.job_name, r.status.value) for r in instance.get_runs()]
    assert_ledger_exact(spec, iceberg, kafka)
    print(states)
