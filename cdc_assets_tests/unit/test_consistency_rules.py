"""Consistency groups: the spec rules, the layouts, the SQL (parsed), the check's verdict and the
generator's transaction records."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
import sqlglot
from pydantic import ValidationError

from cdc_assets.errors import SpecError
from cdc_assets.jobs.sync import sync_selection
from cdc_assets.jobs.upsert import upsert_assets
from cdc_assets.quality.rules import cut_verdict
from cdc_assets.schema.layers import history_layout, ledger_layout
from cdc_assets.spec import load_specs
from cdc_assets.spec.groups import consistency_groups
from cdc_assets.spec.models import ConsistencySpec, HistorySpec, TableSpec
from cdc_assets.sql.consistency import (
    data_collection,
    render_applied,
    render_consistent_view,
    render_cut,
    render_pending,
    render_status,
    render_transaction_records,
    render_transaction_rows,
)
from cdc_assets_dev.demo.events import DebeziumEventFactory
from cdc_assets_dev.demo.events.transactions import TransactionLog
from cdc_assets_tests.conftest import PROJECT_ROOT

SPECS = {s.name: s for s in load_specs(PROJECT_ROOT / "table_specs")}


def grouped(spec: TableSpec, topic: str = "mariadb.transaction") -> TableSpec:
    return spec.model_copy(
        update={
            "history": HistorySpec(mode="scd2"),
            "consistency": ConsistencySpec(group="shop", transaction_topic=topic),
        }
    )


def test_a_group_needs_the_history_and_one_server() -> None:
    raw = SPECS["order_items"].model_dump(by_alias=True, exclude_none=True)
    raw["history"] = {"mode": "none"}
    raw["consistency"] = {"group": "shop", "transaction_topic": "mariadb.transaction"}
    with pytest.raises(ValidationError, match=r"needs the table's history: set history.mode"):
        TableSpec.model_validate(raw)
    raw["history"] = {"mode": "scd2"}
    assert TableSpec.model_validate(raw).consistency is not None


def test_the_tables_of_a_group_share_one_transaction_topic() -> None:
    items = grouped(SPECS["order_items"])
    users = grouped(SPECS["users"], "other.transaction")
    with pytest.raises(SpecError, match="different transaction topics"):
        consistency_groups([items, users])
    groups = consistency_groups([grouped(SPECS["users"]), items, SPECS["orders"]])
    assert {g: [s.name for s in m] for g, m in groups.items()} == {"shop": ["order_items", "users"]}


def test_transaction_columns_only_in_group_tables() -> None:
    plain = SPECS["order_items"]
    assert "_txn_id" not in ledger_layout(plain).column_names
    assert "_txn_id" not in history_layout(plain).column_names
    items = grouped(plain)
    assert ledger_layout(items).column_names[-2:] == ["_txn_id", "_txn_order"]
    assert history_layout(items).column_names[-2:] == ["_txn_id", "_txn_order"]


def test_data_collections_are_named_as_debezium_names_them() -> None:
    assert data_collection(SPECS["order_items"]) == "shop.order_items"
    assert data_collection(SPECS["orders"]) == "public.orders"


def test_group_runs_select_the_group_asset() -> None:
    items = grouped(SPECS["order_items"])
    keys = [k.to_user_string() for k in upsert_assets([items, SPECS["orders"]])]
    assert keys[-1] == "consistent/shop"
    selected = sync_selection(["order_items"], frozenset({"order_items"}), {"order_items": "shop"})
    assert selected[-1].to_user_string() == "consistent/shop"
    assert "consistent" not in str(sync_selection(["orders"], frozenset(), {"order_items": "shop"}))


def test_the_sql_parses() -> None:
    items = grouped(SPECS["order_items"])
    for sql in (
        render_transaction_records("raw"),
        render_transaction_rows("records"),
        render_pending("lake.shop.shop_transactions", 41),
        render_applied("shop.order_items", "ledger", "pending"),
        render_status("pending", ["a1", "a2"], ["shop.orders", "shop.order_items"]),
        render_status("pending", ["a1"], ["shop.orders"], floor=12),
        render_cut("status"),
        render_consistent_view(items, "lake.shop.order_items_history", "lake.shop.t", 41),
    ):
        sqlglot.parse_one(sql, read="spark")


def test_the_cut_verdict() -> None:
    assert cut_verdict([], 0, 60).severity == "WARN"
    assert not cut_verdict([], 0, 60).passed
    ok = cut_verdict([3, 3, 9], 5_000, 60, pending=2)
    assert ok.passed
    assert ok.metadata["cut_offset"] == 9
    back = cut_verdict([3, 9, 7], 0, 60)
    assert (back.passed, back.severity) == (False, "ERROR")
    assert "backwards (9 then 7)" in back.summary
    late = cut_verdict([3], 61_000, 60)
    assert (late.passed, late.severity) == (False, "ERROR")
    assert "trails" in late.summary


def test_the_generator_numbers_each_tables_changes_and_counts_them_at_the_end() -> None:
    items = SPECS["order_items"]
    other = items.model_copy(
        update={"source": items.source.model_copy(update={"table": "order_notes"})}
    )
    f_items, f_other = DebeziumEventFactory(items), DebeziumEventFactory(other)
    log = TransactionLog([f_items, f_other])
    row = {
        "order_id": 1,
        "line_no": 1,
        "sku": "a",
        "quantity": 1,
        "unit_price": "1.00",
        "added_at": datetime(2026, 1, 1),
    }
    with log.transaction() as txid:
        blocks = [
            json.loads(r.value)["transaction"]  # type: ignore[arg-type]
            for r in (f_items.create(row), f_other.create(row), f_items.create(row))
        ]
    outside = json.loads(f_items.create(row).value)  # type: ignore[arg-type]
    assert outside["transaction"] is None
    assert [(b["id"], b["total_order"], b["data_collection_order"]) for b in blocks] == [
        (txid, 1, 1),
        (txid, 2, 1),
        (txid, 3, 2),
    ]
    begin, end = (json.loads(r.value) for r in log.records)  # type: ignore[arg-type]
    assert begin["status"] == "BEGIN"
    assert end["event_count"] == 3
    assert end["data_collections"] == [
        {"data_collection": "shop.order_items", "event_count": 2},
        {"data_collection": "shop.order_notes", "event_count": 1},
    ]


def test_transactions_before_the_floor_are_not_checked() -> None:
    assert "p.ord >= 12 AND" in render_status("p", ["a"], ["shop.orders"], floor=12)
    assert "p.ord >= -1 AND" in render_status("p", ["a"], ["shop.orders"])
