"""Where a live source database is now, in the ledger's source positions: the low watermark that
stitches a JDBC dump to the change stream (`cdc-assets bootstrap --jdbc-url` without
``--position``).

The ledger orders changes by ``(_seq_major, _seq_minor, _seq_row)``: for the MySQL family the
binlog file number, the start position of the row event (Debezium's ``source.pos``) and the row
within it; for PostgreSQL the LSN of the change's WAL record (Debezium's ``source.lsn``), 0, 0.
A watermark is read *before* the dump starts and must be at or below the position of every change
the dump may miss:

- MariaDB: ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` and its ``Binlog_snapshot_file`` /
  ``Binlog_snapshot_position``: every transaction written to the binlog before that position is
  visible in that snapshot, so it is also visible to the dump's later snapshot. (``SHOW MASTER
  STATUS`` alone is not enough: a transaction is written to the binlog before the storage engine
  commits it, so a dump started in between would miss it while its events sit below the
  position.) No lock is taken.
- MySQL (no snapshot position): ``LOCK TABLES <table> READ`` waits until every transaction writing
  the table has fully committed, then ``SHOW MASTER STATUS`` (8.4: ``SHOW BINARY LOG STATUS``) is
  read and the lock released at once: writers of the table pause for that moment.
- PostgreSQL: ``pg_current_wal_insert_lsn()``. Debezium emits a transaction's changes at its
  commit but with the LSNs of their own WAL records, so a transaction open at the watermark may
  have changes below it and commit after the dump's snapshot. The next transaction id is read
  after the LSN, and the dump waits until every transaction older than it has ended
  (``pg_snapshot_xmin`` of a fresh snapshot passes it).

Measured on the real connectors (cdc_assets_tests/integration/test_sources_bootstrap.py): a
MariaDB transaction committed after the watermark starts with its GTID event exactly at the
watermark position, and its row events, which Debezium reports, come after it; a PostgreSQL
change made after the watermark can have ``source.lsn`` exactly equal to it. So the dump is
stamped just below the watermark, ``(major, minor, -1)``: the upsert skips a change only when
its position is at or below that stamp, and a change at exactly the watermark is newer than the
dump and applied.

Why replaying the changes between the watermark and the dump's snapshot is harmless: the dump
already contains them, but every Debezium event carries the row's full image (after image for
c/u/r, the key for d) and the upsert applies only the newest change of each key, in source
order, over a dumped row stamped older than all of them. So base ends with the newest image of
each changed key: an update seen twice gives the same row; a row deleted after the watermark is
deleted (a delete of a row the dump already lacks changes nothing, and is remembered as a
tombstone); a key deleted and inserted again ends with the insert's image; a row inserted and
deleted in the window is absent. Until the ingest has read past the dump's snapshot, base may
show a key's older image from the window; once it has, base is the source. PostgreSQL TOAST
placeholders (an update that leaves a large value untouched does not send it) keep the stored
value: it is the dump's value, or the newest value a change of the same upsert run sent. Both
are current, since any change of the value after the watermark is itself a change the upsert
reads, and carries the value.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from cdc_assets.errors import CdcAssetsError
from cdc_assets.schema.position import Position
from cdc_assets.spec.information_schema import SourceTable

MysqlMethod = Literal["auto", "snapshot", "lock"]
POLL_S = 0.2

# Spark loads drivers from its own jars, which java.sql.DriverManager does not search: name the
# driver class for the URLs we know.
JDBC_DRIVERS = {
    "jdbc:sqlite:": "org.sqlite.JDBC",
    "jdbc:postgresql:": "org.postgresql.Driver",
    "jdbc:mariadb:": "org.mariadb.jdbc.Driver",
    "jdbc:mysql:": "com.mysql.cj.jdbc.Driver",
}


class WatermarkError(CdcAssetsError):
    """The source cannot tell its position (no binlog, an unknown database kind, a transaction
    that did not end in time): no dump was taken."""


@dataclass(frozen=True)
class Watermark:
    """A source position read before a dump: every change the dump may lack is at or above it."""

    position: Position  # (binlog file number, position, 0) or (LSN, 0, 0)
    reported: str  # as the source reported it: 'mariadb-bin.000003:1962' or '0/19269E8'
    method: str  # how it was read, for the log and the snapshot summary

    @property
    def floor(self) -> Position:
        """The dump's stamp: just below the watermark, so that a change at exactly the watermark
        position (row 0 of an event there, or an LSN equal to it) is newer than the dump."""
        return Position(self.position.major, self.position.minor, -1)

    def describe(self) -> str:
        return f"{self.reported} ({self.method})"


# --- pure ------------------------------------------------------------------------------------


def binlog_file_number(name: str) -> int:
    """The number of a binlog file name, as the ingest reads ``source.file`` (the digits after the
    last dot): ``mariadb-bin.000003`` -> 3."""
    match = re.search(r"\.([0-9]+)$", name.strip())
    if match is None:
        raise WatermarkError(f"binlog file name {name!r} does not end in .<number>")
    return int(match.group(1))


def parse_lsn(text: str) -> int:
    """PostgreSQL's ``X/Y`` LSN text as the number Debezium sends in ``source.lsn``."""
    match = re.fullmatch(r"\s*([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})\s*", text)
    if match is None:
        raise WatermarkError(f"{text!r} is not a PostgreSQL LSN like 0/19269E8")
    return (int(match.group(1), 16) << 32) + int(match.group(2), 16)


def format_lsn(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


def binlog_watermark(file_name: str, position: int | str, method: str) -> Watermark:
    """The watermark of a binlog coordinate (the position where the next event will start)."""
    pos = int(position)
    return Watermark(
        Position(binlog_file_number(file_name), pos, 0), f"{file_name.strip()}:{pos}", method
    )


def gtid_sequence(gtid_list: str, domain: int) -> int:
    """The sequence number of ``domain`` in a MariaDB GTID list ``0-1-57,1-2-9`` (0 when the
    domain has no transaction yet)."""
    for item in (i.strip() for i in gtid_list.split(",")):
        if not item:
            continue
        parts = item.split("-")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            raise WatermarkError(f"{gtid_list!r} is not a MariaDB GTID list")
        if int(parts[0]) == domain:
            return int(parts[2])
    return 0


def gtid_watermark(gtid_list: str, domain: int, method: str) -> Watermark:
    """The watermark of a GTID position for a spec ordered by GTID: the next transaction of the
    domain has sequence number last + 1, so the dump is stamped just below (last + 1, 0, 0)."""
    last = gtid_sequence(gtid_list, domain)
    return Watermark(Position(last + 1, 0, 0), f"GTID {gtid_list or '(empty)'}", method)


def lsn_watermark(lsn_text: str, method: str) -> Watermark:
    return Watermark(Position(parse_lsn(lsn_text), 0, 0), lsn_text.strip(), method)


def jdbc_driver(url: str) -> str | None:
    """The driver class of a JDBC URL we know, else None."""
    return next((d for prefix, d in JDBC_DRIVERS.items() if url.startswith(prefix)), None)


def server_kind(url: str) -> Literal["postgresql", "mysql-family"] | None:
    if url.startswith("jdbc:postgresql:"):
        return "postgresql"
    if url.startswith(("jdbc:mariadb:", "jdbc:mysql:")):
        return "mysql-family"
    return None


def dump_table_ref(url: str, source: SourceTable) -> str:
    """The table as the dump's SELECT names it: PostgreSQL ``"schema"."table"``, MySQL family
    ```db`.`table```. Backticks even for MariaDB, where ``read_jdbc`` turns ANSI_QUOTES on: Spark
    probes the table's columns before it runs that session statement."""
    if server_kind(url) == "postgresql":
        return ".".join('"' + p.replace('"', '""') + '"' for p in (source.pg_schema, source.table))
    return ".".join("`" + p.replace("`", "``") + "`" for p in (source.database, source.table))


# --- one JDBC session in the driver JVM --------------------------------------------------------


class JdbcSession:
    """One JDBC connection in Spark's driver JVM, for statements that must share a session
    (a transaction, a table lock), which Spark's JDBC source cannot do. The drivers are in Spark's
    jars, loaded by Spark's class loader, so the driver class is instantiated directly instead of
    going through java.sql.DriverManager. Values are read as text."""

    def __init__(self, spark: Any, url: str, properties: dict[str, str] | None = None) -> None:
        jvm = spark._jvm
        driver_class = jdbc_driver(url)
        props = {**({"driver": driver_class} if driver_class else {}), **(properties or {})}
        driver_class = props.pop("driver", None)
        if driver_class is None:
            raise WatermarkError(f"no JDBC driver known for {url.split('//')[0]}; name one")
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        driver = jvm.java.lang.Class.forName(driver_class, True, loader).newInstance()
        info = jvm.java.util.Properties()
        for key, value in props.items():
            info.setProperty(key, value)
        self._conn = driver.connect(url, info)
        if self._conn is None:
            raise WatermarkError(f"the JDBC driver {driver_class} does not accept the URL")

    def rows(self, sql: str) -> list[tuple[str | None, ...]]:
        statement = self._conn.createStatement()
        try:
            result = statement.executeQuery(sql)
            width = result.getMetaData().getColumnCount()
            out = []
            while result.next():
                out.append(tuple(result.getString(i + 1) for i in range(width)))
            return out
        finally:
            statement.close()

    def execute(self, sql: str) -> None:
        statement = self._conn.createStatement()
        try:
            statement.execute(sql)
        finally:
            statement.close()

    def close(self) -> None:
        self._conn.close()


@contextmanager
def jdbc_session(
    spark: Any, url: str, properties: dict[str, str] | None = None
) -> Iterator[JdbcSession]:
    session = JdbcSession(spark, url, properties)
    try:
        yield session
    finally:
        session.close()


# --- watermarks ------------------------------------------------------------------------------


def read_watermark(
    spark: Any,
    url: str,
    source: SourceTable,
    *,
    properties: dict[str, str] | None = None,
    timeout_s: float = 300.0,
    mysql_method: MysqlMethod = "auto",
    gtid_domain: int | None = None,
) -> Watermark:
    """The source's low watermark for a dump of ``source`` that starts after this returns.

    ``mysql_method``: ``snapshot`` (MariaDB's consistent-snapshot position), ``lock`` (a short
    read lock of the table, for MySQL), ``auto`` (snapshot on MariaDB, else lock). ``timeout_s``
    bounds the wait for open transactions (PostgreSQL) or for the table lock (MySQL).
    ``gtid_domain``: the spec orders by GTID (``source.order: gtid``, MariaDB): the watermark
    is the consistent snapshot's GTID position in that replication domain.
    """
    kind = server_kind(url)
    if kind is None:
        raise WatermarkError(
            f"cannot read a source position from {url.split('//')[0]} (PostgreSQL, MariaDB and "
            "MySQL can tell theirs): give the dump's position with --position"
        )
    with jdbc_session(spark, url, properties) as session:
        if kind == "postgresql":
            return postgres_watermark(session, timeout_s)
        method = mysql_method
        if method == "auto":
            version = str(session.rows("SELECT VERSION()")[0][0])
            method = "snapshot" if "mariadb" in version.lower() else "lock"
        if gtid_domain is not None:
            if method != "snapshot":
                raise WatermarkError(
                    "source.order: gtid needs MariaDB (its GTID position of a consistent snapshot)"
                )
            return mariadb_watermark(session, gtid_domain)
        if method == "snapshot":
            return mariadb_watermark(session)
        return mysql_lock_watermark(session, source, timeout_s)


def mariadb_watermark(session: JdbcSession, gtid_domain: int | None = None) -> Watermark:
    """MariaDB's binlog position of a consistent snapshot (see the module docstring), or with
    ``gtid_domain`` the GTID position at that point (``BINLOG_GTID_POS``)."""
    session.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
    try:
        status = {str(r[0]): r[1] for r in session.rows("SHOW STATUS LIKE 'binlog_snapshot_%'")}
    finally:
        session.execute("COMMIT")
    file_name = status.get("Binlog_snapshot_file") or ""
    position = status.get("Binlog_snapshot_position") or ""
    if not file_name or not position:
        raise WatermarkError(
            "the server reports no binlog snapshot position: is binary logging on (log_bin) and "
            "is it MariaDB? For MySQL use the lock method"
        )
    if gtid_domain is not None:
        file_text = str(file_name).replace("'", "''")
        rows = session.rows(f"SELECT BINLOG_GTID_POS('{file_text}', {int(str(position))})")
        gtid_list = rows[0][0] if rows else None
        if gtid_list is None:
            raise WatermarkError(
                f"BINLOG_GTID_POS({file_name}, {position}) is NULL: the server cannot map its "
                "snapshot position to a GTID position"
            )
        return gtid_watermark(str(gtid_list), gtid_domain, "MariaDB consistent snapshot, GTID")
    return binlog_watermark(file_name, position, "MariaDB consistent snapshot")


def mysql_lock_watermark(session: JdbcSession, source: SourceTable, timeout_s: float) -> Watermark:
    """SHOW MASTER STATUS under a read lock of the table (see the module docstring)."""
    table = f"`{source.database.replace('`', '``')}`.`{source.table.replace('`', '``')}`"
    session.execute(f"SET SESSION lock_wait_timeout = {max(1, int(timeout_s))}")
    session.execute(f"LOCK TABLES {table} READ")
    try:
        try:
            rows = session.rows("SHOW MASTER STATUS")
        except Exception:  # MySQL 8.4 removed it
            rows = session.rows("SHOW BINARY LOG STATUS")
    finally:
        session.execute("UNLOCK TABLES")
    if not rows or not rows[0][0]:
        raise WatermarkError("the server reports no binlog position: is binary logging on?")
    return binlog_watermark(str(rows[0][0]), str(rows[0][1]), f"read lock of {source.qualified()}")


def postgres_watermark(
    session: JdbcSession, timeout_s: float, *, sleep: Callable[[float], None] = time.sleep
) -> Watermark:
    """pg_current_wal_insert_lsn(), then wait for the transactions open at that moment."""
    lsn = str(session.rows("SELECT pg_current_wal_insert_lsn()::text")[0][0])
    # Read after the LSN: every transaction with a change below it has a smaller id. The
    # statement commits at once (autocommit), so its own id does not hold the wait.
    next_xid = int(str(session.rows("SELECT pg_current_xact_id()::text")[0][0]))
    deadline = time.monotonic() + timeout_s
    while True:
        oldest = int(
            str(session.rows("SELECT pg_snapshot_xmin(pg_current_snapshot())::text")[0][0])
        )
        if oldest >= next_xid:
            break
        if time.monotonic() >= deadline:
            raise WatermarkError(
                f"transaction {oldest}, open when the watermark {lsn} was read, has not ended "
                f"after {timeout_s:.0f} s; a dump now could miss its changes. Let it finish "
                "(or cancel it) and try again, or wait longer (--watermark-timeout)"
            )
        sleep(POLL_S)
    return lsn_watermark(lsn, "WAL insert LSN, open transactions waited for")
