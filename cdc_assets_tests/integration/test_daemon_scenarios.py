"""Seeded schema-change scenarios through a real `dagster-daemon` (issue 53): the sensors start
the runs, concurrently where they do, and base must end equal to the replay oracle.

Each seed picks how the table starts (a new spec whose tables do not exist, or onboarded), what
the source changes (a column added, widened past INT, renamed, dropped, or added and widened, or
dropped and added, in one ALTER), how the stream arrives (all before the daemon starts, or in
slices while it runs) and where a run fails once (an evolution, an ingest before its commit, an
upsert's MERGE; or none).
Nothing drives the order: the daemon's sensors must reach the same base whatever it is. The
default seeds run in `make test`; `CDC_ASSETS_SCENARIO_SEEDS=100-199` or
`benchmarks/soak_scenarios.py` runs more. A seed that fails gets a named test of its own.
The runs go through Dagster's default run launcher, as in the project's Dagster home; one fixed
scenario also runs under Dagster's default executor (a process per step).
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from cdc_assets.jobs.continuous import CONTINUOUS_JOB
from cdc_assets.pipeline.shared.failpoint import FAIL_ONCE_ENV
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.evolution import apply_plan, classify
from cdc_assets.schema.layers import base_layout, dead_letter_layout
from cdc_assets.settings import Settings
from cdc_assets.spec.models import ColumnSpec, TableSpec
from cdc_assets_dev.demo.events import KafkaRecord, workload
from cdc_assets_tests.integration.test_evolve import base_differences, later, wide_logins
from cdc_assets_tests.integration.test_ingest import read_table
from cdc_assets_tests.integration.test_schema_evolution_flow import (
    Table,
    schema_record,
    with_column,
    with_type,
)
from cdc_assets_tests.integration.test_upsert import expected_base
from cdc_assets_tests.support.daemon import dagster_home, running_daemon
from cdc_assets_tests.support.scenarios import Scenario, scenario, seeds_to_run

CONVERGE_TIMEOUT_S = 420.0


def renamed(v1: TableSpec) -> TableSpec:
    """``display_name`` renamed to ``full_name`` at the source, as the evolution applies it."""
    data = v1.model_dump(mode="json", by_alias=True)
    for column in data["columns"]:
        if column["name"] == "display_name":
            column["name"] = "full_name"
            column["sink"] = {"name": "display_name"}  # the Iceberg column keeps its name
    data["spec_version"] = v1.spec_version + 1
    proposed = TableSpec.model_validate(data)
    plan = classify(v1, proposed, {"display_name": "full_name"})
    assert plan.supported, plan.describe()
    return apply_plan(v1, plan)


def source_change(v1: TableSpec, change: str) -> tuple[TableSpec, str]:
    """The source's shape after ``change`` and the ALTER Debezium records for it."""
    if change == "rename":
        return renamed(v1), "ALTER TABLE users RENAME COLUMN display_name TO full_name"
    shape, ddl = v1, []
    if "drop" in change:
        # the source's shape without the column (the evolution soft-drops it: its older values
        # stay, rows changed since read null)
        data = v1.model_dump(mode="json", by_alias=True)
        data["columns"] = [c for c in data["columns"] if c["name"] != "country"]
        data["spec_version"] = v1.spec_version + 1
        shape = TableSpec.model_validate(data)
        ddl.append("DROP COLUMN country")
    if "add" in change:
        phone = ColumnSpec(id=9, name="phone", type="varchar(32)")
        shape = with_column(shape, phone, "display_name")
        ddl.append("ADD COLUMN phone varchar(32) AFTER display_name")
    if "widen" in change:
        shape = with_type(shape, "login_count", "bigint")
        ddl.append("MODIFY login_count BIGINT NOT NULL DEFAULT 0")
    return shape, "ALTER TABLE users " + ", ".join(ddl)


def stream(s: Scenario, v1: TableSpec, shape: TableSpec) -> tuple[list[KafkaRecord], ...]:
    """The table's records before the change and after it (in source order)."""
    before = workload(v1, random.Random(s.seed * 7), keys=s.keys, events=s.events)
    after = later(workload(shape, random.Random(s.seed * 7 + 1), keys=s.keys, events=s.events), 1)
    if "widen" in s.change:
        after = wide_logins(after)
    return before, after


def converged(
    table: Table, iceberg: IcebergCatalogResource, kafka: KafkaResource, version: int
) -> list[str]:
    """What still differs from the oracle (empty: base equals the replay of the topic under the
    spec the evolution stored, and no dead letter waits)."""
    current = table.spec()
    if current.spec_version < version:
        return [f"spec version {current.spec_version}, {version} expected"]
    layout = base_layout(current)
    try:
        rows = read_table(iceberg, layout.namespace, layout.name)
        letters = read_table(
            iceberg, dead_letter_layout(current).namespace, dead_letter_layout(current).name
        )
    except Exception as exc:  # a table the daemon has not created yet
        return [f"not readable yet: {exc}"]
    diffs = base_differences(current, rows, expected_base(current, kafka))
    return diffs + [f"dead letter: {r['reason']}" for r in letters]


@pytest.mark.parametrize("seed", seeds_to_run())
def test_a_seeded_scenario_converges_through_the_daemon(
    seed: int,
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    tmp_path: Path,
) -> None:
    run_scenario(scenario(seed), it_settings, spark, iceberg, kafka, tmp_path)


def test_a_scenario_converges_under_dagster_s_default_executor(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    tmp_path: Path,
) -> None:
    """With CDC_ASSETS_EXECUTOR=dagster each step of a run is a process of its own with a Spark
    driver of its own (Dagster's multiprocess executor): the table converges all the same. The
    scenario: a new spec, a column added and one widened, in slices, an ingest failing once
    before its commit."""
    s = Scenario(
        seed=0,
        start="new spec",
        change="add+widen",
        delivery="in slices",
        fail_once="ingest_before_commit",
        keys=20,
        events=60,
        pauses=(4.0, 6.0),
        keeper="runs",
    )
    runs = run_scenario(
        s, it_settings, spark, iceberg, kafka, tmp_path, {"CDC_ASSETS_EXECUTOR": "dagster"}
    )
    # The runs' steps went through Dagster's multiprocess executor.
    instance = dg.DagsterInstance.from_config(str(tmp_path / "dagster"))
    started = [
        e.message or ""
        for r in runs
        if r.job_name == "sync_tables"
        for e in instance.all_logs(r.run_id, of_type=dg.DagsterEventType.ENGINE_EVENT)
    ]
    assert any("multiprocess" in m.lower() for m in started), started[:5]


def run_scenario(
    s: Scenario,
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    tmp_path: Path,
    extra_env: dict[str, str] | None = None,
) -> list[Any]:
    """The daemon keeps the table through scenario ``s`` until base equals the replay; its
    runs."""
    print(s)
    table = Table(it_settings, kafka, tmp_path)
    if s.keeper == "worker":
        table.keep_with_worker("w")
    v1 = table.v1
    if s.start == "onboarded":
        ensure_tables(spark, "lake", v1)
    shape, ddl = source_change(v1, s.change)
    before, after = stream(s, v1, shape)
    change = [schema_record(shape, ddl)]
    env = {
        "CDC_ASSETS_HOME": str(it_settings.home),
        "CDC_ASSETS_SPECS": str(table.specs_dir),
        "CDC_ASSETS_WORKER_HEARTBEAT_S": "2",
        **(extra_env or {}),
    }
    if s.fail_once is not None:
        failed = tmp_path / "failed"
        failed.mkdir()
        env[FAIL_ONCE_ENV] = f"{s.fail_once}={failed}"
    if s.delivery == "at once":
        table.produce(before)
        table.produce(change, table.schema_topic)
        table.produce(after)
    home = dagster_home(tmp_path)
    log = tmp_path / "daemon.log"
    instance = dg.DagsterInstance.from_config(str(home))
    with running_daemon(home, env, log) as daemon:
        if s.delivery == "in slices":
            half = len(after) // 2
            table.produce(before)
            time.sleep(s.pauses[0])
            table.produce(change, table.schema_topic)
            table.produce(after[:half])
            time.sleep(s.pauses[1])
            table.produce(after[half:])
        deadline = time.monotonic() + CONVERGE_TIMEOUT_S
        left: list[str] = ["not checked yet"]
        while time.monotonic() < deadline:
            assert daemon.poll() is None, log.read_text()[-4000:]
            runs = list(instance.get_runs())
            # A worker's run does not finish: every other run must have.
            if runs and all(r.is_finished or r.job_name == CONTINUOUS_JOB for r in runs):
                left = converged(table, iceberg, kafka, v1.spec_version + 1)
                if not left:
                    break
            time.sleep(3)
        states = [(r.job_name, r.status.value, r.tags.get("cdc/trigger")) for r in runs]
        assert not left, f"{s}: base still differs: {left[:10]}\nruns: {states}"
    # A worker's run is still going (STARTED) when the daemon stops; it must not have failed.
    failures = [
        r
        for r in runs
        if r.status != dg.DagsterRunStatus.SUCCESS
        and not (r.job_name == CONTINUOUS_JOB and r.status == dg.DagsterRunStatus.STARTED)
    ]
    if s.keeper == "worker":
        assert any(r.job_name == CONTINUOUS_JOB for r in runs), states
    for run in failures:  # in full in the captured output (an assertion message is cut short)
        print(_failure(instance, run))
    # Only the injected failure may have failed a run; it was retried.
    assert len(failures) <= (1 if s.fail_once else 0), (
        str(s),
        states,
        [_failure(instance, r) for r in failures],
    )
    return runs


def _failure(instance: dg.DagsterInstance, run: dg.DagsterRun) -> str:
    """Why a run failed: its failed steps' errors, else the run's own message."""
    texts = []
    for entry in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE):
        event = entry.dagster_event
        error = event.step_failure_data.error if event is not None else None
        if error is not None:
            texts.append(f"{event.step_key if event else ''}: {error.to_string()[-3000:]}")
    for entry in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE):
        texts.append(entry.message or "")
    return f"{run.job_name} {run.run_id}: " + "\n".join(texts)
