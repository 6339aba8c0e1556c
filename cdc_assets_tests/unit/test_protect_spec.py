"""Protected columns and dropped fields in the spec: what is accepted, what is refused and why,
and how the rest of the core treats them (sink types, evolution, drift, embedded schemas)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from cdc_assets.schema.changes import SetColumnAttribute
from cdc_assets.schema.drift import source_differences
from cdc_assets.schema.evolution import PROTECT_CHANGED, PROTECT_NEW, apply_plan, classify
from cdc_assets.schema.wire import Wire, plan_fields, stored_text_plan
from cdc_assets.spec.connect_schema import differs, names_differ
from cdc_assets.spec.ddl_import import proposed_from_ddl
from cdc_assets.spec.models import Protection, TableSpec
from cdc_assets.sql.protect import (
    ProtectionKey,
    hash_text,
    hmac_sql,
    opened_payload_sql,
    protect_text,
    value_text,
)


def spec(*columns: dict[str, Any], version: int = 1, **pipeline: Any) -> TableSpec:
    return TableSpec.model_validate(
        {
            "spec_version": version,
            "name": "t",
            "source": {"connector": "mysql", "database": "db", "table": "t", "topic": "db.db.t"},
            "columns": [{"id": 1, "name": "id", "type": "bigint", "nullable": False}, *columns],
            "primary_key": ["id"],
            "pipeline": {"sensitive": True, **pipeline},
            "sink": {"namespace": "ns"},
        }
    )


def col(cid: int, name: str, type_: str = "varchar(50)", **kw: Any) -> dict[str, Any]:
    return {"id": cid, "name": name, "type": type_, **kw}


EMAIL = col(2, "email", sensitive=True, protect="hash")


def test_a_protected_column_is_stored_as_a_string_and_plans_its_protection() -> None:
    s = spec(EMAIL, col(3, "pin", "int", sensitive=True, protect="encrypt"))
    plans = {p.name: p for p in plan_fields(s)}
    assert str(plans["pin"].sink) == "string"
    assert str(plans["pin"].natural) == "int"
    assert plans["pin"].protect is Protection.ENCRYPT
    assert s.protects
    # read back from the stored image: the protected text as it is, never decoded again
    stored = stored_text_plan(plans["pin"])
    assert (stored.wire, str(stored.natural), stored.protect) == (Wire.STRING, "string", None)
    assert not spec(col(2, "email")).protects


@pytest.mark.parametrize(
    ("column", "pipeline", "message"),
    [
        (col(2, "email", protect="hash"), {}, "protect needs sensitive: true"),
        (col(2, "d", "decimal(10,2)", sensitive=True, protect="mask_shape"), {}, "masks text"),
        (col(2, "n", "int", sensitive=True, protect="mask_last4"), {}, "masks text"),
        (col(2, "t", "datetime(3)", sensitive=True, protect="hash"), {}, "takes text, numbers"),
        (col(2, "b", "blob", sensitive=True, protect="hash"), {}, "takes text, numbers"),
        (
            col(2, "e", sensitive=True, protect="hash", sink={"name": "e2", "type": "string"}),
            {},
            "drop sink.type",
        ),
        (col(2, "email"), {"drop_fields": ["email"]}, "are columns"),
        (col(2, "email", former_names=["mail"]), {"drop_fields": ["mail"]}, "are columns"),
    ],
)
def test_refused_protections_say_why(
    column: dict[str, Any], pipeline: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        spec(column, **pipeline)


def test_a_key_column_cannot_be_protected() -> None:
    with pytest.raises(ValidationError, match="part of the key"):
        TableSpec.model_validate(
            {
                "spec_version": 1,
                "name": "t",
                "source": {"connector": "mysql", "database": "db", "table": "t", "topic": "x.y.t"},
                "columns": [col(1, "email", nullable=False, sensitive=True, protect="hash")],
                "primary_key": ["email"],
                "pipeline": {"sensitive": True},
                "sink": {"namespace": "ns"},
            }
        )


def test_dropping_fields_needs_a_sensitive_pipeline() -> None:
    with pytest.raises(ValidationError, match="set sensitive: true"):
        spec(col(2, "a"), drop_fields=["ssn"], sensitive=False)


def test_a_string_column_can_be_protected_later_and_nothing_else_changes_protection() -> None:
    plain = spec(col(2, "email", sensitive=True))
    protected = spec(EMAIL, version=2)
    plan = classify(plain, protected)
    assert not plan.rejections
    assert list(plan.changes) == [SetColumnAttribute(2, "email", "protect", None, Protection.HASH)]
    evolved = {c.name: c for c in apply_plan(plain, plan).columns}
    assert evolved["email"].protect is Protection.HASH
    # JSON paths added inside a document column; a path's protection kept as it was
    doc = spec(col(3, "doc", type_="json", sensitive=True))
    one = spec(col(3, "doc", type_="json", sensitive=True, protect_paths={"a": "hash"}), version=2)
    two = spec(
        col(
            3, "doc", type_="json", sensitive=True, protect_paths={"a": "hash", "b.c": "mask_shape"}
        ),
        version=3,
    )
    assert [c.attribute for c in classify(doc, one).changes] == ["protect_paths"]
    assert not classify(one, two).rejections
    # not changed from one protection to another, nor lifted
    masked = spec(col(2, "email", sensitive=True, protect="mask_email"), version=3)
    assert [r.column for r in classify(protected, masked).rejections] == ["email"]
    assert PROTECT_CHANGED in classify(protected, masked).rejections[0].reason
    lifted = spec(col(2, "email", sensitive=True), version=3)
    assert PROTECT_CHANGED in classify(protected, lifted).rejections[0].reason
    # nor a non-string column (its Iceberg type would have to become string)
    number = spec(col(4, "pin", "int", sensitive=True))
    hashed = spec(col(4, "pin", "int", sensitive=True, protect="hash"), version=2)
    reasons = [r.reason for r in classify(number, hashed).rejections]
    assert any("protected values are strings" in r for r in reasons)
    # nor a new column that arrives protected (its values already sat in _row_json)
    added = spec(EMAIL, col(3, "phone", sensitive=True, protect="mask_last4"), version=3)
    assert [r.column for r in classify(protected, added).rejections] == ["phone"]
    assert PROTECT_NEW in classify(protected, added).rejections[0].reason
    # an unchanged protection is no change
    assert not classify(protected, spec(EMAIL, version=3)).rejections


def test_a_dropped_field_is_never_proposed_nor_reported_as_drift() -> None:
    s = spec(col(2, "name"), drop_fields=["ssn"])
    ddl = "CREATE TABLE t (id bigint NOT NULL, name varchar(50), ssn char(11), PRIMARY KEY (id))"
    proposed, _ = proposed_from_ddl(s, ddl)
    assert [c.name for c in proposed.columns] == ["id", "name"]
    assert source_differences(s, ["id", "name", "ssn"]) == []
    assert source_differences(s, ["id", "name", "ssn", "age"]) == [
        "column age is in the source, not in spec v1"
    ]
    fields = [
        {"field": "id", "type": "int64", "optional": False},
        {"field": "name", "type": "string"},
        {"field": "ssn", "type": "string"},
    ]
    assert not names_differ(s, fields)
    assert not differs(s, fields)


KEY = ProtectionKey("k1", b"0123456789abcdef-secret")


def test_hmac_sql_is_rfc_2104_with_sha256() -> None:
    # The SQL spells out the padded key (never the secret itself); its Python twin is hmac's.
    sql = hmac_sql(KEY.hash_key, "m")
    assert KEY.secret.hex() not in sql
    assert sql.count("unhex('") == 2
    assert hash_text("a", KEY).startswith("hmac:k1:")
    assert len(hash_text("a", KEY)) == len("hmac:k1:") + 64


def test_python_twins_keep_the_documented_forms() -> None:
    assert protect_text(Protection.MASK_EMAIL, "ada.l@example.org", None) == "***@example.org"
    assert protect_text(Protection.MASK_EMAIL, "no at sign", None) == "***"
    assert protect_text(Protection.MASK_LAST4, "+44 7700 900123", None) == "***********0123"
    assert protect_text(Protection.MASK_LAST4, "123", None) == "***"
    assert protect_text(Protection.MASK_SHAPE, "Ab-12 é", None) == "Xx-99 x"
    assert protect_text(Protection.HASH, None, KEY) is None
    with pytest.raises(ValueError, match="needs a protection key"):
        protect_text(Protection.ENCRYPT, "x", None)
    enc = protect_text(Protection.ENCRYPT, "x", KEY)
    assert enc == protect_text(Protection.ENCRYPT, "x", KEY)  # stable: joins still work
    assert enc != protect_text(Protection.ENCRYPT, "y", KEY)


def test_value_text_is_sparks_cast_to_string() -> None:
    from datetime import date
    from decimal import Decimal

    assert value_text(True) == "true"
    assert value_text(Decimal("1E+2")) == "100"
    assert value_text(Decimal("12.50")) == "12.50"
    assert value_text(date(2026, 1, 2)) == "2026-01-02"
    assert value_text(42) == "42"


def test_keys_are_checked_and_never_shown() -> None:
    with pytest.raises(ValueError, match="at least 16 bytes"):
        ProtectionKey("k1", b"short")
    with pytest.raises(ValueError, match="lowercase letters or digits"):
        ProtectionKey("k:1", b"0123456789abcdef")
    assert "secret" not in repr(KEY)


def test_a_sealed_payload_with_no_key_is_an_error_not_a_tombstone() -> None:
    sql = opened_payload_sql("payload_b64", [])
    assert "raise_error" in sql
    assert "unbase64(payload_b64)" in sql  # plain payloads still read


def test_spark_redacts_every_key_literal_of_the_sql() -> None:
    import re

    from cdc_assets.sql.protect import KEY_LITERALS, protect_sql, sealed_payload_sql

    sql = " ".join([*(protect_sql(p, "t", KEY) for p in Protection), sealed_payload_sql("v", KEY)])
    redacted = re.sub(KEY_LITERALS, "***", sql)
    for derived in (KEY.hash_key, KEY.encryption_key, KEY.iv_key):
        assert derived.hex() not in redacted
    assert not re.search(r"[0-9a-f]{32,}", redacted)


def test_configured_keys_put_the_current_first_and_read_retired_ones() -> None:
    from cdc_assets.pipeline.shared.protection import ProtectionKeyError, configured_keys

    env = {
        "CDC_ASSETS_PROTECTION_KEY": "the current secret!!",
        "CDC_ASSETS_PROTECTION_KEY_ID": "k3",
        "CDC_ASSETS_PROTECTION_OLD_KEY_K1": "the first secret!!!!",
        "CDC_ASSETS_PROTECTION_OLD_KEY_K3": "ignored: the current id",
    }
    assert [k.key_id for k in configured_keys(env)] == ["k3", "k1"]
    assert configured_keys({}) == []
    with pytest.raises(ProtectionKeyError, match="CDC_ASSETS_PROTECTION_OLD_KEY_K2"):
        configured_keys({"CDC_ASSETS_PROTECTION_OLD_KEY_K2": "short"})
    with pytest.raises(ProtectionKeyError, match="lowercase"):
        configured_keys({**env, "CDC_ASSETS_PROTECTION_KEY_ID": "K3"})


def test_the_protection_verdict_fails_on_plain_values_and_names_places_not_values() -> None:
    from cdc_assets.quality.rules import ProtectionAudit, protection_verdict

    ok = protection_verdict(ProtectionAudit(rows=10, key_ids={"k1", "k2"}), "k2")
    assert ok.passed
    assert "retired key(s) k1" in ok.summary
    audit = ProtectionAudit(rows=10, dropped_in_images=2)
    audit.add_plain("email", 3)
    audit.add_plain("email", 0)
    audit.add_plain("_row_json.email", 1)
    bad = protection_verdict(audit, "k2")
    assert not bad.passed
    assert bad.severity == "ERROR"
    assert bad.metadata["unprotected_values"] == {"_row_json.email": 1, "email": 3}
    assert "2 row images hold a field of drop_fields" in bad.summary


def test_paths_protect_fields_inside_a_json_document() -> None:
    from cdc_assets.sql.protect import protect_document

    paths = {"secret.pin": "hash", "contact.email": "mask_email"}
    s = spec(col(2, "doc", "json", sensitive=True, protect_paths=paths))
    plan = plan_fields(s)[1]
    assert plan.protect_paths == (
        ("contact.email", Protection.MASK_EMAIL),
        ("secret.pin", Protection.HASH),
    )
    assert s.protects
    doc = '{"secret": {"pin": 1234, "keep": true}, "contact": {"email": "a@b.org"}, "x": [1]}'
    out = protect_document(doc, plan.protect_paths, KEY)
    assert out == {
        "secret": {"pin": hash_text("1234", KEY), "keep": True},
        "contact": {"email": "***@b.org"},
        "x": [1],
    }
    # a document without the path, or not an object, is kept as it is
    assert protect_document('{"secret": "flat"}', plan.protect_paths, KEY) == {"secret": "flat"}
    assert protect_document("[1, 2]", plan.protect_paths, KEY) == [1, 2]
    assert protect_document(None, plan.protect_paths, KEY) is None


def test_paths_reach_every_element_of_an_array() -> None:
    from cdc_assets.sql.protect import protect_document

    paths = {"items[].secret": "hash", "phones[]": "mask_last4", "grid[][]": "mask_shape"}
    s = spec(col(2, "doc", "json", sensitive=True, protect_paths=paths))
    plan = plan_fields(s)[1]
    doc = (
        '{"items": [{"secret": "s1", "x": 1}, {"secret": 7}, 3, null, {"other": 1}], '
        '"phones": ["555-1234", null, "12"], "grid": [["Ab1"], "c", []], "rest": "kept"}'
    )
    assert protect_document(doc, plan.protect_paths, KEY) == {
        "items": [
            {"secret": hash_text("s1", KEY), "x": 1},
            {"secret": hash_text("7", KEY)},
            3,
            None,
            {"other": 1},
        ],
        "phones": ["****1234", None, "**"],
        "grid": [["Xx9"], "c", []],
        "rest": "kept",
    }
    # a member that is not an array where the path says one is kept as it is
    odd = '{"items": {"secret": "s"}, "phones": "555-1234"}'
    assert protect_document(odd, plan.protect_paths, KEY) == {
        "items": {"secret": "s"},
        "phones": "555-1234",
    }


def test_paths_inside_a_document_read_into_a_struct() -> None:
    column = col(
        2,
        "doc",
        "json",
        sensitive=True,
        sink={"type": "struct<contact:struct<email:string,age:int>,tags:list<string>>"},
        protect_paths={"contact.email": "hash", "tags[]": "mask_shape", "extra.pin": "hash"},
    )
    plan = plan_fields(spec(column))[1]
    assert plan.parses_document
    assert str(plan.sink) == "struct<contact:struct<email:string,age:int>,tags:list<string>>"
    assert dict(plan.protect_paths)["extra.pin"] is Protection.HASH


@pytest.mark.parametrize(
    ("column", "message"),
    [
        (col(2, "doc", "json", protect_paths={"a": "hash"}), "needs sensitive: true"),
        (col(2, "name", sensitive=True, protect_paths={"a": "hash"}), "JSON column"),
        (
            col(2, "doc", "json", sensitive=True, protect="hash", protect_paths={"a": "hash"}),
            "not both",
        ),
        (
            col(2, "doc", "json", sensitive=True, protect_paths={"a": "hash", "a.b": "hash"}),
            "inside another path, 'a'",
        ),
        (
            col(2, "doc", "json", sensitive=True, protect_paths={"a[].b": "hash", "a.c": "hash"}),
            "'a' is an array in another path",
        ),
        (col(2, "doc", "json", sensitive=True, protect_paths={"a[0]": "hash"}), "pattern"),
        (
            col(
                2,
                "doc",
                "json",
                sensitive=True,
                sink={"type": "struct<a:struct<b:int>>"},
                protect_paths={"a.b": "hash"},
            ),
            "'a.b' is declared int in sink.type",
        ),
        (
            col(
                2,
                "doc",
                "json",
                sensitive=True,
                sink={"type": "struct<a:list<string>>"},
                protect_paths={"a.b": "hash"},
            ),
            "'a' is declared list<string> in sink.type, not an object",
        ),
    ],
)
def test_refused_paths_say_why(column: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        spec(column)


def test_a_struct_read_document_is_compared_and_bootstrapped_protected() -> None:
    from cdc_assets.quality.mirror_diff import base_image, base_values
    from cdc_assets.schema.position import Position
    from cdc_assets.sql.bootstrap import render_bootstrap_select
    from cdc_assets.sql.protect import encrypt_text

    column = col(
        2,
        "doc",
        "json",
        sensitive=True,
        sink={"type": "struct<contact:struct<email:string>,codes:list<string>>"},
        protect_paths={"contact.email": "encrypt", "codes[]": "hash", "extra.pin": "hash"},
    )
    s = spec(column)
    source = {"id": 1, "doc": '{"contact": {"email": "a@b.org"}, "codes": ["x", 5], "more": 1}'}
    image = base_image(s, source, KEY)
    assert image["doc"] == {
        "contact": {"email": encrypt_text("a@b.org", KEY)},
        "codes": [hash_text("x", KEY), hash_text("5", KEY)],
    }
    # base's struct is compared as the struct it is
    assert base_values(s, {"id": 1, "doc": image["doc"]})["doc"] == image["doc"]
    sql = render_bootstrap_select(s, "dump", {"id": "id", "doc": "doc"}, Position(1, 0, 0), KEY)
    # protected as text first, then read into the struct
    assert "from_json(CASE WHEN CAST(`doc` AS STRING) IS NOT NULL" in sql
