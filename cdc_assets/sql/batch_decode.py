"""The decode of a batch of Kafka records as one Spark SQL query (pure).

The expressions of `sql.registry_wire` and `sql.decode` run in stages, each a projection over
the one before it, so that every expression stays small enough for Spark's code generation and
reads the columns the stage below computed once. Here the stages nest as subqueries of one
statement: Spark parses and analyses it once. Built as DataFrame projections instead, the plan
was analysed again after every stage, over a few thousand py4j calls per batch, which for a
batch of a hundred records cost more than the decode itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cdc_assets.schema.wire import FieldPlan
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.ddl import literal, quote
from cdc_assets.sql.decode import (
    ENVELOPE_FIELDS,
    HEADER_FUNCTION,
    classify,
    decode_stages,
    envelope_call,
    envelope_values,
    map_lookup,
    sql_envelope_stages,
    sql_header,
)
from cdc_assets.sql.registry_wire import decoded_json, framing_error, value_text

# The Kafka header Debezium puts on the create of a primary-key change: the row's previous key
# as JSON, e.g. {"order_id":42}.
OLD_KEY_HEADER = "__debezium.oldkey"
# How the record value is read: the project's one-pass JVM function, or Spark's own functions.
JVM_READER, SQL_READER = "jvm", "sql"


def _stage(columns: Sequence[tuple[str, str]], below: str, depth: int, keep: bool = True) -> str:
    """``SELECT [*,] expr AS name, ... FROM (below)``."""
    selected = ", ".join(f"{expr} AS {quote(name)}" for name, expr in columns)
    star = "*, " if keep else ""
    return f"SELECT {star}{selected} FROM ({below}) AS s{depth}"


def _unknown(spec: TableSpec) -> str:
    """The image's fields the spec does not know; a field it drops is known (never stored)."""
    if not spec.pipeline.drop_fields:
        return "unknown"
    names = ", ".join(literal(n) for n in spec.pipeline.drop_fields)
    return f"array_except(unknown, array({names}))"


def render_classified(
    source: str,
    spec: TableSpec,
    plans: list[FieldPlan],
    schemas: Mapping[int, str],
    registry: str | None,
    subject: str,
    *,
    headers: bool,
    reader: str = JVM_READER,
) -> str:
    """Every record of ``source`` (a table or view with Kafka's columns: key, value, partition,
    offset, timestamp, and headers when ``headers``) with its envelope, decoded fields and
    ``_status``/``_stage``/``_reason``. ``schemas`` are the registry writer schemas (id -> Avro
    text) a framed value may name; ``registry`` and ``subject`` word the reason when one is
    missing. ``reader`` is `JVM_READER` or `SQL_READER`: the same columns either way."""
    if reader not in (JVM_READER, SQL_READER):
        raise ValueError(f"unknown envelope reader {reader!r}")
    # Redriven dead letters keep no headers, so no old key either.
    old_key = "CAST(NULL AS STRING)"
    if headers and reader == JVM_READER:
        old_key = f"{HEADER_FUNCTION}(headers, {literal(OLD_KEY_HEADER)})"
    elif headers:
        old_key = sql_header("headers", OLD_KEY_HEADER)
    if reader == JVM_READER:
        envelope = [
            [("_envelope", envelope_call("value_json", plans))],
            [(name, f"_envelope.{quote(name)}") for name, _ in ENVELOPE_FIELDS],
        ]
        values = decode_stages(plans, envelope_values(plans))
    else:
        envelope = sql_envelope_stages("value_json", plans)
        values = decode_stages(plans, map_lookup)
    query = _stage(
        [
            ("key_bin", quote("key")),
            ("value_bin", quote("value")),
            ("_kafka_partition", quote("partition")),
            ("_kafka_offset", quote("offset")),
            ("_kafka_ts", quote("timestamp")),
            ("_old_key", old_key),
        ],
        source,
        0,
        keep=False,
    )
    steps: list[list[tuple[str, str]]] = [
        [("_avro_json", decoded_json("value_bin", schemas))],
        [
            (
                "_framing_error",
                framing_error("value_bin", "_avro_json", schemas, registry, subject),
            ),
            ("value_json", value_text("value_bin", "_avro_json")),
        ],
        *envelope,
        [("image", "CASE WHEN op = 'd' THEN before ELSE after END")],
        *values,
        [("_outcome", classify(spec, plans)), ("_unknown", _unknown(spec))],
        [(f"_{part}", f"_outcome.{part}") for part in ("status", "stage", "reason")],
    ]
    for depth, columns in enumerate(steps, start=1):
        query = _stage(columns, query, depth)
    return query
