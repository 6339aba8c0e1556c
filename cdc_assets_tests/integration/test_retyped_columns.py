"""A source type Iceberg cannot promote to, with generated events (issue 54 item 4): the source
changes ``login_count`` int -> varchar(16) (every old value converts) and ``country`` char(2) ->
int (no old value converts) while events flow; the ingest reads the new shape with the old spec
first, as in a deployment. After the evolution the old columns keep their values, the new
columns hold every value the row images give in the new type, the old values that do not convert
are counted and listed, and no dead letter is left. Base is compared with a plain replay."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from cdc_assets.demo.events import workload
from cdc_assets.pipeline.tables import ensure_tables
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.layers import dead_letter_layout
from cdc_assets.settings import Settings
from cdc_assets.spec.models import TableSpec
from cdc_assets_tests.integration.test_evolution_policies import base_rows, images, push
from cdc_assets_tests.integration.test_evolve import later
from cdc_assets_tests.integration.test_ingest import read_table
from cdc_assets_tests.integration.test_schema_evolution_flow import Table
from cdc_assets_tests.integration.test_upsert import ingest, upsert

ALTER = "ALTER TABLE users MODIFY login_count VARCHAR(16) NULL, MODIFY country INT"


def retyped(v1: TableSpec) -> TableSpec:
    data = v1.model_dump(mode="json", by_alias=True)
    for column in data["columns"]:
        if column["name"] == "login_count":
            column.update(type="varchar(16)", nullable=True, default=None)
        if column["name"] == "country":
            column["type"] = "int"
    return TableSpec.model_validate(data)


def test_a_type_iceberg_cannot_promote_keeps_the_old_column_and_fills_a_new_one(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    tmp_path: Path,
) -> None:
    table = Table(it_settings, kafka, tmp_path)
    v1 = table.v1
    assert v1.evolution.policy == "evolve"
    ensure_tables(spark, "lake", v1)
    shape = retyped(v1)
    old_records = workload(v1, random.Random(81), keys=25, events=70)
    new_records = later(workload(shape, random.Random(82), keys=25, events=70), 1)
    table.produce(old_records)
    ingest(spark, iceberg, kafka, v1)
    upsert(spark, iceberg, v1)
    table.produce(new_records)
    first = ingest(spark, iceberg, kafka, v1)  # the old spec meets the new types
    assert first.dead > 0

    result = push(spark, iceberg, table, shape, ALTER)
    assert result.decision == "applied", result.plan.describe()
    evolved = table.spec()
    by_name = evolved.columns_by_name
    assert (by_name["login_count__v1"].sink_name, by_name["login_count__v1"].dropped) == (
        "login_count",
        True,
    )
    assert by_name["login_count"].sink_name == "login_count__string"
    assert by_name["country"].sink_name == "country__int"
    backfill = result.backfill
    assert backfill is not None
    # every old country is two letters: none converts, each is counted and the first listed
    old_countries = sum(
        1 for r in old_records if r.value and b'"country":"' in r.value and b'"after"' in r.value
    )
    assert backfill.ledger_rows_rejected >= 1
    assert backfill.ledger_rows_rejected <= old_countries + len(new_records)
    assert backfill.rejected_examples
    assert all(":" in e for e in backfill.rejected_examples)

    ingest(spark, iceberg, kafka, evolved)
    upsert(spark, iceberg, evolved)
    base = base_rows(iceberg, evolved)
    expected = images([*old_records, *new_records])
    assert sorted(base) == sorted(expected)
    wrong = []
    for key, image in expected.items():
        row = base[key]
        count, country = image.get("login_count"), image.get("country")
        want_count = None if count is None else str(count)
        want_country = country if isinstance(country, int) else None
        if (row["login_count__string"], row["country__int"]) != (want_count, want_country):
            wrong.append((key, image, row["login_count__string"], row["country__int"]))
        if isinstance(count, int) and (row["login_count"], row["country"]) != (count, country):
            # last changed before the source's change: the old columns keep the old values
            wrong.append((key, image, row["login_count"], row["country"]))
    assert not wrong, wrong[:5]
    assert any(isinstance(i.get("login_count"), int) for i in expected.values())
    assert any(isinstance(i.get("login_count"), str) for i in expected.values())
    dead = dead_letter_layout(evolved)
    assert not read_table(iceberg, dead.namespace, dead.name)
