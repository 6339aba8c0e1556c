"""The source-vs-base diff: the sink mapping applied to source rows, one form per sink type,
missing/extra/differing/duplicated keys with examples, and the SQL that reads both sides."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal

import pytest
import sqlglot

from cdc_assets.quality.mirror_diff import (
    base_image,
    clock_text,
    diff_mirror,
    instant_from_micros,
    instant_from_seconds,
    normalize,
    same,
    wall_clock,
)
from cdc_assets.schema.types import SinkType
from cdc_assets.schema.wire import plan_fields
from cdc_assets.spec import load_specs
from cdc_assets.sql.mirror_read import (
    render_base_select,
    render_source_select,
    source_dialect,
    source_table,
)
from cdc_assets_tests.conftest import PROJECT_ROOT

SPECS = {s.name: s for s in load_specs(PROJECT_ROOT / "table_specs")}


def user(id_: int, **changes: object) -> dict[str, object]:
    row: dict[str, object] = {
        "id": id_,
        "email": "ada@example.org",
        "display_name": "Ada 😀",
        "country": "GB",
        "is_active": True,
        "login_count": 3,
        "created_ms": 1_767_225_600_123,
        "updated_at": datetime(2026, 1, 1, 0, 0, 0, 125000),
    }
    return {**row, **changes}


def test_source_rows_go_through_the_sink_mapping() -> None:
    image = base_image(SPECS["users"], user(1, created_ms=-1))
    # renamed and transformed: epoch milliseconds -> an instant in UTC
    assert "created_ms" not in image
    assert image["created_at"] == datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)
    orders = SPECS["orders"]
    row = {
        "order_id": 1,
        "user_id": 2,
        "status": "new",
        "amount": Decimal("1.5"),
        "tax": None,
        "currency": "EU ",
        "discount_rate": Decimal("0.1"),
        "placed_at": datetime(2026, 1, 1, 5, 30, tzinfo=timezone(timedelta(hours=5, minutes=30))),
        "shipped_at": None,
        "delivery_date": date(1969, 12, 31),
        "note": "x",
        "gift_wrap": True,  # a column the spec does not know: not compared
    }
    image = base_image(orders, row)
    assert image["amount"] == Decimal("1.50")
    assert str(image["amount"]) == "1.50"
    assert str(image["discount_rate"]) == "0.1000"  # decimal(9,4) override: same value
    assert image["placed_at"] == datetime(2026, 1, 1, tzinfo=UTC)
    assert image["placed_at"].tzinfo is UTC  # type: ignore[union-attr]
    assert "gift_wrap" not in image
    with pytest.raises(ValueError, match="no column 'note'"):
        base_image(orders, {k: v for k, v in row.items() if k != "note"})


@pytest.mark.parametrize(
    ("sink", "a", "b", "equal"),
    [
        (SinkType("decimal", 12, 2), Decimal("1.5"), Decimal("1.50"), True),
        (SinkType("decimal", 12, 2), Decimal("1.501"), Decimal("1.50"), False),
        (SinkType("decimal", 12, 2), 7, Decimal("7.00"), True),
        (SinkType("boolean"), 1, True, True),
        (SinkType("boolean"), 2, True, False),
        (SinkType("long"), True, 1, False),
        (SinkType("long"), 1, 1, True),
        (SinkType("timestamptz"), datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 1), False),
        (
            SinkType("timestamptz"),
            datetime(2026, 1, 1, 1, tzinfo=timezone(timedelta(hours=1))),
            datetime(2026, 1, 1, tzinfo=UTC),
            True,
        ),
        (SinkType("timestamp"), datetime(2026, 1, 1), datetime(2026, 1, 1, tzinfo=UTC), False),
        (SinkType("date"), date(2026, 1, 1), datetime(2026, 1, 1), False),
        (SinkType("string"), "a ", "a", False),
        (SinkType("string"), None, "", False),
        (SinkType("binary"), bytearray(b"\x00"), b"\x00", True),
    ],
)
def test_values_compare_by_type_and_value(
    sink: SinkType, a: object, b: object, equal: bool
) -> None:
    assert same(normalize(sink, a), normalize(sink, b)) is equal


def test_diff_reports_missing_extra_differing_and_duplicated_keys() -> None:
    spec = SPECS["users"]
    source = [user(i) for i in range(1, 8)]
    base = [base_image(spec, r) for r in source if r["id"] not in (2, 3)]
    base += [base_image(spec, user(9)), base_image(spec, user(10))]
    base[0] = {**base[0], "email": "other@example.org", "_op": "u"}  # key 1
    base[1] = {**base[1], "created_at": datetime(2026, 1, 1, tzinfo=UTC)}  # key 4
    base.append(base_image(spec, user(5)))  # key 5 twice
    diff = diff_mirror(spec, source, base, examples=1)
    assert not diff.equal
    assert (diff.source_rows, diff.base_rows) == (7, 8)
    assert (diff.missing, diff.extra, diff.differing, diff.duplicated) == (2, 2, 2, 1)
    assert diff.missing_keys == [(2,)]  # one example each, in key order
    assert diff.extra_keys == [(9,)]
    assert diff.duplicated_keys == [(5,)]
    assert diff.by_column == {"email": 1, "created_at": 1}
    ((key, values),) = diff.examples
    assert key == (1,)
    assert [(v.column, v.source, v.base) for v in values] == [
        ("email", "ada@example.org", "other@example.org")
    ]
    text = diff.summary()
    assert text.splitlines()[0] == (
        "users: source 7 rows, base 8 rows: 2 missing from base, 2 extra in base, "
        "2 differing (created_at 1, email 1), 1 keys held twice in base"
    )
    assert "(1,): email: source 'ada@example.org' base 'other@example.org'" in text


def test_equal_tables_and_composite_keys() -> None:
    spec = SPECS["order_items"]
    rows = [
        {
            "order_id": o,
            "line_no": n,
            "sku": "S",
            "quantity": 4294967295,
            "unit_price": Decimal("-99999999.99"),
            "attributes": '{"a": "😀"}',
            "added_at": datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=UTC),
        }
        for o in (1, 2)
        for n in (1, 2)
    ]
    base = [base_image(spec, r) for r in reversed(rows)]
    diff = diff_mirror(spec, rows, base)
    assert diff.equal, diff.summary()
    assert diff.summary() == "order_items: source 4 rows, base 4 rows: equal"


def test_text_and_number_readers() -> None:
    assert wall_clock("1000-01-01 00:00:00.125000") == datetime(1000, 1, 1, 0, 0, 0, 125000)
    assert wall_clock("2026-01-01 00:00:00") == datetime(2026, 1, 1)
    assert wall_clock("2026-01-01T00:00:00.1234567") == datetime(2026, 1, 1, 0, 0, 0, 123456)
    assert instant_from_seconds(Decimal("-0.000001")) == datetime(
        1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC
    )
    assert instant_from_micros(1) == datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC)
    assert clock_text("-838:59:59.5") == "-838:59:59.500000"
    with pytest.raises(ValueError, match="not a date and time"):
        wall_clock("2026-01-01")


def test_reads_of_both_sides_parse_and_format_times_in_the_database() -> None:
    orders = plan_fields(SPECS["orders"])
    sql, columns = render_source_select(
        orders, source_table("postgres", "public", "orders"), "postgres"
    )
    assert sql.startswith("(SELECT ")
    assert sql.endswith(") cdc_assets_source")
    sqlglot.parse_one(sql[1 : sql.rindex(")")], read="postgres")
    by_name = {c.column: c for c in columns}
    assert by_name["placed_at"].decode == "utc_wall_clock"
    assert "to_char(\"placed_at\" AT TIME ZONE 'UTC'" in sql
    assert by_name["delivery_date"].decode == "date"
    assert by_name["amount"].decode == "as_is"
    items = plan_fields(SPECS["order_items"])
    sql, columns = render_source_select(
        items, source_table("mariadb", None, "order_items"), "mariadb"
    )
    sqlglot.parse_one(sql[1 : sql.rindex(")")], read="mysql")
    assert "UNIX_TIMESTAMP(`added_at`) AS c6" in sql
    assert "FROM `order_items`" in sql
    users = plan_fields(SPECS["users"])
    _, columns = render_source_select(users, source_table("mariadb", None, "users"), "mariadb")
    assert {c.column: c.decode for c in columns}["updated_at"] == "wall_clock"
    base_sql, base_columns = render_base_select(users, "`lake`.`app`.`users`")
    assert "unix_micros(`created_at`) AS c6" in base_sql
    assert "CAST(`updated_at` AS STRING) AS c7" in base_sql
    assert [c.column for c in base_columns][6:] == ["created_at", "updated_at"]
    assert source_dialect("jdbc:mariadb://127.0.0.1:3306/app") == "mariadb"
    assert source_dialect("jdbc:postgresql://127.0.0.1/shop") == "postgres"
    assert source_dialect("jdbc:sqlite:/tmp/x.db") == "generic"
