"""Onboarding from a live source's information_schema, without a database: the rows a MariaDB or
PostgreSQL catalog returns -> CREATE TABLE -> spec, the connector's topic naming, where the JDBC
URL comes from, and `specs import-source` writing (and refusing to overwrite) the spec file."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import sqlglot

from cdc_assets.cli import main, redact_url, source_jdbc_url, write_spec_checked
from cdc_assets.errors import CdcAssetsError, SpecError
from cdc_assets.settings import ENV_HOME, ENV_SPECS, load_settings
from cdc_assets.spec import load_spec, load_specs
from cdc_assets.spec.ddl_import import default_topic, spec_from_ddl
from cdc_assets.spec.information_schema import (
    SourceIdentity,
    SourceTable,
    columns_query,
    create_table,
    json_checks_query,
    json_columns,
    primary_key_query,
    size_query,
)
from cdc_assets.spec.models import TableSpec
from cdc_assets.spec.sizing import DEFAULT_BUCKETS, MAX_BUCKETS, SourceSize, buckets_for
from cdc_assets_tests.conftest import PROJECT_ROOT

ORDER_ITEMS = SourceTable("mariadb", "shop", "order_items")
ORDERS = SourceTable("postgresql", "shop", "orders", "public")

# What MariaDB 10.11's information_schema.columns holds for shop.order_items (display widths,
# JSON as LONGTEXT, missing defaults as the text NULL).
MARIADB_ROWS = [
    {"name": "order_id", "column_type": "bigint(20)", "nullable": "NO", "dflt": None},
    {"name": "line_no", "column_type": "smallint(6)", "nullable": "NO", "dflt": None},
    {"name": "sku", "column_type": "varchar(64)", "nullable": "NO", "dflt": None},
    {"name": "quantity", "column_type": "int(10) unsigned", "nullable": "NO", "dflt": None},
    {"name": "unit_price", "column_type": "decimal(10,2)", "nullable": "NO", "dflt": None},
    {"name": "attributes", "column_type": "longtext", "nullable": "YES", "dflt": "NULL"},
    {"name": "added_at", "column_type": "timestamp(6)", "nullable": "NO", "dflt": None},
]

PG_ROWS: list[dict[str, Any]] = [
    {"name": "order_id", "data_type": "bigint", "nullable": "NO"},
    {"name": "user_id", "data_type": "bigint", "nullable": "NO"},
    {"name": "status", "data_type": "character varying", "char_len": 20, "nullable": "NO"},
    {
        "name": "amount",
        "data_type": "numeric",
        "num_precision": 12,
        "num_scale": 2,
        "nullable": "NO",
    },
    {"name": "tax", "data_type": "numeric", "num_precision": 12, "num_scale": 2, "nullable": "YES"},
    {"name": "currency", "data_type": "character", "char_len": 3, "nullable": "NO"},
    {
        "name": "discount_rate",
        "data_type": "numeric",
        "num_precision": 5,
        "num_scale": 4,
        "nullable": "YES",
    },
    {"name": "placed_at", "data_type": "timestamp with time zone", "nullable": "NO"},
    {"name": "shipped_at", "data_type": "timestamp without time zone", "nullable": "YES"},
    {"name": "delivery_date", "data_type": "date", "nullable": "YES"},
    {
        "name": "note",
        "data_type": "text",
        "nullable": "YES",
        "comment": "free text; it's TOASTed when long",
    },
]


def example(name: str) -> TableSpec:
    return next(s for s in load_specs(PROJECT_ROOT / "table_specs") if s.name == name)


def shape(spec: TableSpec) -> list[tuple[object, ...]]:
    """Per column: id, name, type (as the connector parses it) and nullability."""
    out: list[tuple[object, ...]] = []
    for c in spec.columns:
        t = c.source_type(spec.source.connector)
        out.append((c.id, c.name, t.kind, t.length, t.precision, t.scale, c.nullable))
    return out


def same_shape(imported: TableSpec, spec: TableSpec) -> None:
    """Columns, types, nullability and key are the spec's."""
    assert shape(imported) == shape(spec)
    assert imported.primary_key == spec.primary_key


def test_mariadb_rows_become_the_order_items_spec() -> None:
    json = json_columns([{"clause": "json_valid(`attributes`)"}, {"clause": "`x` > 0"}])
    assert json == {"attributes"}
    ddl = create_table(ORDER_ITEMS, MARIADB_ROWS, ["order_id", "line_no"], json=json)
    assert "`order_id` bigint NOT NULL" in ddl  # display widths dropped
    assert "`quantity` int unsigned NOT NULL" in ddl
    assert "`attributes` json" in ddl
    spec = spec_from_ddl(ddl, "mariadb", "shop", "shop.shop.order_items", "shop")
    same_shape(spec, example("order_items"))
    assert [c.type for c in spec.columns][:5] == [
        "bigint",
        "smallint",
        "varchar(64)",
        "int unsigned",
        "decimal(10,2)",
    ]
    assert spec.source.topic == default_topic("mariadb", "shop", "order_items")


def test_json_check_clauses_in_either_quoting() -> None:
    # Spark's JDBC reads of MariaDB run with ANSI_QUOTES, which quotes the clause with ".
    rows = [
        {"clause": 'json_valid("doc")'},
        {"clause": "json_valid(`we``ird`)"},
        {"clause": "json_valid(`a`) and `b` > 1"},
    ]
    assert json_columns(rows) == {"doc", "we`ird"}
    without = create_table(ORDER_ITEMS, MARIADB_ROWS, ["order_id", "line_no"])
    assert "`attributes` longtext" in without


def test_postgres_rows_with_comments_become_the_orders_spec() -> None:
    ddl = create_table(ORDERS, PG_ROWS, ["order_id"])
    assert ddl.endswith(
        "COMMENT ON COLUMN \"orders\".\"note\" IS 'free text; it''s TOASTed when long'"
    )
    spec = spec_from_ddl(ddl, "postgresql", "shop", "shop.public.orders", "shop", schema="public")
    same_shape(spec, example("orders"))
    assert spec.columns[-1].comment == "free text; it's TOASTed when long"
    assert spec.source.schema_ == "public"
    assert default_topic("postgresql", "shop", "orders", schema="public") == "shop.public.orders"


def test_mysql_comments_with_quotes_and_backslashes_round_trip() -> None:
    rows = [
        {"name": "id", "column_type": "bigint(20)", "nullable": "NO", "comment": "surrogate key"},
        {"name": "flag", "column_type": "tinyint(1)", "nullable": "YES", "comment": "a\\b 'c'"},
    ]
    ddl = create_table(SourceTable("mysql", "app", "t"), rows, ["id"])
    spec = spec_from_ddl(ddl, "mysql", "app", "app.app.t", "app")
    assert [(c.type, c.comment) for c in spec.columns] == [
        ("bigint", "surrogate key"),
        ("boolean", "a\\b 'c'"),
    ]


def test_topic_naming_follows_the_connectors() -> None:
    assert default_topic("mysql", "app", "users") == "app.app.users"
    assert default_topic("mariadb", "app", "users", prefix="mariadb") == "mariadb.app.users"
    assert default_topic("postgresql", "shop", "orders") == "shop.public.orders"
    assert default_topic("postgresql", "shop", "t", schema="sales", prefix="pg") == "pg.sales.t"
    assert default_topic("mysql", "my db", "t$1") == "my_db.my_db.t_1"


def test_queries_name_the_table_and_parse() -> None:
    for table, dialect in ((ORDER_ITEMS, "mysql"), (ORDERS, "postgres")):
        queries = [columns_query(table), primary_key_query(table), size_query(table)]
        queries += [json_checks_query(table)] if dialect == "mysql" else []
        for query in queries:
            assert f"'{table.table}'" in query
            assert sqlglot.parse_one(query, read=dialect) is not None
    # A spec and its SourceTable ask the same questions.
    spec = example("orders")
    assert columns_query(spec) == columns_query(SourceTable.of(spec))


def test_buckets_follow_the_source_size() -> None:
    """A power of two per 512 MiB of source, at least one; the default when nothing is known."""
    mib = 2**20
    assert buckets_for(SourceSize(16 * 1024, 0)) == 1  # an empty InnoDB table: one page
    assert buckets_for(SourceSize(512 * mib, None)) == 1
    assert buckets_for(SourceSize(512 * mib + 1, None)) == 2
    assert buckets_for(SourceSize(5 * 1024 * mib, 40_000_000)) == 16
    assert buckets_for(SourceSize(10**15, None)) == MAX_BUCKETS
    assert buckets_for(None) == buckets_for(SourceSize(None, 10)) == DEFAULT_BUCKETS
    assert SourceSize(None, -1).describe() == "unknown size"


def test_jdbc_url_from_flag_settings_or_nothing(tmp_path: Path) -> None:
    env = {
        "CDC_ASSETS_HOME": str(tmp_path / "home"),
        "CDC_ASSETS_SOURCE_URL_SHOP": "jdbc:mariadb://127.0.0.1:3306/shop",
        "CDC_ASSETS_SOURCE_URL_POSTGRESQL_SHOP": "jdbc:postgresql://127.0.0.1:5432/shop",
    }
    settings = load_settings(env)
    assert source_jdbc_url(settings, "postgresql", "shop", "jdbc:x") == "jdbc:x"
    assert source_jdbc_url(settings, "postgresql", "shop").startswith("jdbc:postgresql:")
    assert source_jdbc_url(settings, "mariadb", "shop").startswith("jdbc:mariadb:")
    with pytest.raises(CdcAssetsError, match="set CDC_ASSETS_SOURCE_URL_MYSQL_APP"):
        source_jdbc_url(settings, "mysql", "app")


def test_urls_are_printed_without_passwords() -> None:
    assert (
        redact_url("jdbc:mariadb://127.0.0.1:1/app?user=cdc&password=s3cret&x=1")
        == "jdbc:mariadb://127.0.0.1:1/app?user=cdc&password=***&x=1"
    )
    assert redact_url("jdbc:postgresql://cdc:s3cret@127.0.0.1/shop") == (
        "jdbc:postgresql://cdc:***@127.0.0.1/shop"
    )


def test_a_clashing_spec_is_not_left_behind(tmp_path: Path) -> None:
    users = (PROJECT_ROOT / "table_specs" / "users.yaml").read_text()
    (tmp_path / "users.yaml").write_text(users)
    clash = users.replace("name: users", "name: accounts")  # same topic and sink namespace
    with pytest.raises(SpecError, match="used by both 'accounts' and 'users'"):
        write_spec_checked(tmp_path / "accounts.yaml", clash)
    assert not (tmp_path / "accounts.yaml").exists()
    with pytest.raises(SpecError, match="must match the file name"):
        write_spec_checked(tmp_path / "users.yaml", clash.replace("app.app.users", "other"))
    assert (tmp_path / "users.yaml").read_text() == users  # the previous file is back


class _FakeSpark:
    def get_session(self) -> str:
        return "spark"


def test_import_source_command_writes_validates_and_refuses_to_overwrite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command with the information_schema read replaced by the rows above."""
    import cdc_assets.pipeline.bootstrap.source_schema as source_schema
    import cdc_assets.resources as resources

    calls: list[tuple[Any, ...]] = []

    def fake_create_table(spark: Any, url: str, table: SourceTable) -> str:
        calls.append((spark, url, table))
        return create_table(table, PG_ROWS, ["order_id"])

    def fake_size(spark: Any, url: str, table: SourceTable) -> SourceSize:
        return SourceSize(3 * 2**30, 12_000_000)

    monkeypatch.setattr(source_schema, "source_create_table", fake_create_table)

    def fake_identity(spark: Any, url: str, table: SourceTable) -> SourceIdentity:
        # a column dropped before onboarding left its number 6 unused
        numbers = [n if n < 6 else n + 1 for n in range(1, len(PG_ROWS) + 1)]
        return SourceIdentity(
            {r["name"]: n for r, n in zip(PG_ROWS, numbers, strict=True)}, frozenset({6})
        )

    monkeypatch.setattr(source_schema, "source_size", fake_size)
    monkeypatch.setattr(source_schema, "source_identity", fake_identity)
    monkeypatch.setattr(resources, "build_resources", lambda _: {"spark": _FakeSpark()})
    monkeypatch.setenv(
        "CDC_ASSETS_SOURCE_URL_POSTGRESQL_SHOP", "jdbc:postgresql://h/shop?password=pw"
    )
    # main() exports --home/--specs for Dagster code it loads; set them through
    # monkeypatch so they are undone and later tests do not see these directories.
    monkeypatch.setenv(ENV_HOME, str(tmp_path / "home"))
    monkeypatch.setenv(ENV_SPECS, str(tmp_path))
    args = ["--home", str(tmp_path / "home"), "--specs", str(tmp_path)]
    command = [*args, "specs", "import-source", "--connector", "postgresql"]
    command += ["--database", "shop", "--table", "orders", "--namespace", "sales"]
    assert main(command) == 0
    out, err = capsys.readouterr()
    written = load_spec(tmp_path / "orders.yaml")
    assert out == (tmp_path / "orders.yaml").read_text()
    assert out.startswith("# orders version 1: public.orders in postgresql database shop,\n")
    assert "password=***" in err
    assert "pw" not in err.replace("password", "")
    source = SourceTable("postgresql", "shop", "orders")
    assert calls == [("spark", "jdbc:postgresql://h/shop?password=pw", source)]
    assert written.source.topic == "shop.public.orders"
    assert written.source.schema_ == "public"
    assert written.sink.namespace == "sales"
    # 3 GiB on the source: six 512 MiB shares, the next power of two.
    assert written.base.buckets == 8
    assert "base: bucket(8, order_id), for 3,072.0 MiB, about 12,000,000 rows" in err
    same_shape(written, example("orders"))
    # each column's PostgreSQL number, by which a later rename or drop is proved
    assert [c.source_attnum for c in written.columns] == [1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12]

    # A second import stops before reading anything; --force replaces the file.
    assert main(command) == 2
    assert "orders.yaml exists; pass --force" in " ".join(capsys.readouterr().out.split())
    assert len(calls) == 1
    assert main([*command[:-2], "--topic-prefix", "pg", "--force"]) == 0
    assert load_spec(tmp_path / "orders.yaml").source.topic == "pg.public.orders"
    assert main([*command, "--buckets", "2", "--force"]) == 0
    assert load_spec(tmp_path / "orders.yaml").base.buckets == 2
    assert "bucket(2, order_id), as given" in capsys.readouterr().err
    assert main([*command, "--schema", "x", "--connector", "mariadb"]) == 2


def test_import_source_parser_needs_the_table() -> None:
    from cdc_assets.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["specs", "import-source", "--connector", "mariadb"])
    args = build_parser().parse_args(
        ["specs", "import-source", "--connector", "mariadb", "--database", "d", "--table", "t"]
    )
    assert isinstance(args, argparse.Namespace)
    assert (args.url, args.topic, args.force) == (None, None, False)
