"""The continuous worker (issue 58): a long-running run of ``continuous_tables`` that ingests and
upserts its table in a loop, while ordinary micro-batch runs of the same table run at the same
time. Base must equal the replay of the topic and the ledger hold every record once; the worker's
commits are materializations of the table's assets, it beats, and it stops when its run is
terminated."""

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

from cdc_assets.assets.keys import asset_key
from cdc_assets.definitions import build_defs
from cdc_assets.demo.events import workload
from cdc_assets.demo.events.produce import produce
from cdc_assets.jobs.continuous import (
    CONTINUOUS_JOB,
    HEARTBEAT_TAG,
    WORKER_TAG,
    live_worker_tables,
    worker_run_config,
)
from cdc_assets.jobs.sync import SYNC_JOB, sync_selection
from cdc_assets.pipeline.tables import ensure_tables
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.run_launcher import PID_TAG
from cdc_assets.sensors.new_offsets import current_hour_key
from cdc_assets.settings import Settings
from cdc_assets.spec.versions import write_spec
from cdc_assets_tests.integration.test_ingest import isolated
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
    spec = _worker_spec(it_settings, kafka, "hot")
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
        outcome: dict[str, Any] = {}

        def work() -> None:
            outcome["result"] = defs.resolve_job_def(CONTINUOUS_JOB).execute_in_process(
                instance=instance,
                run_config=worker_run_config(
                    "hot",
                    [spec.name],
                    idle_seconds=0.2,
                    heartbeat_seconds=2,
                    commit_interval_seconds=1.0,
                ),
                tags={WORKER_TAG: "hot", "cdc/tables": spec.name},
                raise_on_error=False,
            )

        worker = threading.Thread(target=work, name="worker")
        worker.start()
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

        _until_base_matches(spec, iceberg, want, alive)
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


def _worker_spec(settings: Settings, kafka: KafkaResource, worker: str) -> Any:
    plain = isolated(example_spec(settings, "orders"), partitions=2, kafka=kafka)
    return plain.model_copy(
        update={"pipeline": plain.pipeline.model_copy(update={"worker": worker})}
    )


def _until_base_matches(spec: Any, iceberg: IcebergCatalogResource, want: Any, alive: Any) -> None:
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
    spec = _worker_spec(it_settings, kafka, "w1")
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

    def beating(runs: list[Any]) -> list[Any]:
        return [
            r
            for r in runs
            if r.job_name == CONTINUOUS_JOB
            and r.status == dg.DagsterRunStatus.STARTED
            and HEARTBEAT_TAG in r.tags
        ]

    produce(events[:600], spec.source.topic, bootstrap)
    with running_daemon(home, env, log) as daemon:

        def alive() -> None:
            assert daemon.poll() is None, log.read_text()[-4000:]

        runs = wait_until(
            instance, daemon, log, lambda runs: bool(beating(runs)), "a beating worker", 300
        )
        # Other runs may be there too (a micro-batch before the worker started, the checks).
        [first] = beating(runs)
        assert first.tags[WORKER_TAG] == "w1"
        _until_base_matches(spec, iceberg, expected_base(spec, kafka), alive)
        produce(events[600:1200], spec.source.topic, bootstrap)
        time.sleep(1.5)  # mid-stream: the worker is reading or committing this slice
        os.kill(int(first.tags[PID_TAG]), signal.SIGKILL)
        produce(events[1200:], spec.source.topic, bootstrap)
        wait_until(
            instance,
            daemon,
            log,
            lambda runs: any(r.run_id != first.run_id for r in beating(runs)),
            "a second worker",
            300,
        )
        _until_base_matches(spec, iceberg, expected_base(spec, kafka), alive)
        killed = instance.get_run_by_id(first.run_id)
        assert killed is not None
        assert killed.status == dg.DagsterRunStatus.FAILURE
        states = [(r.job_name, r.status.value) for r in instance.get_runs()]
    assert_ledger_exact(spec, iceberg, kafka)
    print(states)
