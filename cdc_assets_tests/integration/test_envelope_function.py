"""The project's one-pass envelope reader (`cdc_debezium_envelope`, Java) against what Spark's own
functions give on the same bytes: `is_valid_utf8` and Python's decoder for the UTF-8 check, and
`from_json` of the envelope (images as strings) then of the image (as map<string,string>) for
everything else. Images may differ in spelling only (the reader keeps the source's text; from_json
writes it back out), so JSON texts are compared parsed."""

from __future__ import annotations

import ast
import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cdc_assets.pipeline.ingest.envelope_reader import (
    READER_CONF,
    EnvelopeFunctionMissingError,
    envelope_reader,
    register_envelope_function,
)
from cdc_assets.pipeline.ingest.ingest import classify_records, prepare
from cdc_assets.pipeline.shared.batch_cache import session_conf
from cdc_assets.sql.ddl import literal
from cdc_assets.sql.decode import (
    ENVELOPE_FIELDS,
    ENVELOPE_FUNCTION,
    HEADER_FUNCTION,
    IMAGE_SCHEMA,
    SOURCE_STRUCT,
)
from cdc_assets_tests.conftest import PROJECT_ROOT
from cdc_assets_tests.support.bad_records import cases, users_spec

# What the ingest parsed with before the one-pass reader: the reference here.
_ENVELOPE = (
    f"before:string,after:string,op:string,ts_ms:bigint,source:{SOURCE_STRUCT},"
    "ddl:string,tableChanges:string,status:string,id:string,databaseName:string"
)
REFERENCE_SCHEMA = f"struct<payload:struct<{_ENVELOPE}>,{_ENVELOPE},_corrupt:string>"
_ENVELOPE_NAMES = ["before", "after", "op", "ts_ms", "ddl", "tableChanges", "status", "id"]
_ENVELOPE_NAMES += ["databaseName"]
# The image fields asked for (the spec's columns in the ingest): some in every case's order, some
# absent from every case, some duplicated in a case; every other field is unknown.
IMAGE_NAMES = ["id", "name", "n", "b", "z", "d", "x", "y", "list", "c3", "c19", "ab", "s", "t"]
IMAGE_NAMES += ["f", "nul", "j", "k", "b2", "e", "big", "neg", "never_sent"]
_CALL = f"{ENVELOPE_FUNCTION}(value, array({', '.join(literal(n) for n in IMAGE_NAMES)}))"

UTF8_CASES = [
    b"",
    b"plain ascii",
    b"exactly8",
    b"sixteen bytes ok",
    "é ü ß 例え 🚀".encode(),
    b"\xff",
    b"abcdefg\xff",
    b"abcdefgh\xff",
    b"abcdefghijklmno\xfe",
    b"\xc0\x80",  # overlong NUL
    b"\xc1\xbf",  # overlong
    b"\xe0\x80\x80",  # overlong 3-byte
    b"\xe0\xa0\x80",  # U+0800, the first 3-byte
    b"\xed\x9f\xbf",  # U+D7FF
    b"\xed\xa0\x80",  # a surrogate
    b"\xef\xbf\xbf",  # U+FFFF
    b"\xf0\x80\x80\x80",  # overlong 4-byte
    b"\xf0\x90\x80\x80",  # U+10000
    b"\xf4\x8f\xbf\xbf",  # U+10FFFF
    b"\xf4\x90\x80\x80",  # above U+10FFFF
    b"\xf5\x80\x80\x80",
    b"\xc3",  # truncated 2-byte
    b"abc\xe2\x82",  # truncated 3-byte
    b"\xf0\x9f\x9a",  # truncated 4-byte
    b"\x80abc",  # lone continuation
    b"\xc3\x28",  # bad continuation
    b'{"op":"c","after":{"email":"\xff\xfe"}}',
]

_OBJ = {"id": 1, "name": "Zoë 🚀", "n": 1.5, "b": True, "z": None}
_OBJ["d"] = {"scale": 2, "value": "AQ=="}  # a variable-scale decimal: an object in the image
JSON_CASES = [
    json.dumps({"op": "c", "after": _OBJ, "source": {"table": "t", "file": "b.000001", "pos": 4}}),
    json.dumps({"op": "c", "after": _OBJ}, indent=2),  # pretty-printed
    json.dumps({"op": "c", "after": _OBJ}, ensure_ascii=True),  # \\u escapes
    json.dumps({"op": "d", "before": _OBJ, "after": None, "ts_ms": 5}),
    json.dumps({"op": "u", "before": {"id": 1}, "after": {"id": 2, "list": [1, [2, {"x": 3}]]}}),
    json.dumps({"schema": {"type": "struct", "fields": []}, "payload": {"op": "c", "after": _OBJ}}),
    json.dumps({"schema": {}, "payload": None, "op": "r", "after": {"id": 3}}),
    json.dumps({"payload": "text"}),  # payload of the wrong type: corrupt
    json.dumps({"op": "c", "after": json.dumps({"id": 4, "d": {"a": 1}})}),  # image as a string
    json.dumps({"op": "c", "after": "not an object"}),
    json.dumps({"op": "c", "after": [1, 2]}),
    json.dumps({"op": "c", "after": 7}),
    json.dumps({"op": 1, "after": {"id": 1}, "id": {"a": 1}, "status": ["x"]}),
    json.dumps({"op": "c", "ts_ms": "soon", "after": {"id": 1}}),  # wrong type: corrupt
    json.dumps({"op": "c", "ts_ms": 2**64, "after": {"id": 1}}),  # beyond bigint: corrupt
    json.dumps({"op": "c", "ts_ms": 1.5, "after": {"id": 1}}),  # not integral: corrupt
    json.dumps({"op": "c", "source": "mysql", "after": {"id": 1}}),  # wrong type: corrupt
    json.dumps({"op": "c", "source": {"pos": "x"}, "after": {"id": 1}}),  # nested wrong type
    json.dumps({"op": "c", "source": {"lsn": 9, "txId": 3, "snapshot": True}, "after": {}}),
    json.dumps({"ddl": "ALTER TABLE t ADD c INT", "tableChanges": [{"type": "ALTER"}]}),
    json.dumps({"status": "BEGIN", "id": "tx1", "event_count": 2}),
    json.dumps({"ts_ms": 12}),
    '{"op":"c","after":{"id":1,"id":2}}',  # duplicate field: the last wins
    '{"op":"c","after":{"id":1}',  # truncated
    '{"op":"c","after":{"id":1}} trailing',
    "{'op':'c','after':{'id':1}}",  # single quotes, accepted by from_json
    '{"op":"c","after":{"x":NaN,"y":-Infinity}}',
    '{"op":"c","after":{"big":123456789012345678901234567890,"e":1e3,"neg":-0}}',
    '{"op":"c","after":{"s":"tab\\tquote\\"slash\\/uni\\u00e9"}}',
    # The image scanner's edges: nested texts with brackets and quotes in strings, spacing,
    # literals, an escaped key, single quotes inside a nested value, many duplicated fields.
    '{"op":"c","after":{"j":{"s":"}{\\"]","t":[1,"]"]},"k":1}}',
    '{"op":"c","after":{"j":{\'a\':\'}\'},"k":2}}',
    '{"op":"c","after" : { "a" : 1 ,\n "b" :\t"x" , "c":[ ] } }',
    '{"op":"c","after":{"t":true,"f":false,"n":null,"nul":"null"}}',
    '{"op":"c","after":{"a\\u0062":1,"ab":2}}',
    json.dumps({"op": "u", "after": {f"c{i}": i for i in range(20)}})[:-2]
    + ', "c3": "again", "c19": null}}',
    "[]",
    "42",
    '"c"',
    "null",
    "",
    "{}",
]


def _canonical(text: Any) -> Any:
    """A JSON text as its value (single-quoted JSON, which from_json accepts, too); other
    strings unchanged."""
    if isinstance(text, str) and text[:1] in ("{", "["):
        try:
            # NaN and Infinity as their names: from_json writes them back out quoted.
            return ("json", json.loads(text, parse_constant=str))
        except ValueError:
            pass
        try:
            return ("json", ast.literal_eval(text))
        except (ValueError, SyntaxError):
            return text
    return text


def _number_or_canonical(text: Any) -> Any:
    """Numbers by value: the reader keeps a number's text as the source wrote it (``1e3``,
    ``-0``), from_json writes it back out (``1000.0``, ``0``)."""
    try:
        number = float(text)
    except (TypeError, ValueError):
        return _canonical(text)
    return "NaN" if number != number else number


def _canonical_map(m: Any) -> Any:
    return None if m is None else {k: _number_or_canonical(v) for k, v in m.items()}


@pytest.fixture(scope="module")
def envelope_ready(spark: Any) -> Any:
    register_envelope_function(spark)
    return spark


def _frame(spark: Any, values: list[bytes | None]) -> Any:
    return spark.createDataFrame([(i, v) for i, v in enumerate(values)], "i int, value binary")


def test_utf8_check_agrees_with_spark_and_python(envelope_ready: Any) -> None:
    rows = (
        _frame(envelope_ready, list(UTF8_CASES))
        .selectExpr(
            "i",
            f"{_CALL}.value_utf8_ok AS ours",
            "is_valid_utf8(value) AS spark",
        )
        .orderBy("i")
        .collect()
    )
    for row, value in zip(rows, UTF8_CASES, strict=True):
        try:
            value.decode("utf-8")
            python = True
        except UnicodeDecodeError:
            python = False
        assert (row["ours"], row["spark"]) == (python, python), value


def test_envelope_agrees_with_from_json(envelope_ready: Any) -> None:
    values: list[bytes | None] = [v.encode() for v in JSON_CASES]
    values += [c.value for c in cases()]
    frame = _frame(envelope_ready, values)
    envelope = [f"e.{name}" for name, _ in ENVELOPE_FIELDS]
    ours = frame.selectExpr("i", f"{_CALL} AS e").selectExpr("i", *envelope)
    pick = [
        f"CASE WHEN j.payload IS NOT NULL THEN j.payload.{n} ELSE j.{n} END AS {n}"
        for n in [*_ENVELOPE_NAMES, "source"]
    ]
    reference = (
        frame.selectExpr(
            "i",
            "value IS NOT NULL AND is_valid_utf8(value) AS utf8",
            f"from_json(CAST(value AS STRING), '{REFERENCE_SCHEMA}', "
            "map('mode', 'PERMISSIVE', 'columnNameOfCorruptRecord', '_corrupt')) AS j",
        )
        .selectExpr("i", "utf8", "j IS NOT NULL AND j._corrupt IS NULL AS json_ok", *pick)
        .selectExpr(
            "*",
            f"from_json(CASE WHEN op = 'd' THEN before ELSE after END, '{IMAGE_SCHEMA}') AS img",
        )
    )
    got = {r["i"]: r.asDict(recursive=True) for r in ours.collect()}
    want = {r["i"]: r.asDict(recursive=True) for r in reference.collect()}
    checked = 0
    for i, value in enumerate(values):
        g, w = got[i], want[i]
        if value is None:
            assert g["value_utf8_ok"] is None
            continue
        assert g["value_utf8_ok"] == w["utf8"], value
        if not w["utf8"]:
            assert g["json_ok"] is False
            continue
        assert g["json_ok"] == w["json_ok"], value
        if not w["json_ok"]:
            continue
        for name in [*_ENVELOPE_NAMES, "source"]:
            assert _canonical(g[name]) == _canonical(w[name]), (name, value)
        image = _canonical_map(w["img"])
        if image is None:
            assert (g["vals"], g["unknown"]) == (None, None), value
        else:
            vals = _canonical_map(dict(zip(IMAGE_NAMES, g["vals"], strict=True)))
            assert vals == {n: image.get(n) for n in IMAGE_NAMES}, value
            assert len(g["unknown"]) == len(set(g["unknown"])), value
            assert set(g["unknown"]) == set(image) - set(IMAGE_NAMES), value
        checked += 1
    assert checked >= 40  # most cases are well-formed envelopes compared field by field


def test_kafka_header_agrees_with_filter(envelope_ready: Any) -> None:
    name = "__debezium.oldkey"
    cases: list[list[tuple[str | None, bytes | None] | None] | None] = [
        None,
        [],
        [("other", b"x")],
        [(name, b'{"id":1}')],
        [("other", b"x"), (name, b'{"id":2}'), (name, b'{"id":3}')],  # the first one counts
        [(name, None), (name, b"later")],
        [None, (None, b"no key"), (name, "é".encode())],
    ]
    frame = envelope_ready.createDataFrame(
        list(enumerate(cases)), "i int, headers array<struct<key:string,value:binary>>"
    )
    rows = (
        frame.selectExpr(
            "i",
            f"{HEADER_FUNCTION}(headers, {literal(name)}) AS ours",
            f"CAST(try_element_at(filter(headers, h -> h.key = {literal(name)}), 1).value "
            "AS STRING) AS spark",
        )
        .orderBy("i")
        .collect()
    )
    assert [r["ours"] for r in rows] == [r["spark"] for r in rows]
    assert [r["ours"] for r in rows][3:6] == ['{"id":1}', '{"id":2}', None]


def _classified(spark: Any, values: list[bytes | None], reader: str) -> dict[int, dict[str, Any]]:
    """Every value classified and prepared for the users ledger by ``reader``, by offset."""
    with session_conf(spark, {READER_CONF: reader}):
        assert envelope_reader(spark) == reader
        return _classify(spark, values)


def _classify(spark: Any, values: list[bytes | None]) -> dict[int, dict[str, Any]]:
    rows = [(b'{"id":1}', v, 0, i, None, None) for i, v in enumerate(values)]
    headers = [None, [("__debezium.oldkey", b'{"id":7}')], [("x", b"y")]]
    rows = [(*r[:5], headers[i % 3]) for i, r in enumerate(rows)]
    frame = spark.createDataFrame(
        rows,
        "key binary, value binary, partition int, offset bigint, timestamp timestamp, "
        "headers array<struct<key:string,value:binary>>",
    )
    out = prepare(classify_records(frame, users_spec()), users_spec()).collect()
    return {r["_kafka_offset"]: r.asDict(recursive=True) for r in out}


def test_sql_reader_classifies_as_the_function_does(envelope_ready: Any) -> None:
    """The pure-Spark path (from_json, no jar) against the function on every JSON case and the
    bad-record corpus: the same status, stage, reason, unknown fields and ledger values; row
    images may differ in spelling only."""
    values: list[bytes | None] = [v.encode() for v in JSON_CASES]
    values += [c.value for c in cases()]
    values += [None, *UTF8_CASES]
    ours = _classified(envelope_ready, values, "jvm")
    spark_only = _classified(envelope_ready, values, "sql")
    assert sorted(ours) == sorted(spark_only) == list(range(len(values)))
    texts = {"_row_json", "_before_json"}
    differ = []
    for i, value in enumerate(values):
        g, w = ours[i], spark_only[i]
        g["_unknown"], w["_unknown"] = sorted(g["_unknown"] or []), sorted(w["_unknown"] or [])
        for column in g:
            a, b = g[column], w[column]
            if column in texts:
                a, b = _canonical(a), _canonical(b)
            if a != b:
                differ.append(f"{value!r} {column}: function {g[column]!r} sql {w[column]!r}")
    assert not differ, "\n".join(differ[:20])
    statuses = {r["_status"] for r in ours.values()}
    assert statuses == {"ledger", "dead", "skip"}
    assert any(r["_before_json"] == '{"id":7}' for r in ours.values())  # the old-key header


def test_reader_setting(envelope_ready: Any) -> None:
    with session_conf(envelope_ready, {READER_CONF: "auto"}):
        assert envelope_reader(envelope_ready) == "jvm"
    with session_conf(envelope_ready, {READER_CONF: "SQL"}):
        assert envelope_reader(envelope_ready) == "sql"
    refused = pytest.raises(Exception, match="envelopeReader is 'udf'; use one of auto, jvm, sql")
    with session_conf(envelope_ready, {READER_CONF: "udf"}), refused:
        envelope_reader(envelope_ready)
    assert issubclass(EnvelopeFunctionMissingError, Exception)


# A session configured as the project configures one, but without the project's jar (a machine
# that could not compile it, say): the extension class is missing and the ingest must fall back.
_WITHOUT_JAR = """
import base64, json, logging, sys
from pyspark.sql import SparkSession
from cdc_assets.sql.decode import ENVELOPE_EXTENSIONS
from cdc_assets_tests.integration.test_envelope_function import _classify
logging.basicConfig(level=logging.WARNING)
spark = (
    SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
    .config("spark.driver.memory", "512m").config("spark.sql.session.timeZone", "UTC")
    .config("spark.sql.extensions", ENVELOPE_EXTENSIONS).getOrCreate()
)
values = [None if v is None else base64.b64decode(v) for v in json.load(open(sys.argv[1]))]
rows = _classify(spark, values)
print(json.dumps({i: [r["_status"], r["_stage"], r["_reason"], r["id"]] for i, r in rows.items()}))
spark.stop()
"""


def test_a_session_without_the_jar_falls_back_to_spark_functions(
    envelope_ready: Any, tmp_path: Path
) -> None:
    values: list[bytes | None] = [v.encode() for v in JSON_CASES]
    values += [c.value for c in cases()]
    encoded = [None if v is None else base64.b64encode(v).decode() for v in values]
    (tmp_path / "values.json").write_text(json.dumps(encoded))
    proc = subprocess.run(
        [sys.executable, "-c", _WITHOUT_JAR, str(tmp_path / "values.json")],
        cwd=PROJECT_ROOT,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "decoding Kafka values with Spark's from_json" in proc.stderr
    assert f"{ENVELOPE_FUNCTION} is not available" in proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    want = _classified(envelope_ready, values, "jvm")
    assert {int(i): v for i, v in got.items()} == {
        i: [r["_status"], r["_stage"], r["_reason"], r["id"]] for i, r in want.items()
    }
