"""Spark SQL that turns a schema-registry framed Avro record into Debezium's JSON (pure).

A registry's serializers frame each value as a zero magic byte, the writer schema's id (4 bytes,
big-endian) and the Avro binary encoding. The ingest decodes such a value with Spark's own
``from_avro`` against the writer schema of its id and renders it with ``to_json``, so everything
after the decode (envelope, classification, ledger row images, backfill, redrive) is the one
JSON path. The writer schema is given to ``from_avro`` with its logical types removed: the
binary encoding is the same, and the values then render exactly as Kafka Connect's
``JsonConverter`` writes them (decimals as base64 of the unscaled bytes, timestamps as numbers),
which is what the wire plan of each column expects.

A value that is framed but cannot be decoded gets a reason (`framing_error`); the ingest makes it
a dead letter of stage ``decode``, kept with its raw bytes so a redrive decodes it again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from cdc_assets.sql.ddl import literal

MAGIC_BYTE = 0
HEADER_BYTES = 5  # magic byte + 4-byte schema id

# Spark SQL over a binary column: is it framed, and the schema id of a framed value.
FRAMED = "(length({c}) >= 5 AND substring({c}, 1, 1) = X'00')"
SCHEMA_ID = "CAST(conv(hex(substring({c}, 2, 4)), 16, 10) AS BIGINT)"


def framed(column: str) -> str:
    """True when the binary ``column`` is in the registry wire format."""
    return FRAMED.format(c=column)


def schema_id(column: str) -> str:
    """The writer schema id of a framed ``column`` (garbage for an unframed one)."""
    return SCHEMA_ID.format(c=column)


def without_logical_types(schema: Any) -> Any:
    """The Avro schema with every ``logicalType`` removed, so values keep their plain encoding
    (``bytes`` for decimals, ``long`` for timestamps), as Kafka Connect's JSON renders them."""
    if isinstance(schema, list):
        return [without_logical_types(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: without_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if "fields" in schema:
        out["fields"] = [{**f, "type": without_logical_types(f["type"])} for f in schema["fields"]]
    return out


def reader_schema_text(writer_schema: str) -> str:
    """The schema text ``from_avro`` gets for a writer schema (see `without_logical_types`)."""
    return json.dumps(without_logical_types(json.loads(writer_schema)), separators=(",", ":"))


def _all_null_json(writer_schema: str) -> str:
    """What ``to_json`` gives when ``from_avro`` could not read a payload: every field null."""
    fields = json.loads(writer_schema).get("fields") or []
    return "{" + ",".join(f'"{f["name"]}":null' for f in fields) + "}"


def decoded_json(column: str, schemas: Mapping[int, str]) -> str:
    """Debezium's JSON text of a framed ``column``: one ``from_avro`` per known writer schema
    (id -> Avro schema text), NULL for an unknown id or a payload its schema cannot read
    (``from_avro`` in permissive mode then gives a record of nulls). Null fields are kept, as
    Kafka Connect's JSON keeps them."""
    if not schemas:
        return "CAST(NULL AS STRING)"
    payload = f"substring({column}, {HEADER_BYTES + 1})"
    branches = " ".join(
        f"WHEN {i} THEN nullif(to_json(from_avro({payload}, {literal(reader_schema_text(text))}, "
        f"map('mode', 'PERMISSIVE')), map('ignoreNullFields', 'false')), "
        f"{literal(_all_null_json(text))})"
        for i, text in sorted(schemas.items())
    )
    return f"CASE {schema_id(column)} {branches} END"


def value_text(column: str, decoded: str) -> str:
    """The value the envelope reader gets: the decoded JSON (the column or expression
    ``decoded``, see `decoded_json`) of a framed value, else the value itself."""
    return f"CASE WHEN {framed(column)} THEN CAST({decoded} AS BINARY) ELSE {column} END"


def framing_error(
    column: str, decoded: str, schemas: Mapping[int, str], registry: str | None, subject: str
) -> str:
    """A reason for a framed value that did not decode (``decoded`` is its JSON), else NULL."""
    sid = f"CAST({schema_id(column)} AS STRING)"
    if registry is None:
        unknown = (
            f"concat('value is in the schema registry wire format (schema id ', {sid}, "
            "') but no schema registry is configured')"
        )
    else:
        unknown = (
            f"concat('schema id ', {sid}, ' is not a version of subject ', "
            f"{literal(repr(subject))}, ' in the registry at ', {literal(registry)})"
        )
    known = ", ".join(str(i) for i in sorted(schemas)) or "-1"
    return (
        f"CASE WHEN NOT {framed(column)} THEN NULL "
        f"WHEN {schema_id(column)} NOT IN ({known}) THEN {unknown} "
        f"WHEN {decoded} IS NULL THEN concat('Avro payload does not match its writer schema "
        f"(id ', {sid}, ')') END"
    )
