"""A table's ``evolution.policy`` with generated events (issue 54): the same source changes
under ``lenient`` (a rename is an added column, nothing dropped in Iceberg), ``freeze`` (nothing
applied, rows still land, new fields only in ``_row_json``) and ``fail`` (the ingest commits
nothing of a batch that carries the change until the spec file is changed by hand). Base is
compared with a plain replay of the row images each time."""

from __future__ import annotations

import random
from datetime import datetime
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from cdc_assets.checks.runner import run_checks
from cdc_assets.errors import SchemaChangeStopError
from cdc_assets.pipeline.evolution.converge import EvolutionRejectedError, converge
from cdc_assets.pipeline.shared.offsets import committed_offsets
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.layers import base_layout, dead_letter_layout, ledger_layout
from cdc_assets.settings import Settings
from cdc_assets.spec.models import TableSpec
from cdc_assets.spec.versions import write_spec
from cdc_assets_dev.demo.events import KafkaRecord, workload
from cdc_assets_tests.integration.test_evolve import later
from cdc_assets_tests.integration.test_ingest import read_table
from cdc_assets_tests.integration.test_renames_and_drops import ALTER, payload, source_shape
from cdc_assets_tests.integration.test_schema_evolution_flow import Table, create_table
from cdc_assets_tests.integration.test_upsert import ingest, upsert

ADD = "ALTER TABLE users ADD COLUMN tier VARCHAR(16)"


def with_policy(table: Table, policy: str) -> TableSpec:
    spec = table.v1.model_copy(
        update={"evolution": table.v1.evolution.model_copy(update={"policy": policy})}
    )
    write_spec(spec, table.specs_dir / "users.yaml")
    return spec


def added(v1: TableSpec) -> TableSpec:
    data = v1.model_dump(mode="json", by_alias=True)
    data["columns"].append({"id": 9, "name": "tier", "type": "varchar(16)"})
    return TableSpec.model_validate(data)


def images(records: list[KafkaRecord]) -> dict[int, dict[str, Any]]:
    """Each key's newest row image (deleted keys gone): base as the source has it."""
    out: dict[int, dict[str, Any]] = {}
    for record in records:
        event = payload(record)
        if event is None or event["op"] not in ("c", "u", "r", "d"):
            continue
        if event["op"] == "d":
            out.pop(event["before"]["id"], None)
        else:
            out[event["after"]["id"]] = event["after"]
    return out


def base_rows(iceberg: IcebergCatalogResource, spec: TableSpec) -> dict[int, dict[str, Any]]:
    layout = base_layout(spec)
    return {r["id"]: r for r in read_table(iceberg, layout.namespace, layout.name)}


def push(
    spark: Any,
    iceberg: IcebergCatalogResource,
    table: Table,
    shape: TableSpec,
    ddl: str,
    detected_at: datetime | None = None,
) -> Any:
    """The evolution the schema_changes sensor starts for a record of ``shape`` and ``ddl``."""
    return converge(
        lambda: spark,
        "lake",
        iceberg.load_catalog(),
        table.specs_dir,
        "users",
        source_ddl=create_table(shape),
        audit_ddl=[ddl],
        trigger="push",
        detected_at=detected_at,
    )


def test_lenient_adds_renamed_columns_and_keeps_the_old_ones(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    tmp_path: Path,
) -> None:
    table = Table(it_settings, kafka, tmp_path)
    v1 = with_policy(table, "lenient")
    ensure_tables(spark, "lake", v1)
    renamed = source_shape(v1)
    records = workload(v1, random.Random(71), keys=20, events=60)
    records += later(workload(renamed, random.Random(72), keys=20, events=60), 1)
    table.produce(records)
    ingest(spark, iceberg, kafka, v1)  # the old spec: renamed values go nowhere yet
    result = push(spark, iceberg, table, renamed, ALTER)
    assert result.decision == "applied"
    evolved = table.spec()
    by_name = evolved.columns_by_name
    # nothing renamed or dropped in Iceberg: the old columns stay, the new names are columns
    assert by_name["email"].dropped
    assert by_name["display_name"].dropped
    assert by_name["country"].dropped
    assert {by_name["email_address"].sink_name, by_name["full_name"].sink_name} == {
        "email_address",
        "full_name",
    }
    upsert(spark, iceberg, evolved)
    base = base_rows(iceberg, evolved)
    expected = images(records)
    assert sorted(base) == sorted(expected)
    columns = ("email", "email_address", "display_name", "full_name", "country")
    wrong = {
        k: [(c, base[k][c], image.get(c)) for c in columns if base[k][c] != image.get(c)]
        for k, image in expected.items()
    }
    wrong = {k: v for k, v in wrong.items() if v}
    assert not wrong, dict(list(wrong.items())[:5])
    # both sides of the rename hold values: rows last changed before it and after it
    assert any(row["email"] is not None for row in base.values())
    assert any(row["email_address"] is not None for row in base.values())
    dead = dead_letter_layout(evolved)
    assert not read_table(iceberg, dead.namespace, dead.name)


def test_freeze_applies_nothing_and_rows_still_land(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    resources: dict[str, Any],
    tmp_path: Path,
) -> None:
    table = Table(it_settings, kafka, tmp_path)
    v1 = with_policy(table, "freeze")
    ensure_tables(spark, "lake", v1)
    shape = added(v1)
    records = workload(v1, random.Random(73), keys=15, events=40)
    records += later(workload(shape, random.Random(74), keys=15, events=40), 1)
    table.produce(records)
    with pytest.raises(EvolutionRejectedError, match=r"evolution\.policy is freeze"):
        push(spark, iceberg, table, shape, ADD)
    assert table.spec().spec_version == 1
    ingested = ingest(spark, iceberg, kafka, v1)
    assert ingested.unknown_fields == ["tier"]
    assert ingested.dead == 0
    upsert(spark, iceberg, v1)
    base = base_rows(iceberg, v1)
    expected = images(records)
    assert sorted(base) == sorted(expected)
    assert all(base[k]["email"] == image["email"] for k, image in expected.items())
    assert "tier" not in next(iter(base.values()))
    # what freeze asked for: the check warns (fields only in _row_json), it does not fail
    (converged,) = run_checks(
        table.defs(resources), dg.DagsterInstance.ephemeral(), checks=["schema_converged"]
    )[0]
    assert (converged.passed, converged.severity) == (False, "WARN")
    assert "evolution.policy is freeze" in converged.description


def test_fail_stops_the_table_until_the_spec_changes(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    tmp_path: Path,
) -> None:
    table = Table(it_settings, kafka, tmp_path)
    v1 = with_policy(table, "fail")
    ensure_tables(spark, "lake", v1)
    shape = added(v1)
    before = workload(v1, random.Random(75), keys=15, events=40)
    after = later(workload(shape, random.Random(76), keys=15, events=40), 1)
    table.produce(before)
    ingest(spark, iceberg, kafka, v1)
    layout = ledger_layout(v1)
    name = f"{layout.namespace}.{layout.name}"
    offsets = committed_offsets(iceberg.load_catalog().load_table(name))
    table.produce(after)
    for _ in range(2):  # stopped, not skipped past: the same batch stops it again
        with pytest.raises(SchemaChangeStopError, match=r"field\(s\) tier the spec lacks"):
            ingest(spark, iceberg, kafka, v1)
        assert committed_offsets(iceberg.load_catalog().load_table(name)) == offsets
    with pytest.raises(EvolutionRejectedError, match=r"evolution\.policy is fail"):
        push(spark, iceberg, table, shape, ADD)
    # a person applies the change (a reviewed spec file: any policy applies it)
    reviewed = added(v1).model_copy(update={"spec_version": 2, "evolution": v1.evolution})
    result = converge(
        lambda: spark,
        "lake",
        iceberg.load_catalog(),
        table.specs_dir,
        "users",
        proposed_yaml=reviewed.model_dump_json(by_alias=True),
    )
    assert result.decision == "applied"
    evolved = table.spec()
    ingest(spark, iceberg, kafka, evolved)
    upsert(spark, iceberg, evolved)
    base = base_rows(iceberg, evolved)
    expected = images(before + after)
    assert sorted(base) == sorted(expected)
    assert {k: base[k]["tier"] for k in base} == {k: v.get("tier") for k, v in expected.items()}
