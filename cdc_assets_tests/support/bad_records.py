"""Bad and special Kafka records for the ``users`` example spec, each with its expected outcome.

Most start from a valid generated event and break one thing, so each case tests one rule.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import cache

from cdc_assets.spec import TableSpec, load_spec
from cdc_assets_dev.demo.events import TOAST, DebeziumEventFactory, KafkaRecord
from cdc_assets_tests.conftest import PROJECT_ROOT

Envelope = dict[str, object]


@dataclass(frozen=True)
class Case:
    """One record and what the ingest must do with it."""

    name: str
    key: bytes | None
    value: bytes | None
    status: str
    stage: str | None
    reason: str


@cache
def users_spec() -> TableSpec:
    return load_spec(PROJECT_ROOT / "table_specs" / "users.yaml")


def base_row(**changes: object) -> dict[str, object]:
    """A valid users row (natural values) with some columns replaced."""
    row: dict[str, object] = {
        "id": 1,
        "email": "ada@example.com",
        "display_name": "Ada Lovelace",
        "country": "GB",
        "is_active": True,
        "login_count": 3,
        "created_ms": 1_767_225_600_123,
        "updated_at": datetime(2026, 1, 2, 3, 4, 5, 123_000),
    }
    row.update(changes)
    return row


def _factory(*, embed_schema: bool = False) -> DebeziumEventFactory:
    return DebeziumEventFactory(users_spec(), embed_schema=embed_schema, server_name="app")


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _edited(record: KafkaRecord, edit: Callable[[Envelope], None]) -> KafkaRecord:
    """The record with its (schema-less) envelope changed in place by ``edit``."""
    assert record.value is not None
    envelope = json.loads(record.value)
    edit(envelope)
    return KafkaRecord(record.key, _dumps(envelope))


def _image(name: str) -> Callable[[Envelope], dict[str, object]]:
    def get(envelope: Envelope) -> dict[str, object]:
        image = envelope[name]
        assert isinstance(image, dict)
        return image

    return get


_after, _before = _image("after"), _image("before")


def _set_after(column: str, value: object) -> Callable[[Envelope], None]:
    return lambda env: _after(env).__setitem__(column, value)


def _drop_after(column: str) -> Callable[[Envelope], None]:
    return lambda env: _after(env).__delitem__(column)


def _case(
    name: str, record: KafkaRecord, status: str, stage: str | None = None, reason: str = "ok"
) -> Case:
    return Case(name, record.key, record.value, status, stage, reason)


def _ledger(name: str, record: KafkaRecord) -> Case:
    return _case(name, record, "ledger")


def _convert(name: str, record: KafkaRecord, reason: str) -> Case:
    return _case(name, record, "dead", "convert", reason)


def _envelope(name: str, record: KafkaRecord, reason: str) -> Case:
    return _case(name, record, "dead", "envelope", reason)


def _decode(name: str, value: bytes, reason: str = "value is not a JSON object") -> Case:
    return Case(name, b'{"id":1}', value, "dead", "decode", reason)


def _reversed(obj: object) -> object:
    if isinstance(obj, dict):
        return {k: _reversed(obj[k]) for k in reversed(list(obj))}
    return obj


def cases() -> list[Case]:
    """Every case, in a fixed order; names are unique."""
    f = _factory()
    create = f.create(base_row())
    assert create.value is not None
    key = create.key

    def with_create(edit: Callable[[Envelope], None]) -> KafkaRecord:
        return _edited(create, edit)

    def null_after(env: Envelope) -> None:
        env["after"] = None

    def no_op(env: Envelope) -> None:
        env["op"] = None

    def other_table(env: Envelope) -> None:
        source = env["source"]
        assert isinstance(source, dict)
        source["table"] = "orders"

    def shuffle(env: Envelope) -> None:
        reordered = _reversed(dict(env))
        assert isinstance(reordered, dict)
        env.clear()
        env.update(reordered)

    update = f.update(base_row(), base_row(login_count=4))
    read = f.read(base_row(id=7))
    delete = f.delete(base_row())
    return [
        # not JSON objects
        _decode("malformed_json", b'{"op": c, "after": {"id": 1}}'),
        _decode("truncated_json", create.value[: len(create.value) // 2]),
        _decode("json_array", b'[{"op":"c"}]'),
        _decode("json_number", b"42"),
        _decode("json_string", b'"c"'),
        _decode("empty_value", b""),
        _decode(
            "non_utf8_bytes", b'{"op":"c","after":{"email":"\xff\xfe"}}', "value is not valid UTF-8"
        ),
        # not change events
        _envelope(
            "non_debezium_object",
            KafkaRecord(key, b'{"user":"ada","action":"login"}'),
            "not a Debezium change event: no op field",
        ),
        _envelope("unknown_op_x", with_create(lambda e: e.update(op="x")), "unknown op code 'x'"),
        _envelope(
            "op_null_with_images", with_create(no_op), "not a Debezium change event: no op field"
        ),
        _envelope("c_without_after", with_create(null_after), "op 'c' event has no after image"),
        _envelope(
            "u_without_after", _edited(update, null_after), "op 'u' event has no after image"
        ),
        _envelope("r_without_after", _edited(read, null_after), "op 'r' event has no after image"),
        _envelope(
            "d_without_before",
            _edited(delete, lambda e: e.update(before=None)),
            "op 'd' event has no before image",
        ),
        _envelope(
            "event_for_another_table",
            with_create(other_table),
            "event for table 'orders', expected 'users'",
        ),
        # column values the ingest cannot store
        _convert(
            "c_null_primary_key",
            with_create(_set_after("id", None)),
            "primary key column 'id' is null",
        ),
        _convert(
            "c_missing_primary_key",
            with_create(_drop_after("id")),
            "primary key column 'id' is null",
        ),
        _convert(
            "d_null_primary_key_in_before",
            _edited(delete, lambda e: _before(e).__setitem__("id", None)),
            "primary key column 'id' is null",
        ),
        _convert(
            "c_not_null_email_is_null",
            with_create(_set_after("email", None)),
            "column 'email' is null but declared not nullable",
        ),
        _convert(
            "id_as_word",
            with_create(_set_after("id", "one")),
            "column 'id': cannot decode as long",
        ),
        # Values are read from their JSON text: a number sent as a JSON string is still that number.
        _ledger("id_as_numeric_string", with_create(_set_after("id", "1"))),
        _convert(
            "id_beyond_int64",
            with_create(_set_after("id", 2**63)),
            "column 'id': cannot decode as long",
        ),
        _convert(
            "login_count_as_word",
            with_create(_set_after("login_count", "three")),
            "column 'login_count': cannot decode as int",
        ),
        _ledger("login_count_as_numeric_string", with_create(_set_after("login_count", "3"))),
        _convert(
            "login_count_as_float",
            with_create(_set_after("login_count", 1.5)),
            "column 'login_count': cannot decode as int",
        ),
        _convert(
            "login_count_beyond_int32",
            with_create(_set_after("login_count", 2**31)),
            "column 'login_count': cannot decode as int",
        ),
        _convert(
            "login_count_as_boolean",
            with_create(_set_after("login_count", True)),
            "column 'login_count': cannot decode as int",
        ),
        # An epoch beyond year 9999 is no timestamp (and used to overflow the whole job).
        _convert(
            "created_ms_beyond_year_9999",
            with_create(_set_after("created_ms", 2**62)),
            "column 'created_ms': cannot apply epoch_millis_to_timestamp",
        ),
        _ledger(
            "created_ms_at_year_9999", with_create(_set_after("created_ms", 253_402_300_799_999))
        ),
        _convert(
            "is_active_as_word",
            with_create(_set_after("is_active", "yes")),
            "column 'is_active': cannot decode as boolean_int",
        ),
        _convert(
            "updated_at_as_datetime_string",
            with_create(_set_after("updated_at", "2026-01-02 03:04:05.123")),
            "column 'updated_at': cannot decode as timestamp_millis",
        ),
        _convert(
            "display_name_longer_than_varchar_100",
            with_create(_set_after("display_name", "x" * 101)),
            "column 'display_name': value does not fit varchar(100)",
        ),
        _convert(
            "country_longer_than_char_2",
            with_create(_set_after("country", "GBR")),
            "column 'country': value does not fit char(2)",
        ),
        # records that are not rows: skipped
        Case("tombstone", key, None, "skip", None, "tombstone"),
        _case("heartbeat", f.heartbeat(), "skip", None, "heartbeat"),
        _case("transaction_begin", f.transaction("BEGIN"), "skip", None, "transaction metadata"),
        _case(
            "transaction_end",
            f.transaction("END", event_count=1),
            "skip",
            None,
            "transaction metadata",
        ),
        _case(
            "schema_change",
            f.schema_change("ALTER TABLE users ADD COLUMN nickname varchar(40)"),
            "skip",
            None,
            "schema change event",
        ),
        _case("logical_decoding_message", f.message(), "skip", None, "logical decoding message"),
        # valid edge cases that land in the ledger
        _ledger(
            "unicode_strings",
            f.create(base_row(email="zoë.łódź@例え.jp", display_name="Zoë 日本語 👩‍💻 O'Brien")),
        ),
        _ledger("toast_display_name", f.update(base_row(), base_row(display_name=TOAST))),
        _ledger("unknown_extra_field_in_after", f.create(base_row(nickname="ada"))),
        _ledger("update_changing_primary_key", f.update(base_row(id=1), base_row(id=2))),
        _ledger("truncate", f.truncate()),
        _ledger("snapshot_read", read),
        _ledger("embedded_schema", _factory(embed_schema=True).create(base_row(id=3))),
        _ledger("fields_in_different_order", with_create(shuffle)),
        _ledger("nullable_column_null", f.create({**base_row(), "country": None})),
        _ledger(
            "nullable_column_missing_from_after",
            with_create(_drop_after("display_name")),
        ),
        _ledger("is_active_as_json_boolean", with_create(_set_after("is_active", True))),
        _ledger("is_active_as_nonzero_tinyint", with_create(_set_after("is_active", 2))),
        _ledger("delete", delete),
        _ledger("delete_with_null_not_null_column", f.delete(base_row(email=None))),
    ]
