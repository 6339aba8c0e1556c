"""Debezium records in Avro through a schema registry, as Kafka Connect's Avro converters write
them: the Connect schema of a JSON record with an embedded schema becomes an Avro schema
(semantic names kept as ``connect.name``, optional fields as unions with null), registered under
the topic's value subject, and the value is framed as magic byte 0 + schema id + Avro binary.

The demo, tests and benchmarks use it to produce the same change events in both formats.
"""

from __future__ import annotations

import base64
import io
import json
import struct
from typing import Any

from cdc_assets.sql.registry_wire import without_logical_types
from cdc_assets_dev.demo.events.values import KafkaRecord

_PRIMITIVES = {
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "long",
    "float32": "float",
    "float64": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "bytes",
}
# Connect logical types that Avro has a logical type for (what AvroData maps them to).
_LOGICAL = {
    "org.apache.kafka.connect.data.Date": {"logicalType": "date"},
    "org.apache.kafka.connect.data.Time": {"logicalType": "time-millis"},
    "org.apache.kafka.connect.data.Timestamp": {"logicalType": "timestamp-millis"},
}
DECIMAL = "org.apache.kafka.connect.data.Decimal"


class AvroSchemaConverter:
    """Connect schema -> Avro schema, naming each record once (later uses refer to the name)."""

    def __init__(self) -> None:
        self._defined: set[str] = set()

    def convert(self, schema: dict[str, Any]) -> Any:
        kind = schema["type"]
        name = schema.get("name")
        if kind == "struct":
            full = str(name or "ConnectDefault")
            if full in self._defined:
                return full
            self._defined.add(full)
            record: dict[str, Any] = {"type": "record", "name": full, "fields": []}
            for field in schema["fields"]:
                record["fields"].append(self.field(field))
            if name:
                record["connect.name"] = name
            return record
        if kind == "array":
            return {"type": "array", "items": self.optional(schema["items"])}
        if kind == "map":
            return {"type": "map", "values": self.optional(schema["values"])}
        avro: dict[str, Any] = {"type": _PRIMITIVES[kind]}
        if kind in ("int8", "int16"):
            avro["connect.type"] = kind
        params = schema.get("parameters") or {}
        if name == DECIMAL:
            avro.update(
                logicalType="decimal",
                precision=int(params.get("connect.decimal.precision", 64)),
                scale=int(params.get("scale", 0)),
            )
        elif name in _LOGICAL:
            avro.update(_LOGICAL[str(name)])
        if name:
            avro["connect.name"] = name
        if schema.get("version") is not None:
            avro["connect.version"] = schema["version"]
        if params:
            avro["connect.parameters"] = params
        return avro

    def optional(self, schema: dict[str, Any]) -> Any:
        converted = self.convert(schema)
        return ["null", converted] if schema.get("optional", False) else converted

    def field(self, schema: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"name": schema["field"], "type": self.optional(schema)}
        if schema.get("optional", False):
            out["default"] = None
        return out


def avro_schema(connect_schema: dict[str, Any]) -> dict[str, Any]:
    """The Avro schema Kafka Connect's Avro converter derives from a Connect schema."""
    schema: dict[str, Any] = AvroSchemaConverter().convert(connect_schema)
    return schema


def avro_datum(connect_schema: dict[str, Any], value: Any) -> Any:
    """The JSON converter's value (bytes as base64) as the Avro datum of the same schema."""
    if value is None:
        return None
    kind = connect_schema["type"]
    if kind == "struct":
        return {f["field"]: avro_datum(f, value.get(f["field"])) for f in connect_schema["fields"]}
    if kind == "array":
        return [avro_datum(connect_schema["items"], v) for v in value]
    if kind == "map":
        return {k: avro_datum(connect_schema["values"], v) for k, v in value.items()}
    if kind == "bytes":
        # Decimals too: their unscaled bytes, encoded without the logical type (see `frame`).
        return base64.b64decode(value)
    return value


def _rows_optional(envelope: dict[str, Any]) -> dict[str, Any]:
    """The envelope's Connect schema with every field of its row images optional."""
    fields = []
    for field in envelope["fields"]:
        if field.get("type") == "struct" and field["field"] in ("before", "after"):
            field = {**field, "fields": [{**f, "optional": True} for f in field["fields"]]}
        fields.append(field)
    return {**envelope, "fields": fields}


class RegistryFraming:
    """Turns JSON records with embedded schemas into registry-framed Avro records."""

    def __init__(self, registry_url: str, topic: str) -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        self.client = SchemaRegistryClient({"url": registry_url})
        self.subject = f"{topic}-value"
        self._ids: dict[str, int] = {}
        self._parsed: dict[int, Any] = {}

    def schema_id(self, schema: dict[str, Any]) -> int:
        """Register ``schema`` under the topic's value subject (once) and return its id."""
        from confluent_kafka.schema_registry import Schema

        text = json.dumps(schema, sort_keys=True)
        if text not in self._ids:
            self._ids[text] = self.client.register_schema(self.subject, Schema(text, "AVRO"))
        return self._ids[text]

    def _writer(self, connect: dict[str, Any]) -> tuple[int, Any]:
        import fastavro

        schema = avro_schema(connect)
        sid = self.schema_id(schema)
        if sid not in self._parsed:
            # Encoded without logical types: the datum carries the exact bytes and numbers the
            # JSON converter wrote, which is the same binary encoding.
            self._parsed[sid] = fastavro.parse_schema(without_logical_types(schema))
        return sid, self._parsed[sid]

    def frame(self, record: KafkaRecord) -> KafkaRecord:
        """The same record in Avro. Tombstones stay tombstones, and a record without an embedded
        schema (a marker written by hand) stays JSON: a topic may carry both."""
        import fastavro
        from fastavro.validation import validate

        if record.value is None:
            return record
        envelope = json.loads(record.value)
        if not isinstance(envelope, dict) or "schema" not in envelope or "payload" not in envelope:
            return record
        connect = envelope["schema"]
        datum = avro_datum(connect, envelope["payload"])
        sid, parsed = self._writer(connect)
        if not validate(datum, parsed, raise_errors=False):
            # A PostgreSQL delete under the default replica identity leaves required columns of
            # its before image null: such records get a version whose row fields are optional.
            sid, parsed = self._writer(_rows_optional(connect))
        out = io.BytesIO()
        out.write(struct.pack(">bI", 0, sid))
        fastavro.schemaless_writer(out, parsed, datum)
        return KafkaRecord(record.key, out.getvalue(), record.row)
