"""Avro records through the stack's schema registry (Apicurio, Confluent-compatible API).

The same change events go to two topics, as JSON and as registry-framed Avro (the Connect
schema each JSON record embeds, converted as Kafka Connect's Avro converter does). The oracle
replays the JSON twins in plain Python; the Avro topic's ledger must match it record for record,
and both bases must be equal row for row. Bad framed records become dead letters with their
reason, a redrive decodes them once the registry is there, and a registry outage fails the run
without committing anything.
"""

from __future__ import annotations

import json
import random
import struct
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any, overload

import dagster as dg
import pytest

from cdc_assets.definitions import build_defs
from cdc_assets.kafka_security import ENV_REGISTRY_CA, ENV_REGISTRY_PASSWORD, ENV_REGISTRY_USERNAME
from cdc_assets.local_servers import endpoints
from cdc_assets.pipeline.ingest.ingest import ingest_incremental
from cdc_assets.pipeline.ingest.redrive import redrive
from cdc_assets.pipeline.shared.meta_tables import read_history
from cdc_assets.pipeline.shared.offsets import committed_offsets
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.pipeline.upsert.upsert import build_bucketed, merge_base
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.resources.schema_registry import SchemaRegistryError
from cdc_assets.schema.layers import base_layout, dead_letter_layout, ledger_layout
from cdc_assets.settings import Settings
from cdc_assets.spec import load_specs
from cdc_assets.spec.load import load_spec
from cdc_assets.spec.models import ColumnSpec, TableSpec
from cdc_assets.spec.versions import write_spec
from cdc_assets_dev.demo.events import DebeziumEventFactory, KafkaRecord, produce, workload
from cdc_assets_dev.demo.events.avro import RegistryFraming
from cdc_assets_dev.stack import schema_registry
from cdc_assets_dev.stack.kafka_broker import pick_free_port
from cdc_assets_dev.stack.local_stack import StackState, tls_material
from cdc_assets_tests.integration.test_ingest import (
    assert_ledger_matches,
    consume_all,
    isolated,
    read_table,
)
from cdc_assets_tests.support.auth_gateway import auth_gateway, pem_pair
from cdc_assets_tests.support.bad_records import base_row, users_spec
from cdc_assets_tests.support.oracle import Outcome, expected_outcome

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def registry(it_settings: Settings, stack: StackState) -> schema_registry.Registry:
    """The stack's registry (built once into the jar cache; the stack's teardown stops it)."""
    return schema_registry.start(it_settings)


def _framed(records: list[KafkaRecord], url: str, topic: str) -> list[KafkaRecord]:
    framing = RegistryFraming(url, topic)
    return [framing.frame(r) for r in records]


IMAGES = ("_row_json", "_before_json")


def _without_nulls(image: Any) -> Any:
    if isinstance(image, str):
        image = json.loads(image)
    return {k: v for k, v in image.items() if v is not None} if image is not None else None


@overload
def _images_without_nulls(rows: dict[Any, Outcome]) -> dict[Any, Outcome]: ...
@overload
def _images_without_nulls(rows: list[dict[str, Any]]) -> list[dict[str, Any]]: ...
def _images_without_nulls(rows: Any) -> Any:
    """Row images with their null fields left out. An Avro record names every field of its
    schema; the generator's JSON of a PostgreSQL delete (default replica identity) names the
    key alone: the same image."""
    if isinstance(rows, list):
        return [
            {**r, **{c: json.dumps(_without_nulls(r[c])) for c in IMAGES if r[c]}} for r in rows
        ]
    out = {}
    for coords, outcome in rows.items():
        if outcome.row is not None:
            images = {c: _without_nulls(outcome.row[c]) for c in IMAGES}
            outcome = replace(outcome, row={**outcome.row, **images})
        out[coords] = outcome
    return out


def _upsert(spark: Any, iceberg: IcebergCatalogResource, spec: TableSpec) -> None:
    build_bucketed(spark, "lake", iceberg.load_catalog(), spec)
    merged = merge_base(spark, "lake", iceberg.load_catalog(), spec)
    assert merged.applied or merged.up_to_date


def _base(iceberg: IcebergCatalogResource, spec: TableSpec) -> list[dict[str, Any]]:
    layout = base_layout(spec)
    rows = read_table(iceberg, layout.namespace, layout.name)
    keys = spec.key_sink_names
    return sorted(rows, key=lambda r: tuple(r[k] for k in keys))


# The PostgreSQL shape: decimals of both kinds, time types, TOAST placeholders, and deletes that
# carry the key alone (a second writer schema version on the topic). The MySQL family's Avro
# comes from real Debezium in test_sources_avro.py.
@pytest.mark.parametrize("table", ["orders"])
def test_avro_topic_matches_the_oracle_of_its_json_twin(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    registry: schema_registry.Registry,
    table: str,
) -> None:
    spec = next(s for s in load_specs(it_settings.specs_dir) if s.name == table)
    as_json = isolated(spec, partitions=2, kafka=kafka)
    as_avro = isolated(spec, partitions=2, kafka=kafka)
    records = workload(spec, random.Random(5), keys=40, events=250, embed_schema=True)
    framed = _framed(records, registry.url, as_avro.source.topic)
    assert sum(1 for r in framed if r.value and r.value[:1] == b"\x00") > 200
    produce(records, as_json.source.topic, kafka.resolved_bootstrap())
    produce(framed, as_avro.source.topic, kafka.resolved_bootstrap())
    avro_kafka = kafka.model_copy(update={"schema_registry_url": registry.url})
    for twin in (as_json, as_avro):
        ensure_tables(spark, "lake", twin)
        ingest_incremental(spark, "lake", iceberg.load_catalog(), avro_kafka, twin)

    # the oracle replays the JSON twins; the Avro records sit at the same coordinates (their
    # own Kafka timestamps)
    stamps = {(p, o): ts for p, o, ts, _, _ in consume_all(kafka, as_avro.source.topic)}
    twins = consume_all(kafka, as_json.source.topic)
    assert sorted(stamps) == sorted((p, o) for p, o, *_ in twins)
    outcomes = {
        (p, o): expected_outcome(as_avro, p, o, stamps[(p, o)], k, v) for p, o, _, k, v in twins
    }
    statuses = Counter(o.status for o in outcomes.values())
    assert statuses["ledger"] > 200
    layout = ledger_layout(as_avro)
    ledger = read_table(iceberg, layout.namespace, layout.name)
    assert_ledger_matches(as_avro, _images_without_nulls(outcomes), _images_without_nulls(ledger))
    dead = dead_letter_layout(as_avro)
    assert read_table(iceberg, dead.namespace, dead.name) == []

    for twin in (as_json, as_avro):
        _upsert(spark, iceberg, twin)
    json_base, avro_base = _base(iceberg, as_json), _base(iceberg, as_avro)
    assert len(avro_base) > 10
    assert avro_base == json_base


def test_bad_framed_records_are_dead_letters_then_redriven(
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    registry: schema_registry.Registry,
    tmp_path: Path,
) -> None:
    spec = isolated(users_spec(), kafka=kafka)
    ensure_tables(spark, "lake", spec)
    factory = DebeziumEventFactory(spec, embed_schema=True)
    good = [factory.create(base_row(id=i, email=f"u{i}@example.com")) for i in (1, 2)]
    framing = RegistryFraming(registry.url, spec.source.topic)
    framed = [framing.frame(r) for r in good]
    assert framed[0].value is not None
    known_id = struct.unpack(">I", framed[0].value[1:5])[0]
    unknown = KafkaRecord(b"k", b"\x00" + struct.pack(">I", 987654) + framed[0].value[5:])
    garbage = KafkaRecord(b"k", b"\x00" + struct.pack(">I", known_id) + b"\xff\xff")
    not_zero = KafkaRecord(b"k", b"\x01" + framed[0].value[1:])
    batch = [framed[0], unknown, garbage, not_zero]
    produce(batch, spec.source.topic, kafka.resolved_bootstrap(), partitions_by_key=False)

    # first without a registry: every framed record waits in the dead letters, none is lost
    bootstrap = kafka.resolved_bootstrap()
    no_registry = KafkaResource(bootstrap_servers=bootstrap, home=str(tmp_path))
    first = ingest_incremental(spark, "lake", iceberg.load_catalog(), no_registry, spec)
    assert (first.read, first.ledger, first.dead) == (4, 0, 4)
    layout = dead_letter_layout(spec)
    reasons = {r["offset"]: r["reason"] for r in read_table(iceberg, layout.namespace, layout.name)}
    for offset in (0, 1, 2):
        assert "no schema registry is configured" in reasons[offset]
    assert reasons[3] == "value is not valid UTF-8"

    # redriven with the registry: the good one decodes, the others say what is wrong now
    with_registry = kafka.model_copy(update={"schema_registry_url": registry.url})
    result = redrive(spark, "lake", spec, schemas=with_registry.topic_schemas(spec.source.topic))
    assert (result.replayed, result.to_ledger, result.still_dead) == (4, 1, 3)
    assert any("987654 is not a version of subject" in r for r in result.reasons)
    assert any("does not match its writer schema" in r for r in result.reasons)
    ledger = ledger_layout(spec)
    rows = read_table(iceberg, ledger.namespace, ledger.name)
    assert [(r["_kafka_offset"], r["id"]) for r in rows] == [(0, 1)]

    # later records decode at ingest; a registry outage fails the run and commits nothing
    produce([framed[1]], spec.source.topic, bootstrap)
    down = kafka.model_copy(
        update={"schema_registry_url": f"http://127.0.0.1:{pick_free_port()}/apis/ccompat/v7"}
    )
    table = f"{ledger.namespace}.{ledger.name}"
    before = committed_offsets(iceberg.load_catalog().load_table(table))
    with pytest.raises(SchemaRegistryError, match="cannot be reached"):
        ingest_incremental(spark, "lake", iceberg.load_catalog(), down, spec)
    assert committed_offsets(iceberg.load_catalog().load_table(table)) == before
    second = ingest_incremental(spark, "lake", iceberg.load_catalog(), with_registry, spec)
    assert (second.read, second.ledger, second.dead) == (1, 1, 0)


def test_registry_versions_evolve_the_spec_one_at_a_time_in_order(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    resources: dict[str, Any],
    registry: schema_registry.Registry,
    tmp_path: Path,
) -> None:
    """A PostgreSQL table in Avro: two writer schema versions registered before the sensor
    looks (a column added, then a widening) are proposed and applied one after the other, the
    older first, each named by its schema id; never collapsed into the newest."""
    from cdc_assets_tests.integration.test_evolve import later
    from cdc_assets_tests.integration.test_schema_evolution_flow import (
        _cursors,
        _tick,
        with_column,
        with_type,
    )

    _cursors.clear()
    v1 = isolated(
        next(s for s in load_specs(it_settings.specs_dir) if s.name == "orders"), kafka=kafka
    )
    specs_dir = tmp_path / "specs"
    specs_dir.mkdir()
    write_spec(v1, specs_dir / "orders.yaml")
    settings = replace(it_settings, specs_dir=specs_dir)
    ensure_tables(spark, "lake", v1)
    topic, bootstrap = v1.source.topic, kafka.resolved_bootstrap()
    v2 = with_column(v1, ColumnSpec(id=12, name="coupon", type="text"), "note")
    v3 = with_type(v2, "amount", "numeric(16,2)")
    for stage, shape in enumerate((v1, v2, v3)):
        events = workload(shape, random.Random(60 + stage), keys=15, events=40, embed_schema=True)
        produce(_framed(later(events, stage), registry.url, topic), topic, bootstrap)
    ids = list(kafka.topic_schemas(topic).schemas)
    assert len(ids) >= 3
    instance = dg.DagsterInstance.ephemeral()
    applied = []
    for expected_version in (2, 3):
        defs = build_defs(
            specs=[load_spec(specs_dir / "orders.yaml")],
            settings=settings,
            resource_overrides=resources,
        )
        (request,) = _tick(defs, "schema_changes", instance, resources).run_requests
        assert "registry-schema-" in str(request.run_key)
        applied.append(int(str(request.run_key).split("registry-schema-")[1].split(":")[0]))
        run = defs.resolve_job_def("evolve_schemas").execute_in_process(
            instance=instance,
            run_config=request.run_config,
            asset_selection=list(request.asset_selection or []),
        )
        assert run.success
        assert load_spec(specs_dir / "orders.yaml").spec_version == expected_version
    evolved = load_spec(specs_dir / "orders.yaml")
    assert evolved.columns_by_name["coupon"].type == "text"
    assert evolved.columns_by_name["amount"].type == "decimal(16,2)"
    assert applied == sorted(applied)  # the older version first
    mine = f"subject {topic}-value,"
    history = [
        h for h in read_history(iceberg.load_catalog(), "orders") if mine in (h.source_ddl or "")
    ]
    for entry, schema_id in zip(sorted(history, key=lambda h: h.to_version), applied, strict=True):
        assert f"schema id {schema_id}\n" in (entry.source_ddl or "")
        assert entry.iceberg_schema_ids  # the Iceberg schema each version produced
    defs = build_defs(specs=[evolved], settings=settings, resource_overrides=resources)
    assert not _tick(defs, "schema_changes", instance, resources).run_requests


def test_registry_behind_basic_auth_and_tls(
    it_settings: Settings,
    stack: StackState,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    registry: schema_registry.Registry,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """The registry client sends the credentials of the settings over TLS and checks the
    registry's certificate against the configured CA: a wrong password and an untrusted
    certificate each fail naming the setting and commit nothing; right ones ingest every record
    (the registry behind an HTTPS gateway with basic auth: support/auth_gateway.py)."""
    material = tls_material(it_settings)
    spec = isolated(users_spec(), kafka=kafka)
    ensure_tables(spark, "lake", spec)
    factory = DebeziumEventFactory(spec, embed_schema=True)
    framing = RegistryFraming(registry.url, spec.source.topic)
    framed = [framing.frame(factory.create(base_row(id=i))) for i in range(1, 6)]
    produce(framed, spec.source.topic, kafka.resolved_bootstrap())
    cert, key = pem_pair(material.broker_store, material.store_password, tmp_path / "gateway")
    upstream = f"http://127.0.0.1:{registry.port}"
    ledger = ledger_layout(spec)
    table = f"{ledger.namespace}.{ledger.name}"

    def ingest_as(password: str, ca: Path | None, url: str) -> Any:
        secret = tmp_path / "registry-password"
        secret.write_text(password, encoding="utf-8")
        monkeypatch.setenv(ENV_REGISTRY_USERNAME, "cdc")
        monkeypatch.setenv(f"{ENV_REGISTRY_PASSWORD}_FILE", str(secret))
        if ca is None:
            monkeypatch.delenv(ENV_REGISTRY_CA, raising=False)
        else:
            monkeypatch.setenv(ENV_REGISTRY_CA, str(ca))
        through = kafka.model_copy(update={"schema_registry_url": url})
        return ingest_incremental(spark, "lake", iceberg.load_catalog(), through, spec)

    with auth_gateway(upstream, "cdc", "right-password", cert, key) as gateway:
        url = gateway + endpoints.REGISTRY_CCOMPAT_PATH
        before = committed_offsets(iceberg.load_catalog().load_table(table))
        with pytest.raises(SchemaRegistryError, match=ENV_REGISTRY_PASSWORD) as refused:
            ingest_as("wrong-password", material.ca, url)
        assert "wrong-password" not in str(refused.value)
        with pytest.raises(SchemaRegistryError, match=ENV_REGISTRY_CA):
            ingest_as("right-password", None, url)
        assert committed_offsets(iceberg.load_catalog().load_table(table)) == before
        done = ingest_as("right-password", material.ca, url)
    assert (done.read, done.ledger, done.dead) == (5, 5, 0)
    rows = read_table(iceberg, ledger.namespace, ledger.name)
    assert sorted(r["id"] for r in rows) == [1, 2, 3, 4, 5]
