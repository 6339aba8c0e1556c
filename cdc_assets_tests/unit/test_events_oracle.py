"""Generated Debezium events round-trip through the oracle to the values they were made from."""

from __future__ import annotations

import itertools
import json
import math
import random
import zlib
from collections import Counter
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import pytest

from cdc_assets.schema.wire import FieldPlan, Wire, plan_column, plan_fields
from cdc_assets.spec import TableSpec, load_specs
from cdc_assets_dev.demo.events import (
    TOAST,
    DebeziumEventFactory,
    KafkaRecord,
    encode_value,
    make_key,
    random_row,
    workload,
)
from cdc_assets_tests.conftest import PROJECT_ROOT
from cdc_assets_tests.support.oracle import (
    Outcome,
    assign_coordinates,
    decode_natural,
    expected_outcome,
    plain,
    replay,
    time_text,
)

EXAMPLES = {s.name: s for s in load_specs(PROJECT_ROOT / "table_specs")}
EPOCH = datetime(1970, 1, 1)
SKIP_REASONS = {"tombstone", "heartbeat", "transaction metadata"}


# --- expectations written from the natural values, independently of the oracle ---------------


def _micros_of(clock: object) -> int:
    assert isinstance(clock, time)
    return ((clock.hour * 60 + clock.minute) * 60 + clock.second) * 1_000_000 + clock.microsecond


def _epoch_sink(transform: str, units: int) -> object:
    if transform == "epoch_days_to_date":
        return date(1970, 1, 1) + timedelta(days=units)
    per_unit = {"seconds": 10**6, "millis": 10**3, "micros": 1}[transform.split("_")[1]]
    return (EPOCH + timedelta(microseconds=units * per_unit)).replace(tzinfo=UTC)


def _natural_sink(plan: FieldPlan, natural: object, connector: str) -> object:
    wire, name = plan.wire, plan.natural.name
    if wire is Wire.TIME_MILLIS:
        return time_text(_micros_of(natural) // 1000 * 1000)
    if wire in (Wire.TIME_MICROS, Wire.TIME_NANOS):
        return time_text(_micros_of(natural))
    if wire is Wire.ISO_STRING and name == "string":
        return encode_value(
            plan, natural, connector=connector
        )  # time text is kept as Debezium sent it
    if isinstance(natural, datetime) and name == "timestamp":
        if wire is Wire.TIMESTAMP_MILLIS:
            return natural.replace(microsecond=natural.microsecond // 1000 * 1000)
        return natural
    if isinstance(natural, datetime) and name == "timestamptz":
        return natural.astimezone(UTC)
    if isinstance(natural, int) and name == "decimal":
        return Decimal(natural)  # bigint unsigned
    if isinstance(natural, Decimal) and name == "string":
        return plain(natural)  # decimals wider than Iceberg's 38 digits, or unconstrained
    if wire is Wire.BOOLEAN_INT:
        return bool(natural)
    return natural


def expected_sink(plan: FieldPlan, natural: object, connector: str) -> object:
    """The ledger value a natural value must become, worked out from the wire plan."""
    if natural is None:
        return None
    if plan.transform is not None:
        assert isinstance(natural, int)
        return _epoch_sink(plan.transform, natural)
    if plan.element is not None:
        assert isinstance(natural, list)
        return [None if v is None else _natural_sink(plan.element, v, connector) for v in natural]
    if plan.parses_document:
        # The generator's documents hold exactly these fields' kinds; "label" is not declared.
        doc = json.loads(str(natural))
        return {n: doc.get(n) for n, _ in plan.sink.fields}
    if plan.splits_set:
        return [m for m in str(natural).split(",") if m]
    value = _natural_sink(plan, natural, connector)
    if plan.sink.name == "string" and plan.natural.name != "string":
        return str(value).lower() if isinstance(value, bool) else str(value)
    return value


def assert_same(expected: object, actual: object, where: str) -> None:
    if isinstance(expected, list):
        assert isinstance(actual, list), (where, expected, actual)
        assert len(expected) == len(actual), (where, expected, actual)
        for e, a in zip(expected, actual, strict=True):
            assert_same(e, a, where)
        return
    if isinstance(expected, float):
        assert isinstance(actual, float), (where, actual)
        assert math.isclose(expected, actual, rel_tol=1e-6, abs_tol=1e-9), (where, actual)
        return
    assert type(expected) is type(actual), (where, expected, actual)
    assert expected == actual, (where, expected, actual)
    if isinstance(expected, datetime) and isinstance(actual, datetime):
        assert (expected.tzinfo is None) == (actual.tzinfo is None), where


def check_round_trip(spec: TableSpec, record: KafkaRecord, result: Outcome) -> None:
    """Every column of a ledger row equals what the generator was given for it."""
    assert result.status == "ledger", result
    assert result.row is not None
    assert record.row is not None
    for plan in plan_fields(spec):
        where = f"{spec.name}.{plan.name}"
        given = record.row.get(plan.name)
        unavailable = str(result.row["_unavailable"] or "").split(",")
        if given == TOAST:
            assert result.row[plan.sink_name] is None, where
            assert plan.sink_name in unavailable, where
            continue
        assert plan.sink_name not in unavailable, where
        expected = expected_sink(plan, given, spec.source.connector)
        assert_same(expected, result.row[plan.sink_name], where)


# --- the three example specs, as realistic streams ---------------------------------------------


@pytest.mark.parametrize("embed", [False, True], ids=["plain", "with_schema"])
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_workload_round_trips(name: str, embed: bool) -> None:
    spec = EXAMPLES[name]
    records = workload(spec, random.Random(20260101), keys=40, events=300, embed_schema=embed)
    coords = assign_coordinates(records, partitions=3)
    outcomes = replay(spec, coords)

    reasons = Counter(o.reason for o in outcomes if o.status == "skip")
    assert {o.status for o in outcomes} <= {"ledger", "skip"}, [
        o for o in outcomes if o.status == "dead"
    ][:3]
    assert set(reasons) <= SKIP_REASONS
    ledger = [(r, o) for r, o in zip(records, outcomes, strict=True) if o.status == "ledger"]
    assert len(ledger) == 300
    for record, result in ledger:
        check_round_trip(spec, record, result)

    ops = Counter(o.row["_op"] for _, o in ledger if o.row is not None)
    assert set(ops) == {"r", "c", "u", "d"}
    assert reasons["tombstone"] == ops["d"]
    # Each delete is followed directly by its tombstone, under the same key.
    for i, (record, result) in enumerate(zip(records, outcomes, strict=True)):
        if result.row is not None and result.row["_op"] == "d":
            assert records[i + 1].value is None
            assert records[i + 1].key == record.key


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_workload_positions_and_times_advance(name: str) -> None:
    spec = EXAMPLES[name]
    records = workload(spec, random.Random(7), keys=30, events=300)
    rows = [o.row for o in replay(spec, assign_coordinates(records)) if o.row is not None]
    positions = [(_int(r["_seq_major"]), _int(r["_seq_minor"]), _int(r["_seq_row"])) for r in rows]
    assert positions == sorted(positions)
    source_times = [r["_source_ts"] for r in rows]
    assert all(isinstance(t, datetime) for t in source_times)
    assert source_times == sorted(source_times)  # type: ignore[type-var]
    if spec.source.connector != "postgresql":
        assert positions[-1][0] > positions[0][0]  # the binlog rolled over to a new file
        pairs = itertools.pairwise(positions)
        # a multi-row statement: one binlog position, consecutive rows
        assert any(p[:2] == q[:2] and p[2] + 1 == q[2] for p, q in pairs)


def _int(value: object) -> int:
    assert isinstance(value, int), value
    return value


def _values(records: list[KafkaRecord]) -> list[object]:
    return [v for r in records if r.row is not None for v in r.row.values()]


def test_workloads_cover_the_hard_values() -> None:
    orders = workload(EXAMPLES["orders"], random.Random(3), keys=40, events=300)
    values = _values(orders)
    assert TOAST in values
    decimals = [v for v in values if isinstance(v, Decimal)]
    assert any(d < 0 for d in decimals)
    assert any(len(d.as_tuple().digits) >= 12 for d in decimals)
    stamps = [v for v in values if isinstance(v, datetime)]
    assert any(s.microsecond % 1000 for s in stamps)
    assert any(s.tzinfo is None for s in stamps)
    assert any(s.tzinfo is not None for s in stamps)
    for name in EXAMPLES:
        records = workload(EXAMPLES[name], random.Random(3), keys=40, events=300)
        texts = [v for v in _values(records) if isinstance(v, str) and v != TOAST]
        assert any(not t.isascii() for t in texts), name
    # PostgreSQL by default: updates without before, deletes with only the key.
    for record in orders:
        if record.value is None:
            continue
        payload = json.loads(record.value)
        if payload.get("op") == "u":
            assert payload["before"] is None
        if payload.get("op") == "d":
            assert set(payload["before"]) == {"order_id"}


def test_workload_is_deterministic() -> None:
    spec = EXAMPLES["users"]
    first = workload(spec, random.Random(11), keys=10, events=50)
    second = workload(spec, random.Random(11), keys=10, events=50)
    assert [(r.key, r.value) for r in first] == [(r.key, r.value) for r in second]


# --- every wire encoding, through synthetic specs ----------------------------------------------

MYSQL_COLUMNS = [
    ("tiny", "tinyint"),
    ("utiny", "tinyint unsigned"),
    ("small", "smallint"),
    ("medium", "mediumint"),
    ("plain_int", "int"),
    ("uint", "int unsigned"),
    ("big", "bigint"),
    ("ubig", "bigint unsigned"),
    ("flag", "boolean"),
    ("bit1", "bit(1)"),
    ("bits", "bit(12)"),
    ("real_f", "float"),
    ("real_d", "double"),
    ("wide_dec", "decimal(38,10)"),
    ("bare_dec", "decimal"),
    ("huge_dec", "decimal(50,5)"),
    ("code", "char(5)"),
    ("label", "varchar(40)"),
    ("body", "text"),
    ("doc", "json"),
    ("size", "enum('small','medium','large')"),
    ("tags", "set('a','b','c')"),
    ("fixed_bin", "binary(4)"),
    ("var_bin", "varbinary(16)"),
    ("blob_bin", "blob"),
    ("day", "date"),
    ("clock", "time"),
    ("clock6", "time(6)"),
    ("at", "datetime"),
    ("at6", "datetime(6)"),
    ("zoned", "timestamp"),
    ("zoned3", "timestamp(3)"),
    ("yr", "year"),
]
POSTGRES_COLUMNS = [
    ("small", "smallint"),
    ("plain_int", "integer"),
    ("big", "bigint"),
    ("real_f", "real"),
    ("real_d", "double precision"),
    ("wide_dec", "numeric(38,10)"),
    ("bare_dec", "numeric"),
    ("huge_dec", "numeric(60,3)"),
    ("flag", "boolean"),
    ("bit1", "bit(1)"),
    ("bits", "bit(10)"),
    ("code", "char(3)"),
    ("label", "varchar(50)"),
    ("body", "text"),
    ("doc", "jsonb"),
    ("ident", "uuid"),
    ("markup", "xml"),
    ("addr", "inet"),
    ("blob_bin", "bytea"),
    ("day", "date"),
    ("clock", "time"),
    ("clock3", "time(3)"),
    ("clock_tz", "timetz"),
    ("at", "timestamp"),
    ("at3", "timestamp(3)"),
    ("zoned", "timestamptz"),
    ("tags", "text[]"),
    ("scores", "integer[]"),
    ("big_ids", "bigint[]"),
    ("ratios", "double precision[]"),
    ("flags", "boolean[]"),
    ("days", "date[]"),
]
SETTINGS = [
    {},
    {
        "time_precision_mode": "connect",
        "decimal_handling_mode": "double",
        "binary_handling_mode": "hex",
        "bigint_unsigned_handling_mode": "precise",
    },
    {
        "time_precision_mode": "adaptive",
        "decimal_handling_mode": "string",
        "binary_handling_mode": "base64-url-safe",
    },
    {"time_precision_mode": "isostring", "binary_handling_mode": "base64"},
    {"time_precision_mode": "adaptive_time_microseconds"},
]


def kitchen_sink(connector: str, debezium: dict[str, str]) -> TableSpec:
    typed = MYSQL_COLUMNS if connector != "postgresql" else POSTGRES_COLUMNS
    columns: list[dict[str, Any]] = [{"id": 1, "name": "id", "type": "bigint", "nullable": False}]
    columns += [{"id": i + 2, "name": n, "type": t} for i, (n, t) in enumerate(typed)]
    extra = len(columns) + 1
    columns += [
        {"id": extra, "name": "as_long", "type": "int", "sink": {"type": "long"}},
        {"id": extra + 1, "name": "as_text", "type": "int", "sink": {"type": "string"}},
        {
            "id": extra + 2,
            "name": "epoch_s",
            "type": "bigint",
            "sink": {"transform": "epoch_seconds_to_timestamp"},
        },
        {
            "id": extra + 3,
            "name": "epoch_d",
            "type": "int",
            "sink": {"transform": "epoch_days_to_date"},
        },
        {
            "id": extra + 4,
            "name": "epoch_us",
            "type": "bigint",
            "sink": {"name": "epoch_us_at", "transform": "epoch_micros_to_timestamp"},
        },
        {
            "id": extra + 5,
            "name": "doc_struct",
            "type": "jsonb" if connector == "postgresql" else "json",
            "sink": {"type": "struct<color:string,size:long,tags:list<string>,gift:boolean>"},
        },
    ]
    if connector != "postgresql":
        columns.append(
            {
                "id": extra + 6,
                "name": "toppings",
                "type": "set('ham','egg','chive')",
                "sink": {"type": "list<string>"},
            }
        )
    return TableSpec.model_validate(
        {
            "spec_version": 1,
            "name": "kitchen_sink",
            "source": {
                "connector": connector,
                "database": "lab",
                "schema": "public" if connector == "postgresql" else None,
                "table": "kitchen_sink",
                "topic": "lab.kitchen_sink",
                "debezium": debezium,
            },
            "columns": columns,
            "primary_key": ["id"],
            "sink": {"namespace": "lab"},
        }
    )


SINKS = [
    pytest.param(connector, settings, id=f"{connector}-{i}")
    for connector in ("mysql", "mariadb", "postgresql")
    for i, settings in enumerate(SETTINGS)
]


@pytest.mark.parametrize(("connector", "settings"), SINKS)
def test_every_wire_encoding_round_trips(connector: str, settings: dict[str, str]) -> None:
    spec = kitchen_sink(connector, settings)
    rng = random.Random(zlib.crc32(f"{connector}{sorted(settings.items())}".encode()))
    for embed in (False, True):
        factory = DebeziumEventFactory(spec, embed_schema=embed)
        rows = [random_row(spec, rng, make_key(spec, n)) for n in range(40)]
        records = [factory.read(rows[0])]
        records += [factory.create(row) for row in rows[1:]]
        records += [factory.update(rows[1], random_row(spec, rng, make_key(spec, 1)))]
        records += [factory.delete(rows[2])]
        for offset, record in enumerate(records):
            when = datetime(2026, 1, 1, tzinfo=UTC)
            result = expected_outcome(spec, 0, offset, when, record.key, record.value)
            check_round_trip(spec, record, result)


def test_kitchen_sink_covers_every_wire_encoding() -> None:
    seen = {
        p.wire
        for connector in ("mysql", "postgresql")
        for settings in SETTINGS
        for p in plan_fields(kitchen_sink(connector, settings))
    }
    unused = {Wire.TIMESTAMP_NANOS, Wire.TIME_NANOS}  # no MySQL/PostgreSQL type is sent in nanos
    assert seen == set(Wire) - unused


def test_keys_use_the_value_encoding() -> None:
    spec = TableSpec.model_validate(
        {
            "spec_version": 1,
            "name": "ledger_lines",
            "source": {"connector": "mysql", "database": "lab", "table": "t", "topic": "lab.t"},
            "columns": [
                {"id": 1, "name": "account", "type": "bigint unsigned", "nullable": False},
                {"id": 2, "name": "day", "type": "date", "nullable": False},
            ],
            "primary_key": ["account", "day"],
            "sink": {"namespace": "lab"},
        }
    )
    key_row = make_key(spec, 9)
    assert key_row == {"account": 2**63 + 2, "day": date(2020, 1, 2)}
    key = json.loads(DebeziumEventFactory(spec).key_bytes(key_row))
    assert key == {"account": -(2**63) + 2, "day": 18263}
    wrapped = json.loads(DebeziumEventFactory(spec, embed_schema=True).key_bytes(key_row))
    assert wrapped["payload"] == key
    assert wrapped["schema"]["name"] == "dbserver1.lab.t.Key"
    plans = {p.name: p for p in plan_fields(spec)}
    assert decode_natural(plans["account"], key["account"]) == Decimal(2**63 + 2)


# --- exact encodings, checked against known Kafka Connect / Debezium values ---------------------


def _plan(connector: str, type_text: str, **debezium: str) -> FieldPlan:
    spec = kitchen_sink(connector, debezium)
    column = spec.columns[0].model_copy(update={"type": type_text, "name": "v"})
    return plan_column(spec, column)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (Decimal("123.45"), "MDk="),  # 12345 = 0x3039
        (Decimal("-1.00"), "nA=="),  # -100 = 0x9c
        (Decimal("0.00"), "AA=="),
        (Decimal("1.28"), "AIA="),  # 128 needs a sign byte: 0x0080
        (Decimal("-1.28"), "gA=="),  # -128 fits one byte: 0x80
    ],
)
def test_decimal_bytes_are_minimal_twos_complement(value: Decimal, text: str) -> None:
    plan = _plan("mysql", "decimal(10,2)")
    assert encode_value(plan, value) == text
    assert decode_natural(plan, text) == value


def test_unsigned_bigint_wraps_into_a_signed_long() -> None:
    plan = _plan("mysql", "bigint unsigned")
    assert encode_value(plan, 2**64 - 1) == -1
    assert encode_value(plan, 2**63) == -(2**63)
    assert encode_value(plan, 42) == 42
    assert decode_natural(plan, -1) == Decimal(2**64 - 1)


def test_zoned_timestamps_follow_debezium_formatting() -> None:
    instant = datetime(2026, 1, 2, 3, 4, 5, 120_000, tzinfo=UTC)
    assert encode_value(_plan("mysql", "timestamp(6)"), instant, connector="mysql") == (
        "2026-01-02T03:04:05.120000Z"
    )
    assert encode_value(_plan("postgresql", "timestamptz"), instant, connector="postgresql") == (
        "2026-01-02T03:04:05.12Z"
    )
    whole = instant.replace(microsecond=0)
    assert encode_value(_plan("postgresql", "timestamptz"), whole, connector="postgresql") == (
        "2026-01-02T03:04:05Z"
    )
    plan = _plan("postgresql", "timestamptz")
    assert decode_natural(plan, "2026-01-02T05:04:05.12+02:00") == instant
    assert decode_natural(plan, "2026-01-02T03:04:05.123456789Z") == instant.replace(
        microsecond=123_456
    )


def test_times_and_dates_use_epoch_units() -> None:
    assert encode_value(_plan("mysql", "date"), date(1970, 1, 2)) == 1
    assert encode_value(_plan("mysql", "date"), date(1969, 12, 31)) == -1
    assert encode_value(_plan("mysql", "datetime(3)"), datetime(1970, 1, 1, 0, 0, 1, 5000)) == 1005
    assert encode_value(_plan("mysql", "time(6)"), time(1, 0, 0, 7)) == 3_600_000_007
    assert decode_natural(_plan("mysql", "time(6)"), 90_000_000_000) == "25:00:00.000000"
    assert decode_natural(_plan("mysql", "time(6)"), -1_500_000) == "-00:00:01.500000"


def test_float_columns_send_the_shortest_float32_text() -> None:
    plan = _plan("postgresql", "real")
    assert json.dumps(encode_value(plan, 0.1)) == "0.1"
    assert json.dumps(encode_value(plan, 16777217.0)) == "16777216.0"


def test_toast_placeholder_per_encoding() -> None:
    assert encode_value(_plan("postgresql", "text"), TOAST) == TOAST
    hex_plan = _plan("postgresql", "bytea", binary_handling_mode="hex")
    assert encode_value(hex_plan, TOAST) == TOAST.encode().hex()
    base64_text = "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ=="
    assert encode_value(_plan("postgresql", "bytea"), TOAST) == base64_text
