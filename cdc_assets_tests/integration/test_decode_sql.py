"""The Spark SQL decoders against plain Python on the same values (no Kafka: records are built
as a DataFrame with the Kafka source's columns and run through the real classification)."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_assets.pipeline.ingest.envelope_reader import READER_CONF
from cdc_assets.pipeline.ingest.ingest import classify_records, ledger_rows, prepare
from cdc_assets.pipeline.shared.batch_cache import session_conf
from cdc_assets.pipeline.shared.small_work import INTERPRETED_CONF
from cdc_assets.spec import load_spec_text
from cdc_assets.spec.models import TableSpec

SPEC = load_spec_text(
    """
spec_version: 1
name: wide
source: {connector: mysql, database: db, table: wide, topic: db.db.wide}
columns:
  - {id: 1, name: id, type: bigint, nullable: false}
  - {id: 2, name: d38, type: "decimal(38,10)"}
  - {id: 3, name: d5, type: "decimal(5,2)"}
  - {id: 4, name: ub, type: bigint unsigned}
  - {id: 5, name: t6, type: time(6)}
  - {id: 6, name: dt3, type: datetime(3)}
  - {id: 7, name: dt6, type: datetime(6)}
  - {id: 8, name: ts, type: timestamp(6)}
  - {id: 9, name: day, type: date}
  - {id: 10, name: bin, type: varbinary(16)}
  - {id: 11, name: flag, type: bit(1)}
  - {id: 12, name: ms, type: bigint, sink: {name: ms_ts, transform: epoch_millis_to_timestamp}}
primary_key: [id]
sink: {namespace: t}
""",
    "wide.yaml",
)


def connect_decimal(value: Decimal, scale: int) -> str:
    """Kafka Connect's Decimal on the wire: minimal big-endian two's complement, base64."""
    unscaled = int(value.scaleb(scale, decimal.Context(prec=100)))
    length = max(1, (unscaled + (unscaled < 0)).bit_length() // 8 + 1)
    return base64.b64encode(unscaled.to_bytes(length, "big", signed=True)).decode()


# Small ingest batches decode interpreted (pipeline.shared.small_work), large ones with generated
# code:
# every decoder must give the same values both ways.
# Spark's own envelope reader (no project jar) must give them too.
MODES = pytest.mark.parametrize(
    "mode",
    [{}, INTERPRETED_CONF, {READER_CONF: "sql"}],
    ids=["generated_code", "interpreted", "sql_reader"],
)


def run(
    spark: Any, spec: TableSpec, afters: list[dict[str, Any]], mode: dict[str, str]
) -> list[dict[str, Any]]:
    with session_conf(spark, mode):
        return _run(spark, spec, afters)


def _run(spark: Any, spec: TableSpec, afters: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ts = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    rows = [
        (
            None,
            json.dumps(
                {"op": "c", "after": a, "source": {"table": spec.source.table, "file": "b.000001"}}
            ).encode(),
            0,
            i,
            ts,
        )
        for i, a in enumerate(afters)
    ]
    df = spark.createDataFrame(
        rows, "key binary, value binary, partition int, offset bigint, timestamp timestamp"
    )
    classified = prepare(classify_records(df, spec), spec).persist()
    statuses = [
        (r["_status"], r["_reason"]) for r in classified.select("_status", "_reason").collect()
    ]
    assert all(s == "ledger" for s, _ in statuses), statuses
    out = ledger_rows(classified, spec)
    rows = [r.asDict() for r in out.orderBy("_kafka_offset").collect()]
    classified.unpersist()
    return rows


decimals_38 = st.decimals(
    min_value=Decimal("-9999999999999999999999999999.9999999999"),
    max_value=Decimal("9999999999999999999999999999.9999999999"),
    places=10,
    allow_nan=False,
    allow_infinity=False,
)


@MODES
@settings(
    max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(decimals_38, min_size=20, max_size=40))
def test_precise_decimals_round_trip(
    spark: Any, mode: dict[str, str], values: list[Decimal]
) -> None:
    edge = [
        Decimal("0"),
        Decimal("-0.0000000001"),
        Decimal("0.0000000001"),
        Decimal("-1"),
        Decimal("1"),
    ]
    values = edge + values
    afters = [{"id": i, "d38": connect_decimal(v, 10)} for i, v in enumerate(values)]
    got = [r["d38"] for r in run(spark, SPEC, afters, mode)]
    assert got == values


@MODES
def test_small_decimal_edges_and_misc_types(spark: Any, mode: dict[str, str]) -> None:
    micros = 3 * 3600_000_000 + 4 * 60_000_000 + 5 * 1_000_000 + 6
    after = {
        "id": 1,
        "d5": connect_decimal(Decimal("-999.99"), 2),
        "ub": -1,  # 2**64 - 1 wrapped into a signed long
        "t6": micros,
        "dt3": 1_700_000_000_123,
        "dt6": 1_700_000_000_123_456,
        "ts": "2026-01-02T03:04:05.123456Z",
        "day": 20_000,
        "bin": base64.b64encode(b"\x00\xffab").decode(),
        "flag": True,
        "ms": 1_700_000_000_123,
    }
    [row] = run(spark, SPEC, [after], mode)
    assert row["d5"] == Decimal("-999.99")
    assert row["ub"] == Decimal(2**64 - 1)
    assert row["t6"] == "03:04:05.000006"
    assert row["dt3"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123000)
    assert row["dt6"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123456)
    assert (
        row["ts"].timestamp() == dt.datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=dt.UTC).timestamp()
    )
    assert row["day"] == dt.date(1970, 1, 1) + dt.timedelta(days=20_000)
    assert bytes(row["bin"]) == b"\x00\xffab"
    assert row["flag"] is True
    assert row["ms_ts"].timestamp() == 1_700_000_000.123
    assert row["_seq_major"] == 1
