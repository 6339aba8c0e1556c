"""Sensitive columns protected at ingest, proved by looking for the plaintext everywhere.

A stream with generated emails, phones, names, tax ids, a secret nested in a JSON document and
a dropped field runs through the Dagster jobs (ingest, upsert with history, maintenance) and a
redrive of dead letters; then every data file (decoded values and raw bytes, so column
statistics too), every metadata file and manifest, the dead-letter table and every Dagster event
of the runs are searched for each plaintext value: none may be found. Base is compared with a
plain-Python replay of the same events with the protections applied in Python (HMAC from
``hmac``, AES-GCM from ``cryptography``): the protection must keep the values, not lose them.
"""

from __future__ import annotations

import base64
import json
import random
import uuid
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import fastavro
import pyarrow.parquet as pq
import pytest
import yaml

from cdc_assets.definitions import build_defs
from cdc_assets.jobs.maintenance import MAINTENANCE_JOB
from cdc_assets.pipeline.health.protection_audit import audit_protection
from cdc_assets.pipeline.ingest.redrive import redrive
from cdc_assets.pipeline.shared.protection import ProtectionKeyError, configured_key, key_for
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.quality import rules
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.layers import base_layout, dead_letter_layout, history_layout, ledger_layout
from cdc_assets.schema.sink_values import project_document
from cdc_assets.sensors.new_offsets import current_hour_key
from cdc_assets.settings import ENV_PROTECTION_KEY, ENV_PROTECTION_KEY_ID, Settings
from cdc_assets.spec.models import Protection, TableSpec
from cdc_assets.sql.ddl import literal, table_identifier
from cdc_assets.sql.protect import (
    decrypt_text,
    image_sql,
    protect_document,
    protect_sql,
    protect_text,
    value_text,
)
from cdc_assets_dev.demo.events import DebeziumEventFactory, KafkaRecord, produce
from cdc_assets_tests.integration.test_ingest import isolated, read_table
from cdc_assets_tests.integration.test_upsert import expected_base, ingest, upsert

SECRET = "correct horse battery staple, not in git"

SPEC = """
spec_version: 1
name: customers
source: {connector: mysql, database: crm, table: customers, topic: crm.crm.customers}
columns:
  - {id: 1, name: id, type: bigint, nullable: false}
  - {id: 2, name: email, type: varchar(255), sensitive: true, protect: mask_email}
  - {id: 3, name: phone, type: varchar(32), sensitive: true, protect: mask_last4}
  - {id: 4, name: display_name, type: varchar(100), sensitive: true, protect: encrypt}
  - {id: 5, name: tax_id, type: varchar(20), sensitive: true, protect: hash}
  - {id: 6, name: profile, type: json, sensitive: true, protect: encrypt}
  - {id: 7, name: shape, type: varchar(40), sensitive: true, protect: mask_shape}
  - {id: 8, name: country, type: char(2), nullable: false}
  - {id: 9, name: login_count, type: int}
  - {id: 11, name: pin, type: int, sensitive: true, protect: hash}
  - {id: 12, name: born, type: date, sensitive: true, protect: encrypt}
  - id: 13
    name: settings
    type: json
    sensitive: true
    protect_paths: {secret.pin: hash, contact.email: mask_email, contact.phone: encrypt}
  - id: 14
    name: orders
    type: json
    sensitive: true
    protect_paths: {"items[].card": hash, "phones[]": mask_last4}
  - id: 15
    name: prefs
    type: json
    sensitive: true
    sink: {type: "struct<contact:struct<email:string,tier:int>,codes:list<string>>"}
    protect_paths: {contact.email: encrypt, "codes[]": hash, extra.secret: mask_shape}
primary_key: [id]
pipeline: {sensitive: true, drop_fields: [ssn]}
sink: {namespace: crm}
history: {mode: scd2}
checks: {max_dead_letter_rate: 0.1}
"""


def _specs(kafka: KafkaResource) -> tuple[TableSpec, TableSpec]:
    """The pipeline's spec, and the source's shape (every field plain, ssn a column) that the
    events are made from and the oracle reads."""
    spec = isolated(TableSpec.model_validate(yaml.safe_load(SPEC)), kafka=kafka)
    plain = [c.model_copy(update={"protect": None}) for c in spec.columns]
    ssn = plain[0].model_copy(update={"id": 10, "name": "ssn", "type": "varchar(11)"})
    ssn = ssn.model_copy(update={"nullable": True})
    source = spec.model_copy(
        update={
            "columns": [*plain, ssn],
            "pipeline": spec.pipeline.model_copy(update={"drop_fields": []}),
        }
    )
    return spec, source


def _country_nullable(spec: TableSpec) -> TableSpec:
    """The fix of the dead letters these tests redrive: country may be null."""
    columns = [
        c.model_copy(update={"nullable": True}) if c.name == "country" else c for c in spec.columns
    ]
    return spec.model_copy(update={"columns": columns})


def _row(rng: random.Random, key: int, plaintexts: set[str]) -> dict[str, Any]:
    tag = uuid.UUID(int=rng.getrandbits(128)).hex[:12]
    row = {
        "id": key,
        "email": f"user.{tag}@example.org",
        "phone": f"+44 7{rng.randrange(10**9):09d}",
        "display_name": f"Name {tag}",
        "tax_id": f"TX{tag}",
        "profile": json.dumps({"plan": "pro", "secret": {"pin": f"pin-{tag}"}}),
        "shape": f"Shape-{tag}",
        "country": rng.choice(["GB", "FR", "DE"]),
        "login_count": rng.randrange(100),
        "pin": rng.randrange(10**7, 10**8),
        "born": date(1950, 1, 1) + timedelta(days=rng.randrange(20000)),
        "ssn": f"{rng.randrange(10**3):03d}-{tag[:2]}-{tag[2:6]}",
        "settings": json.dumps(
            {
                "theme": rng.choice(["dark", "light"]),
                "secret": {"pin": f"pin2-{tag}", "tries": rng.randrange(5)},
                "contact": {"email": f"alt.{tag}@example.net", "phone": f"+1 555 {tag[:7]}"},
            }
        ),
        # Paths through arrays, in a document stored as text...
        "orders": json.dumps(
            {
                "items": [{"sku": "A1", "card": f"4111-{tag[:8]}"}, {"sku": "B2", "card": None}],
                "phones": [f"+33 6{tag[:8]}", f"+49 1{tag[4:]}"],
            }
        ),
        # ... and in one read into a struct (extra is not declared: the row image only).
        "prefs": json.dumps(
            {
                "contact": {"email": f"pref.{tag}@example.com", "tier": rng.randrange(3)},
                "codes": [f"code-{tag}", f"code2-{tag}"],
                "extra": {"secret": f"Extra{tag}", "public": 1},
            }
        ),
    }
    # What must never be found: each value whole, and the parts a mask hides.
    plaintexts.update(
        {
            row["email"],
            f"user.{tag}",
            row["phone"],
            row["phone"][:-4],
            row["display_name"],
            row["tax_id"],
            f"pin-{tag}",
            row["shape"],
            tag,
            row["ssn"],
            str(row["pin"]),
            f"pin2-{tag}",
            f"alt.{tag}",
            f"+1 555 {tag[:7]}",
            row["born"].isoformat(),
            f"4111-{tag[:8]}",
            f"+33 6{tag[:4]}",
            f"+49 1{tag[4:8]}",
            f"pref.{tag}",
            f"code-{tag}",
            f"code2-{tag}",
            f"Extra{tag}",
        }
    )
    return row


def _workload(
    factory: DebeziumEventFactory, rng: random.Random, plaintexts: set[str]
) -> list[KafkaRecord]:
    rows = {k: _row(rng, k, plaintexts) for k in range(1, 31)}
    records = [factory.create(r) for r in rows.values()]
    for k in rng.sample(sorted(rows), 12):
        after = {**_row(rng, k, plaintexts), "id": k}
        records.append(factory.update(rows[k], after))
        rows[k] = after
    for k in rng.sample(sorted(rows), 4):
        records += [factory.delete(rows.pop(k)), factory.tombstone({"id": k})]
    return records


def _dead_letters(
    factory: DebeziumEventFactory, rng: random.Random, plaintexts: set[str]
) -> list[KafkaRecord]:
    """A record dead until the spec lets country be null (then redriven), and one that is not
    JSON at all, with plaintext in both."""
    fixable = factory.create({**_row(rng, 100, plaintexts), "country": None})
    broken_row = _row(rng, 101, plaintexts)
    broken = KafkaRecord(b'{"id":101}', f'{{"after": {{"email": "{broken_row["email"]}"'.encode())
    return [fixable, broken]


def _expected(spec: TableSpec, source: TableSpec, kafka: KafkaResource) -> dict[Any, Any]:
    """Base as the oracle replays the source's events, each protection applied by its Python
    twin (HMAC from ``hmac``, AES-GCM from ``cryptography``, the masks by hand)."""
    key = configured_key()
    protections = {c.name: c.protect for c in spec.columns if c.protect}
    documents = {c.name: sorted(c.protect_paths.items()) for c in spec.columns if c.protect_paths}
    typed = {c.name: c.sink_type("mysql") for c in spec.columns if c.protect_paths and c.sink.type}
    out = {}
    for k, row in expected_base(source, kafka).items():
        row.pop("ssn")
        for name, protect in protections.items():
            value = row[name]
            row[name] = None if value is None else protect_text(protect, value_text(value), key)
        for name, paths in documents.items():
            if name in typed:  # the declared members, protected, read into the type again
                text = None if row[name] is None else json.dumps(row[name])
                row[name] = project_document(protect_document(text, paths, key), typed[name])
            else:
                row[name] = protect_document(row[name], paths, key)
        out[k] = row
    return out


def _assert_base(
    spec: TableSpec, iceberg: IcebergCatalogResource, expected: dict[Any, Any]
) -> None:
    key = configured_key()
    assert key is not None
    layout = base_layout(spec)
    actual = {(r["id"],): r for r in read_table(iceberg, layout.namespace, layout.name)}
    assert sorted(actual) == sorted(expected)
    documents = {c.sink_name for c in spec.columns if c.protect_paths and c.sink.type is None}
    for row in actual.values():
        for name in documents:
            row[name] = None if row[name] is None else json.loads(row[name])
    diffs = [
        f"{k} {name}: oracle {value!r} base {actual[k][name]!r}"
        for k, want in expected.items()
        for name, value in want.items()
        if not name.startswith("_") and actual[k][name] != value
    ]
    assert all(r["settings"]["secret"]["pin"].startswith("hmac:") for r in actual.values())
    assert all(r["orders"]["items"][0]["card"].startswith("hmac:") for r in actual.values())
    assert all(c.startswith("hmac:") for r in actual.values() for c in r["prefs"]["codes"])
    assert not diffs, "\n".join(diffs[:20])
    # Reversible with the key alone, outside Spark.
    names = {decrypt_text(r["display_name"], key) for r in actual.values()}
    assert all(n.startswith("Name ") for n in names)
    emails = {decrypt_text(r["prefs"]["contact"]["email"], key) for r in actual.values()}
    assert all(e.startswith("pref.") for e in emails)


def _hits(data: bytes | str, plaintexts: set[str], where: str) -> list[str]:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return [f"{where}: {p!r}" for p in plaintexts if p in text]


def _scan_files(root: Path, plaintexts: set[str]) -> tuple[list[str], int]:
    """Every file under ``root``: raw bytes, and decoded Parquet values and Avro records."""
    hits, files = [], 0
    for path in root.rglob("*"):
        if not path.is_file():
            continue
        files += 1
        hits += _hits(path.read_bytes(), plaintexts, str(path.name))
        if path.suffix == ".parquet":
            table = pq.read_table(path)
            hits += _hits(json.dumps(table.to_pylist(), default=str), plaintexts, path.name)
        elif path.suffix == ".avro":
            with path.open("rb") as f:
                records = list(fastavro.reader(f))
            hits += _hits(json.dumps(records, default=repr), plaintexts, path.name)
    return hits, files


@pytest.fixture
def protection_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_PROTECTION_KEY, SECRET)
    monkeypatch.setenv(ENV_PROTECTION_KEY_ID, "k7")


def test_no_plaintext_anywhere_after_ingest_upsert_history_redrive_and_maintenance(
    protection_key: None,
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    resources: dict[str, Any],
    tmp_path: Path,
) -> None:
    spec, source = _specs(kafka)
    ensure_tables(spark, "lake", spec)
    rng = random.Random(57)
    plaintexts: set[str] = set()
    factory = DebeziumEventFactory(source)
    records = _workload(factory, rng, plaintexts) + _dead_letters(factory, rng, plaintexts)
    produce(records, spec.source.topic, kafka.resolved_bootstrap())

    defs = build_defs(specs=[spec], settings=it_settings, resource_overrides=resources)
    # A Dagster home on disk, as a deployment has: its event log and the runs' captured
    # stdout/stderr (compute logs) are files the scan reads.
    dagster_home = tmp_path / "dagster"
    dagster_home.mkdir()
    instance = dg.DagsterInstance.local_temp(tempdir=str(dagster_home))
    ingest = defs.resolve_job_def("ingest_ledgers").execute_in_process(
        instance=instance, partition_key=current_hour_key(datetime.now(UTC))
    )
    assert ingest.success
    dead = read_table(iceberg, *_name(dead_letter_layout(spec)))
    assert len(dead) == 2
    assert all(r["payload_b64"].startswith("enc:k7:") for r in dead)

    # The spec is fixed (country may be null): the sealed dead letter redrives and is protected
    # on its way to the ledger like any record; the record that is not JSON stays dead.
    fixed = _country_nullable(spec)
    result = redrive(spark, "lake", fixed, schemas=None)
    assert (result.to_ledger, result.still_dead) == (1, 1)
    defs = build_defs(specs=[fixed], settings=it_settings, resource_overrides=resources)
    upsert = defs.resolve_job_def("upsert_bases").execute_in_process(instance=instance)
    assert upsert.success
    # Every check of the protected table agrees with what it stores.
    evaluations = [e for r in (ingest, upsert) for e in r.get_asset_check_evaluations()]
    assert len(evaluations) >= 8
    failed = {e.check_name: e.description for e in evaluations if not e.passed}
    # The null country refused by the first spec asks for an evolution until one runs: right.
    assert set(failed) <= {"schema_converged"}, failed
    assert "country" in failed.get("schema_converged", "country")
    maintenance = defs.resolve_job_def(MAINTENANCE_JOB).execute_in_process(
        instance=instance, run_config={"ops": {"maintain_table": {"config": {"table": spec.name}}}}
    )
    assert maintenance.success

    # Correct: base is the oracle's replay with the protections applied in Python.
    source_fixed = _country_nullable(source)
    _assert_base(spec, iceberg, _expected(spec, source_fixed, kafka))

    # Dropped: ssn is in no table's schema and no stored row image.
    catalog = iceberg.load_catalog()
    for layout in (ledger_layout(spec), base_layout(spec), history_layout(spec)):
        names = [f.name for f in catalog.load_table(".".join(_name(layout))).schema().fields]
        assert "ssn" not in names
    ledger = read_table(iceberg, *_name(ledger_layout(spec)))
    assert all("ssn" not in json.loads(r["_row_json"]) for r in ledger)

    # Nothing anywhere holds a plaintext value.
    hits, files = _scan_files(it_settings.local_warehouse / spec.sink.namespace, plaintexts)
    assert files > 20
    for run in (ingest, upsert, maintenance):
        for event in instance.all_logs(run.run_id):
            hits += _hits(
                dg.serialize_value(event), plaintexts, f"event {event.dagster_event_type}"
            )
    logged, dagster_files = _scan_files(dagster_home, plaintexts)
    assert dagster_files >= 3  # the instance's storage and the runs' captured logs
    hits += logged
    for row in dead:
        hits += _hits(base64.b64decode(row["payload_b64"].split(":", 2)[2]), plaintexts, "dlt")
    assert not hits, "\n".join(sorted(hits)[:20])


def _name(layout: Any) -> tuple[str, str]:
    return layout.namespace, layout.name


def test_a_protecting_table_needs_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_PROTECTION_KEY, raising=False)
    spec = TableSpec.model_validate(yaml.safe_load(SPEC))
    with pytest.raises(ProtectionKeyError, match=ENV_PROTECTION_KEY):
        key_for(spec)


TEXTS = [
    "",
    "a",
    "abcd",
    "abcde",
    "ada@example.com",
    "a@b@c.org",
    "no-at-sign",
    "Zoë Ünal-Øster 42",
    "日本語のテキスト123",
    "emoji 🙂 ok",
    "quote ' and \" and \\ backslash",
    "line\nbreak\ttab",
    "x" * 300,
]


def test_sql_protections_equal_their_python_twins(spark: Any, protection_key: None) -> None:
    """Every protection renders in Spark exactly what its Python twin computes, for text with
    quotes, line breaks, non-ASCII letters, emoji and long values (so the checks comparing a
    source with the mirror, and the tests' oracle, protect as the ingest does)."""
    key = configured_key()
    rng = random.Random(7)
    texts = TEXTS + ["".join(chr(rng.randrange(32, 0xD7FF)) for _ in range(30)) for _ in range(100)]
    frame = spark.createDataFrame([(i, t) for i, t in enumerate(texts)], "i int, t string")
    protections = [p for p in Protection]
    got = frame.selectExpr(
        "i", *(f"{protect_sql(p, 't', key)} AS `{p.value}`" for p in protections)
    )
    rows = {r["i"]: r for r in got.collect()}
    diffs = [
        f"{p.value} of {t!r}: spark {rows[i][p.value]!r} python {protect_text(p, t, key)!r}"
        for i, t in enumerate(texts)
        for p in protections
        if rows[i][p.value] != protect_text(p, t, key)
    ]
    assert not diffs, "\n".join(diffs[:10])
    assert key is not None
    assert all(decrypt_text(rows[i]["encrypt"], key) == t for i, t in enumerate(texts))
    # idempotent masks: a value read back from the stored image is not masked into another
    masks = [p for p in protections if not p.keyed]
    assert all(
        protect_text(p, protect_text(p, t, key), key) == protect_text(p, t, key)
        for p in masks
        for t in texts
    )


def test_row_images_keep_unprotected_fields_and_lose_dropped_ones(spark: Any) -> None:
    image = '{"id":5,"email":"a@b.org","old_email":"c@d.org","ssn":"1","doc":{"k":[1,2]},"n":null}'
    sql = image_sql("img", {"email": "'P1'", "old_email": "'P2'"}, {"ssn"})
    out = spark.sql(f"SELECT {sql} AS o FROM (SELECT {literal(image)} AS img)").first()["o"]
    assert json.loads(out) == {
        "id": 5,
        "email": "P1",
        "old_email": "P2",
        "doc": {"k": [1, 2]},
        "n": None,
    }
    null = spark.sql(
        f"SELECT {image_sql('img', {}, {'ssn'})} AS o FROM (SELECT CAST(NULL AS STRING) AS img)"
    )
    assert null.first()["o"] is None


def test_a_rotated_key_keeps_older_values_and_dead_letters_readable(
    monkeypatch: pytest.MonkeyPatch,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
) -> None:
    """The documented rotation: a new current key and id, the old key kept as
    CDC_ASSETS_PROTECTION_OLD_KEY_<ID>. New values use the new key; values and sealed dead
    letters of the old one stay readable; the audit check passes and names both ids; without
    the old key a redrive of its dead letter stops naming it. Then a value written plain by
    hand turns the audit red."""
    monkeypatch.setenv(ENV_PROTECTION_KEY, SECRET)
    monkeypatch.setenv(ENV_PROTECTION_KEY_ID, "k1")
    spec, source = _specs(kafka)
    ensure_tables(spark, "lake", spec)
    rng = random.Random(5)
    plaintexts: set[str] = set()
    factory = DebeziumEventFactory(source)
    bootstrap = kafka.resolved_bootstrap()
    first = [factory.create(_row(rng, k, plaintexts)) for k in range(1, 11)]
    produce(
        [*first, factory.create({**_row(rng, 50, plaintexts), "country": None})],
        spec.source.topic,
        bootstrap,
    )
    ingest(spark, iceberg, kafka, spec)
    old = configured_key()

    monkeypatch.setenv(ENV_PROTECTION_KEY, "a new secret, from the vault this time")
    monkeypatch.setenv(ENV_PROTECTION_KEY_ID, "k2")
    monkeypatch.setenv("CDC_ASSETS_PROTECTION_OLD_KEY_K1", SECRET)
    new = configured_key()
    assert old is not None
    assert new is not None
    assert new.key_id == "k2"
    rows = {k: _row(rng, k, plaintexts) for k in range(5, 16)}  # updates 5-10, creates 11-15
    second = [factory.create(r) for r in rows.values()]
    produce(
        [*second, factory.create({**_row(rng, 51, plaintexts), "country": None})],
        spec.source.topic,
        bootstrap,
    )
    ingest(spark, iceberg, kafka, spec)
    dead = read_table(iceberg, *_name(dead_letter_layout(spec)))
    assert sorted(r["payload_b64"].split(":")[1] for r in dead) == ["k1", "k2"]

    fixed = _country_nullable(spec)
    assert redrive(spark, "lake", fixed).to_ledger == 2
    upsert(spark, iceberg, fixed)

    keys = {k.key_id: k for k in (old, new)}
    plain_source = _country_nullable(source)
    expected = expected_base(plain_source, kafka)
    actual = {(r["id"],): r for r in read_table(iceberg, *_name(base_layout(spec)))}
    assert sorted(actual) == sorted(expected)
    used = set()
    for k, want in expected.items():
        for c in spec.columns:
            if c.protect is None or not c.protect.keyed or want[c.name] is None:
                continue
            stored = actual[k][c.sink_name]
            key = keys[stored.split(":")[1]]
            used.add(key.key_id)
            assert stored == protect_text(c.protect, value_text(want[c.name]), key), (k, c.name)
            if c.protect is Protection.ENCRYPT:
                assert decrypt_text(stored, key) == value_text(want[c.name])
    assert used == {"k1", "k2"}
    verdict = rules.protection_verdict(audit_protection(spark, "lake", fixed), "k2")
    assert verdict.passed, verdict.summary
    assert verdict.metadata["key_ids_in_use"] == ["k1", "k2"]

    # Without the old key, its sealed dead letter (the record that is not JSON) cannot be read:
    # the redrive stops naming the key, instead of taking it for a tombstone.
    broken = KafkaRecord(b'{"id":77}', b'{"after": {"email": "x@y.z"')
    monkeypatch.setenv(ENV_PROTECTION_KEY, SECRET)
    monkeypatch.setenv(ENV_PROTECTION_KEY_ID, "k1")
    produce([broken], spec.source.topic, bootstrap)
    ingest(spark, iceberg, kafka, fixed)
    monkeypatch.setenv(ENV_PROTECTION_KEY, "a new secret, from the vault this time")
    monkeypatch.setenv(ENV_PROTECTION_KEY_ID, "k2")
    monkeypatch.delenv("CDC_ASSETS_PROTECTION_OLD_KEY_K1")
    with pytest.raises(Exception, match="protection key k1"):
        redrive(spark, "lake", fixed)

    # A value stored plain by any path turns the audit red, naming the column, not the value.
    base = table_identifier("lake", base_layout(spec))
    spark.sql(f"UPDATE {base} SET tax_id = 'TX-written-plain' WHERE id = 3")
    verdict = rules.protection_verdict(audit_protection(spark, "lake", fixed), "k2")
    assert not verdict.passed
    assert verdict.metadata["unprotected_values"] == {"tax_id": 1}
    assert "TX-written-plain" not in repr(verdict)
