"""Onboarding from a CREATE TABLE, and changed DDL as the proposed next version of a spec."""

from __future__ import annotations

import pytest

from cdc_assets.errors import SpecError
from cdc_assets.schema.evolution import RenameColumn, apply_plan
from cdc_assets.schema.layers import all_layouts
from cdc_assets.spec import load_specs
from cdc_assets.spec.ddl_import import (
    parse_create_table,
    plan_from_ddl,
    proposed_from_ddl,
    read_audit,
    spec_from_ddl,
)
from cdc_assets.spec.models import TableSpec
from cdc_assets.spec.schema_change import parse_schema_change
from cdc_assets_dev.demo.events import DebeziumEventFactory
from cdc_assets_tests.conftest import PROJECT_ROOT

MYSQL_DUMP = """-- MySQL dump 10.13  Distrib 8.0.36
/*!40101 SET @OLD_CHARACTER_SET_CLIENT=@@CHARACTER_SET_CLIENT */;
DROP TABLE IF EXISTS `order_items`;
/*!50503 SET character_set_client = utf8mb4 */;
CREATE TABLE `order_items` (
  `order_id` bigint NOT NULL,
  `line_no` smallint NOT NULL DEFAULT '1' COMMENT 'line within the order',
  `sku` varchar(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  `quantity` int unsigned NOT NULL DEFAULT 0,
  `unit_price` decimal(10,2) NOT NULL,
  `status` enum('New','Paid') DEFAULT NULL,
  `attributes` json,
  `seq` int NOT NULL AUTO_INCREMENT,
  `added_at` timestamp(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
  `CustomerRef` bigint(20) unsigned DEFAULT NULL,
  PRIMARY KEY (`order_id`,`line_no`),
  UNIQUE KEY `uk_seq` (`seq`),
  KEY `idx_added` (`added_at`),
  CONSTRAINT `fk_order` FOREIGN KEY (`order_id`) REFERENCES `orders` (`order_id`)
) ENGINE=InnoDB AUTO_INCREMENT=42 DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_0900_ai_ci
  COMMENT='One row per line of an order.';
"""

PG_DUMP = """--
-- PostgreSQL database dump
--
SET statement_timeout = 0;
SELECT pg_catalog.set_config('search_path', '', false);
CREATE TABLE public.orders (
    order_id bigint NOT NULL,
    user_id bigint NOT NULL,
    status character varying(20) DEFAULT 'new'::character varying NOT NULL,
    amount numeric(12,2) NOT NULL,
    tax numeric(12,2),
    currency character(3) NOT NULL,
    discount_rate numeric(5,4),
    placed_at timestamp with time zone DEFAULT now() NOT NULL,
    shipped_at timestamp without time zone,
    delivery_date date,
    note text,
    CONSTRAINT orders_amount_check CHECK (amount >= 0)
);
COMMENT ON TABLE public.orders IS 'Customer orders with money amounts and lifecycle timestamps.';
COMMENT ON COLUMN public.orders.amount IS 'gross amount';
ALTER TABLE ONLY public.orders
    ADD CONSTRAINT orders_pkey PRIMARY KEY (order_id);
CREATE INDEX orders_user_idx ON public.orders USING btree (user_id);
"""


def repo_specs() -> dict[str, TableSpec]:
    return {s.name: s for s in load_specs(PROJECT_ROOT / "table_specs")}


def test_mysql_create_table() -> None:
    spec = spec_from_ddl(MYSQL_DUMP, "mariadb", "shop", "shop.shop.order_items", "shop")
    assert spec.spec_version == 1
    assert spec.name == "order_items"
    assert spec.description == "One row per line of an order."
    assert spec.primary_key == ["order_id", "line_no"]
    got = [(c.id, c.name, c.type, c.nullable, c.default) for c in spec.columns]
    assert got == [
        (1, "order_id", "bigint", False, None),
        (2, "line_no", "smallint", False, "1"),
        (3, "sku", "varchar(64)", False, None),
        (4, "quantity", "int unsigned", False, "0"),
        (5, "unit_price", "decimal(10,2)", False, None),
        (6, "status", "enum('New','Paid')", True, None),
        (7, "attributes", "json", True, None),
        (8, "seq", "int", False, None),
        (9, "added_at", "timestamp(6)", False, "CURRENT_TIMESTAMP(6)"),
        (10, "CustomerRef", "bigint(20) unsigned", True, None),
    ]
    assert spec.columns_by_name["line_no"].comment == "line within the order"
    # A source name that is no Iceberg name gets a sink name.
    assert spec.columns_by_name["CustomerRef"].sink_name == "customerref"
    assert spec.columns_by_name["CustomerRef"].sink_type("mariadb").name == "decimal"


def test_mysql_import_matches_the_example_spec_types() -> None:
    imported = spec_from_ddl(MYSQL_DUMP, "mariadb", "shop", "shop.shop.order_items", "shop")
    example = repo_specs()["order_items"]
    for column in example.columns:
        mine = imported.columns_by_name[column.name]
        assert mine.sink_type("mariadb") == column.sink_type("mariadb"), column.name
        assert mine.nullable == column.nullable, column.name


def test_postgres_dump_with_separate_key_and_comments() -> None:
    spec = spec_from_ddl(PG_DUMP, "postgresql", "shop", "shop.public.orders", "shop")
    assert spec.source.schema_ == "public"
    assert spec.primary_key == ["order_id"]
    assert spec.description == "Customer orders with money amounts and lifecycle timestamps."
    cols = spec.columns_by_name
    assert cols["status"].type == "varchar(20)"
    assert cols["status"].default == "new"
    assert cols["amount"].type == "decimal(12,2)"
    assert cols["amount"].comment == "gross amount"
    assert cols["placed_at"].type == "timestamptz"
    assert cols["placed_at"].default == "CURRENT_TIMESTAMP"
    assert cols["shipped_at"].type == "timestamp"
    assert cols["currency"].type == "char(3)"
    # Same Iceberg types and nullability as the hand-written example of this table.
    example = repo_specs()["orders"]
    for column in example.columns:
        if column.sink.type is None:
            assert cols[column.name].sink_type("postgresql") == column.sink_type("postgresql")
        assert cols[column.name].nullable == column.nullable, column.name


def test_inline_and_composite_keys_and_serials() -> None:
    pg = """CREATE TABLE shop.events (
        id bigserial PRIMARY KEY,
        "Kind" varchar,
        at time(3) with time zone
    )"""
    spec = spec_from_ddl(pg, "postgresql", "shop", "shop.shop.events", "ev", schema="other")
    assert spec.primary_key == ["id"]
    assert spec.source.schema_ == "other"
    assert [(c.name, c.type, c.nullable) for c in spec.columns] == [
        ("id", "bigserial", False),
        ("Kind", "varchar", True),
        ("at", "timetz(3)", True),
    ]
    my = "CREATE TABLE t (a int, b varchar(3), CONSTRAINT pk PRIMARY KEY (b, a)) ENGINE=InnoDB"
    spec = spec_from_ddl(my, "mysql", "db", "db.db.t", "ns", name="tee", sensitive=["b"])
    assert spec.name == "tee"
    assert spec.primary_key == ["b", "a"]
    assert [c.nullable for c in spec.columns] == [False, False]
    assert spec.columns_by_name["b"].sensitive
    assert spec.pipeline.sensitive


@pytest.mark.parametrize(
    ("ddl", "message"),
    [
        ("CREATE TABLE t (a int, b text)", "no PRIMARY KEY"),
        ("CREATE TABLE t (a int PRIMARY KEY, g geometry)", "column g: "),
        ("CREATE TABLE t (a int PRIMARY KEY); CREATE TABLE u (b int PRIMARY KEY)", "exactly one"),
        ("CREATE TABLE t (a int PRIMARY KEY", "cannot parse"),
    ],
)
def test_unusable_ddl_is_explained(ddl: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        spec_from_ddl(ddl, "mysql", "db", "db.db.t", "ns")


def test_sensitive_columns_must_exist() -> None:
    with pytest.raises(SpecError, match=r"sensitive columns \['nope'\]"):
        spec_from_ddl(
            "CREATE TABLE t (a int PRIMARY KEY)", "mysql", "d", "t", "n", sensitive=["nope"]
        )


PG_V1 = """CREATE TABLE public.accounts (
    id bigint NOT NULL,
    name character varying(40),
    balance numeric(12,2),
    opened date,
    CONSTRAINT accounts_pkey PRIMARY KEY (id)
);"""


def accounts() -> TableSpec:
    return spec_from_ddl(PG_V1, "postgresql", "bank", "bank.public.accounts", "bank")


def test_changed_ddl_keeps_ids_by_name_and_numbers_new_columns() -> None:
    current = accounts()
    ddl = PG_V1.replace("balance numeric(12,2),", "balance NUMERIC(14, 2),\n    branch integer,")
    proposed, renames = proposed_from_ddl(current, ddl)
    assert renames == {}
    assert proposed.spec_version == 2
    assert [(c.id, c.name, c.type) for c in proposed.columns] == [
        (1, "id", "bigint"),
        (2, "name", "varchar(40)"),
        (3, "balance", "decimal(14,2)"),
        (5, "branch", "int"),
        (4, "opened", "date"),
    ]
    _, plan = plan_from_ddl(current, ddl)
    assert plan.supported
    assert [str(c) for c in plan.changes] == [
        "widen column balance: decimal(12,2) -> decimal(14,2) (source type decimal(14,2))",
        "add column branch int (id 5, after balance)",
    ]


def test_the_same_type_spelled_differently_keeps_the_spec_text() -> None:
    current = accounts()
    ddl = PG_V1.replace("character varying(40)", "varchar(40)").replace("date", "DATE")
    proposed, _ = proposed_from_ddl(current, ddl)
    assert proposed.columns == current.columns


@pytest.mark.parametrize(
    "audit",
    [
        ["ALTER TABLE public.accounts RENAME COLUMN name TO holder"],
        ["ALTER TABLE accounts RENAME name TO holder"],  # PostgreSQL's COLUMN is optional
        [
            "alter table accounts rename column name to tmp; "
            "alter table accounts rename tmp to holder"
        ],
        ["ALTER TABLE ONLY public.accounts RENAME COLUMN name TO holder", "ANALYZE accounts"],
    ],
)
def test_renames_are_proved_by_the_audit_trail(audit: list[str]) -> None:
    current = accounts()
    ddl = PG_V1.replace("name character varying(40)", "holder character varying(40)")
    proposed, renames = proposed_from_ddl(current, ddl, audit)
    assert renames == {"name": "holder"}
    holder = proposed.columns_by_name["holder"]
    assert (holder.id, holder.sink_name) == (2, "name")  # the Iceberg column keeps its name
    _, plan = plan_from_ddl(current, ddl, audit)
    assert plan.supported
    assert plan.changes == (RenameColumn(2, "name", "holder", "name"),)
    evolved = apply_plan(current, plan)
    assert evolved == proposed
    # The Iceberg tables do not change at all.
    assert all_layouts(evolved) == all_layouts(current)


def test_without_an_audit_trail_a_rename_is_ambiguous() -> None:
    current = accounts()
    ddl = PG_V1.replace("name character varying(40)", "holder character varying(40)")
    _, plan = plan_from_ddl(current, ddl)
    assert not plan.supported
    assert [str(r) for r in plan.rejections] == [
        "column name: disappears while holder is new: the DDL text cannot tell a rename from a "
        "drop plus an add, and the audit trail proves neither (`ALTER TABLE ... RENAME COLUMN "
        "name TO ...` or `DROP COLUMN name`); pass the schema-change history of the table"
    ]
    # An audit trail of another table or schema proves nothing here.
    for other in (
        "ALTER TABLE users RENAME COLUMN name TO holder",
        "ALTER TABLE archive.accounts RENAME COLUMN name TO holder",
    ):
        assert not plan_from_ddl(current, ddl, [other])[1].supported


def test_a_proved_drop_and_add_is_not_a_rename() -> None:
    current = accounts()
    ddl = PG_V1.replace("name character varying(40)", "holder character varying(40)")
    audit = ["ALTER TABLE accounts DROP COLUMN name", "ALTER TABLE accounts ADD COLUMN holder text"]
    _, plan = plan_from_ddl(current, ddl, audit)
    assert [str(c) for c in plan.changes] == [
        "add column holder varchar(40) (id 5, after id)",
        "soft-drop column name: kept in Iceberg, null for new rows",
    ]
    evolved = apply_plan(current, plan)
    assert [(c.id, c.name, c.dropped) for c in evolved.columns] == [
        (1, "id", False),
        (5, "holder", False),
        (2, "name", True),
        (3, "balance", False),
        (4, "opened", False),
    ]


def test_a_plain_drop_needs_no_audit_trail() -> None:
    current = accounts()
    _, plan = plan_from_ddl(current, PG_V1.replace("    opened date,\n", ""))
    assert [str(c) for c in plan.changes] == [
        "soft-drop column opened: kept in Iceberg, null for new rows"
    ]


def test_mysql_change_column_and_a_new_column_under_the_old_name() -> None:
    v1 = "CREATE TABLE `t` (`id` int NOT NULL, `a` int, PRIMARY KEY (`id`)) ENGINE=InnoDB"
    current = spec_from_ddl(v1, "mysql", "db", "db.db.t", "ns")
    v2 = "CREATE TABLE `t` (`id` int NOT NULL, `b` bigint, `a` varchar(5), PRIMARY KEY (`id`))"
    audit = [
        "ALTER TABLE `db`.`t` CHANGE COLUMN `a` `b` bigint",
        "ALTER TABLE t ADD COLUMN a varchar(5)",
    ]
    assert read_audit(audit, current).renames == {"a": "b"}
    proposed, _ = proposed_from_ddl(current, v2, audit)
    assert [(c.id, c.name, c.sink_name) for c in proposed.columns] == [
        (1, "id", "id"),
        (2, "b", "a"),
        (3, "a", "a_3"),  # the Iceberg name a still belongs to the renamed column
    ]
    _, plan = plan_from_ddl(current, v2, audit)
    assert plan.supported, plan.describe()


def test_audit_tracks_drops_after_renames() -> None:
    current = accounts()
    audit = [
        "ALTER TABLE accounts RENAME COLUMN name TO holder",
        "ALTER TABLE accounts DROP COLUMN holder",
        "ALTER TABLE accounts RENAME COLUMN opened TO opened_on",
    ]
    trail = read_audit(audit, current)
    assert trail.renames == {"opened": "opened_on"}
    assert trail.dropped == frozenset({"name"})


def test_the_ddl_must_be_for_the_spec_table() -> None:
    with pytest.raises(SpecError, match="mirrors accounts"):
        proposed_from_ddl(accounts(), PG_V1.replace("public.accounts", "public.other"))


def test_parse_create_table_reads_the_qualifier() -> None:
    table = parse_create_table(PG_DUMP, "postgresql")
    assert (table.qualifier, table.name, table.primary_key) == ("public", "orders", ("order_id",))


def test_a_rename_carries_the_column_references_of_the_spec() -> None:
    data = accounts().model_dump(mode="json", by_alias=True)
    data["checks"] = {"max_null_fraction": {"name": 0.5}, "allow_all_null": ["name"]}
    current = TableSpec.model_validate(data)
    ddl = PG_V1.replace("name character varying(40)", "holder character varying(40)")
    proposed, plan = plan_from_ddl(current, ddl, ["ALTER TABLE accounts RENAME name TO holder"])
    assert plan.supported
    assert proposed.checks.max_null_fraction == {"holder": 0.5}
    assert apply_plan(current, plan) == proposed


def test_a_sensitive_column_renamed_or_dropped_by_the_audit_trail() -> None:
    # The spec names a sensitive column as it knew it; a rename proved by the audit trail moves
    # it, a proved drop removes it (the evolution failed with "not in the DDL", issue 61).
    current = next(s for s in load_specs(PROJECT_ROOT / "table_specs") if s.name == "users")
    sensitive = [c.name for c in current.columns if c.sensitive]
    assert sensitive == ["email"]
    renamed = current.model_copy(
        update={
            "columns": [
                c.model_copy(update={"name": "email_address"}) if c.name == "email" else c
                for c in current.columns
            ]
        }
    )
    record = DebeziumEventFactory(renamed).schema_change("-- the renamed table")
    ddl = parse_schema_change(record.value)[0].create_table
    proposed, plan = plan_from_ddl(
        current,
        ddl,
        ["ALTER TABLE users RENAME COLUMN email TO email_address"],
        sensitive=sensitive,
    )
    assert plan.supported, plan.describe()
    assert [c.new for c in plan.changes if isinstance(c, RenameColumn)] == ["email_address"]
    assert proposed.columns_by_name["email_address"].sensitive


def test_a_column_added_with_a_default_keeps_it_whatever_the_source_says_later() -> None:
    """Its older rows read the default it was added with: a later shape without a default (an
    event's schema, an ``ALTER COLUMN ... DROP DEFAULT``) or with another one changes nothing
    (the spec used to become invalid: backfill_default without a default)."""
    data = next(
        s for s in load_specs(PROJECT_ROOT / "table_specs") if s.name == "orders"
    ).model_dump(mode="json", by_alias=True)
    data["columns"] = [c for c in data["columns"] if c["name"] in ("order_id", "note")]
    data["primary_key"] = ["order_id"]
    spec = TableSpec.model_validate(data)
    base = "CREATE TABLE orders (order_id bigint NOT NULL, note text, PRIMARY KEY (order_id))"
    _, plan = plan_from_ddl(
        spec, base.replace("note text", "note text, stage text NOT NULL DEFAULT 'open'")
    )
    evolved = apply_plan(spec, plan)
    stage = evolved.columns_by_name["stage"]
    assert (stage.default, stage.backfill_default) == ("open", True)
    for later in ("stage text", "stage text DEFAULT 'closed'"):
        proposed, again = plan_from_ddl(evolved, base.replace("note text", f"note text, {later}"))
        assert again.supported, again.describe()
        assert proposed.columns_by_name["stage"].default == "open"
        assert not again.changes, again.describe()
