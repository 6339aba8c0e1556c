"""Source type parsing, default sink types and the widening rule."""

from __future__ import annotations

import pytest

from cdc_assets.errors import UnsupportedTypeError
from cdc_assets.schema.types import (
    SinkType,
    can_override,
    can_promote,
    default_sink_type,
    parse_sink_type,
    parse_source_type,
)

D = SinkType("decimal", 12, 2)


@pytest.mark.parametrize(
    ("connector", "source", "sink"),
    [
        ("mysql", "int", "int"),
        ("mysql", "int(11)", "int"),
        ("mysql", "int unsigned", "long"),
        ("mysql", "bigint", "long"),
        ("mysql", "bigint unsigned", "decimal(20,0)"),
        ("mysql", "tinyint(1)", "int"),
        ("mysql", "bit(1)", "boolean"),
        ("mysql", "bit(8)", "binary"),
        ("mysql", "decimal(10,2)", "decimal(10,2)"),
        ("mysql", "decimal", "decimal(10,0)"),
        ("mysql", "decimal(65,2)", "string"),
        ("mysql", "float", "float"),
        ("mysql", "float(30)", "double"),
        ("postgresql", "interval", "long"),
        ("mysql", "double", "double"),
        ("mysql", "varchar(255)", "string"),
        ("mysql", "enum('a','b')", "string"),
        ("mysql", "json", "string"),
        ("mysql", "datetime(6)", "timestamp"),
        ("mysql", "timestamp(3)", "timestamptz"),
        ("mysql", "date", "date"),
        ("mysql", "time", "string"),
        ("mysql", "year", "int"),
        ("mysql", "blob", "binary"),
        ("mariadb", "smallint", "int"),
        ("tidb", "mediumint", "int"),
        ("postgresql", "numeric(12,2)", "decimal(12,2)"),
        ("postgresql", "numeric", "string"),
        ("postgresql", "timestamptz", "timestamptz"),
        ("postgresql", "timestamp with time zone", "timestamptz"),
        ("postgresql", "timestamp", "timestamp"),
        ("postgresql", "uuid", "string"),
        ("postgresql", "jsonb", "string"),
        ("postgresql", "bytea", "binary"),
        ("postgresql", "real", "float"),
        ("postgresql", "double precision", "double"),
        ("postgresql", "bigserial", "long"),
        ("postgresql", "boolean", "boolean"),
        ("postgresql", "character varying(20)", "string"),
    ],
)
def test_default_sink_type(connector: str, source: str, sink: str) -> None:
    assert str(default_sink_type(parse_source_type(source, connector))) == sink


def test_declared_length_and_precision_are_kept() -> None:
    assert parse_source_type("varchar(255)", "mysql").length == 255
    dec = parse_source_type("numeric(12,2)", "postgresql")
    assert (dec.precision, dec.scale) == (12, 2)


@pytest.mark.parametrize(
    "source", ["geometry", "numeric(10,2)[]", "timestamptz[]", "int[][]", "not a type ("]
)
def test_unsupported_source_types(source: str) -> None:
    with pytest.raises(UnsupportedTypeError):
        parse_source_type(source, "postgresql")


@pytest.mark.parametrize(
    ("old", "new", "ok"),
    [
        ("int", "long", True),
        ("long", "int", False),
        ("float", "double", True),
        ("double", "float", False),
        ("decimal(12,2)", "decimal(14,2)", True),
        ("decimal(12,2)", "decimal(12,2)", True),
        ("decimal(12,2)", "decimal(10,2)", False),
        ("decimal(12,2)", "decimal(14,3)", False),
        ("int", "double", False),
        ("string", "long", False),
        ("long", "string", False),
        ("date", "timestamp", False),
    ],
)
def test_can_promote(old: str, new: str, ok: bool) -> None:
    assert can_promote(parse_sink_type(old), parse_sink_type(new)) is ok


def test_override_may_always_choose_string() -> None:
    assert can_override(D, SinkType("string"))
    assert not can_override(SinkType("string"), SinkType("long"))


@pytest.mark.parametrize("text", ["decimal(39,2)", "decimal(5,6)", "decimal(0,0)", "varchar"])
def test_invalid_sink_types(text: str) -> None:
    with pytest.raises(ValueError, match=r"decimal|unknown sink type"):
        parse_sink_type(text)
