"""A connector's Avro writer schema tells the table's shape as its embedded JSON schema does."""

from __future__ import annotations

import json

import pytest

from cdc_assets.spec import load_specs
from cdc_assets.spec.connect_schema import avro_row_fields, next_version, pg_type, row_fields
from cdc_assets.spec.schema_change import parse_schema_change
from cdc_assets_dev.demo.events import DebeziumEventFactory, random_row
from cdc_assets_dev.demo.events.avro import avro_schema
from cdc_assets_tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.unit

SPECS = {s.name: s for s in load_specs(PROJECT_ROOT / "table_specs")}


@pytest.mark.parametrize("table", sorted(SPECS))
def test_avro_row_fields_match_the_embedded_schema(table: str) -> None:
    import random

    spec = SPECS[table]
    factory = DebeziumEventFactory(spec, embed_schema=True)
    record = factory.create(random_row(spec, random.Random(1)))
    assert record.value is not None
    embedded = row_fields(record.value)
    from_avro = avro_row_fields(avro_schema(json.loads(record.value)["schema"]))
    assert embedded is not None
    assert from_avro is not None

    def shape(fields: list) -> list:  # type: ignore[type-arg]
        return [(f["field"], bool(f.get("optional")), pg_type(f)) for f in fields]

    assert shape(from_avro) == shape(embedded)


def test_a_schema_without_row_images_has_no_row_fields() -> None:
    assert avro_row_fields({"type": "record", "name": "x", "fields": []}) is None
    assert avro_row_fields({"type": "string"}) is None


def test_a_decoded_schema_change_record_parses_like_its_json() -> None:
    spec = SPECS["users"]
    factory = DebeziumEventFactory(spec)
    record = factory.schema_change("ALTER TABLE users ADD COLUMN phone varchar(20)")
    assert record.value is not None
    as_json = parse_schema_change(record.value)
    assert as_json
    assert parse_schema_change(json.loads(record.value)) == as_json


def _fields(spec_columns: list[tuple[str, str]]) -> list[dict[str, object]]:
    return [{"field": n, "type": t, "optional": True} for n, t in spec_columns]


def test_registry_versions_are_applied_one_at_a_time_in_order() -> None:
    import random

    spec = SPECS["orders"]
    record = DebeziumEventFactory(spec, embed_schema=True).create(
        random_row(spec, random.Random(1))
    )
    now = row_fields(record.value)
    assert now is not None
    v1 = (1, now)
    v2 = (2, [*now, *_fields([("phone", "string")])])
    v3 = (3, [*now, *_fields([("phone", "string"), ("vip", "boolean")])])
    assert next_version(spec, [v1, v2, v3]) == v2  # not the newest: v2 first
    assert next_version(spec, [v1]) is None  # nothing newer than the spec's shape
    assert next_version(spec, []) is None
    # no version has the spec's shape (say, the spec came from the information_schema): newest
    assert next_version(spec, [v2, v3]) == v3
    # a version after the spec's that returns to an older shape is still applied in order
    assert next_version(spec, [v2, v1, v3]) == v3
