"""A source type Iceberg cannot promote to, with generated events (issue 54 item 4): the source
changes ``login_count`` int -> varchar(16) (every old value converts) and ``country`` char(2) ->
int (no old value converts) while events flow; the ingest reads the new shape with the old spec
first, as in a deployment. After the evolution the old columns keep their values, the new
columns hold every value the row images give in the new type, the old values that do not convert
are counted and listed, and no dead letter is left. Base is compared with a plain replay."""

from __future__ import annotations

import base64
import json
import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from cdc_assets.definitions import build_defs
from cdc_assets.pipeline.evolution.converge import converge
from cdc_assets.pipeline.health.health import image_mismatches
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.layers import base_layout, dead_letter_layout
from cdc_assets.settings import Settings
from cdc_assets.spec.load import load_spec
from cdc_assets.spec.models import TableSpec
from cdc_assets.spec.versions import write_spec
from cdc_assets_dev.demo.events import produce, workload
from cdc_assets_tests.integration.test_evolution_policies import base_rows, images, push
from cdc_assets_tests.integration.test_evolve import _rewrite, later
from cdc_assets_tests.integration.test_ingest import isolated, read_table
from cdc_assets_tests.integration.test_renames_and_drops import payload
from cdc_assets_tests.integration.test_schema_evolution_flow import (
    Table,
    _cursors,
    _tick,
    create_table,
)
from cdc_assets_tests.integration.test_upsert import example_spec, ingest, upsert
from cdc_assets_tests.integration.test_upsert_catch_up import _upsert_with_catch_up

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


def datetime_of(spec: TableSpec, precision: int) -> TableSpec:
    """``spec`` with ``updated_at`` a DATETIME of ``precision``."""
    data = spec.model_dump(mode="json", by_alias=True)
    for column in data["columns"]:
        if column["name"] == "updated_at":
            column["type"] = f"datetime({precision})"
    return TableSpec.model_validate(data)


@pytest.mark.parametrize(("was", "now"), [(3, 6), (6, 3)])
def test_a_datetime_that_changes_encoding_is_decoded_anew_only_after_the_change(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    tmp_path: Path,
    was: int,
    now: int,
) -> None:
    """``updated_at`` DATETIME(3) <-> DATETIME(6): Debezium sends epoch millis for one and
    micros for the other, one Iceberg type for both, so the evolution is a source-type change
    with a backfill. An image does not say which encoding wrote it; the change's binlog
    position does. 3 -> 6: the micros the old spec met are dead letters (no year 58000), and
    the older rows' millis must not be read as micros (before, every image since the change's
    day was: those times moved to January 1970). 6 -> 3: the old spec read the millis as
    micros (1970, no error), and only the rows after the ALTER are read anew."""
    table = Table(it_settings, kafka, tmp_path)
    v1 = datetime_of(table.v1, was)
    write_spec(v1, table.specs_dir / "users.yaml")
    ensure_tables(spark, "lake", v1)
    shape = datetime_of(v1, now)
    old_records = workload(v1, random.Random(83), keys=20, events=50)
    # fewer keys after the change: the others keep an image from before it
    new_records = later(workload(shape, random.Random(84), keys=8, events=30), 1)
    table.produce([*old_records, *new_records])
    ingest(spark, iceberg, kafka, v1)  # the old spec reads the micros as millis
    upsert(spark, iceberg, v1)

    def source(record: Any) -> dict[str, Any]:
        event = payload(record)
        return event["source"] if event is not None else {}

    first_new = min(
        (s["file"], s["pos"]) for r in new_records if (s := source(r)) and s.get("file")
    )
    last_old = max((s["file"], s["pos"]) for r in old_records if (s := source(r)) and s.get("file"))
    assert last_old < first_new
    result = converge(
        lambda: spark,
        "lake",
        iceberg.load_catalog(),
        table.specs_dir,
        "users",
        source_ddl=create_table(shape),
        audit_ddl=["ALTER TABLE users MODIFY updated_at DATETIME(6)"],
        trigger="push",
        change_position={"file": first_new[0], "pos": first_new[1] - 1},
    )
    assert result.decision == "applied", result.plan.describe()
    evolved = table.spec()
    assert evolved.columns_by_name["updated_at"].type == f"datetime({now})"
    ingest(spark, iceberg, kafka, evolved)
    upsert(spark, iceberg, evolved)

    epoch = datetime(1970, 1, 1)
    want: dict[int, datetime | None] = {}
    encoded: dict[int, int] = {}  # key -> microseconds per unit of its newest image
    units = {3: 1_000, 6: 1}  # microseconds per unit sent
    for records, unit in ((old_records, units[was]), (new_records, units[now])):
        for record in records:
            event = payload(record)
            if event is None or event["op"] not in ("c", "u", "r", "d"):
                continue
            if event["op"] == "d":
                want.pop(event["before"]["id"], None)
                continue
            value = event["after"].get("updated_at")
            at = None if value is None else epoch + timedelta(microseconds=value * unit)
            want[event["after"]["id"]] = at
            encoded[event["after"]["id"]] = unit
    base = base_rows(iceberg, evolved)
    assert sorted(base) == sorted(want)
    wrong = {
        k: (base[k]["updated_at"], at) for k, at in want.items() if base[k]["updated_at"] != at
    }
    assert not wrong, list(wrong.items())[:5]
    # rows last changed in each encoding, both compared
    assert {encoded[k] for k, v in want.items() if v is not None} == {1, 1_000}
    # the image_values check reads each image in the encoding of its side of the change
    checked = image_mismatches(spark, "lake", iceberg.load_catalog(), evolved)
    assert not any(checked.ledger.values()), checked.ledger_examples
    assert checked.base == 0, checked.base_examples

    # An ingest that loaded the old spec before the evolution commits after it: the upsert's
    # catch-up backfills its rows with the position the evolution kept on the ledger, and
    # leaves the rows before it as they are (before, it read every image of the day in the new
    # encoding: the older rows' millis became 1970 micros).
    late = later(workload(shape, random.Random(85), keys=20, events=30), 2)
    table.produce(late)
    ingest(spark, iceberg, kafka, v1)
    caught = _upsert_with_catch_up(spark, iceberg, evolved, table.specs_dir)
    assert caught is not None
    upsert(spark, iceberg, evolved)  # the dead letters the catch-up redrove (3 -> 6)
    for record in late:
        event = payload(record)
        if event is None or event["op"] not in ("c", "u", "r", "d"):
            continue
        if event["op"] == "d":
            want.pop(event["before"]["id"], None)
            continue
        value = event["after"].get("updated_at")
        want[event["after"]["id"]] = (
            None if value is None else epoch + timedelta(microseconds=value * units[now])
        )
    base = base_rows(iceberg, evolved)
    assert sorted(base) == sorted(want)
    wrong = {
        k: (base[k]["updated_at"], at) for k, at in want.items() if base[k]["updated_at"] != at
    }
    assert not wrong, list(wrong.items())[:5]
    checked = image_mismatches(spark, "lake", iceberg.load_catalog(), evolved)
    assert not any(checked.ledger.values()), checked.ledger_examples


def with_types(spec: TableSpec, **types: str) -> TableSpec:
    """``spec`` with the named columns of these source types (added at the end when new)."""
    data = spec.model_dump(mode="json", by_alias=True)
    for column in data["columns"]:
        if column["name"] in types:
            column["type"] = types.pop(column["name"])
    next_id = max(c["id"] for c in data["columns"]) + 1
    for n, (name, type_) in enumerate(types.items()):
        data["columns"].append({"id": next_id + n, "name": name, "type": type_})
    return TableSpec.model_validate(data)


def unscaled(value: str, scale: int) -> Decimal:
    """A Kafka Connect decimal's base64 bytes at ``scale``."""
    return Decimal(int.from_bytes(base64.b64decode(value), "big", signed=True)).scaleb(-scale)


def exactly(value: Decimal, precision: int, scale: int) -> Decimal | None:
    """``value`` as a decimal(``precision``, ``scale``) when that loses no digit and fits."""
    at = value.quantize(Decimal(1).scaleb(-scale))
    return at if at == value and len(at.as_tuple().digits) <= precision else None


CHANGES = {
    # column: (before, after) source types; the ALTER that makes the change
    "decimals": (
        {"balance": "decimal(10,4)", "credit": "decimal(8,2)", "fee": "decimal(6,1)"},
        {"balance": "decimal(10,2)", "credit": "decimal(8,4)", "fee": "decimal(9,3)"},
        "ALTER TABLE users MODIFY balance DECIMAL(10,2), MODIFY credit DECIMAL(8,4), "
        "MODIFY fee DECIMAL(9,3)",
    ),
    "zone": (
        {},
        {"updated_at": "timestamp(3)"},
        "ALTER TABLE users MODIFY updated_at TIMESTAMP(3)",
    ),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_new_scale_or_zone_fills_the_new_column_from_the_old_values_before_the_change(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    tmp_path: Path,
    change: str,
) -> None:
    """A decimal's scale (down: most old values do not convert; up: those that fit do; up with
    room: every one does) and a
    DATETIME that becomes a TIMESTAMP. Debezium sends a decimal as unscaled bytes, so the old
    spec reads the bytes after the ALTER at the old scale (other values, no error), and a zoned
    string after epoch millis not at all (dead letters). The new column takes the old column's
    value, converted exactly, for the rows before the change's binlog position, and the image
    decoded anew for the rows after it; the old values that do not convert are counted, never
    rounded. Base is compared with a plain replay of the images."""
    before, after, ddl = CHANGES[change]
    table = Table(it_settings, kafka, tmp_path)
    v1 = with_types(table.v1, **before)
    write_spec(v1, table.specs_dir / "users.yaml")
    ensure_tables(spark, "lake", v1)
    shape = with_types(v1, **after)
    old_records = workload(v1, random.Random(85), keys=20, events=50)
    new_records = later(workload(shape, random.Random(86), keys=8, events=30), 1)
    table.produce([*old_records, *new_records])
    ingest(spark, iceberg, kafka, v1)  # the old spec meets the new encoding
    upsert(spark, iceberg, v1)
    first_new = min(
        (s["file"], s["pos"])
        for r in new_records
        if (e := payload(r)) is not None and (s := e["source"]).get("file")
    )
    result = converge(
        lambda: spark,
        "lake",
        iceberg.load_catalog(),
        table.specs_dir,
        "users",
        source_ddl=create_table(shape),
        audit_ddl=[ddl],
        trigger="push",
        change_position={"file": first_new[0], "pos": first_new[1] - 1},
    )
    assert result.decision == "applied", result.plan.describe()
    evolved = table.spec()
    sinks = {name: evolved.columns_by_name[name].sink_name for name in after}
    assert all(evolved.columns_by_name[f"{name}__v1"].dropped for name in after)
    ingest(spark, iceberg, kafka, evolved)
    upsert(spark, iceberg, evolved)

    epoch = datetime(1970, 1, 1)

    def expected(name: str, value: Any, new: bool) -> tuple[Any, Any]:
        """(the new column's value, the old column's) of one image's field."""
        if value is None:
            return None, None
        if change == "zone":
            if new:
                return datetime.fromisoformat(value), None
            wall = epoch + timedelta(milliseconds=value)
            return wall.replace(tzinfo=UTC), wall
        old_scale = int(before[name].split(",")[1].rstrip(")"))
        precision, new_scale = (int(n) for n in after[name][8:-1].split(","))
        if new:
            return unscaled(value, new_scale), None
        was = unscaled(value, old_scale)
        return exactly(was, precision, new_scale), was

    want: dict[int, tuple[bool, dict[str, Any]]] = {}
    not_converting = 0
    for records, new in ((old_records, False), (new_records, True)):
        for record in records:
            event = payload(record)
            if event is None or event["op"] not in ("c", "u", "r", "d"):
                continue
            image = event["before"] if event["op"] == "d" else event["after"]
            if not new:
                not_converting += any(
                    image.get(n) is not None and expected(n, image[n], False)[0] is None
                    for n in after
                )
            if event["op"] == "d":
                want.pop(image["id"], None)
            else:
                want[image["id"]] = (new, image)
    base = base_rows(iceberg, evolved)
    assert sorted(base) == sorted(want)
    wrong = []
    for key, (new, image) in want.items():
        for name in after:
            value, old_value = expected(name, image.get(name), new)
            got = base[key][sinks[name]]
            if got != value:
                wrong.append((key, name, "new column", got, value))
            # the old column keeps what it held; after the change it is no longer written
            if not new and base[key][name] != old_value:
                wrong.append((key, name, "old column", base[key][name], old_value))
    assert not wrong, wrong[:5]
    backfill = result.backfill
    assert backfill is not None
    assert backfill.ledger_rows_rejected == not_converting
    assert (not_converting > 0) == (change == "decimals")
    # the image_values check reads the rows before the change as the backfill filled them
    checked = image_mismatches(spark, "lake", iceberg.load_catalog(), evolved)
    assert checked.ledger_rows > 0
    assert not any(checked.ledger.values()), checked.ledger_examples
    assert checked.base == 0, checked.base_examples
    assert any(not new for new, _ in want.values())
    assert any(new for new, _ in want.values())
    dead = dead_letter_layout(evolved)
    assert not read_table(iceberg, dead.namespace, dead.name)


def test_a_postgres_numeric_scale_change_is_placed_by_the_first_record_of_the_new_shape(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    resources: dict[str, Any],
    tmp_path: Path,
) -> None:
    """PostgreSQL has no schema-change topic: its events start carrying the new shape in their
    embedded schema. ``tax`` numeric(12,2) -> numeric(12,4) is sent as unscaled bytes, so the
    old spec reads the new records' bytes at scale 2 (other values). The sensor places the
    change at the newest record of the old shape (its LSN), the evolution's backfill converts
    the older values exactly (those beyond 8 integer digits do not fit and are counted) and
    decodes the newer images anew; base is compared with a plain replay."""
    _cursors.clear()
    v1 = isolated(example_spec(it_settings, "orders"), kafka=kafka)
    specs_dir = tmp_path / "specs"
    specs_dir.mkdir()
    write_spec(v1, specs_dir / "orders.yaml")
    settings = replace(it_settings, specs_dir=specs_dir)
    ensure_tables(spark, "lake", v1)
    shape = with_types(v1, tax="numeric(12,4)")
    old_records = workload(v1, random.Random(87), keys=20, events=60, embed_schema=True)

    def after_the_old(_: int, envelope: dict[str, Any]) -> None:
        source = envelope.get("source")
        if isinstance(source, dict) and source.get("lsn") is not None:
            source["lsn"] += 10**8

    new_records = _rewrite(
        workload(shape, random.Random(88), keys=8, events=30, embed_schema=True), after_the_old
    )
    produce([*old_records, *new_records], v1.source.topic, kafka.resolved_bootstrap())
    ingest(spark, iceberg, kafka, v1)  # the old spec reads the new bytes at scale 2
    upsert(spark, iceberg, v1)

    instance = dg.DagsterInstance.ephemeral()
    defs = build_defs(specs=[v1], settings=settings, resource_overrides=resources)
    (request,) = _tick(defs, "schema_changes", instance, resources).run_requests
    config = request.run_config["ops"]["schema__orders_schema"]["config"]
    last_old = max(e["source"]["lsn"] for r in old_records if (e := payload(r)) is not None)
    assert json.loads(config["source_position"]) == {"lsn": last_old}
    run = defs.resolve_job_def("evolve_schemas").execute_in_process(
        instance=instance,
        run_config=request.run_config,
        asset_selection=list(request.asset_selection or []),
    )
    assert run.success
    evolved = load_spec(specs_dir / "orders.yaml")
    assert evolved.columns_by_name["tax"].sink_name == "tax__decimal_12_4"
    ingest(spark, iceberg, kafka, evolved)
    upsert(spark, iceberg, evolved)

    want: dict[int, Decimal | None] = {}
    for records, scale in ((old_records, 2), (new_records, 4)):
        for record in records:
            event = payload(record)
            if event is None or event["op"] not in ("c", "u", "r", "d"):
                continue
            if event["op"] == "d":
                want.pop(event["before"]["order_id"], None)
                continue
            tax = event["after"].get("tax")
            value = None if tax is None else unscaled(tax, scale)
            want[event["after"]["order_id"]] = (
                value if value is None or scale == 4 else exactly(value, 12, 4)
            )
    layout = base_layout(evolved)
    base = {r["order_id"]: r for r in read_table(iceberg, layout.namespace, layout.name)}
    assert sorted(base) == sorted(want)
    wrong = {k: (base[k]["tax__decimal_12_4"], v) for k, v in want.items()
             if base[k]["tax__decimal_12_4"] != v}  # fmt: skip
    assert not wrong, list(wrong.items())[:5]
    assert any(v is not None for v in want.values())
    checked = image_mismatches(spark, "lake", iceberg.load_catalog(), evolved)
    assert not any(checked.ledger.values()), checked.ledger_examples
