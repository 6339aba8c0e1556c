"""Rows moved to another primary key without their out-of-line (TOAST) columns: which old value
each column takes, followed through chains of moves, and the SQL that reads and applies them.

Found by running the pipeline on real PostgreSQL events: a primary-key update of a row whose
`note` was stored out of line arrived as a create carrying Debezium's placeholder, and base kept
NULL where the source held the text."""

from __future__ import annotations

import pytest
import sqlglot

from cdc_assets.pipeline.upsert.moved_rows import (
    KeyChange,
    Move,
    StoredRow,
    newest_moves,
    parse_old_key,
    resolve_moves,
)
from cdc_assets.spec import load_specs
from cdc_assets.sql.upsert import (
    ChangeWindow,
    moved_view_schema,
    render_key_history,
    render_moved_creates,
    render_newest_changes,
    render_stored_rows,
)
from cdc_assets_tests.conftest import PROJECT_ROOT

SPECS = {s.name: s for s in load_specs(PROJECT_ROOT / "table_specs")}
ORDERS = SPECS["orders"]
WINDOW = ChangeWindow(
    ledger="`lake`.`shop`.`orders_cdc`", snapshot_id=7, start={0: 10}, end={0: 90}
)


def order(lsn: int, offset: int | None = None) -> tuple[int, ...]:
    return (lsn, 0, 0, 0, lsn if offset is None else offset)


def change(
    lsn: int,
    op: str,
    note: str | None = None,
    *,
    unavailable: bool = False,
    old: int | None = None,
    status: str = "new",
) -> KeyChange:
    return KeyChange(
        order=order(lsn),
        op=op,
        unavailable=frozenset({"note"} if unavailable else ()),
        values={"note": None if unavailable else note, "status": status},
        old_key=(old,) if old is not None else None,
    )


def test_old_keys_are_read_from_the_header_json() -> None:
    assert parse_old_key(ORDERS, '{"order_id":8000001293}') == (8000001293,)
    items = SPECS["order_items"]
    assert parse_old_key(items, '{"order_id": 7, "line_no": 2}') == (7, 2)
    for bad in (None, "", "[1]", "{", '{"order_id": "7"}', '{"order_id": true}', '{"x": 1}'):
        assert parse_old_key(ORDERS, bad) is None


def test_only_a_key_whose_newest_create_is_a_move_lacking_columns_needs_old_values() -> None:
    creates = [
        # key 2: moved in from 1 without the note, then created again (with all columns)
        ((2,), order(10), "c", '{"order_id":1}', "note"),
        ((2,), order(20), "c", None, None),
        # key 3: created, then moved in from 4 without the note: the move is its current life
        ((3,), order(11), "c", None, None),
        ((3,), order(21), "c", '{"order_id":4}', "note"),
        # key 5: moved in with every column sent
        ((5,), order(12), "c", '{"order_id":6}', None),
        # key 7: a snapshot read is never a move
        ((7,), order(13), "r", '{"order_id":8}', "note"),
    ]
    assert newest_moves(ORDERS, creates) == [Move((3,), order(21), (4,), ("note",))]


def test_values_come_from_the_old_key_before_the_move() -> None:
    moves = [Move((20,), order(50), (10,), ("note",))]
    history = {
        (10,): [
            change(5, "c", "first"),
            change(8, "u", "long text"),
            change(9, "u", unavailable=True),  # unchanged TOAST value: the one before stands
            change(60, "c", "after the move"),  # a later life of key 10: not this row's
        ]
    }
    result = resolve_moves(moves, history, {})
    assert result.values == {(20,): {"note": "long text"}}
    assert not result.wanted
    # a NULL value is a value
    history[(10,)][1] = change(8, "u", None)
    assert resolve_moves(moves, history, {}).values == {(20,): {"note": None}}


def test_chains_of_moves_are_followed_key_by_key() -> None:
    moves = [Move((30,), order(90), (20,), ("note",))]
    history: dict[tuple[object, ...], list[KeyChange]] = {
        (20,): [change(50, "c", unavailable=True, old=10), change(55, "u", unavailable=True)]
    }
    first = resolve_moves(moves, history, {})
    assert first.wanted == {(10,)}  # the key before must be read first
    assert first.values == {(30,): {}}
    history[(10,)] = [change(5, "c", "from the first key")]
    assert resolve_moves(moves, history, {}).values == {(30,): {"note": "from the first key"}}


def test_a_row_without_history_takes_base_s_row_and_nothing_is_invented() -> None:
    moves = [Move((20,), order(50), (10,), ("note",)), Move((21,), order(50), (11,), ("note",))]
    history: dict[tuple[object, ...], list[KeyChange]] = {(10,): [], (11,): []}
    stored = {
        (10,): StoredRow(order(3), {"note": "from a dump"}),
        (11,): StoredRow(order(70), {"note": "written after the move"}),
    }
    result = resolve_moves(moves, history, stored)
    assert result.values == {(20,): {"note": "from a dump"}, (21,): {}}


def test_moved_rows_sql_parses_and_uses_the_view() -> None:
    statements = [
        render_moved_creates(ORDERS, WINDOW),
        render_key_history(ORDERS, WINDOW, "`keys`"),
        render_stored_rows(ORDERS, "`lake`.`shop`.`orders`", "`keys`"),
        render_newest_changes(ORDERS, WINDOW, "`t`", carry_unavailable=True, moved="`moved`"),
    ]
    for sql in statements:
        sqlglot.parse_one(sql.replace(" VERSION AS OF 7", ""), read="spark")
    newest = statements[-1]
    assert "LEFT JOIN `moved` m ON m.`order_id` = n.r.`order_id`" in newest
    assert "CAST(m.v9 AS STRING)" in newest  # note, the 10th carried column
    assert "CAST(m.v3 AS DECIMAL(12,2))" in newest  # tax
    assert "CAST(m.v7 AS TIMESTAMP_NTZ)" in newest  # shipped_at
    assert "n.a9.o < named_struct('o0', m._mo0" in newest
    assert moved_view_schema(ORDERS).startswith("`order_id` BIGINT, _mo0 BIGINT")
    without = render_newest_changes(ORDERS, WINDOW, "`t`", carry_unavailable=True)
    assert "LEFT JOIN" not in without


@pytest.mark.parametrize("name", ["users", "order_items"])
def test_specs_without_placeholders_never_join_moves(name: str) -> None:
    sql = render_newest_changes(SPECS[name], WINDOW, "`t`", carry_unavailable=False)
    assert "_mo0" not in sql
