"""A partition backfill of the ledger launched as Dagster launches it (issue 26): `dagster job
backfill` submits one run per hour to a Dagster home configured like the project's own (queued
runs, a pool per table), and a real `dagster-daemon` dequeues them and starts each in a run
worker of its own, which loads the code location from `workspace.yaml`. The damaged hour is
rebuilt exactly; the other hour, the consumed offsets and every other record are untouched."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg
from confluent_kafka import Producer

from cdc_assets.pipeline.ingest.ingest import ingest_incremental
from cdc_assets.pipeline.shared.offsets import committed_offsets
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.layers import ledger_layout
from cdc_assets.settings import Settings
from cdc_assets.spec.versions import write_spec
from cdc_assets_dev.demo.events import DebeziumEventFactory
from cdc_assets_tests.conftest import PROJECT_ROOT
from cdc_assets_tests.integration.test_ingest import isolated, read_table
from cdc_assets_tests.integration.test_ingest_recovery import oracle_check
from cdc_assets_tests.support.bad_records import base_row, users_spec
from cdc_assets_tests.support.daemon import BIN, dagster_home, running_daemon, wait_until


def test_a_ledger_partition_backfill_runs_through_the_daemon(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    tmp_path: Path,
) -> None:
    spec = isolated(users_spec(), kafka=kafka)
    ensure_tables(spark, "lake", spec)
    factory = DebeziumEventFactory(spec)
    # Hours well before the current one (so their runs rebuild), and recent: the broker's
    # retention deletes records whose timestamps are older than 7 days.
    ten = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=4)
    hours = [(ten + timedelta(hours=h)).strftime("%Y-%m-%d-%H:00") for h in (0, 1)]
    producer = Producer(kafka.client_conf())
    for i in range(60):
        record = factory.create(base_row(id=i + 1, email=f"u{i}@example.com"))
        stamp = ten + timedelta(minutes=i * 2)  # 30 records in each hour
        producer.produce(
            spec.source.topic,
            key=record.key,
            value=record.value,
            timestamp=int(stamp.timestamp() * 1000),
        )
    assert producer.flush(30) == 0
    first = ingest_incremental(spark, "lake", iceberg.load_catalog(), kafka, spec)
    assert first.hours == hours
    layout = ledger_layout(spec)
    ledger = f"lake.{layout.namespace}.{layout.name}"
    identifier = f"{layout.namespace}.{layout.name}"
    offsets = committed_offsets(iceberg.load_catalog().load_table(identifier))
    first_hr, second_hr = ten.hour, (ten + timedelta(hours=1)).hour
    spark.sql(f"DELETE FROM {ledger} WHERE hr = {first_hr} AND _kafka_offset % 3 = 0")  # damage
    eleven = {
        r["_kafka_offset"]: r["_processed_at"]
        for r in read_table(iceberg, layout.namespace, layout.name)
        if r["hr"] == second_hr
    }
    damaged = hours[:1]  # one run: the other hour must come through it untouched

    specs_dir = tmp_path / "specs"
    specs_dir.mkdir()
    write_spec(spec, specs_dir / f"{spec.name}.yaml")
    home = dagster_home(tmp_path)
    env = {"CDC_ASSETS_HOME": str(it_settings.home), "CDC_ASSETS_SPECS": str(specs_dir)}
    log = tmp_path / "daemon.log"
    with running_daemon(home, env, log) as daemon:
        submitted = subprocess.run(
            [
                str(BIN / "dagster"),
                *("job", "backfill", "-j", "ingest_ledgers", "-w", "workspace.yaml"),
                *("--partitions", ",".join(damaged), "--noprompt"),
            ],
            cwd=PROJECT_ROOT,
            env={**os.environ, **env, "DAGSTER_HOME": str(home)},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        instance = dg.DagsterInstance.from_config(str(home))

        def ended(runs: list[Any]) -> bool:
            backfill = [r for r in runs if r.tags.get("dagster/backfill")]
            return len(backfill) >= len(damaged) and all(r.is_finished for r in runs)

        runs = wait_until(instance, daemon, log, ended, "the backfill's runs")
    backfill = [r for r in runs if r.tags.get("dagster/backfill")]
    assert sorted(r.tags.get("dagster/partition") for r in backfill) == damaged
    assert {r.job_name for r in backfill} == {"ingest_ledgers"}
    assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs), [
        (r.job_name, r.status) for r in runs
    ]

    rows = read_table(iceberg, layout.namespace, layout.name)
    assert sorted(r["_kafka_offset"] for r in rows if r["hr"] == first_hr) == list(range(30))
    kept = {r["_kafka_offset"]: r["_processed_at"] for r in rows if r["hr"] == second_hr}
    assert kept == eleven  # not selected: the same records, never rewritten
    assert committed_offsets(iceberg.load_catalog().load_table(identifier)) == offsets
    oracle_check(spec, kafka, iceberg)
