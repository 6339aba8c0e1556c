"""A column's sink mapping on Python values: what a source value becomes in Iceberg (transform,
type override). Pure. The ingest applies the same mapping in Spark SQL (``cdc_assets.sql.decode``);
the test oracle and the source-vs-base comparison apply this one.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

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
    if plan.sink.name == "string" and plan.natural.name != "string":
        return sink_string(natural)
    # Any other override is a widening (int->long, float->double, decimal(p,s)->decimal(q,s)).
    return natural
