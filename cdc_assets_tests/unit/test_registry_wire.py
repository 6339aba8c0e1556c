"""The pure rules of decoding registry-framed Avro values (the Spark side: integration tests)."""

from __future__ import annotations

import json

import pytest

from cdc_assets.sql.registry_wire import (
    decoded_json,
    framing_error,
    reader_schema_text,
    without_logical_types,
)

pytestmark = pytest.mark.unit

DECIMAL = {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}
WRITER = {
    "type": "record",
    "name": "Envelope",
    "fields": [
        {
            "name": "after",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Value",
                    "fields": [
                        {"name": "amount", "type": ["null", DECIMAL], "default": None},
                        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
                        {"name": "tags", "type": {"type": "array", "items": DECIMAL}},
                        {"name": "attrs", "type": {"type": "map", "values": DECIMAL}},
                    ],
                },
            ],
        },
        {"name": "op", "type": "string"},
    ],
}


def test_logical_types_are_removed_at_every_depth_and_nothing_else() -> None:
    plain = without_logical_types(WRITER)
    assert "logicalType" not in json.dumps(plain)
    value = plain["fields"][0]["type"][1]
    assert value["fields"][0]["type"] == ["null", {"type": "bytes", "precision": 10, "scale": 2}]
    assert value["fields"][1]["type"] == {"type": "int"}
    assert value["fields"][2]["type"]["items"]["type"] == "bytes"
    assert value["fields"][3]["type"]["values"]["type"] == "bytes"
    assert [f["name"] for f in plain["fields"]] == ["after", "op"]
    assert WRITER["fields"][0]["type"][1]["fields"][1]["type"]["logicalType"] == "date"  # type: ignore[index]


def test_reader_schema_text_is_compact_json_of_the_plain_schema() -> None:
    text = reader_schema_text(json.dumps(WRITER, indent=2))
    assert "\n" not in text
    assert json.loads(text) == without_logical_types(WRITER)


def test_one_branch_per_known_schema_and_null_when_none_is_known() -> None:
    schemas = {3: json.dumps(WRITER), 11: json.dumps(WRITER)}
    sql = decoded_json("v", schemas)
    assert sql.count("from_avro(") == 2
    assert "WHEN 3 THEN" in sql
    assert "WHEN 11 THEN" in sql
    # a payload its schema cannot read decodes to a record of nulls: that is NULL too
    assert '\'{"after":null,"op":null}\'' in sql
    assert decoded_json("v", {}) == "CAST(NULL AS STRING)"


def test_the_reasons_name_the_registry_or_its_absence() -> None:
    absent = framing_error("v", "d", {}, None, "t-value")
    assert "no schema registry is configured" in absent
    assert "NOT IN (-1)" in absent  # every framed value is unknown without schemas
    known = framing_error("v", "d", {4: "{}", 2: "{}"}, "http://127.0.0.1:1", "t-value")
    assert "NOT IN (2, 4)" in known
    assert "is not a version of subject" in known
    assert "http://127.0.0.1:1" in known
    assert "does not match its writer schema" in known
