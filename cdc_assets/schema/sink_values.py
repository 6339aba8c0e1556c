"""A column's sink mapping on Python values: what a source value becomes in Iceberg (transform,
type override). Pure. The ingest applies the same mapping in Spark SQL (``cdc_assets.sql.decode``);
the test oracle and the source-vs-base comparison apply this one.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from cdc_assets.schema.types import SinkType
from cdc_assets.schema.wire import FieldPlan

EPOCH = datetime(1970, 1, 1)
EPOCH_DATE = date(1970, 1, 1)
# Source units per second of the epoch transforms (days are handled apart).
_PER_SECOND = {
    "epoch_seconds_to_timestamp": 1,
    "epoch_millis_to_timestamp": 1_000,
    "epoch_micros_to_timestamp": 1_000_000,
}


def plain(value: Decimal) -> str:
    """A decimal as plain text, never in exponent notation."""
    return format(value, "f")


def sink_string(value: object) -> str:
    """How a natural value reads when a spec stores its column as string."""
    if isinstance(value, Decimal):
        return plain(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def to_sink(plan: FieldPlan, natural: object) -> object:
    """The natural value after the column's transform or type override (None stays None);
    OverflowError when a transform leaves the range of dates."""
    if natural is None:
        return None
    if plan.transform is not None:
        if not isinstance(natural, int) or isinstance(natural, bool):
            raise TypeError(f"{plan.name}: {plan.transform} needs an integer, got {natural!r}")
        if plan.transform == "epoch_days_to_date":
            return EPOCH_DATE + timedelta(days=natural)
        per_second = _PER_SECOND[plan.transform]
        return (EPOCH + timedelta(microseconds=natural * 1_000_000 // per_second)).replace(
            tzinfo=UTC
        )
    if plan.parses_document:
        return project_document(json.loads(str(natural)), plan.sink)
    if plan.splits_set:
        return [] if natural == "" else str(natural).split(",")
    if plan.sink.name == "string" and plan.natural.name != "string":
        return sink_string(natural)
    # Any other override is a widening (int->long, float->double, decimal(p,s)->decimal(q,s)).
    return natural


class DocumentMismatchError(ValueError):
    """A JSON document (or one of its values) that does not fit the declared nested type."""


_INT_BOUNDS = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}


def _leaf(value: object, sink: SinkType) -> object:
    name = sink.name
    if name == "string":
        # Spark reads any JSON value into a string field as its (compact) JSON text.
        if isinstance(value, str):
            return value
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if name == "boolean" and isinstance(value, bool):
        return value
    if isinstance(value, bool):
        raise DocumentMismatchError(f"{value!r} is not a {sink}")
    if name in _INT_BOUNDS and isinstance(value, int):
        low, high = _INT_BOUNDS[name]
        if low <= value <= high:
            return value
    if name in ("float", "double") and isinstance(value, int | float):
        return float(value)
    if name == "decimal" and isinstance(value, int | float):
        number = Decimal(str(value))
        try:
            scaled = number.quantize(Decimal(1).scaleb(-(sink.scale or 0)), ROUND_HALF_UP)
        except InvalidOperation:
            raise DocumentMismatchError(f"{value!r} does not fit {sink}") from None
        if len(scaled.as_tuple().digits) <= (sink.precision or 0):
            return scaled
    raise DocumentMismatchError(f"{value!r} is not a {sink}")


def project_document(value: object, sink: SinkType) -> object:
    """A parsed JSON value read as the nested type ``sink``, as Spark's ``from_json`` reads it
    (schema on read: fields the type does not declare are left out, missing ones are null);
    DocumentMismatchError when its shape or one of its values does not fit."""
    if value is None:
        return None
    if sink.element is not None:
        if not isinstance(value, list):
            raise DocumentMismatchError(f"{sink} needs an array")
        return [project_document(v, sink.element) for v in value]
    if sink.value is not None:
        if not isinstance(value, dict):
            raise DocumentMismatchError(f"{sink} needs an object")
        return {k: project_document(v, sink.value) for k, v in value.items()}
    if sink.fields:
        if not isinstance(value, dict):
            raise DocumentMismatchError(f"{sink} needs an object")
        return {n: project_document(value.get(n), t) for n, t in sink.fields}
    return _leaf(value, sink)
