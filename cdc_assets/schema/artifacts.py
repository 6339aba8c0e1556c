"""A table's or view's schema as a versioned Python package consumers depend on (pure: renders
the package's files; `cdc_assets.pipeline.evolution.artifacts` builds and publishes them).

The package ``cdc-schema-<namespace>-<name>`` (import ``cdc_schema_<namespace>_<name>``) holds a
pydantic record model, a pandera DataFrameModel, the Avro schema and a JSON Schema, all from the
one schema: source casing (as the field alias), enum values, nullability and docs. Its version is
the spec version for a table (``<spec_version>.0.0``), and for a view the count of its distinct
derived schemas so far, so every version of a package always has the same content.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from cdc_assets.schema.views import DIALECT, RelationSchema, SchemaColumn

GENERATOR = "cdc-assets"
_DECIMAL_RE = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")
# Spark SQL type -> (Python annotation, pandera dtype, Avro type, JSON Schema)
_SIMPLE: dict[str, tuple[str, str, Any, dict[str, Any]]] = {
    "boolean": ("bool", "boolean", "boolean", {"type": "boolean"}),
    "tinyint": ("int", "Int32", "int", {"type": "integer"}),
    "smallint": ("int", "Int32", "int", {"type": "integer"}),
    "int": ("int", "Int32", "int", {"type": "integer"}),
    "bigint": ("int", "Int64", "long", {"type": "integer"}),
    "float": ("float", "Float32", "float", {"type": "number"}),
    "double": ("float", "Float64", "double", {"type": "number"}),
    "string": ("str", "string", "string", {"type": "string"}),
    "binary": ("bytes", "object", "bytes", {"type": "string", "contentEncoding": "base64"}),
    "date": (
        "datetime.date",
        "object",
        {"type": "int", "logicalType": "date"},
        {"type": "string", "format": "date"},
    ),
    "timestamp": (
        "datetime.datetime",
        "datetime64[us, UTC]",
        {"type": "long", "logicalType": "timestamp-micros"},
        {"type": "string", "format": "date-time"},
    ),
    # Objects, as for dates: pandera holds a zone-less datetime64 only at nanoseconds (up to
    # 2262), and sources keep sentinels such as 9999-12-31 that Iceberg's microseconds hold.
    "timestamp_ntz": (
        "datetime.datetime",
        "object",
        {"type": "long", "logicalType": "local-timestamp-micros"},
        {"type": "string", "format": "date-time"},
    ),
}


class ArtifactError(ValueError):
    """A schema that cannot become a package (a type without a mapping)."""


@dataclass(frozen=True)
class Artifact:
    """The package of one schema version: its files (path -> text) and their content hash."""

    distribution: str
    module: str
    version: str
    files: dict[str, str]

    @property
    def digest(self) -> str:
        h = hashlib.sha256()
        for path in sorted(self.files):
            h.update(path.encode() + b"\0" + self.files[path].encode() + b"\0")
        return h.hexdigest()


def names(relation: str) -> tuple[str, str]:
    """(distribution, module) of a relation ``namespace.name``."""
    slug = re.sub(r"[^a-z0-9]+", "_", relation.lower()).strip("_")
    return "cdc-schema-" + slug.replace("_", "-"), "cdc_schema_" + slug


def _mapping(column: SchemaColumn) -> tuple[str, str, Any, dict[str, Any]]:
    return _type_mapping(column.type, column.name)


def _optional(avro: Any, schema: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    # Nested fields and list elements are always optional (see schema.types.SinkType).
    return ["null", avro], {"anyOf": [schema, {"type": "null"}]}


def _nested_mapping(dtype: exp.DataType, path: str) -> tuple[str, str, Any, dict[str, Any]]:
    """Python annotation, pandera dtype, Avro type and JSON Schema of an array, map or struct
    (pandas holds nested values as Python objects)."""
    kind = dtype.this
    if kind == exp.DataType.Type.ARRAY:
        python, _, avro, schema = _type_mapping(dtype.expressions[0].sql(DIALECT).lower(), path)
        avro, schema = _optional(avro, schema)
        return (
            f"list[{python} | None]",
            "object",
            {"type": "array", "items": avro},
            {
                "type": "array",
                "items": schema,
            },
        )
    if kind == exp.DataType.Type.MAP:
        python, _, avro, schema = _type_mapping(dtype.expressions[1].sql(DIALECT).lower(), path)
        avro, schema = _optional(avro, schema)
        return (
            f"dict[str, {python} | None]",
            "object",
            {"type": "map", "values": avro},
            {
                "type": "object",
                "additionalProperties": schema,
            },
        )
    fields, properties = [], {}
    for column_def in dtype.expressions:
        name = column_def.name
        field_type = column_def.args["kind"].sql(DIALECT).lower()
        _, _, avro, schema = _type_mapping(field_type, f"{path}_{name}")
        avro, schema = _optional(avro, schema)
        fields.append({"name": name, "type": avro, "default": None})
        properties[name] = schema
    record = {"type": "record", "name": f"{_identifier(path)}_record", "fields": fields}
    return "dict[str, object]", "object", record, {"type": "object", "properties": properties}


def _type_mapping(type_text: str, path: str) -> tuple[str, str, Any, dict[str, Any]]:
    if type_text in _SIMPLE:
        return _SIMPLE[type_text]
    match = _DECIMAL_RE.match(type_text)
    if match:
        precision, scale = int(match.group(1)), int(match.group(2))
        avro = {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}
        return "decimal.Decimal", "object", avro, {"type": "string", "format": "decimal"}
    if type_text.startswith(("array<", "map<", "struct<")):
        return _nested_mapping(exp.DataType.build(type_text, dialect=DIALECT), path)
    raise ArtifactError(f"column {path}: no artifact mapping for type {type_text}")


def _identifier(name: str) -> str:
    """A column's field name in the generated models (the column's name stays its alias).
    Pydantic and pandera take no field with a leading underscore (pydantic makes it a private
    attribute): ``_shard`` becomes ``shard_``."""
    ident = name if name.isidentifier() else re.sub(r"\W", "_", name)
    if ident.startswith("_"):
        stripped = ident.lstrip("_")
        ident = f"{stripped}_" if stripped and not stripped[0].isdigit() else f"f{ident}"
    return ident


def avro_schema(relation: RelationSchema, version: str) -> dict[str, Any]:
    fields = []
    for c in relation.columns:
        _, _, avro, _ = _mapping(c)
        if c.enum:
            avro = {"type": "enum", "name": f"{c.name}_values", "symbols": list(c.enum)}
        field: dict[str, Any] = {"name": c.name, "type": ["null", avro] if c.nullable else avro}
        if c.nullable:
            field["default"] = None
        if c.doc:
            field["doc"] = c.doc
        if c.display and c.display != c.name:
            field["aliases"] = [c.display]
        fields.append(field)
    namespace, name = relation.name.split(".", 1)
    return {
        "type": "record",
        "name": name,
        "namespace": namespace,
        "doc": f"{relation.kind} {relation.name}, schema version {version}",
        "fields": fields,
    }


def json_schema(relation: RelationSchema, version: str) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for c in relation.columns:
        _, _, _, schema = _mapping(c)
        prop: dict[str, Any] = dict(schema)
        if c.enum:
            prop = {"type": "string", "enum": list(c.enum)}
        if c.nullable:
            prop = {"anyOf": [prop, {"type": "null"}]}
        if c.doc:
            prop["description"] = c.doc
        properties[c.label] = prop
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": relation.name,
        "description": f"{relation.kind} {relation.name}, schema version {version}",
        "type": "object",
        "properties": properties,
        "required": [c.label for c in relation.columns if not c.nullable],
        "additionalProperties": False,
    }


def _module_source(relation: RelationSchema, version: str) -> str:
    record, frame = [], []
    for c in relation.columns:
        python, dtype, _, _ = _mapping(c)
        annotation = f"Literal[{', '.join(repr(v) for v in c.enum)}]" if c.enum else python
        if c.nullable:
            annotation += " | None"
        args = [f"alias={c.label!r}"]
        if c.nullable:
            args.insert(0, "default=None")
        if c.doc:
            args.append(f"description={c.doc!r}")
        record.append(f"    {_identifier(c.name)}: {annotation} = Field({', '.join(args)})")
        checks = [f"nullable={c.nullable}"]
        if _identifier(c.name) != c.name:
            checks.append(f"alias={c.name!r}")
        if c.enum:
            checks.append(f"isin={list(c.enum)!r}")
        if c.doc:
            checks.append(f"description={c.doc!r}")
        frame.append(
            f"    {_identifier(c.name)}: Series[{dtype!r}] = pa.Field({', '.join(checks)})"
        )
    return "\n".join(
        [
            f'"""Schema of {relation.kind} {relation.name}, version {version} (generated by '
            f'{GENERATOR}: do not edit)."""',
            "",
            "from __future__ import annotations",
            "",
            "import datetime",
            "import decimal",
            "import json",
            "from importlib import resources",
            "from typing import Literal",
            "",
            "import pandera.pandas as pa",
            "from pandera.typing import Series",
            "from pydantic import BaseModel, ConfigDict, Field",
            "",
            f"RELATION = {relation.name!r}",
            f"KIND = {relation.kind!r}",
            f"VERSION = {version!r}",
            "",
            "",
            "class Record(BaseModel):",
            f'    """One row of {relation.name}; field aliases are the source\'s names."""',
            "",
            "    model_config = ConfigDict(populate_by_name=True, frozen=True)",
            "",
            *record,
            "",
            "",
            "class RecordFrame(pa.DataFrameModel):",
            f'    """A pandas DataFrame of {relation.name} rows (columns by catalog name)."""',
            "",
            *frame,
            "",
            "    class Config:",
            "        strict = True",
            "        coerce = True  # pandas reads integer columns with NULLs as floats",
            "",
            "",
            "def avro_schema() -> dict:",
            '    return json.loads(resources.files(__name__).joinpath("schema.avsc").read_text())',
            "",
            "",
            "def json_schema() -> dict:",
            '    return json.loads(resources.files(__name__).joinpath("schema.json").read_text())',
            "",
            "",
            "_ = (datetime, decimal)  # used by the annotations above",
            "",
        ]
    )


def render_artifact(relation: RelationSchema, version: str) -> Artifact:
    """The package of ``relation`` at ``version``: its files, deterministic for the same input."""
    distribution, module = names(relation.name)
    pyproject = "\n".join(
        [
            "[build-system]",
            'requires = ["setuptools>=70"]',
            'build-backend = "setuptools.build_meta"',
            "",
            "[project]",
            f'name = "{distribution}"',
            f'version = "{version}"',
            f'description = "Schema of {relation.kind} {relation.name} (generated by {GENERATOR})"',
            'requires-python = ">=3.11"',
            'dependencies = ["pydantic>=2", "pandera>=0.20", "pandas>=2"]',
            "",
            "[tool.setuptools]",
            f'packages = ["{module}"]',
            "",
            "[tool.setuptools.package-data]",
            f'{module} = ["schema.avsc", "schema.json"]',
            "",
        ]
    )
    files = {
        "pyproject.toml": pyproject,
        f"{module}/__init__.py": _module_source(relation, version),
        f"{module}/schema.avsc": json.dumps(avro_schema(relation, version), indent=2) + "\n",
        f"{module}/schema.json": json.dumps(json_schema(relation, version), indent=2) + "\n",
    }
    return Artifact(distribution, module, version, files)
