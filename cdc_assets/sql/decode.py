"""Spark SQL that turns a Debezium JSON record into a ledger row, a dead letter or a skip (pure).

The ingest reads the record value once (`ENVELOPE_FUNCTION`) into the envelope, its
``before``/``after`` images as raw JSON text and the applied image as one raw text per field.
Everything below renders expressions over those raw texts; `cdc_assets.pipeline.ingest.ingest`
applies
them. Each record gets a ``_status`` (``ledger``/``dead``/``skip``), a ``_stage`` and a ``_reason``.
"""

from __future__ import annotations

import base64
from collections.abc import Callable

from cdc_assets.schema.types import SinkType
from cdc_assets.schema.wire import TOAST_PLACEHOLDER, FieldPlan, Wire
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.ddl import literal, quote, spark_type

SOURCE_STRUCT = (
    "struct<ts_ms:bigint,snapshot:string,db:string,schema:string,table:string,file:string,"
    "pos:bigint,row:bigint,gtid:string,lsn:bigint,txId:bigint>"
)
# The image as a map of raw JSON texts, as the ledger's backfill parses ``_row_json``: every
# column is looked up in it (`map_lookup`).
IMAGE_SCHEMA = "map<string,string>"

# The project's JVM function (java/udf) that reads a record value in one pass: whether
# it is UTF-8, whether it is a JSON object with envelope fields of the right JSON types, the
# envelope (from ``payload`` when the record embeds a schema), the before/after images as the
# source wrote them, and of the applied image (before for deletes, else after) the raw text of
# each field named in its second argument, in that order (``vals``), and the names of the other
# fields (``unknown``: fields the spec does not know yet). The session extension
# ``ENVELOPE_EXTENSIONS`` (in ``spark.sql.extensions``) provides it.
ENVELOPE_FUNCTION = "cdc_debezium_envelope"
ENVELOPE_EXTENSIONS = "io.cdcassets.spark.CdcExtensions"
# The same extension's cdc_kafka_header(headers, name): the first Kafka header of that name as
# text (what filter() over the headers gives, in the stage's generated code).
HEADER_FUNCTION = "cdc_kafka_header"
ENVELOPE_FIELDS = (
    ("value_utf8_ok", "boolean"),
    ("json_ok", "boolean"),
    ("op", "string"),
    ("ts_ms", "bigint"),
    ("source", SOURCE_STRUCT),
    ("ddl", "string"),
    ("tableChanges", "string"),
    ("status", "string"),
    ("id", "string"),
    ("databaseName", "string"),
    ("before", "string"),
    ("after", "string"),
    ("vals", "array<string>"),
    ("unknown", "array<string>"),
    ("txn_id", "string"),
    ("txn_order", "bigint"),
)
ENVELOPE_TYPE = "struct<" + ",".join(f"{n}:{t}" for n, t in ENVELOPE_FIELDS) + ">"
TWO_POW_64 = 18446744073709551616

SKIP, DEAD, LEDGER = "skip", "dead", "ledger"


def raw(plan: FieldPlan) -> str:
    """The raw text of a column in the image being applied (after; before for deletes), looked
    up once per record into a column of its own (see `raw_stage`)."""
    return ref(plan, "r")


FieldText = Callable[[int, FieldPlan], str]


def _first(texts: list[str]) -> str:
    return texts[0] if len(texts) == 1 else f"coalesce({', '.join(texts)})"


def map_lookup(index: int, plan: FieldPlan) -> str:
    """A column's raw text from an image parsed into ``img`` (`IMAGE_SCHEMA`), under its name or,
    in an event older than a rename, a former one."""
    return _first([f"img[{literal(n)}]" for n in (plan.name, *plan.aliases)])


def envelope_names(plans: list[FieldPlan]) -> list[str]:
    """The fields the envelope function is asked for: every plan's name in plan order, then the
    former names of renamed columns."""
    return [p.name for p in plans] + [a for p in plans for a in p.aliases]


def envelope_values(plans: list[FieldPlan]) -> FieldText:
    """A column's raw text from the envelope function's ``vals`` (asked for as
    `envelope_names` lists them): its own name's, else a former name's."""
    at = {n: i for i, n in reversed(list(enumerate(envelope_names(plans))))}

    def value(index: int, plan: FieldPlan) -> str:
        return _first([f"vals[{index}]", *(f"vals[{at[a]}]" for a in plan.aliases)])

    return value


def envelope_call(value: str, plans: list[FieldPlan]) -> str:
    """The envelope function over ``value``, asking for the fields `envelope_names` lists."""
    names = ", ".join(literal(n) for n in envelope_names(plans))
    return f"{ENVELOPE_FUNCTION}({value}, array({names}))"


# The pure-Spark reader: the same envelope columns from Spark's own functions, for a session
# without the project's function (its jar absent, or built for another Spark version). It
# parses the value, then the applied image, with from_json: two parses instead of one pass,
# and each image value is Spark's text of it (a number may be spelled differently), so
# `map_lookup` reads the columns from ``img``.
_ENVELOPE_JSON = (
    f"before:string,after:string,op:string,ts_ms:bigint,source:{SOURCE_STRUCT},"
    "ddl:string,tableChanges:string,status:string,id:string,databaseName:string,"
    "transaction:struct<id:string,data_collection_order:bigint>"
)
_CORRUPT = "_corrupt"
# Top level of a record value: the envelope itself (no embedded schema) or under "payload". The
# embedded "schema" object is not listed, so Spark skips it instead of materializing it.
VALUE_SCHEMA = f"struct<payload:struct<{_ENVELOPE_JSON}>,{_ENVELOPE_JSON},{_CORRUPT}:string>"
_PICKED = {
    "op": "op",
    "ts_ms": "ts_ms",
    "source": "source",
    "ddl": "ddl",
    "tableChanges": "tableChanges",
    "status": "status",
    "id": "id",
    "databaseName": "databaseName",
    "before": "before",
    "after": "after",
    "txn_id": "transaction.id",
    "txn_order": "transaction.data_collection_order",
}


def sql_envelope_stages(value: str, plans: list[FieldPlan]) -> list[list[tuple[str, str]]]:
    """Projections giving the columns of `ENVELOPE_FIELDS` (but ``vals``) and the applied image
    as ``img`` (`IMAGE_SCHEMA`) from ``value`` (binary) with Spark's own functions; what
    `envelope_call` gives in one pass."""
    doc = "_value_doc"
    options = f"map('mode', 'PERMISSIVE', 'columnNameOfCorruptRecord', {literal(_CORRUPT)})"
    parsed = f"from_json(CAST({value} AS STRING), {literal(VALUE_SCHEMA)}, {options})"

    def picked(path: str) -> str:
        return (
            f"CASE WHEN NOT json_ok THEN NULL WHEN {doc}.payload IS NOT NULL "
            f"THEN {doc}.payload.{path} ELSE {doc}.{path} END"
        )

    names = ", ".join(literal(n) for n in envelope_names(plans))
    applied = "CASE WHEN op = 'd' THEN before ELSE after END"
    return [
        [
            ("value_utf8_ok", f"is_valid_utf8({value})"),
            # Only valid UTF-8 is cast: CAST would replace bad bytes and parse the rest.
            (doc, f"CASE WHEN is_valid_utf8({value}) THEN {parsed} END"),
        ],
        [("json_ok", f"value_utf8_ok AND {doc} IS NOT NULL AND {doc}.{_CORRUPT} IS NULL")],
        [(name, picked(path)) for name, path in _PICKED.items()],
        [("_img_all", f"from_json({applied}, {literal(IMAGE_SCHEMA)})")],
        [("img", _last_wins("_img_all"))],
        [("unknown", f"array_except(map_keys(img), array({names}))")],
    ]


def _last_wins(image: str) -> str:
    """The map ``image`` with a field sent twice holding its last value, as the function (and
    from_json of a struct) reads it: from_json keeps both entries of a map and a lookup finds
    the first. Rebuilt only for the rare image that has a duplicate."""
    keys = f"array_distinct(map_keys({image}))"
    last = f"element_at(filter(map_entries({image}), e -> e.key = k), -1).value"
    return (
        f"CASE WHEN size(map_keys({image})) = size({keys}) THEN {image} "
        f"ELSE map_from_arrays({keys}, transform({keys}, k -> {last})) END"
    )


def sql_header(headers: str, name: str) -> str:
    """What `HEADER_FUNCTION` gives, with Spark's own functions: the first header ``name``'s
    value as text."""
    return (
        f"CAST(try_element_at(filter({headers}, h -> h.key = {literal(name)}), 1).value AS STRING)"
    )


def raw_stage(plans: list[FieldPlan], field_text: FieldText = map_lookup) -> list[tuple[str, str]]:
    """One lookup per column; every later expression reads the resulting column."""
    return [(ref(plan, "r"), field_text(i, plan)) for i, plan in enumerate(plans)]


def ref(plan: FieldPlan, part: str) -> str:
    """An intermediate column of one field: ``h`` hex bytes, ``u`` unscaled decimal, ``s`` scale,
    ``n`` natural value, ``v`` sink value. Computing them in stages keeps each expression small
    enough for Spark's code generation."""
    return f"__{part}_{plan.sink_name}"


_DECIMAL_WIRES = (Wire.DECIMAL_BYTES, Wire.DECIMAL_VARIABLE)


def decode_stages(
    plans: list[FieldPlan], field_text: FieldText = map_lookup
) -> list[list[tuple[str, str]]]:
    """Ordered projections (name, expression) computing every field's natural and sink value
    from each field's raw text (``field_text``: from ``img`` or from the envelope's ``vals``)."""
    hexes, unscaled, naturals, sinks = [], [], [], []
    for p in plans:
        if p.wire is Wire.DECIMAL_BYTES:
            hexes.append((ref(p, "h"), f"hex(try_to_binary({raw(p)}, 'base64'))"))
        if p.wire is Wire.DECIMAL_VARIABLE:
            value = f"get_json_object({raw(p)}, '$.value')"
            hexes.append((ref(p, "h"), f"hex(try_to_binary({value}, 'base64'))"))
            hexes.append((ref(p, "s"), f"try_cast(get_json_object({raw(p)}, '$.scale') AS INT)"))
        if p.wire in _DECIMAL_WIRES:
            unscaled.append((ref(p, "u"), unscaled_from_hex(ref(p, "h"))))
        naturals.append((ref(p, "n"), decode_natural(p)))
        sinks.append((ref(p, "v"), to_sink(p)))
    stages = (raw_stage(plans, field_text), hexes, unscaled, naturals, sinks)
    return [stage for stage in stages if stage]


def _placeholders(plan: FieldPlan) -> list[str]:
    data = TOAST_PLACEHOLDER.encode()
    if plan.wire is Wire.JSON_ARRAY:
        # An unchanged TOASTed array arrives as a one-element array of the placeholder.
        return [f'["{TOAST_PLACEHOLDER}"]']
    if plan.wire is Wire.BYTES_BASE64:
        return [base64.b64encode(data).decode()]
    if plan.wire is Wire.BYTES_BASE64_URL:
        return [base64.urlsafe_b64encode(data).decode()]
    if plan.wire is Wire.BYTES_HEX:
        return [data.hex()]
    return [TOAST_PLACEHOLDER]


def is_unavailable(plan: FieldPlan) -> str:
    """True when the source did not send the value (PostgreSQL unchanged TOAST column)."""
    values = ", ".join(literal(v) for v in _placeholders(plan))
    return f"({raw(plan)} IN ({values}))"


def _int(r: str) -> str:
    return f"try_cast({r} AS INT)"


def _long(r: str) -> str:
    return f"try_cast({r} AS BIGINT)"


def unscaled_from_hex(h: str) -> str:
    """The unscaled integer of a Kafka Connect decimal (big-endian two's complement bytes, given
    as hex) as DECIMAL(38,0); NULL when absent, empty or beyond 38 digits.

    The bytes are sign-extended to 16, split into 16+56+56-bit chunks that fit a BIGINT, and
    negative values are turned into their magnitude chunk by chunk (NOT, then +1), so no
    intermediate result leaves DECIMAL(38,0).
    """
    neg = f"(conv(substr({h}, 1, 1), 16, 10) >= 8)"
    padded = f"lpad({h}, 32, CASE WHEN {neg} THEN 'F' ELSE '0' END)"

    def chunk(start: int, digits: int) -> str:
        value = f"CAST(conv(substr({padded}, {start}, {digits}), 16, 10) AS BIGINT)"
        mask = (1 << (4 * digits)) - 1
        return f"CASE WHEN {neg} THEN {mask} - {value} ELSE {value} END"

    # Only try_* arithmetic: a value beyond DECIMAL(38,0) becomes NULL (a dead letter), never
    # an ANSI overflow error that would fail the whole batch.
    high = f"try_multiply(CAST({chunk(1, 4)} AS DECIMAL(38,0)), CAST({1 << 112} AS DECIMAL(38,0)))"
    mid = f"try_multiply(CAST({chunk(5, 14)} AS DECIMAL(38,0)), CAST({1 << 56} AS DECIMAL(38,0)))"
    low = f"try_add(CAST({chunk(19, 14)} AS DECIMAL(38,0)), CASE WHEN {neg} THEN 1 ELSE 0 END)"
    magnitude = f"try_add(try_add({high}, {mid}), {low})"
    too_long = f"(length({h}) > 32 OR {h} = '' OR {h} IS NULL)"
    return (
        f"CASE WHEN {too_long} THEN NULL WHEN {neg} THEN try_subtract(0, {magnitude}) "
        f"ELSE {magnitude} END"
    )


def _scaled_text(unscaled: str, scale: str) -> str:
    """Render an unscaled DECIMAL(38,0) with ``scale`` fraction digits as plain text."""
    # Strip the sign as text: Spark's Decimal.abs rounds 35+ digit values through Scala's
    # 34-digit default context and then fails on them.
    text = f"regexp_replace(CAST({unscaled} AS STRING), '^-', '')"
    # lpad also truncates longer strings, so only ever pad up.
    digits = f"lpad({text}, greatest(length({text}), {scale} + 1), '0')"
    sign = f"CASE WHEN {unscaled} < 0 THEN '-' ELSE '' END"
    int_part = f"substr({digits}, 1, length({digits}) - {scale})"
    frac = f"substr({digits}, length({digits}) - {scale} + 1)"
    return (
        f"CASE WHEN {unscaled} IS NULL THEN NULL WHEN {scale} = 0 THEN concat({sign}, {digits}) "
        f"ELSE concat({sign}, {int_part}, '.', {frac}) END"
    )


def _time_text(micros: str) -> str:
    return (
        f"format_string('%02d:%02d:%02d.%06d', {micros} div 3600000000, "
        f"({micros} div 60000000) % 60, ({micros} div 1000000) % 60, {micros} % 1000000)"
    )


def _iso(plan: FieldPlan, r: str) -> str:
    natural = plan.natural.name
    if natural == "date":
        return f"try_cast({r} AS DATE)"
    if natural == "timestamp":
        return f"try_cast({r} AS TIMESTAMP_NTZ)"
    if natural == "timestamptz":
        return f"try_cast({r} AS TIMESTAMP)"
    return r


def decode_natural(plan: FieldPlan) -> str:
    """The column decoded from its wire encoding to its natural type (NULL if undecodable)."""
    r = raw(plan)
    w = plan.wire
    natural = spark_type(plan.natural)
    simple = {
        Wire.INT: _int(r),
        Wire.LONG: _long(r),
        Wire.FLOAT: f"try_cast({r} AS FLOAT)",
        Wire.DOUBLE: f"try_cast({r} AS DOUBLE)",
        Wire.BOOLEAN: f"CASE {r} WHEN 'true' THEN true WHEN 'false' THEN false END",
        # MySQL sends TINYINT(1) as a number, but a real boolean for tables created while
        # streaming: accept both.
        Wire.BOOLEAN_INT: (
            f"CASE WHEN {r} IN ('true', 'false') THEN {r} = 'true' "
            f"WHEN {_int(r)} BETWEEN -128 AND 255 THEN {_int(r)} <> 0 END"
        ),
        Wire.STRING: r,
        Wire.DECIMAL_NUMBER: f"try_cast({r} AS DOUBLE)",
        Wire.DATE_DAYS: f"date_from_unix_date({_int(r)})",
        # Only years 1 to 9999 (what Python's datetime, and so most readers, can hold): a
        # larger number is no time of this encoding (micros read as millis after a source's
        # DATETIME(3) -> DATETIME(6), say) and becomes a dead letter, not a year 58000.
        Wire.TIMESTAMP_MILLIS: _in_range(
            _long(r),
            "epoch_millis_to_timestamp",
            f"CAST(timestamp_millis({_long(r)}) AS {natural})",
        ),
        Wire.TIMESTAMP_MICROS: _in_range(
            _long(r),
            "epoch_micros_to_timestamp",
            f"CAST(timestamp_micros({_long(r)}) AS {natural})",
        ),
        Wire.TIMESTAMP_NANOS: f"CAST(timestamp_micros({_long(r)} div 1000) AS {natural})",
        Wire.ZONED_TIMESTAMP: f"try_cast({r} AS TIMESTAMP)",
        Wire.TIME_MILLIS: _time_text(f"({_long(r)} * 1000)"),
        Wire.TIME_MICROS: _time_text(_long(r)),
        Wire.TIME_NANOS: _time_text(f"({_long(r)} div 1000)"),
        Wire.BYTES_BASE64: f"try_to_binary({r}, 'base64')",
        Wire.BYTES_HEX: f"try_to_binary({r}, 'hex')",
        Wire.BYTES_BASE64_URL: (
            f"try_to_binary(concat(translate({r}, '-_', '+/'), "
            f"repeat('=', (4 - length({r}) % 4) % 4)), 'base64')"
        ),
    }
    if w in simple:
        return simple[w]
    if w is Wire.JSON_ARRAY:
        assert plan.element is not None
        # Every element as raw text (a JSON scalar reads as its text), each decoded as a column
        # of the element's type would be: the lambda variable is the element's raw column name.
        each = decode_natural(plan.element)
        return f"transform(from_json({r}, 'array<string>'), {raw(plan.element)} -> {each})"
    if w is Wire.UNSIGNED_LONG:
        # bigint.unsigned.handling.mode=long wraps values >= 2^63 into negative longs.
        v = f"CAST({_long(r)} AS DECIMAL(20,0))"
        return f"CASE WHEN {_long(r)} < 0 THEN {v} + {TWO_POW_64} ELSE {v} END"
    if w is Wire.DECIMAL_BYTES:
        return f"try_cast({_scaled_text(ref(plan, 'u'), str(plan.scale))} AS {natural})"
    if w is Wire.DECIMAL_VARIABLE:
        return _scaled_text(ref(plan, "u"), ref(plan, "s"))
    if w is Wire.DECIMAL_STRING:
        return r if plan.natural.name == "string" else f"try_cast({r} AS {natural})"
    if w is Wire.ISO_STRING:
        return _iso(plan, r)
    raise ValueError(f"no decoder for wire encoding {w}")


def _shadow_type(sink: SinkType) -> SinkType:
    """``sink`` with every primitive replaced by string: how the same JSON parses when no value
    can fail its type (Spark reads any JSON scalar as its text)."""
    if sink.element is not None:
        return SinkType("list", element=_shadow_type(sink.element))
    if sink.value is not None:
        return SinkType("map", value=_shadow_type(sink.value))
    if sink.fields:
        return SinkType("struct", fields=tuple((n, _shadow_type(t)) for n, t in sink.fields))
    return SinkType("string")


def _lost(typed: str, shadow: str, sink: SinkType, depth: int = 0) -> str:
    """True when a value present in ``shadow`` became null in ``typed``: a JSON value that does
    not fit its declared type, which ``from_json`` would otherwise turn into a silent null."""
    if sink.element is not None or sink.value is not None:
        t, s, b = f"__t{depth}", f"__s{depth}", f"__b{depth}"
        inner = _lost(t, s, sink.element or sink.value, depth + 1)  # type: ignore[arg-type]
        pairs = f"{typed}, {shadow}"
        if sink.value is not None:
            pairs = f"map_values({typed}), map_values({shadow})"
        zipped = f"zip_with({pairs}, ({t}, {s}) -> {inner})"
        # A list or map that failed as a whole reads as null where its text parsed.
        return f"({shadow} IS NOT NULL AND ({typed} IS NULL OR exists({zipped}, {b} -> {b})))"
    if sink.fields:
        parts = [
            _lost(f"{typed}.{quote(n)}", f"{shadow}.{quote(n)}", t, depth) for n, t in sink.fields
        ]
        return f"({typed} IS NULL AND {shadow} IS NOT NULL OR " + " OR ".join(parts) + ")"
    return f"({shadow} IS NOT NULL AND {typed} IS NULL)"


def parse_document(text: str, sink: SinkType) -> str:
    """A JSON document's text parsed into ``sink`` (a nested type)."""
    return f"from_json({text}, {literal(spark_type(sink))})"


def _shape_lost(text: str, sink: SinkType, depth: int = 0) -> str:
    """True when the JSON ``text`` does not have the shape of ``sink``: an object where a struct
    or map is declared, an array where a list is, level by level. ``from_json`` reads a struct
    from a document of another shape as a struct of nulls, which would pass for a value."""
    if not sink.is_nested:
        return "false"
    e = f"__e{depth}"
    if sink.element is not None:
        outline = parse_document(text, SinkType("list", element=SinkType("string")))
        cond = f"{outline} IS NULL"
        if sink.element.is_nested:
            inner = _shape_lost(e, sink.element, depth + 1)
            cond += f" OR exists({outline}, {e} -> {e} IS NOT NULL AND ({inner}))"
        return f"({cond})"
    cond = f"json_object_keys({text}) IS NULL"
    outline_type: SinkType
    if sink.value is not None:
        outline_type = SinkType("map", value=SinkType("string"))
        if sink.value.is_nested:
            values = f"map_values({parse_document(text, outline_type)})"
            inner = _shape_lost(e, sink.value, depth + 1)
            cond += f" OR exists({values}, {e} -> {e} IS NOT NULL AND ({inner}))"
        return f"({cond})"
    outline_type = SinkType("struct", fields=tuple((n, SinkType("string")) for n, _ in sink.fields))
    for name, field_type in sink.fields:
        if field_type.is_nested:
            part = f"{parse_document(text, outline_type)}.{quote(name)}"
            cond += f" OR ({part} IS NOT NULL AND {_shape_lost(part, field_type, depth + 1)})"
    return f"({cond})"


def document_lost(text: str, parsed: str, sink: SinkType) -> str:
    """True when the document ``text`` does not parse into ``sink``: not JSON, another shape, or
    a value that does not fit its field's type (found by parsing once more with every primitive
    read as text, and looking for values present there and null in ``parsed``)."""
    shadow = parse_document(text, _shadow_type(sink))
    lost = _lost(parsed, shadow, sink)
    return f"({parsed} IS NULL OR {_shape_lost(text, sink)} OR coalesce({lost}, false))"


def _decodable(plan: FieldPlan) -> str:
    """True when the raw text is readable in its wire encoding, before any range/fit check."""
    if plan.wire is Wire.JSON_ARRAY:
        return f"(NOT {document_lost(raw(plan), ref(plan, 'n'), plan.natural)})"
    if plan.parses_document:
        return f"(NOT {document_lost(ref(plan, 'n'), ref(plan, 'v'), plan.sink)})"
    if plan.wire in _DECIMAL_WIRES:
        return f"({ref(plan, 'u')} IS NOT NULL)"
    if plan.wire is Wire.DECIMAL_STRING:
        return f"(try_cast({raw(plan)} AS DOUBLE) IS NOT NULL)"
    return f"({ref(plan, 'n')} IS NOT NULL)"


def _fits(plan: FieldPlan) -> str | None:
    """A condition that the decoded value fits the declared source type, if one applies."""
    source = plan.source
    if source.kind in ("CHAR", "NCHAR", "VARCHAR", "NVARCHAR") and source.length:
        return f"(char_length({raw(plan)}) <= {source.length})"
    if plan.wire in (Wire.DECIMAL_BYTES, Wire.DECIMAL_STRING) and plan.natural.name == "decimal":
        return f"({ref(plan, 'n')} IS NOT NULL)"
    return None


# The epochs of 0001-01-01T00:00:00Z and of the last microsecond of 9999-12-31, per unit: the
# range a transform accepts (what Python's datetime, and so most readers, can hold).
_FIRST_SECOND, _LAST_SECOND = -62_135_596_800, 253_402_300_799
EPOCH_RANGES = {
    "epoch_seconds_to_timestamp": (_FIRST_SECOND, _LAST_SECOND),
    "epoch_millis_to_timestamp": (_FIRST_SECOND * 1_000, _LAST_SECOND * 1_000 + 999),
    "epoch_micros_to_timestamp": (_FIRST_SECOND * 1_000_000, _LAST_SECOND * 1_000_000 + 999_999),
    "epoch_days_to_date": (-719_162, 2_932_896),
}
_EPOCH_FUNCTIONS = {
    "epoch_seconds_to_timestamp": "timestamp_seconds",
    "epoch_millis_to_timestamp": "timestamp_millis",
    "epoch_micros_to_timestamp": "timestamp_micros",
    "epoch_days_to_date": "date_from_unix_date",
}


def _in_range(number: str, transform: str, value: str) -> str:
    """``value`` when ``number`` lies in the years `EPOCH_RANGES` gives ``transform``, else NULL."""
    low, high = EPOCH_RANGES[transform]
    return f"CASE WHEN {number} BETWEEN {low} AND {high} THEN {value} END"


def epoch_to_sink(transform: str, number: str) -> str:
    """An epoch ``number`` (a BIGINT expression) through ``transform``; NULL outside years
    1-9999, where a value is no date (and timestamp_millis would overflow, failing the whole
    job). The ledger makes such a value a dead letter (_value_reasons), a bootstrap a bad value."""
    low, high = EPOCH_RANGES[transform]
    value = f"CAST({number} AS INT)" if transform == "epoch_days_to_date" else number
    function = _EPOCH_FUNCTIONS[transform]
    return f"CASE WHEN {number} BETWEEN {low} AND {high} THEN {function}({value}) END"


def split_set(text: str) -> str:
    """A MySQL SET as a list: MySQL sends its members joined by commas, the empty set as ''."""
    empty = "CAST(array() AS ARRAY<STRING>)"
    return f"CASE WHEN {text} = '' THEN {empty} ELSE split({text}, ',') END"


def to_sink(plan: FieldPlan) -> str:
    """The column's ledger value: transform, else override cast, else the natural value."""
    r = raw(plan)
    if plan.transform in EPOCH_RANGES:
        return epoch_to_sink(plan.transform, _long(r))
    natural = ref(plan, "n")
    if plan.sink == plan.natural:
        return natural
    if plan.parses_document:
        return parse_document(natural, plan.sink)
    if plan.splits_set:
        return split_set(natural)
    return f"CAST({natural} AS {spark_type(plan.sink)})"


def ledger_value(plan: FieldPlan, has_field: Callable[[str], str] | None = None) -> str:
    """A column's ledger value. With ``has_field`` (a field name -> whether the image has it)
    and a plan ``default``, an image without the field (a row older than the column) gets the
    default; an image with the field set to null keeps the null."""
    value = f"CASE WHEN {is_unavailable(plan)} THEN NULL ELSE {ref(plan, 'v')} END"
    if plan.default is None or has_field is None:
        return value
    present = " OR ".join(has_field(n) for n in (plan.name, *plan.aliases))
    default = f"try_cast({literal(plan.default)} AS {spark_type(plan.sink)})"
    return f"CASE WHEN {ref(plan, 'v')} IS NOT NULL OR ({present}) THEN {value} ELSE {default} END"


def json_has_field(image: str) -> Callable[[str], str]:
    """``has_field`` for an image as JSON text (the ingest's): parsed only where it is asked,
    for a null value of a column with a default."""
    return lambda name: (
        f"coalesce(array_contains(json_object_keys({image}), {literal(name)}), false)"
    )


def map_has_field(image: str) -> Callable[[str], str]:
    """``has_field`` for an image parsed into a map (`IMAGE_SCHEMA`: the backfill's)."""
    return lambda name: f"coalesce(map_contains_key({image}, {literal(name)}), false)"


def _value_reasons(plans: list[FieldPlan]) -> list[tuple[str, str]]:
    """(condition, reason) pairs for the convert stage, in the order they are reported."""
    out: list[tuple[str, str]] = []
    image_ops = "op IN ('c', 'u', 'r', 'd')"
    for p in plans:
        if p.key:
            out.append(
                (
                    f"{image_ops} AND {raw(p)} IS NULL",
                    literal(f"primary key column {p.name!r} is null"),
                )
            )
    for p in plans:
        r = raw(p)
        present = f"{r} IS NOT NULL AND NOT {is_unavailable(p)}"
        if not p.nullable and not p.key:
            out.append(
                (
                    f"op IN ('c', 'u', 'r') AND {r} IS NULL",
                    literal(f"column {p.name!r} is null but declared not nullable"),
                )
            )
        out.append(
            (
                f"{image_ops} AND {present} AND NOT {_decodable(p)}",
                literal(f"column {p.name!r}: cannot decode as {p.decode_as}"),
            )
        )
        if p.transform:
            out.append(
                (
                    f"{image_ops} AND {present} AND {ref(p, 'v')} IS NULL",
                    literal(f"column {p.name!r}: cannot apply {p.transform}"),
                )
            )
        fits = _fits(p)
        if fits is not None:
            out.append(
                (
                    f"{image_ops} AND {present} AND NOT coalesce({fits}, false)",
                    literal(f"column {p.name!r}: value does not fit {p.source.text}"),
                )
            )
    return out


def classify(spec: TableSpec, plans: list[FieldPlan]) -> str:
    """One CASE over the columns ``value_bin`` (the raw value), ``_framing_error`` (see
    `registry_wire.framing_error`), the envelope columns (`ENVELOPE_FIELDS`) and the decoded
    fields, giving ``struct<status, stage, reason>``: the first rule that matches decides, and
    the chain is evaluated once per record."""
    table = spec.source.table
    rules: list[tuple[str, str, str, str]] = [
        ("value_bin IS NULL", SKIP, "", literal("tombstone")),
        ("_framing_error IS NOT NULL", DEAD, "decode", "_framing_error"),
        ("NOT value_utf8_ok", DEAD, "decode", literal("value is not valid UTF-8")),
        (
            "NOT json_ok",
            DEAD,
            "decode",
            literal("value is not a JSON object"),
        ),
        ("ddl IS NOT NULL OR tableChanges IS NOT NULL", SKIP, "", literal("schema change event")),
        ("status IN ('BEGIN', 'END')", SKIP, "", literal("transaction metadata")),
        (
            "op IS NULL AND ts_ms IS NOT NULL AND before IS NULL AND after IS NULL "
            "AND source IS NULL",
            SKIP,
            "",
            literal("heartbeat"),
        ),
        (
            "op IS NULL",
            DEAD,
            "envelope",
            literal("not a Debezium change event: no op field"),
        ),
        ("op = 'm'", SKIP, "", literal("logical decoding message")),
        (
            "op NOT IN ('c', 'u', 'd', 'r', 't')",
            DEAD,
            "envelope",
            "concat('unknown op code ', '''', op, '''')",
        ),
        (
            f"source.table IS NOT NULL AND source.table <> {literal(table)}",
            DEAD,
            "envelope",
            f"concat('event for table ''', source.table, ''', expected ''', "
            f"{literal(table.replace(chr(39), chr(39) * 2))}, '''')",
        ),
        (
            "op IN ('c', 'u', 'r') AND after IS NULL",
            DEAD,
            "envelope",
            "concat('op ''', op, ''' event has no after image')",
        ),
        (
            "op = 'd' AND before IS NULL",
            DEAD,
            "envelope",
            literal("op 'd' event has no before image"),
        ),
    ]
    rules += gtid_rules(spec)
    rules += [(cond, DEAD, "convert", reason) for cond, reason in _value_reasons(plans)]

    def outcome(status: str, stage: str, reason: str) -> str:
        return (
            f"named_struct('status', {status}, 'stage', CAST({stage} AS STRING), "
            f"'reason', CAST({reason} AS STRING))"
        )

    pairs = [(r[0], outcome(literal(r[1]), literal(r[2]) if r[2] else "NULL", r[3])) for r in rules]
    return _case(pairs, outcome(literal(LEDGER), "NULL", "NULL"))


def _case(pairs: list[tuple[str, str]], default: str) -> str:
    return "CASE " + " ".join(f"WHEN {c} THEN {v}" for c, v in pairs) + f" ELSE {default} END"


def sequence_columns(spec: TableSpec) -> dict[str, str]:
    """The numeric source position: binlog (file number, position, row), (LSN, 0, 0), or for
    ``source.order: gtid`` (GTID sequence number, position, row). A row event without a GTID
    (Debezium's snapshot reads) gets a NULL major, which `pipeline.ingest.gtid_floor` fills in."""
    if spec.source.connector == "postgresql":
        return {
            "_seq_major": "source.lsn",
            "_seq_minor": "CASE WHEN source.lsn IS NOT NULL THEN CAST(0 AS BIGINT) END",
            "_seq_row": "CASE WHEN source.lsn IS NOT NULL THEN CAST(0 AS BIGINT) END",
        }
    if spec.source.order == "gtid":
        # One transaction never spans two binlog files, so position and row order the events
        # within it, even when its GTID was read from another server's binlog after a failover.
        return {
            "_seq_major": gtid_part("source.gtid", 3),
            "_seq_minor": "CASE WHEN source.file IS NOT NULL THEN source.pos END",
            "_seq_row": "CASE WHEN source.file IS NOT NULL THEN source.row END",
        }
    file_number = r"try_cast(regexp_extract(source.file, '\\.([0-9]+)$', 1) AS BIGINT)"
    return {
        "_seq_major": f"CASE WHEN source.file IS NOT NULL THEN {file_number} END",
        "_seq_minor": "CASE WHEN source.file IS NOT NULL THEN source.pos END",
        "_seq_row": "CASE WHEN source.file IS NOT NULL THEN source.row END",
    }


GTID_PATTERN = "^([0-9]+)-([0-9]+)-([0-9]+)$"


def gtid_part(gtid: str, group: int) -> str:
    """A part of a MariaDB GTID ``domain-server-sequence`` (group 1, 2, 3) as a long, NULL when
    the text is not one."""
    part = f"regexp_extract({gtid}, {literal(GTID_PATTERN)}, {group})"
    return f"try_cast(nullif({part}, '') AS BIGINT)"


def gtid_rules(spec: TableSpec) -> list[tuple[str, str, str, str]]:
    """Dead-letter rules of a ``source.order: gtid`` spec: changes it cannot place in order."""
    if spec.source.order != "gtid":
        return []
    domain = spec.source.gtid_domain
    row_ops = "op IN ('c', 'u', 'd', 'r') AND source.gtid IS NOT NULL"
    return [
        (
            "op IN ('c', 'u', 'd') AND source.gtid IS NULL",
            DEAD,
            "envelope",
            literal(
                "a change without source.gtid, and the spec orders changes by GTID "
                "(source.order: gtid)"
            ),
        ),
        (
            f"{row_ops} AND {gtid_part('source.gtid', 3)} IS NULL",
            DEAD,
            "envelope",
            "concat('source.gtid ''', source.gtid, ''' is not a MariaDB GTID "
            "domain-server-sequence')",
        ),
        (
            f"{row_ops} AND {gtid_part('source.gtid', 1)} <> {domain}",
            DEAD,
            "envelope",
            "concat('GTID ', source.gtid, ' is in replication domain ', "
            f"{gtid_part('source.gtid', 1)}, ', the spec orders by domain {domain} "
            "(source.gtid_domain): sequence numbers of two domains do not compare')",
        ),
    ]


def unavailable_list(plans: list[FieldPlan]) -> str:
    """Comma-separated sink names of columns the source did not send, or NULL."""
    parts = ", ".join(
        f"CASE WHEN {is_unavailable(p)} THEN {literal(p.sink_name)} END" for p in plans
    )
    return f"nullif(concat_ws(',', {parts}), '')"
