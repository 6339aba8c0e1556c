"""Onboarding and bootstrap from the live sources (MariaDB and PostgreSQL with real Debezium):

- `specs import-source` reads each example table's information_schema and writes its spec, which
  matches table_specs/ in columns, types, nullability and key;
- a table with rows before its connector starts: Debezium's snapshot (op ``r``) plus the changes
  streamed after it become base == the source table;
- a JDBC dump stitched by a low watermark read from the source before the dump: rows changed
  before, during (between watermark and dump, and a transaction open at the watermark) and
  after the dump, with the Kafka records from before the dump deleted, so that history exists
  only in the dump; base == the source table;
- the watermark against real events: a change right after it is above the dump's stamp.

Base is compared with the source by the project's comparison
(``pipeline.bootstrap.source_compare``).

The example tables belong to the session's real-sources stack, which other modules also change:
every comparison is of the whole table. This module's connectors (registered after rows exist)
write topics of their own, so deleting their old records touches no other module.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from cdc_assets.cli import main
from cdc_assets.pipeline.bootstrap.bootstrap import bootstrap_from_source
from cdc_assets.pipeline.bootstrap.source_compare import compare_source
from cdc_assets.pipeline.bootstrap.source_position import (
    Watermark,
    binlog_file_number,
    jdbc_session,
    read_watermark,
)
from cdc_assets.pipeline.bootstrap.source_schema import import_source_spec
from cdc_assets.pipeline.ingest.ingest import ingest_incremental
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.pipeline.upsert.upsert import build_bucketed, merge_base
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.layers import base_layout, ledger_layout
from cdc_assets.schema.position import Position
from cdc_assets.settings import ENV_HOME, ENV_SPECS, Settings
from cdc_assets.spec import load_spec, load_specs
from cdc_assets.spec.information_schema import SourceTable
from cdc_assets.spec.models import TableSpec
from cdc_assets_dev.stack import sources
from cdc_assets_dev.stack.local_stack import StackState
from cdc_assets_tests.conftest import PROJECT_ROOT
from cdc_assets_tests.integration.test_ingest import read_table
from cdc_assets_tests.support import extra_connector
from cdc_assets_tests.unit.test_import_source import shape

pytestmark = pytest.mark.integration

TAG = uuid.uuid4().hex[:6]
WAIT_S = 60.0
# Keys of this module's rows; other modules' rows stay in the tables and are compared too.
FIRST = 810_000
# A column test_sources.py may have added to MariaDB shop.order_items by now.
ALTER_ADDED = {"gift_wrap"}
Key = tuple[object, ...]


@pytest.fixture(scope="module")
def home(sources_home: Settings, sources_stack: StackState) -> Settings:
    return sources_home


@pytest.fixture(scope="module")
def src_kafka(home: Settings, sources_stack: StackState) -> KafkaResource:
    return KafkaResource(bootstrap_servers=sources_stack.bootstrap_servers, home=str(home.home))


@pytest.fixture(scope="module")
def urls(home: Settings) -> dict[str, str]:
    """JDBC URL (as the cdc user) per server kind, for database app (MariaDB) / shop (PG)."""
    found = {(db, server): url for db, server, url in sources.jdbc_urls(home)}
    return {"mariadb": found[("app", "mariadb")], "postgres": found[("shop", "postgres")]}


def example_specs() -> dict[str, TableSpec]:
    return {s.name: s for s in load_specs(PROJECT_ROOT / "table_specs")}


# --- SQL on the sources ------------------------------------------------------------------------


def maria(home: Settings, sql: str) -> str:
    return sources.mariadb_execute(home, sql, "app")


def pg(home: Settings, sql: str) -> str:
    return sources.postgres_execute(home, sql, "shop")


def user_values(key: int, rng: random.Random) -> str:
    name = "NULL" if key % 5 == 0 else f"'user {key}'"
    country = "NULL" if key % 4 == 0 else f"'{rng.choice(['DE', 'NO', 'GB', 'FR'])}'"
    stamp = "NULL" if key % 3 == 0 else f"'2026-01-{1 + key % 28:02d} 10:{key % 60:02d}:00.125'"
    return (
        f"({key}, 'u{key}@example.org', {name}, {country}, {key % 2}, {rng.randint(0, 99)}, "
        f"{1767225600000 + key}, {stamp})"
    )


def insert_users(home: Settings, keys: range | list[int], seed: int = 1) -> None:
    rng = random.Random(seed)
    maria(home, "INSERT INTO users VALUES " + ", ".join(user_values(k, rng) for k in keys) + ";")


# 400 md5 digests: about 12 KiB that pglz cannot shrink below 2 KiB, so PostgreSQL stores it out
# of line (TOAST) and an update that leaves it alone sends Debezium's placeholder instead.
BIG_NOTE = "(SELECT string_agg(md5(g::text || '{seed}'), '') FROM generate_series(1, 400) g)"


def order_values(key: int, rng: random.Random, big: bool = False) -> str:
    tax = "NULL" if key % 3 == 0 else f"{rng.randint(0, 999)}.{rng.randint(0, 99):02d}"
    rate = "NULL" if key % 4 == 0 else f"0.{rng.randint(0, 9999):04d}"
    shipped = "NULL" if key % 2 else f"'2026-02-{1 + key % 28:02d} 08:00:00.5'"
    delivery = "NULL" if key % 5 == 0 else f"'2026-03-{1 + key % 28:02d}'"
    note = BIG_NOTE.format(seed=key) if big else ("NULL" if key % 2 else f"'note {key}'")
    return (
        f"({key}, {key % 97}, 'new', {rng.randint(1, 10**6)}.{rng.randint(0, 99):02d}, {tax}, "
        f"'EUR', {rate}, '2026-01-02 03:04:05.{key % 1000:03d}+02', {shipped}, {delivery}, "
        f"{note})"
    )


def insert_orders(
    home: Settings, keys: range | list[int], big: frozenset[int] = frozenset(), seed: int = 1
) -> None:
    rng = random.Random(seed)
    values = ", ".join(order_values(k, rng, k in big) for k in keys)
    pg(home, f"INSERT INTO public.orders VALUES {values};")


# --- Kafka -------------------------------------------------------------------------------------


def end_offset(kafka: KafkaResource, topic: str) -> int:
    consumer = Consumer({**kafka.client_conf(), "group.id": f"it-{uuid.uuid4().hex}"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=15)[1])
    finally:
        consumer.close()


def events(kafka: KafkaResource, topic: str, start: int = 0) -> list[dict[str, Any]]:
    """Payloads of the topic's change events from ``start`` (tombstones left out)."""
    consumer = Consumer({**kafka.client_conf(), "group.id": f"it-{uuid.uuid4().hex}"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=15)
        position = max(start, low)
        consumer.assign([TopicPartition(topic, 0, position)])
        out = []
        while position < high:
            msg = consumer.poll(15)
            assert msg is not None, f"{topic}: no record at offset {position}"
            assert msg.error() is None, msg.error()
            position = msg.offset() + 1
            if msg.value() is not None:
                out.append({**json.loads(msg.value())["payload"], "_offset": msg.offset()})
        return out
    finally:
        consumer.close()


def image(event: dict[str, Any]) -> dict[str, Any]:
    return dict(event["after"] if event["op"] != "d" else event["before"])


def wait_for(
    kafka: KafkaResource,
    topic: str,
    op: str,
    key: dict[str, object],
    start: int,
    nth: int = 1,
) -> int:
    """Wait until the connector has delivered the ``nth`` change ``op`` of ``key``; the topic's
    end then (everything the source wrote before that change is below it)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        seen = 0
        for event in events(kafka, topic, start):
            row = image(event)
            if event["op"] == op and all(row.get(k) == v for k, v in key.items()):
                seen += 1
                if seen == nth:
                    return end_offset(kafka, topic)
        time.sleep(0.5)
    raise AssertionError(f"{topic}: no {op} event of {key} within {WAIT_S:.0f} s")


# --- base -------------------------------------------------------------------------------------


def base_rows(iceberg: IcebergCatalogResource, spec: TableSpec) -> dict[Key, dict[str, Any]]:
    layout = base_layout(spec)
    rows = read_table(iceberg, layout.namespace, layout.name)
    keys = [c.sink_name for c in spec.key_columns]
    out = {tuple(r[k] for k in keys): r for r in rows}
    assert len(out) == len(rows), "base holds a key twice"
    return out


def assert_base_is_source(
    spark: Any, iceberg: IcebergCatalogResource, spec: TableSpec, url: str
) -> dict[Key, dict[str, Any]]:
    """Source and base row for row, every spec column with its typed value (the project's
    source comparison); returns base's rows with their change columns."""
    diff = compare_source(spark, "lake", spec, url)
    assert diff.equal, diff.summary()
    assert diff.source_rows > 0
    return base_rows(iceberg, spec)


# --- pipeline ----------------------------------------------------------------------------------


def isolated(spec: TableSpec, label: str) -> TableSpec:
    sink = spec.sink.model_copy(update={"namespace": f"itb_{label}_{uuid.uuid4().hex[:6]}"})
    return spec.model_copy(update={"sink": sink})


def ingest_and_upsert(
    spark: Any, iceberg: IcebergCatalogResource, kafka: KafkaResource, spec: TableSpec
) -> None:
    ingest_incremental(spark, "lake", iceberg.load_catalog(), kafka, spec)
    build_bucketed(spark, "lake", iceberg.load_catalog(), spec)
    merged = merge_base(spark, "lake", iceberg.load_catalog(), spec)
    assert merged.applied or merged.up_to_date


def ledger_rows(iceberg: IcebergCatalogResource, spec: TableSpec) -> list[dict[str, Any]]:
    layout = ledger_layout(spec)
    return read_table(iceberg, layout.namespace, layout.name)


# --- 1. onboarding from the live source --------------------------------------------------------


def test_import_source_matches_the_example_specs(
    home: Settings,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`cdc-assets specs import-source` on each example table. The command runs in this process
    on the session's Spark (a second session would re-point its catalog); URLs come from the
    settings variable (PostgreSQL) and from the local stack (MariaDB)."""
    import cdc_assets.resources as resources

    class SessionSpark:
        def get_session(self) -> Any:
            return spark

    monkeypatch.setattr(resources, "build_resources", lambda _: {"spark": SessionSpark()})
    monkeypatch.setenv(ENV_HOME, str(home.home))
    monkeypatch.setenv(ENV_SPECS, str(tmp_path))
    pg_url = next(u for db, s, u in sources.jdbc_urls(home) if s == "postgres")
    monkeypatch.setenv("CDC_ASSETS_SOURCE_URL_POSTGRESQL_SHOP", pg_url)
    for name, spec in example_specs().items():
        src = spec.source
        command = ["specs", "import-source", "--connector", src.connector]
        command += ["--database", src.database, "--table", src.table]
        command += ["--schema", src.schema_] if src.schema_ else []
        assert main(command) == 0, capsys.readouterr()
        out, err = capsys.readouterr()
        assert f"wrote {tmp_path / (name + '.yaml')}" in err
        assert "password=***" in err
        imported = load_spec(tmp_path / f"{name}.yaml")
        assert out == (tmp_path / f"{name}.yaml").read_text(encoding="utf-8")
        columns = shape(imported)
        if name == "order_items":  # test_sources.py's ALTER may have added its column at the end
            columns = [c for c in columns if c[1] not in ALTER_ADDED]
        assert columns == shape(spec), (name, out)
        assert imported.primary_key == spec.primary_key
        assert (imported.source.topic, imported.sink.namespace) == (src.topic, spec.sink.namespace)
        assert (imported.source.database, imported.source.schema_) == (src.database, src.schema_)
        assert imported.spec_version == 1
        # A few dozen rows on the source: one bucket, sized from the database's estimate.
        assert imported.base.buckets == 1
        assert f"base: bucket(1, {imported.bucket_column.name}), for " in err
    # The directory of imported specs loads as a whole; a second import is refused.
    assert len(load_specs(tmp_path)) == 3
    again = ["specs", "import-source", "--connector", "postgresql", "--database", "shop"]
    assert main([*again, "--table", "orders"]) == 2
    assert "orders.yaml exists; pass --force" in " ".join(capsys.readouterr().out.split())


# --- connectors of this module, registered while the tables hold rows --------------------------

SEEDED = range(FIRST + 1, FIRST + 31)
SEEDED_BIG = frozenset({FIRST + 1, FIRST + 2})  # orders with TOASTed notes


@pytest.fixture(scope="module")
def connectors(
    home: Settings, sources_stack: StackState, src_kafka: KafkaResource
) -> Iterator[dict[str, extra_connector.ExtraConnector]]:
    """One MariaDB (app.users) and one PostgreSQL (public.orders) connector of this module,
    started after rows were inserted, so their snapshots read those rows."""
    insert_users(home, SEEDED)
    insert_orders(home, SEEDED, big=SEEDED_BIG)
    started: dict[str, extra_connector.ExtraConnector] = {}
    try:
        for server, table in (("mariadb", "app.users"), ("postgres", "public.orders")):
            started[server] = extra_connector.register(
                home,
                sources_stack.bootstrap_servers,
                server,
                TAG,
                [table],
            )
        yield started
    finally:
        admin = src_kafka.admin()
        for extra in started.values():
            extra_connector.remove(home, extra, admin)
        if "postgres" in started:
            assert not extra_connector.slot_exists(home, f"it_{TAG}")


def onboard(
    spark: Any, urls: dict[str, str], extra: extra_connector.ExtraConnector, label: str
) -> TableSpec:
    """The table's spec as `specs import-source` makes it, on the connector's topic, with a
    namespace of its own, and its Iceberg tables."""
    if extra.server == "mariadb":
        source, topic = SourceTable("mariadb", "app", "users"), extra.topic("app", "users")
    else:
        source = SourceTable("postgresql", "shop", "orders", "public")
        topic = extra.topic("public", "orders")
    spec, _ = import_source_spec(spark, urls[extra.server], source, topic=topic)
    spec = isolated(spec, label)
    ensure_tables(spark, "lake", spec)
    return spec


# --- 2a. Debezium's snapshot, then the stream --------------------------------------------------


def test_debezium_snapshot_then_stream_converge_to_the_source(
    home: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    src_kafka: KafkaResource,
    connectors: dict[str, extra_connector.ExtraConnector],
    urls: dict[str, str],
) -> None:
    specs = {s: onboard(spark, urls, c, f"snap{s[0]}") for s, c in connectors.items()}
    key_of = {"mariadb": "id", "postgres": "order_id"}
    for server, spec in specs.items():
        reads = {image(e)[key_of[server]] for e in events(src_kafka, spec.source.topic)}
        assert set(SEEDED) <= reads, f"{server}: the snapshot did not read every seeded row"
        assert {e["op"] for e in events(src_kafka, spec.source.topic)} == {"r"}
    starts = {s: end_offset(src_kafka, spec.source.topic) for s, spec in specs.items()}
    new = FIRST + 31
    maria(
        home,
        f"""
        UPDATE users SET login_count = login_count + 1, display_name = 'changed'
          WHERE id BETWEEN {FIRST + 1} AND {FIRST + 5};
        DELETE FROM users WHERE id IN ({FIRST + 6}, {FIRST + 7});
        INSERT INTO users VALUES {user_values(new, random.Random(3))};
        """,
    )
    pg(
        home,
        f"""
        UPDATE public.orders SET status = 'paid' WHERE order_id IN ({FIRST + 1}, {FIRST + 3});
        DELETE FROM public.orders WHERE order_id = {FIRST + 4};
        INSERT INTO public.orders VALUES {order_values(new, random.Random(3))};
        """,
    )
    for server, spec in specs.items():
        wait_for(src_kafka, spec.source.topic, "c", {key_of[server]: new}, starts[server])
        ingest_and_upsert(spark, iceberg, src_kafka, spec)
    users = assert_base_is_source(spark, iceberg, specs["mariadb"], urls["mariadb"])
    orders = assert_base_is_source(spark, iceberg, specs["postgres"], urls["postgres"])
    # Rows untouched since the snapshot hold its read; changed ones the newest change.
    assert users[(FIRST + 10,)]["_op"] == "r"
    assert users[(FIRST + 1,)]["_op"] == "u"
    assert orders[(new,)]["_op"] == "c"
    # The update of a TOASTed row sent the placeholder; base kept the note the snapshot read.
    update = [
        e
        for e in events(src_kafka, specs["postgres"].source.topic, starts["postgres"])
        if e["op"] == "u" and e["after"]["order_id"] == FIRST + 1
    ]
    assert update[-1]["after"]["note"] == "__debezium_unavailable_value"
    note = orders[(FIRST + 1,)]["note"]
    assert isinstance(note, str)
    assert len(note) == 400 * 32


# --- 2b. a JDBC dump stitched by the source's watermark ----------------------------------------


def _wait_until(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"{what} within {WAIT_S:.0f} s"
        time.sleep(0.1)


def _users_script(k: int) -> dict[str, str]:
    rng = random.Random(k)
    return {
        "before": f"""
            INSERT INTO users VALUES {", ".join(user_values(i, rng) for i in range(k + 1, k + 11))};
            UPDATE users SET login_count = login_count + 10 WHERE id BETWEEN {k + 1} AND {k + 3};
            DELETE FROM users WHERE id IN ({k + 4}, {k + 5});
            INSERT INTO users VALUES {user_values(k + 5, rng)};
            UPDATE users SET updated_at = '1582-10-10 08:00:00.250' WHERE id = {k + 6};
            """,
        "open": f"""
            START TRANSACTION;
            UPDATE users SET display_name = 'in-flight' WHERE id = {k + 7};
            INSERT INTO users VALUES {user_values(k + 20, rng)};
            DO SLEEP(3);
            COMMIT;
            """,
        "during": f"""
            UPDATE users SET login_count = login_count + 100 WHERE id = {k + 1};
            DELETE FROM users WHERE id = {k + 2};
            INSERT INTO users VALUES {user_values(k + 11, rng)};
            DELETE FROM users WHERE id = {k + 3};
            INSERT INTO users VALUES {user_values(k + 3, rng)};
            """,
        "after": f"""
            UPDATE users SET login_count = login_count + 1000, country = NULL WHERE id = {k + 1};
            UPDATE users SET updated_at = '0001-01-01 00:00:00' WHERE id = {k + 8};
            DELETE FROM users WHERE id = {k + 11};
            INSERT INTO users VALUES {user_values(k + 12, rng)};
            """,
    }


# Values before the Gregorian calendar's start (1582-10-15), which PostgreSQL keeps in the
# proleptic Gregorian calendar and java.sql's types in the Julian one: one row of the dump and one
# streamed change hold them (Debezium's snapshot of them is off by days: docs/debezium.md).
_ANCIENT = (
    "placed_at = '1500-03-01 12:00:00+00', shipped_at = '0001-01-01 00:00:00', "
    "delivery_date = '1582-10-10'",
    "placed_at = '0001-01-01 00:00:00+00', shipped_at = '1582-10-10 06:30:00', "
    "delivery_date = '0001-01-01'",
)
_ANCIENT_VALUES = {
    6: (datetime(1500, 3, 1, 12, tzinfo=UTC), datetime(1, 1, 1), date(1582, 10, 10)),
    8: (datetime(1, 1, 1, tzinfo=UTC), datetime(1582, 10, 10, 6, 30), date(1, 1, 1)),
}


def _orders_script(k: int) -> dict[str, str]:
    rng = random.Random(k)
    big = {k + 1, k + 2, k + 9}
    rows = ", ".join(order_values(i, rng, i in big) for i in range(k + 1, k + 11))
    return {
        "before": f"""
            INSERT INTO public.orders VALUES {rows};
            UPDATE public.orders SET amount = amount + 10
              WHERE order_id BETWEEN {k + 1} AND {k + 3};
            DELETE FROM public.orders WHERE order_id IN ({k + 4}, {k + 5});
            INSERT INTO public.orders VALUES {order_values(k + 5, rng)};
            UPDATE public.orders SET {_ANCIENT[0]} WHERE order_id = {k + 6};
            """,
        "open": f"""
            BEGIN;
            UPDATE public.orders SET status = 'in-flight' WHERE order_id = {k + 7};
            INSERT INTO public.orders VALUES {order_values(k + 20, rng)};
            SELECT pg_sleep(3);
            COMMIT;
            """,
        # k+1 holds a TOASTed note: its updates below send Debezium's placeholder.
        "during": f"""
            UPDATE public.orders SET status = 'packed' WHERE order_id = {k + 1};
            DELETE FROM public.orders WHERE order_id = {k + 2};
            INSERT INTO public.orders VALUES {order_values(k + 11, rng)};
            DELETE FROM public.orders WHERE order_id = {k + 3};
            INSERT INTO public.orders VALUES {order_values(k + 3, rng, big=True)};
            """,
        "after": f"""
            UPDATE public.orders SET status = 'shipped', tax = NULL WHERE order_id = {k + 1};
            UPDATE public.orders SET note = 'short again' WHERE order_id = {k + 9};
            UPDATE public.orders SET {_ANCIENT[1]} WHERE order_id = {k + 8};
            DELETE FROM public.orders WHERE order_id = {k + 11};
            INSERT INTO public.orders VALUES {order_values(k + 12, rng)};
            """,
    }


def _running(home: Settings, server: str) -> bool:
    """Whether the open transaction's script reached its sleep (its writes are done)."""
    if server == "mariadb":
        out = sources.mariadb_execute(
            home,
            "SELECT count(*) FROM information_schema.processlist WHERE info LIKE 'DO SLEEP(%';",
        )
    else:
        out = pg(
            home,
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(%' "
            "AND state = 'active' AND pid <> pg_backend_pid();",
        )
    return out.strip() == "1"


@pytest.mark.parametrize("server", ["mariadb", "postgres"])
def test_jdbc_dump_is_stitched_by_the_source_watermark(
    server: str,
    home: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    src_kafka: KafkaResource,
    connectors: dict[str, extra_connector.ExtraConnector],
    urls: dict[str, str],
) -> None:
    extra = connectors[server]
    spec = onboard(spark, urls, extra, f"dump{server[0]}")
    topic, key = spec.source.topic, spec.primary_key[0]
    k = FIRST + 100
    script = _users_script(k) if server == "mariadb" else _orders_script(k)
    run = (lambda sql: maria(home, sql)) if server == "mariadb" else (lambda sql: pg(home, sql))

    start = end_offset(src_kafka, topic)
    run(script["before"])
    # The last change before: k+6's update, the script's last statement (waiting for an earlier
    # one left the update above the cut when the connector delivered it a moment later, and the
    # ledger then held a change of a row the test leaves alone since the dump).
    cut = wait_for(src_kafka, topic, "u", {key: k + 6}, start)

    # A transaction open at the watermark: its writes happen before it, its commit after.
    failures: list[BaseException] = []

    def open_transaction() -> None:
        try:
            run(script["open"])
        except BaseException as err:  # the test's thread reports it
            failures.append(err)

    thread = threading.Thread(target=open_transaction)
    thread.start()
    _wait_until("the open transaction's writes", lambda: _running(home, server))
    marks: list[Watermark] = []

    def during(mark: Watermark) -> None:
        marks.append(mark)
        run(script["during"])

    result = bootstrap_from_source(
        spark,
        "lake",
        iceberg.load_catalog(),
        spec,
        urls[server],
        progress=False,
        before_dump=during,
    )
    thread.join()
    assert not failures, failures
    run(script["after"])
    wait_for(src_kafka, topic, "c", {key: k + 12}, cut)
    assert result.watermark is not None
    mark = result.watermark
    assert marks == [mark]
    assert result.position == mark.floor == Position(mark.position.major, mark.position.minor, -1)
    base = iceberg.load_catalog().load_table(f"{spec.sink.namespace}.{spec.name}")
    summaries = [s.summary.additional_properties for s in base.metadata.snapshots if s.summary]
    boot = [p for p in summaries if p.get("cdc.kind") == "bootstrap"]
    assert [(p["cdc.floor"], p["cdc.bootstrap-watermark"]) for p in boot] == [
        (mark.floor.text(), mark.describe())
    ]

    # Kafka's retention took every record from before the dump: that history is only in it.
    admin = src_kafka.admin()
    deleted = admin.delete_records([TopicPartition(topic, 0, cut)])
    assert next(iter(deleted.values())).result(30).low_watermark == cut

    ingest_and_upsert(spark, iceberg, src_kafka, spec)
    rows = assert_base_is_source(spark, iceberg, spec, urls[server])

    ledger = ledger_rows(iceberg, spec)
    assert min(r["_kafka_offset"] for r in ledger) == cut

    def position(row: dict[str, Any]) -> Position:
        return Position(row["_seq_major"], row["_seq_minor"], row["_seq_row"])

    # A row inserted before the dump and left alone since: from the dump, stamped at the floor,
    # with no change of it in the ledger.
    assert (rows[(k + 6,)]["_op"], position(rows[(k + 6,)])) == ("r", mark.floor)
    assert not [r for r in ledger if r[key] == k + 6]
    # The changes between the watermark and the dump are replayed onto the dumped rows.
    window = [r for r in ledger if r[key] in (k + 1, k + 2, k + 3, k + 11)]
    assert window
    assert all(position(r) > mark.floor for r in window)
    # The open transaction changed k+7. On MariaDB it reached the binlog only at its commit,
    # after the watermark, so its change is above it and applied. On PostgreSQL its change
    # has its WAL record's LSN, below the watermark: the upsert skips it, and only the wait
    # for open transactions before the dump put its value in base.
    flight = [r for r in ledger if r[key] == k + 7]
    assert len(flight) == 1
    if server == "mariadb":
        assert position(flight[0]) > mark.floor
        assert rows[(k + 7,)]["display_name"] == "in-flight"
        # Pre-Gregorian date-times from the dump (k+6) and the stream (k+8); year 1 is not
        # taken for a two-digit year (the connector's enable.time.adjuster is off).
        assert rows[(k + 6,)]["updated_at"] == datetime(1582, 10, 10, 8, 0, 0, 250000)
        assert rows[(k + 8,)]["updated_at"] == datetime(1, 1, 1)
    else:
        assert position(flight[0]) <= mark.floor
        assert rows[(k + 7,)]["status"] == "in-flight"
        assert rows[(k + 7,)]["_op"] == "r"
        # TOAST: k+1's note came from the dump; every later update sent the placeholder.
        note = rows[(k + 1,)]["note"]
        assert isinstance(note, str)
        assert len(note) == 400 * 32
        assert rows[(k + 1,)]["status"] == "shipped"
        assert [r["_unavailable"] for r in ledger if r[key] == k + 1] == ["note", "note"]
        # Pre-Gregorian values, from the dump (k+6) and from the stream (k+8), as the source
        # holds them (read back by pyiceberg, not by Spark's JDBC reader).
        for offset, values in _ANCIENT_VALUES.items():
            row = rows[(k + offset,)]
            got = (row["placed_at"], row["shipped_at"], row["delivery_date"])
            assert got == values, (offset, got)


# --- the watermark against real events ---------------------------------------------------------


def test_a_change_right_after_the_watermark_is_above_the_dump_stamp(
    home: Settings,
    spark: Any,
    src_kafka: KafkaResource,
    connectors: dict[str, extra_connector.ExtraConnector],
    urls: dict[str, str],
) -> None:
    users = SourceTable("mariadb", "app", "users")
    snapshot = read_watermark(spark, urls["mariadb"], users, mysql_method="snapshot")
    locked = read_watermark(spark, urls["mariadb"], users, mysql_method="lock")
    assert locked.position == snapshot.position  # nothing was written in between
    topic = connectors["mariadb"].topic("app", "users")
    start = end_offset(src_kafka, topic)
    maria(home, f"INSERT INTO users VALUES {user_values(FIRST + 500, random.Random(5))};")
    wait_for(src_kafka, topic, "c", {"id": FIRST + 500}, start)
    event = events(src_kafka, topic, start)[-1]["source"]
    seen = Position(binlog_file_number(event["file"]), event["pos"], event["row"])
    # The transaction begins with its GTID event exactly at the watermark; Debezium reports the
    # row event after it.
    file_name = snapshot.reported.rsplit(":", 1)[0]
    first = sources.mariadb_execute(
        home, f"SHOW BINLOG EVENTS IN '{file_name}' FROM {snapshot.position.minor} LIMIT 1;"
    ).split("\t")
    assert (first[1], first[2]) == (str(snapshot.position.minor), "Gtid")
    assert seen > snapshot.floor
    assert seen.minor > snapshot.position.minor

    orders = SourceTable("postgresql", "shop", "orders", "public")
    mark = read_watermark(spark, urls["postgres"], orders)
    topic = connectors["postgres"].topic("public", "orders")
    start = end_offset(src_kafka, topic)
    pg(home, f"INSERT INTO public.orders VALUES {order_values(FIRST + 500, random.Random(5))};")
    wait_for(src_kafka, topic, "c", {"order_id": FIRST + 500}, start)
    lsn = int(events(src_kafka, topic, start)[-1]["source"]["lsn"])
    # The change's LSN is at or above the watermark (equal when nothing else wrote WAL first),
    # and the ledger's (lsn, 0, 0) is above the dump's stamp either way.
    assert lsn >= mark.position.major
    assert Position(lsn, 0, 0) > mark.floor
    print(f"watermark {mark.reported} = {mark.position.major}, first change at LSN {lsn}")
    with jdbc_session(spark, urls["postgres"]) as session:
        assert session.rows("SELECT 1::text, NULL")[0] == ("1", None)
