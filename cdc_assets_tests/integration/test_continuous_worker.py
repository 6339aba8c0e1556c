"""The continuous worker (issue 58): a long-running run of ``continuous_tables`` that ingests and
upserts its table in a loop, while ordinary micro-batch runs of the same table run at the same
time. Base must equal the replay of the topic and the ledger hold every record once; the worker's
commits are materializations of the table's assets, it beats, and it stops when its run is
terminated."""

import random
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

CATCH_UP_S = 240.0


def test_a_worker_and_micro_batch_runs_at_once_lose_and_double_nothing(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    resources: dict[str, Any],
    tmp_path: Path,
) -> None:
    plain = isolated(example_spec(it_settings, "orders"), partitions=2, kafka=kafka)
    spec = plain.model_copy(
        update={"pipeline": plain.pipeline.model_copy(update={"worker": "hot"})}
    )
    specs_dir = tmp_path / "specs"
    specs_dir.mkdir()
    write_spec(spec, specs_dir / f"{spec.name}.yaml")
    settings = replace(it_settings, specs_dir=specs_dir, tables_at_once=1)
    defs = build_defs(specs=[spec], settings=settings, resource_overrides=resources)
    ensure_tables(spark, "lake", spec)
    bootstrap = kafka.resolved_bootstrap()
    events = workload(spec, random.Random(58), keys=150, events=2400)
    slices = [events[i : i + 400] for i in range(0, len(events), 400)]

    with dg.instance_for_test() as instance:
        outcome: dict[str, Any] = {}

        def work() -> None:
            outcome["result"] = defs.resolve_job_def(CONTINUOUS_JOB).execute_in_process(
                instance=instance,
                run_config=worker_run_config(
                    "hot", [spec.name], idle_seconds=0.2, heartbeat_seconds=2
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
        deadline = time.monotonic() + CATCH_UP_S
        while True:
            assert worker.is_alive(), outcome
            try:
                assert_base_matches(spec, iceberg, want)
                break
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(2)
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
