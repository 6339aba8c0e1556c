"""Nested and richer types (issue 22 part 4): sink type grammar, arrays and enums from the
source, what a JSON column or a SET may be stored as, the widening rule field by field, and the
plain-Python reading of a JSON document that the oracle and the source comparison share."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from cdc_assets.errors import UnsupportedTypeError
from cdc_assets.quality.mirror_diff import normalize, same
from cdc_assets.schema.sink_values import DocumentMismatchError, project_document
from cdc_assets.schema.types import (
    SinkType,
    can_override,
    can_promote,
    default_sink_type,
    parse_sink_type,
    parse_source_type,
    promotion_problems,
)
from cdc_assets.schema.wire import Wire, plan_fields
from cdc_assets.spec.connect_schema import avro_row_fields, column_type, pg_type
from cdc_assets.spec.information_schema import _pg_type
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.bootstrap import dump_value, render_bootstrap_checks, render_dump_query
from cdc_assets.sql.ddl import spark_type


@pytest.mark.parametrize(
    ("text", "canonical", "spark"),
    [
        ("list<int>", "list<int>", "ARRAY<INT>"),
        ("LIST< Long >", "list<long>", "ARRAY<BIGINT>"),
        ("map<string, decimal(10, 2)>", "map<string,decimal(10,2)>", "MAP<STRING, DECIMAL(10,2)>"),
        (
            "struct<street: string, zip: int, tags: list<string>>",
            "struct<street:string,zip:int,tags:list<string>>",
            "STRUCT<`street`: STRING, `zip`: INT, `tags`: ARRAY<STRING>>",
        ),
        (
            "list<struct<a:timestamptz,b:map<string,list<double>>>>",
            "list<struct<a:timestamptz,b:map<string,list<double>>>>",
            "ARRAY<STRUCT<`a`: TIMESTAMP, `b`: MAP<STRING, ARRAY<DOUBLE>>>>",
        ),
    ],
)
def test_nested_sink_types_parse_print_and_render(text: str, canonical: str, spark: str) -> None:
    parsed = parse_sink_type(text)
    assert str(parsed) == canonical
    assert parse_sink_type(canonical) == parsed
    assert parsed.is_nested
    assert spark_type(parsed) == spark


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("map<int,string>", "keys must be string"),
        ("struct<>", "has no fields"),
        ("struct<a int>", "write name:type"),
        ("struct<a:int,a:long>", "appears twice"),
        ("list<money>", "unknown sink type 'money'"),
        ("struct<a:list<int>", "unknown sink type"),
    ],
)
def test_bad_nested_sink_types_say_why(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_sink_type(text)


def test_arrays_and_enums_from_the_source() -> None:
    ints = parse_source_type("integer[]", "postgresql")
    assert ints.kind == "ARRAY"
    assert ints.element is not None
    assert ints.element.kind == "INT"
    assert str(default_sink_type(ints)) == "list<int>"
    assert str(default_sink_type(parse_source_type("varchar(20)[]", "postgresql"))) == (
        "list<string>"
    )
    assert str(default_sink_type(parse_source_type("date[]", "postgresql"))) == "list<date>"
    enum = parse_source_type("enum('new','it''s done')", "postgresql")
    assert enum.values == ("new", "it's done")
    assert default_sink_type(enum) == SinkType("string")
    assert parse_source_type("set('a','b')", "mysql").values == ("a", "b")
    with pytest.raises(UnsupportedTypeError, match="arrays of DECIMAL"):
        parse_source_type("numeric(10,2)[]", "postgresql")


def test_the_widening_rule_goes_field_by_field_and_names_the_path() -> None:
    old = parse_sink_type("struct<a:int,b:list<float>,c:map<string,decimal(10,2)>>")
    wider = parse_sink_type("struct<a:long,b:list<double>,c:map<string,decimal(12,2)>,d:string>")
    assert can_promote(old, wider)
    assert not can_promote(wider, old)
    problems = promotion_problems(wider, old, "doc")
    assert problems == [
        "doc.a: long -> int is not a widening",
        "doc.b.element: double -> float is not a widening",
        "doc.c.value: decimal(12,2) -> decimal(10,2) is not a widening",
        "doc.d: a nested field cannot be removed (soft-drop it: keep it in the struct, where "
        "it stays null for new rows)",
    ]
    assert promotion_problems(SinkType("string"), parse_sink_type("list<string>"), "x") == [
        "x: string -> list<string> changes the type category (string -> list)"
    ]


def test_what_a_json_column_and_a_set_may_be_stored_as() -> None:
    json_type = parse_source_type("json", "mysql")
    struct = parse_sink_type("struct<a:int>")
    assert can_override(SinkType("string"), struct, json_type)
    assert not can_override(SinkType("string"), struct)  # a text column is not a document
    members = parse_source_type("set('x','y')", "mysql")
    assert can_override(SinkType("string"), parse_sink_type("list<string>"), members)
    assert not can_override(SinkType("string"), parse_sink_type("list<int>"), members)


def _spec(*columns: dict[str, Any], connector: str = "mysql") -> TableSpec:
    return TableSpec.model_validate(
        {
            "spec_version": 1,
            "name": "t",
            "source": {"connector": connector, "database": "db", "table": "t", "topic": "db.t"},
            "columns": [{"id": 1, "name": "id", "type": "bigint", "nullable": False}, *columns],
            "primary_key": ["id"],
            "sink": {"namespace": "ns"},
        }
    )


def test_specs_refuse_nested_keys_and_document_fields_json_cannot_hold() -> None:
    with pytest.raises(ValueError, match=r"values can be read as .* not date"):
        _spec({"id": 2, "name": "doc", "type": "json", "sink": {"type": "struct<d:date>"}})
    with pytest.raises(ValueError, match="cannot be stored as struct<a:int>"):
        _spec({"id": 2, "name": "doc", "type": "text", "sink": {"type": "struct<a:int>"}})
    with pytest.raises(ValueError, match="a key must be a primitive"):
        TableSpec.model_validate(
            {
                "spec_version": 1,
                "name": "t",
                "source": {
                    "connector": "postgresql",
                    "database": "db",
                    "schema": "public",
                    "table": "t",
                    "topic": "db.public.t",
                },
                "columns": [{"id": 1, "name": "ids", "type": "integer[]", "nullable": False}],
                "primary_key": ["ids"],
                "sink": {"namespace": "ns"},
            }
        )


def test_wire_plans_of_nested_columns() -> None:
    spec = _spec(
        {"id": 2, "name": "tags", "type": "text[]"},
        {"id": 3, "name": "doc", "type": "jsonb", "sink": {"type": "struct<a:int>"}},
        connector="postgresql",
    )
    _, tags, doc = plan_fields(spec)
    assert tags.wire is Wire.JSON_ARRAY
    assert tags.element is not None
    assert tags.element.wire is Wire.STRING
    assert tags.decode_as == "list<string>"
    assert doc.wire is Wire.STRING
    assert doc.parses_document
    assert doc.decode_as == "struct<a:int>"


@pytest.mark.parametrize(
    ("value", "sink", "expected"),
    [
        ({"a": 1, "extra": "x"}, "struct<a:long,b:string>", {"a": 1, "b": None}),
        ({"a": {"x": 1}, "b": 7}, "struct<a:string,b:string>", {"a": '{"x":1}', "b": "7"}),
        ([1, None, 3], "list<int>", [1, None, 3]),
        ({"k": [1.5]}, "map<string,list<double>>", {"k": [1.5]}),
        ({"p": 1.005}, "struct<p:decimal(5,2)>", {"p": Decimal("1.01")}),
        (None, "struct<a:int>", None),
    ],
)
def test_documents_read_as_their_declared_type(value: object, sink: str, expected: object) -> None:
    assert project_document(value, parse_sink_type(sink)) == expected


@pytest.mark.parametrize(
    ("value", "sink"),
    [
        ([1], "struct<a:int>"),
        ({"a": "1"}, "struct<a:int>"),
        ({"a": 1.5}, "struct<a:int>"),
        ({"a": 2**31}, "struct<a:int>"),
        ({"a": True}, "struct<a:int>"),
        ({"a": 5}, "struct<a:struct<b:int>>"),
        ({"a": 1}, "list<int>"),
        ({"p": 12345.6}, "struct<p:decimal(5,2)>"),
    ],
)
def test_documents_that_do_not_fit_are_refused(value: object, sink: str) -> None:
    with pytest.raises(DocumentMismatchError):
        project_document(value, parse_sink_type(sink))


def test_nested_values_compare_element_by_element() -> None:
    sink = parse_sink_type("struct<n:decimal(6,2),flags:list<boolean>>")
    source = normalize(sink, {"n": Decimal("1.5"), "flags": [True, None]})
    base = normalize(sink, {"n": Decimal("1.50"), "flags": [True, None]})
    assert same(source, base)
    assert not same(source, normalize(sink, {"n": Decimal("1.5"), "flags": [False, None]}))
    assert not same([1, 2], [1, 2, 3])


def test_importers_name_arrays_and_enums_and_see_their_changes() -> None:
    assert _pg_type({"data_type": "ARRAY", "udt_name": "_int4"}) == "int4[]"
    enum_row = {"data_type": "USER-DEFINED", "udt_name": "mood", "enum_labels": "'ok','sad'"}
    assert _pg_type(enum_row) == "enum('ok','sad')"
    array_field = {"type": "array", "items": {"type": "int64", "optional": True}}
    assert pg_type(array_field) == "bigint[]"
    enum_field = {
        "type": "string",
        "name": "io.debezium.data.Enum",
        "parameters": {"allowed": "ok,it's"},
    }
    assert pg_type(enum_field) == "enum('ok','it''s')"
    assert column_type("enum ('ok','sad')", enum_field | {"parameters": {"allowed": "ok,sad"}}) == (
        "enum ('ok','sad')"
    )
    assert column_type("int4[]", {"type": "array", "items": {"type": "int64"}}) == "bigint[]"
    assert column_type("varchar[]", {"type": "array", "items": {"type": "string"}}) == "varchar[]"
    propagated = {"type": "array", "parameters": {"__debezium.source.column.type": "_TEXT"}}
    assert pg_type(propagated) == "text[]"
    avro = {
        "type": "record",
        "name": "Envelope",
        "fields": [
            {
                "name": "after",
                "type": [
                    "null",
                    {
                        "type": "record",
                        "name": "Value",
                        "fields": [
                            {"name": "tags", "type": ["null", {"type": "array", "items": "string"}]}
                        ],
                    },
                ],
            }
        ],
    }
    fields = avro_row_fields(avro)
    assert fields is not None
    assert pg_type(fields[0]) == "text[]"


def test_a_dump_reads_documents_sets_and_padded_types_as_the_ledger_does() -> None:
    spec = _spec(
        {"id": 2, "name": "doc", "type": "json", "sink": {"type": "struct<a:int>"}},
        {"id": 3, "name": "toppings", "type": "set('ham','egg')", "sink": {"type": "list<string>"}},
        {"id": 4, "name": "size", "type": "enum('s','m')"},
        {"id": 5, "name": "code", "type": "char(4)"},
    )
    doc, toppings = plan_fields(spec)[1:3]
    assert dump_value(doc, "DOC") == "from_json(CAST(`DOC` AS STRING), 'STRUCT<`a`: INT>')"
    assert "split(CAST(`toppings` AS STRING), ',')" in dump_value(toppings, "toppings")
    # Spark's JDBC source pads CHAR, SET and ENUM values: MariaDB reads them as it returns them.
    assert render_dump_query(plan_fields(spec), "`db`.`t`", "mariadb") == (
        "(SELECT `id`, `doc`, CAST(`toppings` AS CHAR) AS `toppings`, CAST(`size` AS CHAR) AS "
        "`size`, CAST(`code` AS CHAR) AS `code` FROM `db`.`t`) cdc_assets_dump"
    )
    assert render_dump_query(plan_fields(spec), '"public"."t"', "postgres") == '"public"."t"'

    # A document that does not fit its type is a bad value of the dump, not a silent NULL.
    checks = render_bootstrap_checks(spec, "v", {c.name: c.name for c in spec.columns})
    assert "json_object_keys(CAST(`doc` AS STRING)) IS NULL" in checks


def test_a_dump_reads_dates_and_date_times_as_iso_text() -> None:
    """The JDBC drivers' java.sql values count in the Julian calendar before 1582-10-15: the dump
    reads dates and date-times as ISO text, which Spark casts in the proleptic Gregorian one."""
    pg_spec = _spec(
        {"id": 2, "name": "at", "type": "timestamptz"},
        {"id": 3, "name": "local", "type": "timestamp"},
        {"id": 4, "name": "day", "type": "date"},
        connector="postgresql",
    )
    pg = render_dump_query(plan_fields(pg_spec), '"public"."t"', "postgres")
    assert pg.startswith('(SELECT "id", CASE WHEN isfinite(("at" AT TIME ZONE \'UTC\')) AND ')
    assert "to_char((\"at\" AT TIME ZONE 'UTC'), 'YYYY-MM-DD HH24:MI:SS.US') || 'Z'" in pg
    assert 'ELSE CAST("local" AS TEXT) END AS "local"' in pg
    assert "to_char(\"day\", 'YYYY-MM-DD')" in pg
    maria_spec = _spec(
        {"id": 2, "name": "at", "type": "timestamp"},
        {"id": 3, "name": "local", "type": "datetime(3)"},
        {"id": 4, "name": "day", "type": "date"},
    )
    plans = plan_fields(maria_spec)
    maria = render_dump_query(plans, "`db`.`t`", "mariadb")
    assert "DATE_FORMAT(`local`, '%Y-%m-%d %H:%i:%s.%f') AS `local`" in maria
    assert "DATE_FORMAT(`day`, '%Y-%m-%d') AS `day`" in maria
    assert "`at`," in maria  # MariaDB's TIMESTAMP starts in 1970: read as it is
    # Spark casts the text back (the same cast the ledger's decode uses)
    assert dump_value(plans[3], "day") == "try_cast(`day` AS DATE)"
