"""Evolution racing an ingest on the daemon's own path (issue 27): a real `dagster-daemon` with
the project's sensors, no in-process driver.

A stream arrives at once: rows of v1, the schema change (a column added and a column widened
past INT in one ALTER), rows of the new shape. The `new_kafka_offsets` sensor starts a
`sync_tables` run (ingest and upsert), which loaded spec v1; its run worker reads and decodes
the whole batch, then is held before its commit (hold point ``ingest_before_commit``, armed for
the daemon's run workers). Meanwhile
the `schema_changes` sensor starts the evolution, which runs to the end (and `ledger_updated`
its upsert). Released, the ingest commits and catches up, and the same run's upsert, still on
spec v1, applies the batch and catches base up. Base must equal the replay of the topic under
the final spec, with no dead letter left.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import dagster as dg

from cdc_assets.pipeline.shared.failpoint import HOLD_ENV
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.layers import dead_letter_layout
from cdc_assets.settings import Settings
from cdc_assets.spec.models import ColumnSpec
from cdc_assets_dev.demo.events import workload
from cdc_assets_tests.integration.test_evolve import later, wide_logins
from cdc_assets_tests.integration.test_ingest import read_table
from cdc_assets_tests.integration.test_schema_evolution_flow import (
    Table,
    schema_record,
    with_column,
    with_type,
)
from cdc_assets_tests.integration.test_upsert import assert_base_matches, expected_base
from cdc_assets_tests.support.daemon import dagster_home, running_daemon, wait_until

HELD_TIMEOUT_S = 300.0


def test_the_daemon_evolving_while_an_ingest_is_held_loses_no_value(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    tmp_path: Path,
) -> None:
    table = Table(it_settings, kafka, tmp_path)
    v1 = table.v1
    ensure_tables(spark, "lake", v1)
    final = with_type(
        with_column(v1, ColumnSpec(id=9, name="phone", type="varchar(32)"), "display_name"),
        "login_count",
        "bigint",
    )
    table.produce(workload(v1, random.Random(61), keys=30, events=90))
    table.produce(
        [
            schema_record(
                final,
                "ALTER TABLE users ADD COLUMN phone varchar(32) AFTER display_name, "
                "MODIFY login_count BIGINT NOT NULL DEFAULT 0",
            )
        ],
        table.schema_topic,
    )
    table.produce(wide_logins(later(workload(final, random.Random(62), keys=30, events=90), 1)))

    hold = tmp_path / "hold"
    hold.mkdir()
    home = dagster_home(tmp_path)
    env = {
        "CDC_ASSETS_HOME": str(it_settings.home),
        "CDC_ASSETS_SPECS": str(table.specs_dir),
        HOLD_ENV: f"ingest_before_commit={hold}",
    }
    log = tmp_path / "daemon.log"
    instance = dg.DagsterInstance.from_config(str(home))
    with running_daemon(home, env, log) as daemon:
        deadline = time.monotonic() + HELD_TIMEOUT_S
        while not (hold / "ingest_before_commit.held").exists():
            assert daemon.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, "no ingest run reached its hold point"
            time.sleep(0.5)

        def evolved(runs: list[Any]) -> bool:
            return any(
                r.job_name == "evolve_schemas" and r.status == dg.DagsterRunStatus.SUCCESS
                for r in runs
            )

        wait_until(instance, daemon, log, evolved, "the sensor-started evolution")
        assert table.spec().spec_version == 2
        (hold / "ingest_before_commit.release").touch()

        def upserted_after_the_ingest(runs: list[Any]) -> bool:
            """The held micro-batch (a `sync_tables` run) ended: its upsert ran after its
            ingest's commit, in the same run, with the spec it loaded before the evolution."""
            return all(r.is_finished for r in runs) and any(
                r.job_name == "sync_tables" and r.status == dg.DagsterRunStatus.SUCCESS
                for r in runs
            )

        runs = wait_until(instance, daemon, log, upserted_after_the_ingest, "the upsert")
    failed = [(r.job_name, r.status) for r in runs if r.status != dg.DagsterRunStatus.SUCCESS]
    assert not failed, failed
    current = table.spec()
    assert_base_matches(current, iceberg, expected_base(current, kafka))
    layout = dead_letter_layout(current)
    assert read_table(iceberg, layout.namespace, layout.name) == []
