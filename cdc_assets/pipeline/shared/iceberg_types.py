"""Iceberg types (pyiceberg) for sink types, and back as the sink type text specs use."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from cdc_assets.schema.types import SinkType


def iceberg_type(sink: SinkType, ids: Iterator[int] | None = None) -> Any:
    """The pyiceberg type of a sink type. Nested fields get ids from ``ids``, placeholders that
    the table's schema update replaces with fresh ones (Iceberg assigns nested field ids once,
    and keeps them through renames, widenings and added siblings)."""
    from pyiceberg import types as it

    ids = ids if ids is not None else itertools.count(1_000_000)
    if sink.name == "decimal":
        return it.DecimalType(sink.precision or 0, sink.scale or 0)
    if sink.element is not None:
        return it.ListType(next(ids), iceberg_type(sink.element, ids), element_required=False)
    if sink.value is not None:
        return it.MapType(
            next(ids), it.StringType(), next(ids), iceberg_type(sink.value, ids), False
        )
    if sink.fields:
        return it.StructType(
            *(
                it.NestedField(next(ids), n, iceberg_type(t, ids), required=False)
                for n, t in sink.fields
            )
        )
    simple = {
        "boolean": it.BooleanType,
        "int": it.IntegerType,
        "long": it.LongType,
        "float": it.FloatType,
        "double": it.DoubleType,
        "date": it.DateType,
        "timestamp": it.TimestampType,
        "timestamptz": it.TimestamptzType,
        "string": it.StringType,
        "binary": it.BinaryType,
    }
    return simple[sink.name]()


def sink_text(field_type: Any) -> str:
    """A pyiceberg type as the sink type text the specs use (pyiceberg prints nested types with
    their field ids and optionality, which a spec does not state)."""
    from pyiceberg import types as it

    if isinstance(field_type, it.ListType):
        return f"list<{sink_text(field_type.element_type)}>"
    if isinstance(field_type, it.MapType):
        return f"map<{sink_text(field_type.key_type)},{sink_text(field_type.value_type)}>"
    if isinstance(field_type, it.StructType):
        return (
            "struct<"
            + ",".join(f"{f.name}:{sink_text(f.field_type)}" for f in field_type.fields)
            + ">"
        )
    return str(field_type)
