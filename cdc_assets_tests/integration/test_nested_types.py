"""Nested and richer types through the real pipeline (issue 22 parts 4 and 5): PostgreSQL
arrays, a JSON column read as a struct and one as a map, a MySQL SET as a list and enums, from
Kafka through Spark into Iceberg list, struct and map columns, compared with the plain-Python
oracle record for record and row for row; bad nested values become dead letters naming the
type; then the nested types evolve (a struct gains a field, a struct field and an array element
widen) through the three phases, and base equals the oracle's replay of the whole topic under
the new version; the table's asset checks pass.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

import dagster as dg
import pytest

from cdc_assets.checks.runner import run_checks
from cdc_assets.definitions import build_defs
from cdc_assets.pipeline.evolution.evolve import backfill_from_ledger, evolve_iceberg
from cdc_assets.pipeline.ingest.ingest import ingest_incremental
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.evolution import apply_plan, classify
from cdc_assets.schema.layers import base_layout, dead_letter_layout, ledger_layout
from cdc_assets.settings import Settings
from cdc_assets.spec import load_spec_text
from cdc_assets.spec.models import TableSpec
from cdc_assets_dev.demo.events import DebeziumEventFactory, KafkaRecord, produce, workload
from cdc_assets_tests.integration.test_ingest import (
    assert_ledger_matches,
    consume_all,
    isolated,
    read_table,
)
from cdc_assets_tests.integration.test_upsert import assert_base_matches, expected_base, upsert
from cdc_assets_tests.support.oracle import expected_outcome

pytestmark = pytest.mark.integration

DOC_V1 = "struct<color:string,size:int,tags:list<string>>"
DOC_V2 = "struct<color:string,size:long,tags:list<string>,gift:boolean,label:string>"

GADGETS = """
spec_version: 1
name: gadgets
source:
  connector: postgresql
  database: shop
  schema: public
  table: gadgets
  topic: shop.public.gadgets
columns:
  - {id: 1, name: id, type: bigint, nullable: false}
  - {id: 2, name: tags, type: "text[]"}
  - {id: 3, name: scores, type: "integer[]"}
  - {id: 4, name: ratios, type: "double precision[]"}
  - {id: 5, name: flags, type: "boolean[]"}
  - {id: 6, name: days, type: "date[]"}
  - {id: 7, name: doc, type: jsonb, sink: {type: "%s"}}
  - {id: 8, name: mood, type: "enum('ok','sad','it''s fine')"}
  - {id: 9, name: attrs, type: jsonb, sink: {type: "map<string,string>"}}
primary_key: [id]
sink: {namespace: shop}
"""

PIZZAS = """
spec_version: 1
name: pizzas
source: {connector: mariadb, database: shop, table: pizzas, topic: shop.shop.pizzas}
columns:
  - {id: 1, name: id, type: bigint, nullable: false}
  - {id: 2, name: toppings, type: "set('ham','egg','chive')", sink: {type: "list<string>"}}
  - {id: 3, name: doc, type: json, sink: {type: "%s"}}
  - {id: 4, name: size, type: "enum('s','m','l')"}
  - {id: 5, name: attrs, type: json, sink: {type: "map<string,string>"}}
primary_key: [id]
sink: {namespace: shop}
"""


def spec_of(text: str, doc: str = DOC_V1) -> TableSpec:
    spec_text = text % doc
    name = spec_text.split("name: ", 1)[1].split()[0]
    return load_spec_text(spec_text, f"{name}.yaml")


def _bad(spec: TableSpec, n: int, **after: object) -> KafkaRecord:
    """A create of key ``n`` whose image has the given raw JSON values (bad on purpose)."""
    row: dict[str, object] = {c.name: None for c in spec.columns}
    record = DebeziumEventFactory(spec).create({**row, "id": n})
    assert record.value is not None
    envelope = json.loads(record.value)
    envelope["after"].update(after)
    return KafkaRecord(record.key, json.dumps(envelope).encode())


def bad_records(spec: TableSpec) -> list[KafkaRecord]:
    not_a_doc = _bad(spec, 900_001, doc="{not json")
    wrong_shape = _bad(spec, 900_002, doc="[1, 2]")
    wrong_type = _bad(spec, 900_003, doc=json.dumps({"color": "red", "size": "large"}))
    nested_scalar = _bad(spec, 900_004, doc=json.dumps({"tags": "red"}))
    out = [not_a_doc, wrong_shape, wrong_type, nested_scalar]
    if spec.source.connector == "postgresql":
        out += [
            _bad(spec, 900_005, scores=[1, "two", 3]),
            _bad(spec, 900_006, scores={"a": 1}),
            _bad(spec, 900_007, days=[1, 2.5]),
        ]
    return out


def run(
    spark: Any, iceberg: IcebergCatalogResource, kafka: KafkaResource, spec: TableSpec
) -> tuple[Any, dict[tuple[int, int], Any]]:
    result = ingest_incremental(spark, "lake", iceberg.load_catalog(), kafka, spec)
    outcomes = {
        (p, o): expected_outcome(spec, p, o, ts, k, v)
        for p, o, ts, k, v in consume_all(kafka, spec.source.topic)
    }
    return result, outcomes


@pytest.mark.parametrize("text", [GADGETS, PIZZAS], ids=["postgresql", "mariadb"])
def test_nested_values_round_trip_bad_ones_are_dead_letters_and_types_evolve(
    it_settings: Settings,
    resources: dict[str, Any],
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    text: str,
) -> None:
    v1 = isolated(spec_of(text), partitions=2, kafka=kafka)
    bootstrap = kafka.resolved_bootstrap()
    ensure_tables(spark, "lake", v1)
    produce(workload(v1, random.Random(31), keys=40, events=250), v1.source.topic, bootstrap)
    produce(bad_records(v1), v1.source.topic, bootstrap)

    result, outcomes = run(spark, iceberg, kafka, v1)
    statuses = Counter(o.status for o in outcomes.values())
    assert (result.ledger, result.dead) == (statuses["ledger"], statuses["dead"])
    assert result.dead == len(bad_records(v1))
    ledger = read_table(iceberg, v1.sink.namespace, ledger_layout(v1).name)
    assert_ledger_matches(v1, outcomes, ledger)
    # Every nested value type made it: non-empty lists and structs with values.
    doc_values = [r["doc"] for r in ledger if r["doc"] is not None]
    assert any(d["tags"] for d in doc_values)
    assert all(set(d) == {"color", "size", "tags"} for d in doc_values)
    list_column = "scores" if v1.source.connector == "postgresql" else "toppings"
    assert any(r[list_column] for r in ledger)

    # Dead letters say what the value could not be decoded as; the oracle says the same.
    dead = read_table(iceberg, v1.sink.namespace, dead_letter_layout(v1).name)
    got = {(d["partition"], d["offset"]): d["reason"] for d in dead}
    want = {k: o.reason for k, o in outcomes.items() if o.status == "dead"}
    assert got == want
    assert any(f"cannot decode as {DOC_V1}" in r for r in got.values())
    if v1.source.connector == "postgresql":
        assert any("column 'scores': cannot decode as list<int>" in r for r in got.values())
        assert any("column 'days': cannot decode as list<date>" in r for r in got.values())

    upsert(spark, iceberg, v1)
    assert_base_matches(v1, iceberg, expected_base(v1, kafka))

    # Nested evolution: the document gains two fields and widens one; a PostgreSQL int array
    # widens its element. Iceberg keeps the nested field ids it gave before.
    proposed = spec_of(text, DOC_V2)
    if v1.source.connector == "postgresql":
        scores = proposed.columns_by_name["scores"].model_copy(update={"type": "bigint[]"})
        columns = [scores if c.name == "scores" else c for c in proposed.columns]
        proposed = proposed.model_copy(update={"columns": columns})
    proposed = proposed.model_copy(update={"source": v1.source, "sink": v1.sink, "spec_version": 2})
    plan = classify(v1, proposed)
    assert plan.supported, plan.describe()
    v2 = apply_plan(v1, plan)
    catalog = iceberg.load_catalog()
    before = _nested_ids(catalog, v1)
    evolve_iceberg(catalog, v1, v2, plan)
    after = _nested_ids(catalog, v1)
    assert {k: v for k, v in after.items() if k in before} == before
    assert {"doc.gift", "doc.label"} <= set(after)
    evolved = [c.sink_name for c in v2.columns if c.name in ("doc", "scores")]
    backfill_from_ledger(spark, "lake", catalog, v2, evolved)

    # New events under v2 (wide sizes, gifts, labels), then the jobs of v2.
    produce(workload(v2, random.Random(32), keys=40, events=120), v2.source.topic, bootstrap)
    result, outcomes = run(spark, iceberg, kafka, v2)
    assert result.dead == 0
    upsert(spark, iceberg, v2)
    assert_base_matches(v2, iceberg, expected_base(v2, kafka))
    base = read_table(iceberg, v2.sink.namespace, base_layout(v2).name)
    assert any(r["doc"] and r["doc"]["label"] for r in base)

    # Every asset check of the table runs on nested columns (image values, the pandera model of
    # the schema package, the dead letters: the ones of v1 stay, as warnings).
    defs = build_defs(specs=[v2], settings=it_settings, resource_overrides=resources)
    outcomes, _ = run_checks(defs, dg.DagsterInstance.ephemeral())
    assert len(outcomes) >= 10
    errors = [(o.check, o.description, o.metadata) for o in outcomes if o.is_error]
    assert not errors, errors
    assert {o.check for o in outcomes if o.passed} >= {"image_values", "sample_conforms"}


def _nested_ids(catalog: Any, spec: TableSpec) -> dict[str, int]:
    """Field ids of the base table's nested fields, by path."""
    table = catalog.load_table(f"{spec.sink.namespace}.{base_layout(spec).name}")
    schema = table.schema()
    out = {}
    for field_id in schema._lazy_id_to_name:
        name = schema.find_column_name(field_id)
        if name is not None and "." in name:
            out[name] = field_id
    return out
