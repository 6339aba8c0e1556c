"""Schema evolution through Dagster on the real stack: a column added at the source mid-stream is
seen by the push sensor (Debezium's schema-change topic), applied by one evolve run, and reaches
base; pull then sees no drift and a second proposal of the same change is a recorded no-op; an
unsupported change touches nothing; evolutions of one table run one at a time.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from confluent_kafka.admin import NewTopic

from cdc_assets.assets.keys import asset_key, node_name
from cdc_assets.checks.runner import run_checks
from cdc_assets.cli import main
from cdc_assets.cli.common import materializations
from cdc_assets.definitions import build_defs
from cdc_assets.pipeline.shared.meta_tables import read_history
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.evolution import apply_plan, classify
from cdc_assets.schema.layers import base_layout
from cdc_assets.sensors.new_offsets import current_hour_key
from cdc_assets.settings import Settings
from cdc_assets.spec.load import load_spec
from cdc_assets.spec.models import ColumnSpec, TableSpec
from cdc_assets.spec.schema_change import parse_schema_change
from cdc_assets.spec.versions import write_spec
from cdc_assets_dev.demo.events import DebeziumEventFactory, KafkaRecord, produce, workload
from cdc_assets_tests.conftest import PROJECT_ROOT
from cdc_assets_tests.integration.test_evolve import later
from cdc_assets_tests.integration.test_ingest import isolated, read_table
from cdc_assets_tests.integration.test_upsert import example_spec, ingest, upsert


def with_column(spec: TableSpec, column: ColumnSpec, after: str) -> TableSpec:
    """The next spec version with ``column`` after ``after`` (through the classifier)."""
    columns: list[ColumnSpec] = []
    for c in spec.columns:
        columns.append(c)
        if c.name == after:
            columns.append(column)
    proposed = spec.model_copy(update={"columns": columns, "spec_version": spec.spec_version + 1})
    plan = classify(spec, TableSpec.model_validate(proposed.model_dump(by_alias=True)))
    assert plan.supported, plan.describe()
    return apply_plan(spec, plan)


def with_type(spec: TableSpec, name: str, type_text: str) -> TableSpec:
    """The next spec version with column ``name`` of type ``type_text`` (through the classifier)."""
    columns = [
        c.model_copy(update={"type": type_text}) if c.name == name else c for c in spec.columns
    ]
    proposed = spec.model_copy(update={"columns": columns, "spec_version": spec.spec_version + 1})
    plan = classify(spec, TableSpec.model_validate(proposed.model_dump(by_alias=True)))
    assert plan.supported, plan.describe()
    return apply_plan(spec, plan)


def create_table(spec: TableSpec) -> str:
    """The source's CREATE TABLE for a spec, as Debezium's schema-change record describes it."""
    record = DebeziumEventFactory(spec).schema_change("-- shape of " + spec.name)
    return parse_schema_change(record.value)[0].create_table


def schema_record(spec: TableSpec, ddl: str) -> KafkaRecord:
    return DebeziumEventFactory(spec).schema_change(ddl)


class Table:
    """One isolated users table with its own spec directory and schema-change topic."""

    def __init__(self, settings: Settings, kafka: KafkaResource, tmp: Path) -> None:
        spec = isolated(example_spec(settings, "users"), kafka=kafka)
        self.schema_topic = f"it.schema.{uuid.uuid4().hex[:8]}"
        admin = kafka.admin()
        admin.create_topics([NewTopic(self.schema_topic, num_partitions=1, replication_factor=1)])[
            self.schema_topic
        ].result(30)
        self.v1 = spec.model_copy(
            update={
                "source": spec.source.model_copy(update={"schema_change_topic": self.schema_topic})
            }
        )
        self.specs_dir = tmp / "specs"
        self.specs_dir.mkdir()
        write_spec(self.v1, self.specs_dir / "users.yaml")
        self.settings = replace(settings, specs_dir=self.specs_dir)
        self.kafka = kafka

    def keep_with_worker(self, worker: str) -> None:
        """The table kept fresh by a continuous worker (``pipeline.worker``) instead of runs."""
        pipeline = self.v1.pipeline.model_copy(update={"worker": worker})
        self.v1 = self.v1.model_copy(update={"pipeline": pipeline})
        write_spec(self.v1, self.specs_dir / "users.yaml")

    def spec(self) -> TableSpec:
        return load_spec(self.specs_dir / "users.yaml")

    def defs(self, resources: dict[str, Any]) -> dg.Definitions:
        return build_defs(specs=[self.spec()], settings=self.settings, resource_overrides=resources)

    def produce(self, records: list[KafkaRecord], topic: str | None = None) -> None:
        produce(records, topic or self.v1.source.topic, self.kafka.resolved_bootstrap())


def _tick(defs: dg.Definitions, name: str, instance: Any, resources: dict[str, Any]) -> Any:
    sensor = defs.get_sensor_def(name)
    context = dg.build_sensor_context(
        instance=instance, resources={"kafka": resources["kafka"]}, cursor=_cursors.get(name)
    )
    result = sensor(context)
    _cursors[name] = result.cursor if isinstance(result, dg.SensorResult) else None
    return result


_cursors: dict[str, str | None] = {}


def test_column_added_mid_stream_reaches_base_once(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    resources: dict[str, Any],
    tmp_path: Path,
) -> None:
    _cursors.clear()
    table = Table(it_settings, kafka, tmp_path)
    v1 = table.v1
    ensure_tables(spark, "lake", v1)
    table.produce(workload(v1, random.Random(31), keys=20, events=60))
    ingest(spark, iceberg, kafka, v1)
    upsert(spark, iceberg, v1)
    instance = dg.DagsterInstance.ephemeral()
    # the connector's snapshot recorded the table as v1 describes it: nothing to do
    table.produce([schema_record(v1, create_table(v1))], table.schema_topic)
    assert not _tick(table.defs(resources), "schema_changes", instance, resources).run_requests

    # the source adds a column; Debezium writes the DDL, then rows carry the new field
    v2 = with_column(v1, ColumnSpec(id=9, name="nickname", type="varchar(40)"), "display_name")
    started = time.monotonic()
    table.produce(
        [schema_record(v2, "ALTER TABLE users ADD COLUMN nickname varchar(40) AFTER display_name")],
        table.schema_topic,
    )
    changed = later(workload(v2, random.Random(32), keys=20, events=60), 1)
    table.produce(changed)
    ingest(spark, iceberg, kafka, v1)  # the pipeline still runs v1: values stay in _row_json

    # one sensor tick, one evolve run
    defs = table.defs(resources)
    tick = _tick(defs, "schema_changes", instance, resources)
    (request,) = tick.run_requests
    assert request.tags["cdc/trigger"] == "schema_changes"
    run = defs.resolve_job_def("evolve_schemas").execute_in_process(
        instance=instance,
        run_config=request.run_config,
        asset_selection=list(request.asset_selection or []),
    )
    assert run.success
    evolved = table.spec()
    assert evolved.spec_version == 2
    assert [c.name for c in evolved.columns][3] == "nickname"
    upsert(spark, iceberg, evolved)
    latency = time.monotonic() - started

    layout = base_layout(evolved)
    base = {r["id"]: r for r in read_table(iceberg, layout.namespace, layout.name)}
    last: dict[Any, dict[str, Any] | None] = {}
    for batch, records in (("v1", []), ("v2", changed)):
        for r in records:
            if r.row is not None:
                last[r.row["id"]] = r.row if batch == "v2" else None
    expected = {k: row.get("nickname") for k, row in last.items() if row is not None}
    got = {k: base[k]["nickname"] for k in expected if k in base}
    assert got == {k: v for k, v in expected.items() if k in base}
    assert sum(v is not None for v in got.values()) > 5
    # the null_counts check sees the new column null exactly where no value could arrive
    outcomes, _ = run_checks(
        table.defs(resources), instance, checks=["null_counts", "schema_drift"]
    )
    by_name = {o.check: o for o in outcomes}
    assert by_name["schema_drift"].passed
    nulls = by_name["null_counts"].metadata["null_counts"]["nickname"]
    assert nulls == sum(r["nickname"] is None for r in base.values())
    assert nulls == len(base) - sum(v is not None for v in got.values())
    print(f"schema change event -> values in base: {latency:.1f} s")
    assert latency < 120

    # phase 3 on its own (the recovery after a crash between the spec write and the backfill)
    # finds nothing left to recover
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CDC_ASSETS_HOME", str(table.settings.home))
        mp.setenv("CDC_ASSETS_SPECS", str(table.specs_dir))
        assert main(["backfill", "users", "--column", "nickname"]) == 0
        assert main(["backfill", "users", "--column", "nope"]) == 2

    # the next tick has nothing new; pull sees no drift; the same change proposed again is a no-op
    assert not _tick(defs, "schema_changes", instance, resources).run_requests
    # a lost cursor replays the topic from its start, the v1 record first: only the newest
    # record of the table counts, so nothing moves the spec back
    _cursors.pop("schema_changes", None)
    assert not _tick(defs, "schema_changes", instance, resources).run_requests
    drift = defs.resolve_job_def("check_schema_drift").execute_in_process(instance=instance)
    observations = [
        e.event_specific_data.asset_observation  # type: ignore[union-attr]
        for e in drift.all_events
        if e.event_type == dg.DagsterEventType.ASSET_OBSERVATION
    ]
    (observed,) = observations
    assert observed.metadata["drift"].value is False
    again = defs.resolve_job_def("evolve_schemas").execute_in_process(
        instance=instance,
        run_config={
            "ops": {
                node_name("schema", "users"): {
                    "config": {"source_ddl": create_table(v2), "trigger": "pull"}
                }
            }
        },
        asset_selection=[asset_key("schema", "users")],
    )
    assert again.success
    history = [h for h in read_history(iceberg.load_catalog(), "users") if h.to_version >= 1]
    decisions = [(h.trigger, h.decision, h.from_version, h.to_version) for h in history[-2:]]
    assert decisions == [("push", "applied", 1, 2), ("pull", "no-op", 2, 2)]


def test_unsupported_change_touches_nothing(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    resources: dict[str, Any],
    tmp_path: Path,
) -> None:
    _cursors.clear()
    table = Table(it_settings, kafka, tmp_path)
    v1 = table.v1
    ensure_tables(spark, "lake", v1)
    before = iceberg.load_catalog().load_table(f"{v1.sink.namespace}.users").schema()
    # A key's type cannot change (another column's would become a new column).
    narrowed = v1.model_copy(
        update={
            "columns": [
                c.model_copy(update={"type": "varchar(20)"}) if c.name == "id" else c
                for c in v1.columns
            ]
        }
    )
    table.produce(
        [schema_record(narrowed, "ALTER TABLE users MODIFY id varchar(20) NOT NULL")],
        table.schema_topic,
    )
    instance = dg.DagsterInstance.ephemeral()
    defs = table.defs(resources)
    (request,) = _tick(defs, "schema_changes", instance, resources).run_requests
    run = defs.resolve_job_def("evolve_schemas").execute_in_process(
        instance=instance,
        run_config=request.run_config,
        asset_selection=list(request.asset_selection or []),
        raise_on_error=False,
    )
    assert not run.success
    (failure,) = run.get_step_failure_events()
    message = failure.event_specific_data.error.message  # type: ignore[union-attr]
    assert "rejected, no table was changed" in message
    assert "column id:" in message
    assert table.spec() == v1
    after = iceberg.load_catalog().load_table(f"{v1.sink.namespace}.users").schema()
    assert after == before
    (entry,) = read_history(iceberg.load_catalog(), "users")[-1:]
    assert entry.decision == "rejected"
    assert entry.reasons is not None
    assert "key or bucket column" in entry.reasons


def _evolve_child(table: Table, name: str, ddl: Path, dagster_home: Path) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "CDC_ASSETS_HOME": str(table.settings.home),
        "CDC_ASSETS_SPECS": str(table.specs_dir),
        "CDC_ASSETS_SPARK_MASTER": "local[1]",
        "DAGSTER_HOME": str(dagster_home),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "cdc_assets.cli", "evolve", name, "--ddl", str(ddl)],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.timeout(600)
def test_two_evolutions_of_one_table_run_one_at_a_time(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    tmp_path: Path,
) -> None:
    table = Table(it_settings, kafka, tmp_path)
    v1 = table.v1
    ensure_tables(spark, "lake", v1)
    v2 = with_column(v1, ColumnSpec(id=9, name="nickname", type="varchar(40)"), "display_name")
    v3 = with_column(v2, ColumnSpec(id=10, name="tier", type="varchar(10)"), "nickname")
    (tmp_path / "v2.sql").write_text(create_table(v2))
    (tmp_path / "v3.sql").write_text(create_table(v3))
    home = tmp_path / "dagster"
    home.mkdir()
    (home / "dagster.yaml").write_text("concurrency:\n  pools:\n    default_limit: 1\n")
    # the second starts while the first runs: it queues behind it and sees what it wrote
    first = _evolve_child(table, "users", tmp_path / "v2.sql", home)
    deadline = time.monotonic() + 120
    while not dg.DagsterInstance.from_config(str(home)).get_runs() and first.poll() is None:
        assert time.monotonic() < deadline, "the first evolution did not start"
        time.sleep(0.5)
    children = [first, _evolve_child(table, "users", tmp_path / "v3.sql", home)]
    outputs = [c.communicate(timeout=500)[0] for c in children]
    assert [c.returncode for c in children] == [0, 0], "\n".join(outputs)
    final = table.spec()
    assert final.spec_version == 3
    assert [c.name for c in final.columns][3:5] == ["nickname", "tier"]
    instance = dg.DagsterInstance.from_config(str(home))
    runs = instance.get_runs()
    assert len(runs) == 2
    spans = sorted(
        (s.start_time, s.end_time) for r in runs for s in instance.get_run_step_stats(r.run_id)
    )
    assert spans[0][1] <= spans[1][0], f"evolutions overlapped: {spans}"
    blocked = [
        r.run_id
        for r in runs
        if any(
            "blocked by limit for pool cdc_evolve/users" in (e.message or "")
            for e in instance.all_logs(r.run_id)
        )
    ]
    assert len(blocked) == 1


def test_postgres_new_field_in_row_events_is_pushed_from_the_embedded_schema(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    resources: dict[str, Any],
    tmp_path: Path,
) -> None:
    _cursors.clear()
    v1 = isolated(example_spec(it_settings, "orders"), kafka=kafka)
    specs_dir = tmp_path / "specs"
    specs_dir.mkdir()
    write_spec(v1, specs_dir / "orders.yaml")
    settings = replace(it_settings, specs_dir=specs_dir)
    ensure_tables(spark, "lake", v1)
    bootstrap = kafka.resolved_bootstrap()
    produce(
        workload(v1, random.Random(41), keys=20, events=60, embed_schema=True),
        v1.source.topic,
        bootstrap,
    )
    instance = dg.DagsterInstance.ephemeral()

    def ingest_job(spec: TableSpec) -> Any:
        defs = build_defs(specs=[spec], settings=settings, resource_overrides=resources)
        return defs, defs.resolve_job_def("ingest_ledgers").execute_in_process(
            instance=instance,
            partition_key=current_hour_key(datetime.now(UTC)),
            asset_selection=[asset_key("cdc", "orders")],
        )

    defs, _ = ingest_job(v1)
    assert not _tick(defs, "schema_changes", instance, resources).run_requests

    # the source adds a column; PostgreSQL's events just start carrying it
    v2 = with_column(v1, ColumnSpec(id=12, name="coupon", type="text"), "note")
    produce(
        later(workload(v2, random.Random(42), keys=20, events=60, embed_schema=True), 1),
        v1.source.topic,
        bootstrap,
    )
    defs, ingested = ingest_job(v1)
    cdc = materializations(ingested, asset_key("cdc", "orders"))[-1].metadata
    assert cdc["unknown_fields"].value == ["coupon"]
    # pull sees it too, from the same embedded schema
    (observed,) = _drift(defs, instance)
    assert observed["drift"].value is True
    assert "add column coupon text" in observed["plan"].value
    (request,) = _tick(defs, "schema_changes", instance, resources).run_requests
    run = defs.resolve_job_def("evolve_schemas").execute_in_process(
        instance=instance,
        run_config=request.run_config,
        asset_selection=list(request.asset_selection or []),
    )
    assert run.success
    evolved = load_spec(specs_dir / "orders.yaml")
    assert evolved.spec_version == 2
    assert evolved.columns_by_name["coupon"].type == "text"
    upsert(spark, iceberg, evolved)
    layout = base_layout(evolved)
    rows = read_table(iceberg, layout.namespace, layout.name)
    assert sum(r["coupon"] is not None for r in rows) > 5
    # applied: the next tick proposes nothing, and pull sees no drift
    defs = build_defs(specs=[evolved], settings=settings, resource_overrides=resources)
    assert not _tick(defs, "schema_changes", instance, resources).run_requests
    (observed,) = _drift(defs, instance)
    assert observed["drift"].value is False

    # a widening adds no field: the ingest reports nothing unknown, the embedded schema states
    # the new decimal precision, and the next tick starts its evolution
    v3 = with_type(evolved, "amount", "numeric(16,2)")
    produce(
        later(workload(v3, random.Random(43), keys=20, events=30, embed_schema=True), 2),
        v1.source.topic,
        bootstrap,
    )
    defs, ingested = ingest_job(evolved)
    assert (
        not materializations(ingested, asset_key("cdc", "orders"))[-1]
        .metadata["unknown_fields"]
        .value
    )
    (request,) = _tick(defs, "schema_changes", instance, resources).run_requests
    run = defs.resolve_job_def("evolve_schemas").execute_in_process(
        instance=instance,
        run_config=request.run_config,
        asset_selection=list(request.asset_selection or []),
    )
    assert run.success
    widened = load_spec(specs_dir / "orders.yaml")
    assert widened.spec_version == 3
    assert widened.columns_by_name["amount"].type == "decimal(16,2)"
    defs = build_defs(specs=[widened], settings=settings, resource_overrides=resources)
    assert not _tick(defs, "schema_changes", instance, resources).run_requests
    # events of the old shape arriving after the evolution look like a narrowing: no run
    produce(
        later(workload(evolved, random.Random(44), keys=5, events=5, embed_schema=True), 3),
        v1.source.topic,
        bootstrap,
    )
    assert not _tick(defs, "schema_changes", instance, resources).run_requests


def _drift(defs: dg.Definitions, instance: Any) -> list[Any]:
    run = defs.resolve_job_def("check_schema_drift").execute_in_process(instance=instance)
    return [
        e.event_specific_data.asset_observation.metadata  # type: ignore[union-attr]
        for e in run.all_events
        if e.event_type == dg.DagsterEventType.ASSET_OBSERVATION
    ]
