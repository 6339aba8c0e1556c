"""Schema evolution on the real stack: a column added and a column widened mid-stream, with the
jobs of the old version running between phase 1 (Iceberg) and phase 2 (spec), then the backfill
from the ledger; base must end equal to the plain-Python replay of the new version.

The events of every stage are generated from the spec version the source has at that point, so
the row images of the old version's jobs already carry the new column. Each stage's events are
moved to later binlog files, as a source that keeps writing would number them.
"""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from cdc_assets.errors import EvolutionError
from cdc_assets.pipeline.evolution.evolve import (
    BackfillResult,
    backfill_from_ledger,
    change_point,
    evolve_iceberg,
    evolve_layer,
)
from cdc_assets.pipeline.health.health import iceberg_differences
from cdc_assets.pipeline.shared.meta_tables import read_history, record_history
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.changes import AddColumn, EvolutionPlan, WidenType
from cdc_assets.schema.evolution import apply_plan, classify
from cdc_assets.schema.history import HistoryEntry
from cdc_assets.schema.layers import all_layouts, base_layout, ledger_layout
from cdc_assets.settings import Settings
from cdc_assets.spec.models import ColumnSpec, TableSpec
from cdc_assets_dev.demo.events import KafkaRecord, produce, workload
from cdc_assets_tests.integration.test_ingest import isolated, read_table, same
from cdc_assets_tests.integration.test_upsert import example_spec, expected_base, ingest, upsert
from cdc_assets_tests.support.base_oracle import Key

FILES_PER_STAGE = 100  # binlog files between stages: more than one workload crosses
WIDE = 3_000_000_000  # beyond INT: a dead letter before the widening, a value after it


def next_version(spec: TableSpec, **changes: Any) -> TableSpec:
    """The spec as the source now has it (the proposal), one version up."""
    data = spec.model_dump(mode="json", by_alias=True)
    data.update(changes, spec_version=spec.spec_version + 1)
    return TableSpec.model_validate(data)


def evolve_spec(current: TableSpec, proposed: TableSpec) -> tuple[EvolutionPlan, TableSpec]:
    plan = classify(current, proposed)
    assert plan.supported, plan.describe()
    return plan, apply_plan(current, plan)


def with_nickname(v1: TableSpec) -> TableSpec:
    columns = v1.model_dump(mode="json", by_alias=True)["columns"]
    at = next(i for i, c in enumerate(columns) if c["name"] == "display_name") + 1
    nickname = ColumnSpec(id=99, name="nickname", type="varchar(40)", comment="what friends say")
    columns.insert(at, nickname.model_dump(mode="json", by_alias=True))
    return next_version(v1, columns=columns)


def with_wide_logins(v2: TableSpec) -> TableSpec:
    columns = v2.model_dump(mode="json", by_alias=True)["columns"]
    for c in columns:
        if c["name"] == "login_count":
            c["type"] = "bigint"
    return next_version(v2, columns=columns)


def _rewrite(records: list[KafkaRecord], change: Any) -> list[KafkaRecord]:
    out = []
    for i, record in enumerate(records):
        if record.value is None:
            out.append(record)
            continue
        event = json.loads(record.value)
        change(i, event.get("payload") if isinstance(event.get("payload"), dict) else event)
        out.append(KafkaRecord(record.key, json.dumps(event).encode(), record.row))
    return out


def later(records: list[KafkaRecord], stage: int) -> list[KafkaRecord]:
    """The events moved ``stage`` x FILES_PER_STAGE binlog files on: after every earlier stage."""

    def move(_: int, envelope: dict[str, Any]) -> None:
        source = envelope.get("source")
        if isinstance(source, dict) and source.get("file"):
            stem, number = source["file"].rsplit(".", 1)
            source["file"] = f"{stem}.{int(number) + stage * FILES_PER_STAGE:06d}"

    return _rewrite(records, move)


def wide_logins(records: list[KafkaRecord]) -> list[KafkaRecord]:
    """Every third row image gets a login count beyond INT."""

    def widen(i: int, envelope: dict[str, Any]) -> None:
        after = envelope.get("after")
        if isinstance(after, dict) and "login_count" in after and i % 3 == 0:
            after["login_count"] = WIDE + i

    return _rewrite(records, widen)


def base_differences(
    spec: TableSpec, rows: list[dict[str, Any]], expected: dict[Key, dict[str, Any]]
) -> list[str]:
    """How base rows differ from the replay (keys and every column of the base layout)."""
    keys = [c.sink_name for c in spec.key_columns]
    actual = {tuple(r[k] for k in keys): r for r in rows}
    out = [] if len(actual) == len(rows) else ["base holds a key twice"]
    out += [f"missing key {k}" for k in sorted(set(expected) - set(actual), key=repr)]
    out += [f"extra key {k}" for k in sorted(set(actual) - set(expected), key=repr)]
    out += [
        f"{key} {c}: oracle {want[c]!r} base {actual[key][c]!r}"
        for key, want in expected.items()
        if key in actual
        for c in base_layout(spec).column_names
        if not same(want[c], actual[key][c], c)
    ]
    return out


def live_shape(iceberg: IcebergCatalogResource, spec: TableSpec) -> dict[str, Any]:
    """Per layer, what a reader sees of a table: columns in order (name, type, required, doc),
    partition spec, identifier fields and the properties the layout sets."""
    catalog = iceberg.load_catalog()
    out = {}
    for layer, layout in all_layouts(spec).items():
        table = catalog.load_table(f"{layout.namespace}.{layout.name}")
        schema = table.schema()
        partitions = [
            (schema.find_field(f.source_id).name, str(f.transform), f.name)
            for f in table.spec().fields
        ]
        props = {k: table.properties.get(k) for k in layout.properties if k != "format-version"}
        out[layer] = {
            "columns": [(f.name, str(f.field_type), f.required, f.doc) for f in schema.fields],
            "partitions": partitions,
            "identifier": sorted(schema.identifier_field_names()),
            "properties": props,
            "comment": table.properties.get("comment"),
            "format": table.metadata.format_version,
        }
    return out


def non_null(iceberg: IcebergCatalogResource, spec: TableSpec, column: str) -> int:
    layout = base_layout(spec)
    return sum(r[column] is not None for r in read_table(iceberg, layout.namespace, layout.name))


@dataclass
class Flow:
    """What the module's one evolution story saw along the way."""

    v1: TableSpec
    v2: TableSpec
    v3: TableSpec
    plan12: EvolutionPlan
    plan23: EvolutionPlan
    runs: dict[str, Any] = field(default_factory=dict)
    checks: dict[str, Any] = field(default_factory=dict)


def run_stage(
    flow: Flow,
    name: str,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    spec: TableSpec,
    records: list[KafkaRecord],
) -> None:
    produce(records, spec.source.topic, kafka.resolved_bootstrap())
    ingested = ingest(spark, iceberg, kafka, spec)
    bucketed, merged = upsert(spark, iceberg, spec)
    flow.runs[name] = (ingested, bucketed, merged)


@pytest.fixture(scope="module")
def flow(
    it_settings: Settings, spark: Any, iceberg: IcebergCatalogResource, kafka: KafkaResource
) -> Flow:
    v1 = isolated(example_spec(it_settings, "users"), partitions=2, kafka=kafka)
    plan12, v2 = evolve_spec(v1, with_nickname(v1))
    plan23, v3 = evolve_spec(v2, with_wide_logins(v2))
    flow = Flow(v1, v2, v3, plan12, plan23)
    catalog = iceberg.load_catalog()
    rng = random.Random(23)

    def stage(name: str, spec: TableSpec, records: list[KafkaRecord]) -> None:
        run_stage(flow, name, spark, iceberg, kafka, spec, records)

    ensure_tables(spark, "lake", v1)
    stage("v1 events, v1 jobs", v1, workload(v1, rng, keys=24, events=80))
    # The source added the column: its events carry it, the jobs do not know it yet.
    stage("v2 events, v1 jobs", v1, later(workload(v2, rng, keys=24, events=80), 1))
    # Phase 1, interrupted after one table, then run to the end.
    evolve_layer(catalog, "base", v1, v2)
    flow.checks["half evolved"] = iceberg_differences(catalog, v2)
    flow.checks["ids12"] = evolve_iceberg(catalog, v1, v2, plan12)
    flow.checks["ids12 again"] = evolve_iceberg(catalog, v1, v2, plan12)
    flow.checks["differences v2"] = iceberg_differences(catalog, v2)
    # Between phase 1 and phase 2: the old jobs run on the evolved tables.
    stage("v2 events, v1 jobs on v2 tables", v1, later(workload(v2, rng, keys=24, events=60), 2))
    flow.checks["base nicknames before backfill"] = non_null(iceberg, v2, "nickname")
    # Phase 2 is the spec file (not here); phase 3:
    flow.checks["backfill2"] = backfill_from_ledger(spark, "lake", catalog, v2, ["nickname"])
    flow.checks["backfill2 again"] = backfill_from_ledger(spark, "lake", catalog, v2, ["nickname"])
    stage("v2 events, v2 jobs", v2, later(workload(v2, rng, keys=24, events=60), 3))
    flow.checks["expected v2"] = expected_base(v2, kafka)
    layout = base_layout(v2)
    flow.checks["base v2"] = read_table(iceberg, layout.namespace, layout.name)

    # The source widens login_count: wide values are dead letters until the jobs know it.
    wide = wide_logins(later(workload(v3, rng, keys=24, events=60), 4))
    stage("v3 events, v2 jobs", v2, wide)
    flow.checks["ids23"] = evolve_iceberg(catalog, v2, v3, plan23)
    flow.checks["differences v3"] = iceberg_differences(catalog, v3)
    stage("v3 events, v2 jobs on v3 tables", v2, later(workload(v3, rng, keys=24, events=30), 5))
    since = datetime.now(UTC)
    flow.checks["backfill3"] = backfill_from_ledger(
        spark, "lake", catalog, v3, ["login_count"], since=since
    )
    stage("v3 events, v3 jobs", v3, later(workload(v3, rng, keys=24, events=30), 6))
    flow.checks["expected v3"] = expected_base(v3, kafka)
    flow.checks["base v3"] = read_table(iceberg, layout.namespace, layout.name)

    fresh = v3.model_copy(
        update={"sink": v3.sink.model_copy(update={"namespace": v3.sink.namespace + "_fresh"})}
    )
    ensure_tables(spark, "lake", fresh)
    flow.checks["shape fresh"] = live_shape(iceberg, fresh)
    flow.checks["shape evolved"] = live_shape(iceberg, v3)
    return flow


def test_plans_are_one_add_and_one_widening(flow: Flow) -> None:
    assert [type(c) for c in flow.plan12.changes] == [AddColumn]
    assert [type(c) for c in flow.plan23.changes] == [WidenType]
    names = [c.name for c in flow.v2.columns]
    assert names[names.index("display_name") + 1] == "nickname"


def test_phase_one_converges_after_an_interruption(flow: Flow) -> None:
    half = flow.checks["half evolved"]
    assert not half["base"], half["base"]
    assert half["cdc"], "the ledger was not evolved yet"
    assert flow.checks["ids12"] == flow.checks["ids12 again"]
    for version in ("differences v2", "differences v3"):
        assert not any(flow.checks[version].values()), flow.checks[version]


def test_evolved_tables_equal_a_fresh_onboarding(flow: Flow) -> None:
    fresh, evolved = flow.checks["shape fresh"], flow.checks["shape evolved"]
    for layer in fresh:
        assert evolved[layer] == fresh[layer], layer


def test_old_jobs_keep_running_on_evolved_tables(flow: Flow) -> None:
    for name in ("v2 events, v1 jobs on v2 tables", "v3 events, v2 jobs on v3 tables"):
        ingested, bucketed, merged = flow.runs[name]
        assert ingested.ledger > 0, name
        assert bucketed.rows > 0, name
        assert merged.applied, name
    before = flow.runs["v2 events, v1 jobs"][0]
    assert "nickname" in before.unknown_fields  # it reached the ledger only as row image text
    assert flow.checks["base nicknames before backfill"] == 0


def test_added_column_reaches_base_without_a_gap(flow: Flow) -> None:
    backfill: BackfillResult = flow.checks["backfill2"]
    assert backfill.ledger_rows_updated > 50
    assert backfill.base_rows_updated > 5
    assert backfill.ledger_rows_rejected == 0
    assert backfill.ledger_snapshot_id is not None
    assert backfill.base_snapshot_id is not None
    again: BackfillResult = flow.checks["backfill2 again"]
    assert (again.ledger_rows_updated, again.base_rows_updated) == (0, 0)
    # The replay decodes every event with v2: a row whose newest change predates the column is
    # null there too, so base must match it exactly.
    expected = flow.checks["expected v2"]
    assert sum(r["nickname"] is not None for r in expected.values()) > 5
    assert not base_differences(flow.v2, flow.checks["base v2"], expected)


def test_widened_column_recovers_its_dead_letters(flow: Flow) -> None:
    ingested = flow.runs["v3 events, v2 jobs"][0]
    assert ingested.dead > 0
    assert all("login_count" in reason for reason in ingested.dead_reasons)
    backfill: BackfillResult = flow.checks["backfill3"]
    assert backfill.redriven == ingested.dead
    assert backfill.ledger_rows_updated == 0  # an int fits a long: nothing to rewrite
    expected = flow.checks["expected v3"]
    assert any((r["login_count"] or 0) >= WIDE for r in expected.values())
    assert not base_differences(flow.v3, flow.checks["base v3"], expected)


@pytest.fixture
def onboarded(
    it_settings: Settings, spark: Any, kafka: KafkaResource
) -> tuple[TableSpec, TableSpec, EvolutionPlan]:
    v1 = isolated(example_spec(it_settings, "users"), kafka=kafka)
    ensure_tables(spark, "lake", v1)
    plan, v2 = evolve_spec(v1, with_nickname(v1))
    return v1, v2, plan


def test_evolving_twice_changes_nothing_and_bad_input_changes_nothing(
    iceberg: IcebergCatalogResource, onboarded: tuple[TableSpec, TableSpec, EvolutionPlan]
) -> None:
    v1, v2, plan = onboarded
    catalog = iceberg.load_catalog()

    def schemas() -> dict[str, int]:
        return {
            layer: len(catalog.load_table(f"{lay.namespace}.{lay.name}").metadata.schemas)
            for layer, lay in all_layouts(v1).items()
        }

    before = schemas()
    rejected = classify(v1, v2.model_copy(update={"primary_key": ["email"]}))
    assert not rejected.supported
    with pytest.raises(EvolutionError, match="rejected"):
        evolve_iceberg(catalog, v1, v2, rejected)
    ledger = ledger_layout(v1)
    with catalog.load_table(f"{ledger.namespace}.{ledger.name}").update_schema() as update:
        update.add_column("rogue", iceberg_string())
    with pytest.raises(EvolutionError, match="rogue"):
        evolve_iceberg(catalog, v1, v2, plan)
    after = schemas()
    assert after == {**before, "cdc": before["cdc"] + 1}  # only the rogue column's own schema
    with catalog.load_table(f"{ledger.namespace}.{ledger.name}").update_schema() as update:
        update.delete_column("rogue")

    first = evolve_iceberg(catalog, v1, v2, plan)
    counted = schemas()
    second = evolve_iceberg(catalog, v1, v2, plan)
    assert second == first
    assert schemas() == counted
    assert not any(iceberg_differences(catalog, v2).values())
    point = change_point(catalog, v2)
    assert point.schema_ids == first


def iceberg_string() -> Any:
    from pyiceberg.types import StringType

    return StringType()


def test_history_round_trip(iceberg: IcebergCatalogResource) -> None:
    catalog = iceberg.load_catalog()
    table = f"t_{uuid.uuid4().hex[:8]}"
    applied = HistoryEntry(
        table=table,
        from_version=1,
        to_version=2,
        diff=f"{table}: version 1 -> 2: supported\n  + add column nickname",
        trigger="push",
        decision="applied",
        applied_at=datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
        source_ddl="ALTER TABLE users ADD COLUMN nickname varchar(40)",
        iceberg_schema_ids={"cdc": 1, "base": 2},
        snapshot_ids={"base": 123456789012345},
        kafka_offsets={0: 17, 1: 4},
        detected_at=datetime(2026, 1, 2, 3, 0, tzinfo=UTC),
    )
    plan = classify(
        TableSpec.model_validate({**_users_dump(), "name": table}),
        TableSpec.model_validate({**_users_dump(), "name": table, "primary_key": ["email"]}),
    )
    rejected = HistoryEntry.for_plan(
        plan, trigger="pull", applied_at=datetime(2026, 1, 3, tzinfo=UTC)
    )
    record_history(catalog, applied)
    record_history(catalog, rejected)
    record_history(catalog, HistoryEntry.for_plan(plan, trigger="manual", applied_at=_now()))
    mine = read_history(catalog, table)
    assert mine[:2] == [applied, rejected]
    assert rejected.decision == "rejected"
    assert rejected.reasons is not None
    assert "primary key" in rejected.reasons
    assert rejected.kafka_offsets is None
    assert len(mine) == 3
    assert {e.table for e in read_history(catalog)} >= {table}
    with pytest.raises(ValueError, match="trigger"):
        HistoryEntry.for_plan(plan, trigger="cron", applied_at=_now())


def _now() -> datetime:
    return datetime.now(UTC)


def _users_dump() -> dict[str, Any]:
    from cdc_assets_tests.support.bad_records import users_spec

    return users_spec().model_dump(mode="json", by_alias=True)
