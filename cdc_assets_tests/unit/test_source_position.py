"""Low watermarks of live sources without a database: the positions in the ledger's numbering, the
dump's stamp just below them, and the statements each source kind runs (with a scripted JDBC
session), including the wait for PostgreSQL transactions open at the watermark."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cdc_assets.cli import build_parser, main
from cdc_assets.pipeline.bootstrap.source_position import (
    JdbcSession,
    Watermark,
    WatermarkError,
    binlog_file_number,
    binlog_watermark,
    dump_table_ref,
    format_lsn,
    lsn_watermark,
    mariadb_watermark,
    mysql_lock_watermark,
    parse_lsn,
    postgres_watermark,
    server_kind,
)
from cdc_assets.schema.position import Position
from cdc_assets.spec.information_schema import SourceTable
from cdc_assets_tests.conftest import PROJECT_ROOT


class ScriptedSession(JdbcSession):
    """Answers queries from a function of the SQL text and records every statement."""

    def __init__(self, answer: Callable[[str], list[tuple[str | None, ...]]]) -> None:
        self.answer = answer
        self.log: list[str] = []

    def rows(self, sql: str) -> list[tuple[str | None, ...]]:
        self.log.append(sql)
        return self.answer(sql)

    def execute(self, sql: str) -> None:
        self.log.append(sql)
        self.answer(sql)

    def close(self) -> None:
        self.log.append("close")


def test_positions_in_the_ledgers_numbering() -> None:
    assert binlog_file_number("mariadb-bin.000003") == 3
    assert binlog_file_number("binlog.1000042") == 1000042
    with pytest.raises(WatermarkError, match="does not end in"):
        binlog_file_number("mariadb-bin")
    assert parse_lsn("0/19269E8") == 26372584
    assert parse_lsn("1/0") == 1 << 32
    assert format_lsn(parse_lsn("16/B374D848")) == "16/B374D848"
    with pytest.raises(WatermarkError, match="not a PostgreSQL LSN"):
        parse_lsn("26372584")
    assert binlog_watermark("mariadb-bin.000001", "1962", "m").position == Position(1, 1962, 0)
    assert lsn_watermark("0/19269E8", "m").position == Position(26372584, 0, 0)


@pytest.mark.parametrize(
    ("watermark", "skipped", "applied"),
    [
        # MariaDB: the next transaction's GTID event starts at the watermark; Debezium reports
        # its row events (after it) with their rows, and a row event exactly there is newer too.
        (
            binlog_watermark("mariadb-bin.000001", 1962, "m"),
            [Position(1, 1961, 5), Position(1, 1000, 0)],
            [Position(1, 1962, 0), Position(1, 2160, 0), Position(2, 4, 0)],
        ),
        # PostgreSQL: a change after the watermark may have exactly its LSN.
        (
            lsn_watermark("0/19269E8", "m"),
            [Position(26372583, 0, 0)],
            [Position(26372584, 0, 0), Position(26372585, 0, 0)],
        ),
    ],
)
def test_the_dump_is_stamped_just_below_the_watermark(
    watermark: Watermark, skipped: list[Position], applied: list[Position]
) -> None:
    # The upsert skips a change at or below the floor (ledger order: position as a tuple).
    assert all(p <= watermark.floor for p in skipped)
    assert all(p > watermark.floor for p in applied)
    assert watermark.floor.row == -1
    assert Position.parse(watermark.floor.text()) == watermark.floor


def test_dump_table_names_and_server_kinds() -> None:
    users = SourceTable("mariadb", "app", "users")
    orders = SourceTable("postgresql", "shop", "orders")
    assert dump_table_ref("jdbc:mariadb://h/app", users) == "`app`.`users`"
    assert dump_table_ref("jdbc:mysql://h/app", SourceTable("mysql", "a`b", "t")) == "`a``b`.`t`"
    assert dump_table_ref("jdbc:postgresql://h/shop", orders) == '"public"."orders"'
    assert server_kind("jdbc:postgresql://h/shop") == "postgresql"
    assert server_kind("jdbc:mysql://h/app") == "mysql-family"
    assert server_kind("jdbc:sqlite:/tmp/x.db") is None


def test_mariadb_reads_the_position_of_a_consistent_snapshot() -> None:
    def answer(sql: str) -> list[tuple[str | None, ...]]:
        if sql.startswith("SHOW STATUS"):
            return [
                ("Binlog_snapshot_file", "mariadb-bin.000002"),
                ("Binlog_snapshot_position", "77"),
            ]
        return []

    session = ScriptedSession(answer)
    mark = mariadb_watermark(session)
    assert mark.position == Position(2, 77, 0)
    assert mark.reported == "mariadb-bin.000002:77"
    assert session.log == [
        "START TRANSACTION WITH CONSISTENT SNAPSHOT",
        "SHOW STATUS LIKE 'binlog_snapshot_%'",
        "COMMIT",
    ]
    no_binlog = ScriptedSession(
        lambda sql: (
            [("Binlog_snapshot_file", ""), ("Binlog_snapshot_position", "0")]
            if sql.startswith("SHOW")
            else []
        )
    )
    with pytest.raises(WatermarkError, match="binary logging"):
        mariadb_watermark(no_binlog)
    assert no_binlog.log[-1] == "COMMIT"


def test_mysql_reads_the_binlog_position_under_a_read_lock() -> None:
    def answer(sql: str) -> list[tuple[str | None, ...]]:
        if sql == "SHOW MASTER STATUS":
            raise RuntimeError("removed in 8.4")
        if sql == "SHOW BINARY LOG STATUS":
            return [("binlog.000009", "4711", "", "", "")]
        return []

    session = ScriptedSession(answer)
    mark = mysql_lock_watermark(session, SourceTable("mysql", "app", "users"), 30)
    assert mark.position == Position(9, 4711, 0)
    assert session.log == [
        "SET SESSION lock_wait_timeout = 30",
        "LOCK TABLES `app`.`users` READ",
        "SHOW MASTER STATUS",
        "SHOW BINARY LOG STATUS",
        "UNLOCK TABLES",
    ]


def test_postgres_waits_for_the_transactions_open_at_the_watermark() -> None:
    oldest = iter(["740", "744", "745", "746"])

    def answer(sql: str) -> list[tuple[str | None, ...]]:
        if "wal_insert_lsn" in sql:
            return [("0/19269E8",)]
        if "pg_current_xact_id" in sql:
            return [("745",)]
        return [(next(oldest),)]

    naps: list[float] = []
    session = ScriptedSession(answer)
    mark = postgres_watermark(session, 60, sleep=naps.append)
    assert mark.position == Position(26372584, 0, 0)
    # The LSN is read before the next transaction id; then xmin polls until it passes 745.
    assert [s.split("(")[0] for s in session.log] == [
        "SELECT pg_current_wal_insert_lsn",
        "SELECT pg_current_xact_id",
        "SELECT pg_snapshot_xmin",
        "SELECT pg_snapshot_xmin",
        "SELECT pg_snapshot_xmin",
    ]
    assert len(naps) == 2


def test_postgres_gives_up_on_a_transaction_that_stays_open() -> None:
    def answer(sql: str) -> list[tuple[str | None, ...]]:
        if "wal_insert_lsn" in sql:
            return [("0/10",)]
        return [("745",)] if "xact_id" in sql else [("700",)]

    with pytest.raises(WatermarkError, match="transaction 700, open when the watermark 0/10"):
        postgres_watermark(ScriptedSession(answer), 0, sleep=lambda _: None)


def test_bootstrap_command_needs_a_position_for_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CDC_ASSETS_HOME", str(tmp_path))
    monkeypatch.setenv("CDC_ASSETS_SPECS", str(PROJECT_ROOT / "table_specs"))
    assert main(["bootstrap", "users", "--parquet", str(tmp_path)]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "a file dump needs --position" in out
    args = build_parser().parse_args(["bootstrap", "users", "--source"])
    assert (args.from_source, args.position, args.watermark_timeout) == (True, None, 300.0)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bootstrap", "users", "--source", "--jdbc-url", "jdbc:x"])


def test_bootstrap_command_reads_the_watermark_when_no_position_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import cdc_assets.pipeline.bootstrap.bootstrap as bootstrap
    import cdc_assets.resources as resources
    from cdc_assets.pipeline.bootstrap.bootstrap import BootstrapResult

    seen: dict[str, Any] = {}

    def fake(spark: Any, catalog: str, iceberg: Any, spec: Any, url: str, **kw: Any) -> Any:
        seen.update(url=url, spark=spark, **kw)
        mark = binlog_watermark("mariadb-bin.000001", 1962, "MariaDB consistent snapshot")
        return BootstrapResult(spec.name, 3, mark.floor, "jdbc `app`.`users`", 1.0, mark)

    class Spark:
        catalog = type("C", (), {"name": "lake"})()
        # a Spark Connect client has no driver JVM for the watermark's JDBC session
        remote: str | None = "sc://127.0.0.1:15002"

        def model_copy(self, update: dict[str, Any]) -> Any:
            copy = Spark()
            copy.remote = update["remote"]
            return copy

        def get_session(self) -> str:
            return "spark" if self.remote is None else "connect client"

    class Iceberg:
        def load_catalog(self) -> str:
            return "catalog"

    monkeypatch.setattr(bootstrap, "bootstrap_from_source", fake)
    monkeypatch.setattr(
        resources, "build_resources", lambda _: {"spark": Spark(), "iceberg": Iceberg()}
    )
    monkeypatch.setenv("CDC_ASSETS_HOME", str(tmp_path))
    monkeypatch.setenv("CDC_ASSETS_SPECS", str(PROJECT_ROOT / "table_specs"))
    monkeypatch.setenv("CDC_ASSETS_SOURCE_URL_MYSQL_APP", "jdbc:mariadb://127.0.0.1:1/app")
    assert main(["bootstrap", "users", "--source", "--watermark-timeout", "9"]) == 0
    assert seen["url"] == "jdbc:mariadb://127.0.0.1:1/app"
    assert seen["timeout_s"] == 9.0
    assert seen["spark"] == "spark"  # a driver of its own
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "users: 3 rows loaded into base from jdbc `app`.`users` at source position 1:1962:-1" in out
    )
    assert "just below the watermark mariadb-bin.000001:1962 (MariaDB consistent snapshot)" in out
