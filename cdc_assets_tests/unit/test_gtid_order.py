"""Ordering by MariaDB GTID (``source.order: gtid``), the order that survives a failover: which
specs may use it, the ledger positions it renders, the dead-letter rules for changes it cannot
place, the dump watermark in GTID terms and the ledger's order fixed at creation."""

from __future__ import annotations

from typing import Any

import pytest

from cdc_assets.errors import SpecError
from cdc_assets.pipeline.bootstrap.source_position import (
    JdbcSession,
    WatermarkError,
    gtid_sequence,
    gtid_watermark,
    mariadb_watermark,
)
from cdc_assets.schema.layers import ORDER_PROPERTY, ledger_layout, order_mismatch
from cdc_assets.schema.position import Position
from cdc_assets.spec import load_spec_text
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.decode import gtid_rules, sequence_columns

pytestmark = pytest.mark.unit


def spec(connector: str = "mariadb", order: str | None = "gtid", domain: int | None = None) -> Any:
    extra = f", order: {order}" if order else ""
    extra += f", gtid_domain: {domain}" if domain is not None else ""
    return load_spec_text(
        f"""
spec_version: 1
name: users
source: {{connector: {connector}, database: app, table: users, topic: a.app.users{extra}}}
columns:
  - {{id: 1, name: id, type: bigint, nullable: false}}
primary_key: [id]
sink: {{namespace: app}}
""",
        "users.yaml",
    )


def test_binlog_is_the_default_and_gtid_is_for_mariadb_only() -> None:
    assert spec(order=None).source.order == "binlog"
    assert spec().source.order == "gtid"
    for connector, why in [("mysql", "numbered per server"), ("postgresql", "LSN")]:
        with pytest.raises(SpecError, match=why):
            spec(connector)


def test_gtid_positions_take_the_sequence_number_then_position_and_row() -> None:
    columns = sequence_columns(spec())
    assert "source.gtid" in columns["_seq_major"]
    assert "source.file" not in columns["_seq_major"]
    assert columns["_seq_minor"].endswith("source.pos END")
    assert "source.file" in sequence_columns(spec(order=None))["_seq_major"]


def test_dead_letter_rules_name_the_domain_and_the_missing_gtid() -> None:
    assert gtid_rules(spec(order=None)) == []
    rules = gtid_rules(spec(domain=3))
    reasons = " ".join(r[3] for r in rules)
    assert "without source.gtid" in reasons
    assert "domain {3}" not in reasons
    assert "domain 3" in reasons
    assert all(r[1] == "dead" and r[2] == "envelope" for r in rules)
    # Snapshot reads (op r) carry no GTID and are stamped from their place in Kafka instead.
    assert rules[0][0] == "op IN ('c', 'u', 'd') AND source.gtid IS NULL"


def test_gtid_list_and_watermark() -> None:
    assert gtid_sequence("0-1-57,1-2-9", 0) == 57
    assert gtid_sequence("0-1-57,1-2-9", 1) == 9
    assert gtid_sequence("", 0) == 0
    with pytest.raises(WatermarkError):
        gtid_sequence("3E11FA47:1-5", 0)
    mark = gtid_watermark("0-1-57", 0, "test")
    # The next transaction has sequence 58 and every event of it a position above 0.
    assert mark.floor == Position(58, 0, -1)
    assert Position(57, 999_999, 99) < mark.floor < Position(58, 4, 0)


class Scripted(JdbcSession):
    def __init__(self) -> None:
        self.log: list[str] = []

    def rows(self, sql: str) -> list[tuple[str | None, ...]]:
        self.log.append(sql)
        if "binlog_snapshot" in sql:
            return [
                ("Binlog_snapshot_file", "mariadb-bin.000004"),
                ("Binlog_snapshot_position", "812"),
            ]
        if "BINLOG_GTID_POS" in sql:
            return [("0-7-120",)]
        raise AssertionError(sql)

    def execute(self, sql: str) -> None:
        self.log.append(sql)

    def close(self) -> None:
        pass


def test_mariadb_gtid_watermark_maps_the_snapshot_position() -> None:
    session = Scripted()
    mark = mariadb_watermark(session, gtid_domain=0)
    assert mark.position == Position(121, 0, 0)
    assert "BINLOG_GTID_POS('mariadb-bin.000004', 812)" in session.log[-1]
    assert mariadb_watermark(Scripted()).position == Position(4, 812, 0)


def test_ledger_records_its_order_and_refuses_another() -> None:
    gtid: TableSpec = spec()
    binlog: TableSpec = spec(order=None)
    assert ledger_layout(gtid).properties[ORDER_PROPERTY] == "gtid"
    assert order_mismatch({ORDER_PROPERTY: "gtid"}, gtid) is None
    assert order_mismatch({}, binlog) is None  # ledgers older than the property
    problem = order_mismatch({}, gtid)
    assert problem is not None
    assert "binlog" in problem
    assert "bootstrap" in problem
    assert order_mismatch({}, spec("postgresql", order=None)) is None
