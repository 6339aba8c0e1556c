"""A protection set in a later spec version, and `pipeline.maintenance.reprotect` rewriting what
was stored
before it: no plaintext left in any file of the table's namespace, base equal to the oracle's
replay with the protections applied in Python, and the pipeline going on from where it was."""

from __future__ import annotations

import json
import random
import uuid
from typing import Any

import pytest
import yaml

from cdc_assets.checks.accounting import account
from cdc_assets.pipeline.health.protection_audit import audit_protection
from cdc_assets.pipeline.ingest.redrive import redrive
from cdc_assets.pipeline.maintenance.reprotect import reprotect_table
from cdc_assets.pipeline.shared.protection import configured_key
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.pipeline.upsert.history import update_history
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.evolution import apply_plan, classify
from cdc_assets.schema.layers import base_layout, dead_letter_layout, ledger_layout
from cdc_assets.schema.sink_values import project_document
from cdc_assets.settings import ENV_PROTECTION_KEY, ENV_PROTECTION_KEY_ID, Settings
from cdc_assets.spec.models import Protection, TableSpec
from cdc_assets.sql.protect import decrypt_text, protect_document, protect_text, value_text
from cdc_assets_dev.demo.events import DebeziumEventFactory, produce
from cdc_assets_tests.integration.test_ingest import isolated, read_table
from cdc_assets_tests.integration.test_sensitive_columns import _name, _scan_files
from cdc_assets_tests.integration.test_upsert import expected_base, ingest, upsert

SPEC = """
spec_version: 1
name: members
source: {connector: mysql, database: crm, table: members, topic: crm.crm.members}
columns:
  - {id: 1, name: id, type: bigint, nullable: false}
  - {id: 2, name: email, type: varchar(255), sensitive: true}
  - {id: 3, name: phone, type: varchar(32), sensitive: true}
  - {id: 4, name: display_name, type: varchar(100), sensitive: true}
  - {id: 5, name: settings, type: json, sensitive: true}
  - {id: 6, name: country, type: char(2), nullable: false}
  - {id: 7, name: orders, type: json, sensitive: true}
  - id: 8
    name: prefs
    type: json
    sensitive: true
    sink: {type: "struct<contact:struct<email:string,tier:int>,codes:list<string>>"}
primary_key: [id]
pipeline: {sensitive: true}
sink: {namespace: crm}
history: {mode: scd2}
checks: {max_dead_letter_rate: 0.2}
"""

PROTECTIONS = {"email": "mask_email", "phone": "hash", "display_name": "encrypt"}
PATHS = {
    "settings": {"secret.pin": "hash"},
    "orders": {"items[].card": "hash"},  # a path through an array
    # a document read into a struct; extra is not declared (the row image holds it alone)
    "prefs": {"contact.email": "encrypt", "codes[]": "hash", "extra.secret": "mask_shape"},
}
TEXT_DOCUMENTS = ("settings", "orders")


def _protected(spec: TableSpec) -> TableSpec:
    """The next spec version as a person writes it: the same columns, now protected."""
    columns = [
        c.model_copy(
            update={
                "protect": Protection(PROTECTIONS[c.name]) if c.name in PROTECTIONS else None,
                "protect_paths": {p: Protection(v) for p, v in PATHS.get(c.name, {}).items()},
            }
        )
        for c in spec.columns
    ]
    return TableSpec.model_validate(
        {
            **spec.model_dump(mode="json", by_alias=True),
            "spec_version": 2,
            "columns": [
                c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in columns
            ],
        }
    )


def _row(rng: random.Random, key: int, plaintexts: set[str], **over: Any) -> dict[str, Any]:
    tag = uuid.UUID(int=rng.getrandbits(128)).hex[:12]
    row = {
        "id": key,
        "email": f"member.{tag}@example.org",
        "phone": f"+44 7{rng.randrange(10**9):09d}",
        "display_name": f"Member {tag}",
        "settings": json.dumps({"theme": "dark", "secret": {"pin": f"pin-{tag}"}}),
        "country": rng.choice(["GB", "FR"]),
        "orders": json.dumps({"items": [{"sku": "A", "card": f"card-{tag}"}, {"sku": "B"}]}),
        "prefs": json.dumps(
            {
                "contact": {"email": f"pref.{tag}@example.com", "tier": 2},
                "codes": [f"code-{tag}"],
                "extra": {"secret": f"Extra{tag}"},
            }
        ),
        **over,
    }
    plaintexts.update({f"member.{tag}", row["phone"], row["display_name"], f"pin-{tag}"})
    plaintexts.update({f"card-{tag}", f"pref.{tag}", f"code-{tag}", f"Extra{tag}"})
    return row


def _expected(spec: TableSpec, source: TableSpec, kafka: KafkaResource) -> dict[Any, Any]:
    key = configured_key()
    out = {}
    for k, row in expected_base(source, kafka).items():
        for c in spec.columns:
            if c.protect is not None and row[c.name] is not None:
                row[c.name] = protect_text(c.protect, value_text(row[c.name]), key)
            elif c.protect_paths and c.sink.type is not None and row[c.name] is not None:
                # the declared members, protected, read into the type again
                text = json.dumps(row[c.name])
                paths = sorted(c.protect_paths.items())
                row[c.name] = project_document(
                    protect_document(text, paths, key), c.sink_type("mysql")
                )
            elif c.protect_paths:
                row[c.name] = protect_document(row[c.name], sorted(c.protect_paths.items()), key)
        out[k] = row
    return out


def _assert_base(spec: TableSpec, source: TableSpec, iceberg: Any, kafka: KafkaResource) -> None:
    expected = _expected(spec, source, kafka)
    layout = base_layout(spec)
    actual = {(r["id"],): r for r in read_table(iceberg, layout.namespace, layout.name)}
    assert sorted(actual) == sorted(expected)
    diffs = [
        f"{k} {name}: oracle {value!r} base {actual[k][name]!r}"
        for k, want in expected.items()
        for name, value in want.items()
        if not name.startswith("_")
        and (
            json.loads(actual[k][name]) != value
            if name in TEXT_DOCUMENTS and value is not None
            else actual[k][name] != value
        )
    ]
    assert not diffs, "\n".join(diffs[:20])


def test_a_column_protected_later_is_rewritten_everywhere_and_the_pipeline_goes_on(
    monkeypatch: pytest.MonkeyPatch,
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
) -> None:
    monkeypatch.setenv(ENV_PROTECTION_KEY, "a secret for the rewrite test, not in git")
    monkeypatch.setenv(ENV_PROTECTION_KEY_ID, "r1")
    plain = isolated(TableSpec.model_validate(yaml.safe_load(SPEC)), kafka=kafka)
    ensure_tables(spark, "lake", plain)
    catalog = iceberg.load_catalog()
    rng = random.Random(571)
    plaintexts: set[str] = set()
    factory = DebeziumEventFactory(plain)
    bootstrap = kafka.resolved_bootstrap()
    rows = {k: _row(rng, k, plaintexts) for k in range(1, 26)}
    records = [factory.create(r) for r in rows.values()]
    for k in rng.sample(sorted(rows), 8):
        records.append(factory.update(rows[k], _row(rng, k, plaintexts)))
    # A dead letter stored before any protection: its payload is plaintext.
    records.append(factory.create(_row(rng, 90, plaintexts, country=None)))
    produce(records, plain.source.topic, bootstrap)
    ingest(spark, iceberg, kafka, plain)
    upsert(spark, iceberg, plain)
    update_history(spark, "lake", catalog, plain)

    # The next version protects four fields; the evolution takes it (no Iceberg change).
    proposed = _protected(plain)
    plan = classify(plain, proposed)
    assert not plan.rejections, plan.rejections
    assert {str(c).split(":")[0] for c in plan.changes} == {
        "column email",
        "column phone",
        "column display_name",
        "column settings",
        "column orders",
        "column prefs",
    }
    spec = apply_plan(plain, plan)
    assert spec.protects

    # New events are protected at ingest; what was stored before is not, and the audit says so.
    more = [factory.create(_row(rng, k, plaintexts)) for k in range(30, 36)]
    produce(more, spec.source.topic, bootstrap)
    ingest(spark, iceberg, kafka, spec)
    upsert(spark, iceberg, spec)
    update_history(spark, "lake", catalog, spec)
    before = audit_protection(spark, "lake", spec)
    assert before.plain_total > 0
    assert {
        "email",
        "phone",
        "display_name",
        "settings.secret.pin",
        "orders.items[].card",
        "prefs.contact.email",
        "prefs.codes[]",
        "_row_json.prefs.extra.secret",
    } <= set(before.plain)
    assert before.plain["dead letter payloads"] == 1

    messages: list[str] = []
    result = reprotect_table(spark, "lake", catalog, spec, log=messages.append)
    assert result.clean, (result.plain_after, result.kept_with_plaintext, messages)
    assert result.plain_before == before.plain_total
    assert result.snapshots_expired > 0
    assert audit_protection(spark, "lake", spec).plain_total == 0
    dead = read_table(iceberg, *_name(dead_letter_layout(spec)))
    assert [r["payload_b64"].split(":")[:2] for r in dead] == [["enc", "r1"]]

    # Correct: base is the oracle's replay with every protection applied in Python.
    _assert_base(spec, plain, iceberg, kafka)
    # No file of the table's namespace holds a value the protections cover: data files
    # (decoded and raw, so column statistics), manifests, manifest lists and metadata.
    hits, files = _scan_files(it_settings.local_warehouse / spec.sink.namespace, plaintexts)
    assert files > 10
    assert not hits, "\n".join(sorted(hits)[:20])

    # The pipeline goes on from where it stood: nothing read twice, nothing lost.
    later = [factory.update(rows[1], _row(rng, 1, plaintexts)), factory.delete(rows[2])]
    produce(later, spec.source.topic, bootstrap)
    ingest(spark, iceberg, kafka, spec)
    upsert(spark, iceberg, spec)
    _assert_base(spec, plain, iceberg, kafka)
    ledger = read_table(iceberg, *_name(ledger_layout(spec)))
    offsets = [(r["_kafka_partition"], r["_kafka_offset"]) for r in ledger]
    assert len(offsets) == len(set(offsets)) == len(records) + len(more) + len(later) - 1
    assert account(catalog, spec).passed

    # A second run finds nothing to rewrite.
    again = reprotect_table(spark, "lake", catalog, spec)
    assert again.clean
    assert again.plain_before == 0
    assert again.rows_rewritten == {}


def test_rekeying_encrypts_again_with_the_current_key_and_the_old_one_is_no_longer_needed(
    monkeypatch: pytest.MonkeyPatch,
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
) -> None:
    """The rotation's second half: values encrypted and dead letters sealed with k1 are
    encrypted again with k2; k1's hashes stay (a hash cannot be re-keyed) and are listed;
    without k1, the table reads and the dead letter redrives."""
    old_secret = "the first secret of the rekey test"
    monkeypatch.setenv(ENV_PROTECTION_KEY, old_secret)
    monkeypatch.setenv(ENV_PROTECTION_KEY_ID, "k1")
    plain = isolated(TableSpec.model_validate(yaml.safe_load(SPEC)), kafka=kafka)
    spec = _protected(plain)
    ensure_tables(spark, "lake", spec)
    catalog = iceberg.load_catalog()
    rng = random.Random(572)
    factory = DebeziumEventFactory(plain)
    bootstrap = kafka.resolved_bootstrap()
    records = [factory.create(_row(rng, k, set())) for k in range(1, 16)]
    records.append(factory.create(_row(rng, 90, set(), country=None)))  # a dead letter
    produce(records, spec.source.topic, bootstrap)
    ingest(spark, iceberg, kafka, spec)
    upsert(spark, iceberg, spec)
    update_history(spark, "lake", catalog, spec)

    monkeypatch.setenv(ENV_PROTECTION_KEY, "the second secret, from the vault")
    monkeypatch.setenv(ENV_PROTECTION_KEY_ID, "k2")
    monkeypatch.setenv("CDC_ASSETS_PROTECTION_OLD_KEY_K1", old_secret)
    more = [factory.create(_row(rng, k, set())) for k in range(20, 26)]
    produce(more, spec.source.topic, bootstrap)
    ingest(spark, iceberg, kafka, spec)
    upsert(spark, iceberg, spec)
    update_history(spark, "lake", catalog, spec)
    assert audit_protection(spark, "lake", spec).key_ids == {"k1", "k2"}

    result = reprotect_table(spark, "lake", catalog, spec, rekey=True)
    assert result.clean, (result.stale_after, result.kept_with_plaintext)
    assert result.rows_rewritten.get("cdc", 0) == len(records) - 1
    # k1 stays in use by the hashes alone (phone, settings.secret.pin)
    assert result.key_ids_after == ["k1", "k2"]
    base = read_table(iceberg, *_name(base_layout(spec)))
    assert all(r["display_name"].startswith("enc:k2:") for r in base)
    assert {r["phone"].split(":")[1] for r in base} == {"k1", "k2"}
    dead = read_table(iceberg, *_name(dead_letter_layout(spec)))
    assert [r["payload_b64"].split(":")[:2] for r in dead] == [["enc", "k2"]]
    # No value of k1's encryption is left in any file (older snapshots expired).
    hits, _ = _scan_files(it_settings.local_warehouse / spec.sink.namespace, {"enc:k1:"})
    assert not hits, hits[:5]

    # Correct without k1: base is the oracle's replay (hashes under the key each names).
    monkeypatch.delenv("CDC_ASSETS_PROTECTION_OLD_KEY_K1")
    keys = {"k2": configured_key()}
    monkeypatch.setenv(ENV_PROTECTION_KEY, old_secret)
    monkeypatch.setenv(ENV_PROTECTION_KEY_ID, "k1")
    keys["k1"] = configured_key()
    monkeypatch.setenv(ENV_PROTECTION_KEY, "the second secret, from the vault")
    monkeypatch.setenv(ENV_PROTECTION_KEY_ID, "k2")
    expected = expected_base(plain, kafka)
    actual = {(r["id"],): r for r in base}
    assert sorted(actual) == sorted(expected)
    for k, want in expected.items():
        got = actual[k]
        assert decrypt_text(got["display_name"], keys["k2"]) == want["display_name"]
        phone_key = keys[got["phone"].split(":")[1]]
        assert got["phone"] == protect_text(Protection.HASH, want["phone"], phone_key)
    # The dead letter, sealed with k2 now, redrives without k1 (and stays dead: country null).
    assert redrive(spark, "lake", spec).still_dead == 1
