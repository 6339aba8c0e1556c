"""MariaDB replication between the local stack's servers, for failover drills: make a further
server a GTID replica of another, wait until it has caught up, stop the primary, promote the
replica.

A replica starts from the primary's current GTID position and copies nothing older: databases
created on the primary afterwards replicate in full, earlier ones do not exist on the replica.
Every server runs with ``gtid_strict_mode`` and ``log_slave_updates``, so the replica's own
binlog holds the primary's transactions under their original GTIDs (what a Debezium connector
moved to it resumes from) at positions of its own binlog that have nothing to do with the
primary's.
"""

from __future__ import annotations

import signal
import time

from cdc_assets.errors import StackError
from cdc_assets.settings import Settings
from cdc_assets_dev.stack import sources
from cdc_assets_dev.stack.kafka_broker import HOST


def gtid_position(settings: Settings, name: str) -> str:
    """The server's binlog GTID position, e.g. ``0-1-57``."""
    return sources.mariadb_execute(settings, "SELECT @@global.gtid_binlog_pos;", name=name).strip()


def replicate(settings: Settings, replica: str, primary: str = sources.MARIADB) -> str:
    """Make ``replica`` (a running further server) replicate ``primary`` from the primary's
    current GTID position; return that position. The replica's own earlier binlog (its setup)
    is reset first: in strict mode a GTID sequence already used in the domain is refused."""
    if replica == primary:
        raise StackError(f"{replica}: a server cannot replicate itself")
    port = sources.port_of(settings, primary)
    if port is None:
        raise StackError(f"the local MariaDB server {primary!r} was never started")
    start = gtid_position(settings, primary)
    password = sources.cdc_password(settings).replace("'", "''")
    sources.mariadb_execute(
        settings,
        "RESET MASTER;"
        f"SET GLOBAL gtid_slave_pos = '{start}';"
        f"CHANGE MASTER TO MASTER_HOST = '{HOST}', MASTER_PORT = {port}, "
        f"MASTER_USER = '{sources.CDC_USER}', MASTER_PASSWORD = '{password}', "
        "MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1;"
        "START SLAVE;",
        name=replica,
    )
    return start


def wait_caught_up(
    settings: Settings, replica: str, primary: str = sources.MARIADB, timeout_s: float = 60.0
) -> str:
    """Wait until ``replica`` has applied everything ``primary`` has logged now; return that
    GTID position."""
    target = gtid_position(settings, primary)
    answer = sources.mariadb_execute(
        settings, f"SELECT MASTER_GTID_WAIT('{target}', {timeout_s:.0f});", name=replica
    ).strip()
    if answer != "0":
        status = sources.mariadb_execute(settings, "SHOW SLAVE STATUS\\G", name=replica)
        raise StackError(
            f"replica {replica} did not reach {primary}'s GTID position {target} within "
            f"{timeout_s:.0f} s:\n{status}"
        )
    return target


def kill(settings: Settings, name: str) -> None:
    """Stop a server abruptly (SIGKILL), as a crashed primary stops."""
    sources.stop_mariadb(settings, name, signal.SIGKILL)


def promote(settings: Settings, replica: str, timeout_s: float = 60.0) -> str:
    """Turn ``replica`` into a primary: wait until its SQL thread has applied what it received,
    stop replicating and forget the primary; return its GTID position."""
    deadline = time.monotonic() + timeout_s
    while True:
        # The client runs without column names: look for the SQL thread's state in the values.
        status = sources.mariadb_execute(settings, "SHOW SLAVE STATUS\\G", name=replica)
        if "Slave has read all relay log" in status:
            break
        if time.monotonic() > deadline:
            raise StackError(f"replica {replica} did not apply its relay log in time:\n{status}")
        time.sleep(0.2)
    sources.mariadb_execute(settings, "STOP SLAVE; RESET SLAVE ALL;", name=replica)
    return gtid_position(settings, replica)
