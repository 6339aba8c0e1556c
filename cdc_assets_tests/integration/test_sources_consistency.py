"""Consistent views on a live MariaDB through Debezium, with transactions racing the pipeline.

Two tables of the test's own, orders and their lines, captured by a connector of its own with
Debezium's transaction metadata on. A writer thread runs transactions that keep one invariant:
an order's ``total`` is the sum of its lines' quantities, and every order has a line. Meanwhile
the pipeline ingests, historises and cuts, in an order that changes per cycle. Every read of
the consistent views must hold the invariant (a half-applied transaction breaks it); at the end
the views equal the source, read with its own client.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cdc_assets.pipeline.ingest.ingest import ingest_incremental
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.pipeline.upsert.consistency import update_cut, view_name
from cdc_assets.pipeline.upsert.history import update_history
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.settings import Settings
from cdc_assets.spec.models import TableSpec
from cdc_assets_dev.stack import sources
from cdc_assets_dev.stack.local_stack import StackState
from cdc_assets_tests.support import extra_connector

pytestmark = pytest.mark.integration

MAX_TRANSACTIONS = 2000
CYCLES = 4  # pipeline cycles while the writer runs
TIMEOUT_S = 180.0


def specs_for(database: str, prefix: str, tag: str) -> list[TableSpec]:
    common = {
        "spec_version": 1,
        "sink": {"namespace": f"cons_{tag}"},
        "base": {"buckets": 2},
        "history": {"mode": "scd2"},
        "consistency": {"group": "shop", "transaction_topic": f"{prefix}.transaction"},
    }

    def source(table: str) -> dict[str, str]:
        return {
            "connector": "mariadb",
            "database": database,
            "table": table,
            "topic": f"{prefix}.{database}.{table}",
        }

    orders = {
        **common,
        "name": "orders",
        "source": source("orders"),
        "columns": [
            {"id": 1, "name": "order_id", "type": "bigint", "nullable": False},
            {"id": 2, "name": "total", "type": "int", "nullable": False},
        ],
        "primary_key": ["order_id"],
    }
    lines = {
        **common,
        "name": "order_lines",
        "source": source("order_lines"),
        "columns": [
            {"id": 1, "name": "order_id", "type": "bigint", "nullable": False},
            {"id": 2, "name": "line_no", "type": "int", "nullable": False},
            {"id": 3, "name": "quantity", "type": "int", "nullable": False},
        ],
        "primary_key": ["order_id", "line_no"],
    }
    return [TableSpec.model_validate(orders), TableSpec.model_validate(lines)]


@pytest.fixture(scope="module")
def shop(
    sources_home: Settings, sources_stack: StackState, spark: Any
) -> Iterator[tuple[str, list[TableSpec], KafkaResource]]:
    tag = uuid.uuid4().hex[:6]
    database = f"cons_{tag}"
    sources.mariadb_execute(
        sources_home,
        f"CREATE DATABASE `{database}`; USE `{database}`;"
        "CREATE TABLE orders (order_id BIGINT NOT NULL PRIMARY KEY, total INT NOT NULL);"
        "CREATE TABLE order_lines (order_id BIGINT NOT NULL, line_no INT NOT NULL,"
        " quantity INT NOT NULL, PRIMARY KEY (order_id, line_no));"
        "INSERT INTO orders VALUES (1, 3); INSERT INTO order_lines VALUES (1, 1, 1), (1, 2, 2);",
    )
    prefix = f"cons{tag}"
    kafka = KafkaResource(
        bootstrap_servers=sources_stack.bootstrap_servers, home=str(sources_home.home)
    )
    connector = extra_connector.register(
        sources_home,
        sources_stack.bootstrap_servers,
        "mariadb",
        tag,
        [f"{database}.orders", f"{database}.order_lines"],
        prefix=prefix,
        overrides={"provide.transaction.metadata": "true"},
    )
    specs = specs_for(database, prefix, tag)
    for spec in specs:
        ensure_tables(spark, "lake", spec)
    try:
        yield database, specs, kafka
    finally:
        extra_connector.remove(sources_home, connector, kafka.admin())


def writer(settings: Settings, database: str, seed: int, stop: threading.Event) -> None:
    """Transactions, until ``stop``, that keep total = sum(quantity) per order, with every
    order one line or more: new orders, changed lines, deleted orders."""
    rng = random.Random(seed)
    live = {1: 2}  # order -> lines
    for n in range(MAX_TRANSACTIONS):
        if stop.is_set():
            return
        oid = 100 + n
        choice = rng.random()
        if choice < 0.4 or len(live) < 2:
            count = rng.randint(1, 4)
            values = ", ".join(f"({oid}, {i}, {i})" for i in range(1, count + 1))
            body = (
                f"INSERT INTO orders VALUES ({oid}, {count * (count + 1) // 2});"
                f"INSERT INTO order_lines VALUES {values};"
            )
            live[oid] = count
        elif choice < 0.8:
            target = rng.choice(sorted(live))
            add = rng.randint(1, 5)
            body = (
                f"UPDATE order_lines SET quantity = quantity + {add} "
                f"WHERE order_id = {target} AND line_no = 1;"
                f"UPDATE orders SET total = total + {add} WHERE order_id = {target};"
            )
        else:
            target = rng.choice(sorted(live))
            del live[target]
            body = (
                f"DELETE FROM order_lines WHERE order_id = {target};"
                f"DELETE FROM orders WHERE order_id = {target};"
            )
        sources.mariadb_execute(settings, f"START TRANSACTION; {body} COMMIT;", database)
        time.sleep(rng.random() * 0.3)


def read_views(spark: Any, specs: list[TableSpec]) -> tuple[dict[int, int], dict[Any, int]]:
    orders, lines = specs
    o = spark.sql(f"SELECT * FROM lake.{orders.sink.namespace}.{view_name(orders)}").collect()
    i = spark.sql(f"SELECT * FROM lake.{lines.sink.namespace}.{view_name(lines)}").collect()
    return (
        {r["order_id"]: r["total"] for r in o},
        {(r["order_id"], r["line_no"]): r["quantity"] for r in i},
    )


def assert_whole(orders: dict[int, int], lines: dict[Any, int], when: str) -> None:
    sums: dict[int, int] = {}
    for (oid, _), quantity in lines.items():
        sums[oid] = sums.get(oid, 0) + quantity
    assert sums == orders, f"{when}: orders {orders} lines' sums {sums}"


def test_consistent_views_never_show_half_a_source_transaction(
    shop: tuple[str, list[TableSpec], KafkaResource],
    sources_home: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
) -> None:
    database, specs, kafka = shop
    catalog = iceberg.load_catalog()
    rng = random.Random(11)
    stop = threading.Event()
    thread = threading.Thread(target=writer, args=(sources_home, database, 5, stop), daemon=True)

    def step(kind: str, spec: TableSpec) -> None:
        if kind == "ingest":
            ingest_incremental(spark, "lake", catalog, kafka, spec)
        else:
            update_history(spark, "lake", catalog, spec)

    def cycle(when: str) -> Any:
        work = [(k, s) for k in ("ingest", "history") for s in specs]
        rng.shuffle(work)
        for kind, spec in work:
            step(kind, spec)
        result = update_cut(spark, "lake", catalog, kafka, "shop", specs)
        if result.cut_offset is not None:
            assert_whole(*read_views(spark, specs), when)
        return result

    thread.start()
    moved = 0
    try:
        for n in range(CYCLES):
            moved += int(cycle(f"cycle {n}").moved)
    finally:
        stop.set()
        thread.join()
    # The last transaction: a marker order; once the views show it, everything is in.
    sources.mariadb_execute(
        sources_home,
        "START TRANSACTION; INSERT INTO orders VALUES (999999, 7);"
        "INSERT INTO order_lines VALUES (999999, 1, 7); COMMIT;",
        database,
    )
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        cycle("after the writer")
        orders, lines = read_views(spark, specs)
        if 999999 in orders:
            break
        assert time.monotonic() < deadline, "the marker transaction never reached the views"
        time.sleep(1)
    source_orders = sources.mariadb_execute(
        sources_home, "SELECT order_id, total FROM orders;", database
    )
    source_lines = sources.mariadb_execute(
        sources_home, "SELECT order_id, line_no, quantity FROM order_lines;", database
    )
    assert orders == {
        int(a): int(b) for a, b in (r.split("\t") for r in source_orders.split("\n") if r)
    }
    assert lines == {
        (int(a), int(b)): int(c)
        for a, b, c in (r.split("\t") for r in source_lines.split("\n") if r)
    }
    assert moved >= 2, "the cut moved less than twice while the writer ran"
