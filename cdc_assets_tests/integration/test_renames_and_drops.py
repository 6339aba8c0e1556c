"""A MySQL rename, CHANGE COLUMN and DROP COLUMN mid-stream, with generated events (issue 61).

The source renames ``email`` (NOT NULL) to ``email_address``, renames ``display_name`` to
``full_name`` with ``CHANGE COLUMN`` and drops ``country``, all in one ALTER; Debezium writes the
schema-change record and the row events carry the new shape. The pipeline still runs the old spec
when those events arrive (the sensor starts the evolution after the ingest read them), so the
rows it writes lack both renamed columns, and a row without ``email`` is a dead letter. The
evolution must bring back every value: base equals a plain replay of the row images, reading
each renamed column under whichever name the image has, and no dead letter is left. Before the
fix the evolution reported success and base held ``NULL`` (or no row) for every change made
after the rename.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from cdc_assets.checks.runner import run_checks
from cdc_assets.pipeline.evolution.converge import converge
from cdc_assets.pipeline.health.health import iceberg_differences
from cdc_assets.pipeline.shared.failpoint import FAIL_ONCE_ENV
from cdc_assets.pipeline.shared.meta_tables import read_history
from cdc_assets.pipeline.shared.tables import ensure_tables, missing_tables
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.layers import base_layout, dead_letter_layout
from cdc_assets.schema.reconcile import ATTEMPT_SEPARATOR, FIRST_BACKOFF_SECONDS
from cdc_assets.sensors import schema_changes as schema_changes_module
from cdc_assets.sensors.schema_changes import DESIRED_TAG
from cdc_assets.settings import Settings
from cdc_assets.spec.models import TableSpec
from cdc_assets_dev.demo.events import KafkaRecord, workload
from cdc_assets_tests.integration.test_evolve import later
from cdc_assets_tests.integration.test_ingest import read_table
from cdc_assets_tests.integration.test_schema_evolution_flow import (
    Table,
    _cursors,
    _tick,
    create_table,
    schema_record,
)
from cdc_assets_tests.integration.test_upsert import ingest, upsert

ALTER = (
    "ALTER TABLE users RENAME COLUMN email TO email_address, "
    "CHANGE COLUMN display_name full_name varchar(100), DROP COLUMN country"
)
# the source's name of each base column, before and after the ALTER
RENAMED = {"email": "email_address", "display_name": "full_name"}


def source_shape(v1: TableSpec) -> TableSpec:
    """The table as the source has it after ``ALTER``: what its events and schema record carry."""
    data = v1.model_dump(mode="json", by_alias=True)
    columns = []
    for column in data["columns"]:
        if column["name"] == "country":
            continue
        column["name"] = RENAMED.get(column["name"], column["name"])
        columns.append(column)
    data["columns"] = columns
    return TableSpec.model_validate(data)


def payload(record: KafkaRecord) -> dict[str, Any] | None:
    if record.value is None:
        return None
    value = json.loads(record.value)
    inner = value.get("payload", value) if isinstance(value, dict) else None
    return inner if isinstance(inner, dict) and "op" in inner else None


def replay(records: list[KafkaRecord]) -> dict[int, dict[str, Any]]:
    """Base as the row images say, in source order; each column under the name it had then."""
    table: dict[int, dict[str, Any]] = {}
    for record in records:
        event = payload(record)
        if event is None or event["op"] not in ("c", "u", "r", "d"):
            continue
        image = event["before"] if event["op"] == "d" else event["after"]
        if event["op"] == "d":
            table.pop(image["id"], None)
            continue
        table[image["id"]] = {
            "email": image.get("email_address", image.get("email")),
            "display_name": image.get("full_name", image.get("display_name")),
            "country": image.get("country"),  # gone after the drop: null in rows changed since
        }
    return table


def test_renames_and_a_drop_mid_stream_lose_no_value(
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
    before = workload(v1, random.Random(61), keys=24, events=80)
    table.produce(before)
    ingest(spark, iceberg, kafka, v1)
    upsert(spark, iceberg, v1)

    renamed = source_shape(v1)
    table.produce([schema_record(renamed, ALTER)], table.schema_topic)
    after = later(workload(renamed, random.Random(62), keys=24, events=80), 1)
    table.produce(after)
    ingest(spark, iceberg, kafka, v1)  # still the old spec: the renamed values go nowhere yet

    instance = dg.DagsterInstance.ephemeral()
    defs = table.defs(resources)
    # The check sees the table behind its stream: the new names are fields the spec lacks
    # (within the grace period a warning; the rule's unit tests cover the error after it).
    (behind,) = run_checks(defs, instance, checks=["schema_converged"])[0]
    assert not behind.passed
    assert behind.severity == "WARN"
    assert sorted(behind.metadata["fields_behind"]) == ["email_address", "full_name"]
    (request,) = _tick(defs, "schema_changes", instance, resources).run_requests
    run = defs.resolve_job_def("evolve_schemas").execute_in_process(
        instance=instance,
        run_config=request.run_config,
        asset_selection=list(request.asset_selection or []),
    )
    assert run.success
    evolved = table.spec()
    assert evolved.spec_version == 2
    by_id = {c.id: c for c in evolved.columns}
    # renames keep the column (id and Iceberg name); the drop is soft
    assert (by_id[2].name, by_id[2].sink_name) == ("email_address", "email")
    assert (by_id[3].name, by_id[3].sink_name) == ("full_name", "display_name")
    assert by_id[4].dropped
    upsert(spark, iceberg, evolved)
    (converged,) = run_checks(table.defs(resources), instance, checks=["schema_converged"])[0]
    assert converged.passed, converged.description

    expected = replay(before + after)
    layout = base_layout(evolved)
    base = {r["id"]: r for r in read_table(iceberg, layout.namespace, layout.name)}
    assert sorted(base) == sorted(expected)
    wrong = {
        k: {c: (base[k][c], v) for c, v in row.items() if base[k][c] != v}
        for k, row in expected.items()
    }
    wrong = {k: v for k, v in wrong.items() if v}
    shown = dict(list(wrong.items())[:5])
    assert not wrong, f"{len(wrong)} of {len(expected)} rows differ: {shown}"
    assert sum(row["email"] is not None for row in expected.values()) == len(expected)
    dead = dead_letter_layout(evolved)
    letters = read_table(iceberg, dead.namespace, dead.name)
    assert not letters, [r["reason"] for r in letters][:5]


def test_evolving_a_table_not_created_yet_creates_it(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    resources: dict[str, Any],
    tmp_path: Path,
) -> None:
    # A new spec whose stream already carries a schema change (issue 53): the sensor's
    # evolution runs before the first ingest created any table. It used to fail ("does not
    # exist; onboard the table") and was never retried; onboarding is evolution from nothing.
    _cursors.clear()
    table = Table(it_settings, kafka, tmp_path)
    v1 = table.v1
    renamed = source_shape(v1)
    records = workload(v1, random.Random(63), keys=12, events=30)
    records += later(workload(renamed, random.Random(64), keys=12, events=30), 1)
    table.produce(records[:30])
    table.produce([schema_record(renamed, ALTER)], table.schema_topic)
    table.produce(records[30:])
    assert missing_tables(iceberg.load_catalog(), v1)

    instance = dg.DagsterInstance.ephemeral()
    defs = table.defs(resources)
    (request,) = _tick(defs, "schema_changes", instance, resources).run_requests
    run = defs.resolve_job_def("evolve_schemas").execute_in_process(
        instance=instance,
        run_config=request.run_config,
        asset_selection=list(request.asset_selection or []),
    )
    assert run.success
    evolved = table.spec()
    assert evolved.spec_version == 2
    assert not missing_tables(iceberg.load_catalog(), evolved)
    assert not any(iceberg_differences(iceberg.load_catalog(), evolved).values())
    ingest(spark, iceberg, kafka, evolved)
    upsert(spark, iceberg, evolved)
    layout = base_layout(evolved)
    base = {r["id"]: r for r in read_table(iceberg, layout.namespace, layout.name)}
    expected = replay(records)
    assert sorted(base) == sorted(expected)
    # Events older than the renames decode under the new spec too: each column is read under
    # its former name where the image has that one (a NOT NULL email was a dead letter).
    got = {k: (base[k]["email"], base[k]["display_name"]) for k in base}
    assert got == {k: (v["email"], v["display_name"]) for k, v in expected.items()}
    dead = dead_letter_layout(evolved)
    assert not read_table(iceberg, dead.namespace, dead.name)


def test_a_failed_evolution_is_retried_until_the_table_converges(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    resources: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Issue 53: an evolution started once by a schema-change record, failing for a transient
    # reason, left the table behind forever. The sensor compares the desired shape with the
    # spec every tick and retries after a backoff.
    _cursors.clear()
    table = Table(it_settings, kafka, tmp_path)
    v1 = table.v1
    ensure_tables(spark, "lake", v1)
    renamed = source_shape(v1)
    records = workload(v1, random.Random(65), keys=12, events=30)
    records += later(workload(renamed, random.Random(66), keys=12, events=30), 1)
    table.produce(records[:30])
    table.produce([schema_record(renamed, ALTER)], table.schema_topic)
    table.produce(records[30:])
    ingest(spark, iceberg, kafka, v1)
    monkeypatch.setenv(FAIL_ONCE_ENV, f"evolve_start={tmp_path}")
    instance = dg.DagsterInstance.ephemeral()
    defs = table.defs(resources)

    def run(request: dg.RunRequest) -> bool:
        return (
            defs.resolve_job_def("evolve_schemas")
            .execute_in_process(
                instance=instance,
                run_config=request.run_config,
                asset_selection=list(request.asset_selection or []),
                tags=request.tags,
                raise_on_error=False,
            )
            .success
        )

    (first,) = _tick(defs, "schema_changes", instance, resources).run_requests
    assert not run(first)  # the injected transient failure
    assert table.spec().spec_version == 1
    # Backing off: nothing now, the same desired shape again after the backoff.
    assert not _tick(defs, "schema_changes", instance, resources).run_requests
    later_now = time.time() + FIRST_BACKOFF_SECONDS + 1
    monkeypatch.setattr(schema_changes_module.time, "time", lambda: later_now)
    (second,) = _tick(defs, "schema_changes", instance, resources).run_requests
    assert second.run_key == f"{first.run_key}{ATTEMPT_SEPARATOR}2"
    assert second.tags[DESIRED_TAG] == first.tags[DESIRED_TAG]
    assert run(second)
    assert table.spec().spec_version == 2
    # Reconciled: the spec has the shape, nothing more is asked.
    assert not _tick(defs, "schema_changes", instance, resources).run_requests
    upsert(spark, iceberg, table.spec())
    layout = base_layout(table.spec())
    base = {r["id"]: r for r in read_table(iceberg, layout.namespace, layout.name)}
    expected = replay(records)
    assert {k: base[k]["email"] for k in base} == {k: v["email"] for k, v in expected.items()}


def test_a_safe_column_is_added_beside_a_refused_one(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    tmp_path: Path,
) -> None:
    # Issue 53: decided per column. One record adds `tier` and turns the key `id` into a
    # VARCHAR (a key's type cannot change, refused): the addition applies, the refusal is
    # recorded.
    table = Table(it_settings, kafka, tmp_path)
    v1 = table.v1
    ensure_tables(spark, "lake", v1)
    data = v1.model_dump(mode="json", by_alias=True)
    for column in data["columns"]:
        if column["name"] == "id":
            column["type"] = "varchar(20)"
    data["columns"].append({"id": 9, "name": "tier", "type": "varchar(16)"})
    shape = TableSpec.model_validate(data)
    ddl = "ALTER TABLE users MODIFY id VARCHAR(20) NOT NULL, ADD COLUMN tier VARCHAR(16)"
    result = converge(
        lambda: spark,
        "lake",
        iceberg.load_catalog(),
        table.specs_dir,
        "users",
        source_ddl=create_table(shape),
        audit_ddl=[ddl],
        trigger="push",
    )
    assert result.decision == "partial"
    assert [r.column for r in result.refused] == ["id"]
    evolved = table.spec()
    assert evolved.spec_version == 2
    assert evolved.columns_by_name["tier"].type == "varchar(16)"
    assert evolved.columns_by_name["id"].type == "bigint"
    assert not any(iceberg_differences(iceberg.load_catalog(), evolved).values())
    (entry,) = [h for h in read_history(iceberg.load_catalog(), "users") if h.to_version == 2][-1:]
    assert entry.decision == "partial"
    assert "id" in (entry.reasons or "")
