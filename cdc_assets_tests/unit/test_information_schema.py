"""information_schema rows -> CREATE TABLE -> no change against the spec they describe."""

from __future__ import annotations

import sqlglot

from cdc_assets.spec import load_specs
from cdc_assets.spec.ddl_import import plan_from_ddl
from cdc_assets.spec.information_schema import columns_query, create_table, primary_key_query
from cdc_assets.spec.models import TableSpec
from cdc_assets_tests.conftest import PROJECT_ROOT


def _spec(name: str) -> TableSpec:
    return next(s for s in load_specs(PROJECT_ROOT / "table_specs") if s.name == name)


def test_mariadb_rows_describe_the_users_spec() -> None:
    spec = _spec("users")
    rows = [
        {"name": "id", "column_type": "bigint(20)", "nullable": "NO", "dflt": None},
        {"name": "email", "column_type": "varchar(255)", "nullable": "NO", "dflt": None},
        {"name": "display_name", "column_type": "varchar(100)", "nullable": "YES", "dflt": "NULL"},
        {"name": "country", "column_type": "char(2)", "nullable": "YES", "dflt": "NULL"},
        {"name": "is_active", "column_type": "tinyint(1)", "nullable": "NO", "dflt": "1"},
        {"name": "login_count", "column_type": "int(11)", "nullable": "NO", "dflt": "0"},
        {"name": "created_ms", "column_type": "bigint(20)", "nullable": "NO", "dflt": None},
        {"name": "updated_at", "column_type": "datetime(3)", "nullable": "YES", "dflt": "NULL"},
    ]
    ddl = create_table(spec, rows, ["id"])
    _, plan = plan_from_ddl(spec, ddl, sensitive=["email"])
    assert plan.supported, plan.describe()
    assert all(type(c).__name__ != "AddColumn" for c in plan.changes), plan.describe()


def test_postgres_rows_and_an_added_column() -> None:
    spec = _spec("orders")
    types = {
        "order_id": ("bigint", {}),
        "user_id": ("bigint", {}),
        "status": ("character varying", {"char_len": 20}),
        "amount": ("numeric", {"num_precision": 12, "num_scale": 2}),
        "tax": ("numeric", {"num_precision": 12, "num_scale": 2}),
        "currency": ("character", {"char_len": 3}),
        "discount_rate": ("numeric", {"num_precision": 5, "num_scale": 4}),
        "placed_at": ("timestamp with time zone", {}),
        "shipped_at": ("timestamp without time zone", {}),
        "delivery_date": ("date", {}),
        "note": ("text", {}),
        "coupon": ("character varying", {"char_len": 20}),
    }
    rows = [
        {
            "name": name,
            "data_type": data_type,
            "udt_name": "",
            "nullable": "NO" if name in ("order_id", "user_id", "status", "amount") else "YES",
            "dflt": None,
            **extra,
        }
        for name, (data_type, extra) in types.items()
    ]
    rows[5]["nullable"] = "NO"  # currency
    rows[7]["nullable"] = "NO"  # placed_at
    _, plan = plan_from_ddl(spec, create_table(spec, rows, ["order_id"]))
    assert plan.supported, plan.describe()
    assert [str(c) for c in plan.changes] == [
        "add column coupon character varying(20) (id 12, after note)"
    ] or [str(c).split(" (")[0] for c in plan.changes] == ["add column coupon varchar(20)"]


def test_queries_parse() -> None:
    for name, dialect in (("users", "mysql"), ("orders", "postgres")):
        spec = _spec(name)
        for query in (columns_query(spec), primary_key_query(spec)):
            assert sqlglot.parse_one(query, read=dialect) is not None
