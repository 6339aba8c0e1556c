"""The rewrite of values stored before their protection, as SQL (pure): what each statement
touches, that it only changes values not yet protected, and where it reads image fields."""

from __future__ import annotations

from typing import Any

import pytest

from cdc_assets.spec.models import Protection, TableSpec
from cdc_assets.sql.protect import ProtectionKey
from cdc_assets.sql.reprotect import (
    column_value_sql,
    plain_sql,
    protected_columns,
    render_rewrite,
    render_seal_dead_letters,
    stored_values,
)

KEY = ProtectionKey("k1", b"0123456789abcdef0123")


def spec(*columns: dict[str, Any], **pipeline: Any) -> TableSpec:
    return TableSpec.model_validate(
        {
            "spec_version": 2,
            "name": "t",
            "source": {"connector": "mysql", "database": "db", "table": "t", "topic": "db.db.t"},
            "columns": [{"id": 1, "name": "id", "type": "bigint", "nullable": False}, *columns],
            "primary_key": ["id"],
            "pipeline": {"sensitive": True, **pipeline},
            "sink": {"namespace": "ns"},
        }
    )


EMAIL = {"id": 2, "name": "email", "type": "varchar(99)", "sensitive": True, "protect": "hash"}
DOC = {
    "id": 3,
    "name": "doc",
    "type": "json",
    "sensitive": True,
    "protect_paths": {"a.b": "mask_shape"},
    "former_names": ["document"],
}


def test_nothing_protected_renders_nothing() -> None:
    plain = spec({"id": 2, "name": "email", "type": "varchar(9)", "sensitive": True})
    assert protected_columns(plain) == []
    assert render_rewrite("t", plain, KEY, ledger=True) is None
    assert stored_values(plain, images=True) == []


def test_a_ledger_rewrite_covers_typed_columns_images_and_before_images() -> None:
    s = spec(EMAIL, DOC, drop_fields=["ssn"])
    sql = render_rewrite("lake.ns.t_cdc", s, KEY, ledger=True)
    assert sql is not None
    assert sql.startswith("UPDATE lake.ns.t_cdc SET `email` = CASE WHEN `email` IS NULL OR")
    assert "_row_json = CASE WHEN _row_json IS NOT NULL" in sql
    assert "_before_json = CASE WHEN _before_json IS NOT NULL" in sql
    # every name a field had, in the image; the dropped field in both images
    for name in ("'$.email'", "'$.doc'", "'$.document'", "'ssn'"):
        assert name in sql
    places = [v.place for v in stored_values(s, images=True)]
    assert places == [
        "email",
        "_row_json.email",
        "doc.a.b",
        "_row_json.doc.a.b",
        "_row_json.document.a.b",
    ]
    # base and history: typed columns only
    base = render_rewrite("lake.ns.t", s, KEY, ledger=False)
    assert base is not None
    assert "_row_json" not in base
    assert "'ssn'" not in base


def test_a_value_already_protected_is_kept() -> None:
    c = spec(EMAIL).columns[1]
    sql = column_value_sql(spec(EMAIL), c, KEY)
    assert "RLIKE '^hmac:[a-z0-9]{1,16}:[0-9a-f]{64}$'" in sql
    assert sql.index("THEN `email`") < sql.index("ELSE concat('hmac:k1:'")
    doc = spec(DOC).columns[1]
    assert doc.protect_paths == {"a.b": Protection.MASK_SHAPE}
    # a mask kept when applying it again changes nothing: its fixed point is the form
    nested = column_value_sql(spec(DOC), doc, KEY)
    assert "CAST(_dv1 AS STRING) = mask(CAST(_dv1 AS STRING), 'X', 'x', '9', NULL)" in nested


def test_paths_through_arrays_are_audited_element_by_element() -> None:
    items = {
        "id": 2,
        "name": "items",
        "type": "json",
        "sensitive": True,
        "protect_paths": {"list[].secret": "hash", "note": "mask_shape"},
    }
    values = {v.place: v for v in stored_values(spec(items), images=False)}
    assert not values["items.note"].many
    assert values["items.note"].expr == "get_json_object(`items`, '$.note')"
    many = values["items.list[].secret"]
    assert many.many
    assert "try_variant_get(_x, '$', 'array<variant>')" in many.expr
    # any element not in its form makes the row plain
    assert plain_sql([many]).startswith(f"exists({many.expr}, _v -> (_v IS NOT NULL AND NOT")


def test_a_document_read_into_a_struct_is_rewritten_as_json_and_read_back() -> None:
    doc = {
        "id": 2,
        "name": "doc",
        "type": "json",
        "sensitive": True,
        "sink": {"type": "struct<email:string,age:int>"},
        "protect_paths": {"email": "hash"},
    }
    s = spec(doc)
    sql = column_value_sql(s, s.columns[1], KEY)
    assert sql.startswith("from_json(CASE WHEN to_json(`doc`) IS NOT NULL")
    assert sql.endswith("'STRUCT<`email`: STRING, `age`: INT>')")
    assert [v.expr for v in stored_values(s, images=False)] == [
        "get_json_object(to_json(`doc`), '$.email')"
    ]
    rewrite = render_rewrite("lake.ns.t_cdc", s, KEY, ledger=True)
    assert rewrite is not None
    # the row image keeps its own document (every member), protected
    assert "CAST(CASE WHEN CAST(_pv AS STRING) IS NOT NULL" in rewrite


def test_dead_letters_are_sealed_once() -> None:
    sql = render_seal_dead_letters("lake.ns.t_dead", KEY)
    assert "NOT startswith(payload_b64, 'enc:')" in sql
    assert "aes_encrypt(unbase64(payload_b64)" in sql


@pytest.mark.parametrize("protection", list(Protection))
def test_every_protection_renders_a_guarded_rewrite(protection: Protection) -> None:
    column = {**EMAIL, "protect": protection.value}
    sql = render_rewrite("t", spec(column), KEY, ledger=False)
    assert sql is not None
    assert sql.count("CASE WHEN `email` IS NULL OR") == 1


def test_rekeying_decrypts_with_the_key_a_value_names_and_seals_payloads_again() -> None:
    old = ProtectionKey("k0", b"an older secret of twenty")
    column = {**EMAIL, "protect": "encrypt"}
    sql = render_rewrite("t", spec(column), KEY, ledger=False, old_keys=[old])
    assert sql is not None
    # kept: null or already of the current key; re-keyed: of k0; another key id: kept
    assert "startswith(`email`, 'enc:k1:') THEN `email`" in sql
    assert "CASE split_part(`email`, ':', 2) WHEN 'k0' THEN" in sql
    assert f"unhex('{old.encryption_key.hex()}'), 'GCM')" in sql
    assert "NOT startswith(`email`, 'enc:k1:')" in sql.split(" WHERE ")[1]
    # a hash cannot be re-keyed: its rewrite is the same with or without old keys
    hashed = spec(EMAIL)
    rekeyed = render_rewrite("t", hashed, KEY, ledger=False, old_keys=[old])
    assert rekeyed == render_rewrite("t", hashed, KEY, ledger=False)
    seal = render_seal_dead_letters("d", KEY, [old])
    assert "NOT startswith(payload_b64, 'enc:k1:')" in seal
    assert "WHEN 'k0' THEN aes_decrypt" in seal
