"""Real sources end to end: MariaDB and PostgreSQL from Debian's packages, Kafka Connect with the
Debezium connectors, all started by `stack up --sources` on a broker of their own. Rows changed
through the databases' own clients arrive on the specs' topics as Debezium events, and the
project's oracle (what the ingest must do with a record) puts them in the ledger.

The stack is the session's real-sources stack (`sources_stack` in the integration conftest), not
the demo's: the demo writes the same topics there, and these real events would change what the
demo's tests count.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from cdc_assets.schema.wire import TOAST_PLACEHOLDER
from cdc_assets.settings import Settings
from cdc_assets.spec import load_specs
from cdc_assets.spec.ddl_import import plan_from_ddl
from cdc_assets.spec.models import TableSpec
from cdc_assets.spec.schema_change import parse_schema_change
from cdc_assets_dev.demo.events import DebeziumEventFactory, random_row
from cdc_assets_dev.stack import local_process, sources
from cdc_assets_dev.stack.local_stack import StackState, stack_status, stack_up
from cdc_assets_tests.conftest import PROJECT_ROOT
from cdc_assets_tests.support.oracle import Outcome, expected_outcome

pytestmark = pytest.mark.integration

READ_TIMEOUT_S = 60.0


# Columns the schema-change test adds to the live tables.
ALTER_ADDED = {"gift_wrap"}


@pytest.fixture(scope="module")
def home(sources_home: Settings) -> Settings:
    return sources_home


@pytest.fixture(scope="module")
def specs() -> dict[str, TableSpec]:
    return {s.name: s for s in load_specs(PROJECT_ROOT / "table_specs")}


# --- Kafka helpers ---------------------------------------------------------------------------


def _consumer(bootstrap: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-sources-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )


def end_offset(bootstrap: str, topic: str) -> int:
    """The next offset of the topic's only partition (0 when the topic does not exist yet)."""
    consumer = _consumer(bootstrap)
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    except KafkaException:
        return 0
    finally:
        consumer.close()


def read(bootstrap: str, topic: str, start: int, count: int) -> list[Message]:
    """``count`` records of ``topic`` from offset ``start``, waiting for them to arrive."""
    consumer = _consumer(bootstrap)
    consumer.assign([TopicPartition(topic, 0, start)])
    records: list[Message] = []
    deadline = time.monotonic() + READ_TIMEOUT_S
    try:
        while len(records) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                records.append(msg)
    finally:
        consumer.close()
    assert len(records) >= count, (
        f"{topic}: {len(records)} of {count} records from offset {start} within "
        f"{READ_TIMEOUT_S:.0f} s: {[r.value() for r in records]}"
    )
    return records


def payload(msg: Message) -> dict[str, Any]:
    value = msg.value()
    assert value is not None
    parsed: dict[str, Any] = json.loads(value)
    return dict(parsed["payload"])


def outcome(spec: TableSpec, msg: Message) -> Outcome:
    ts = datetime.fromtimestamp(msg.timestamp()[1] / 1000, tz=UTC)
    return expected_outcome(spec, msg.partition(), msg.offset(), ts, msg.key(), msg.value())


def ledger_rows(spec: TableSpec, msgs: list[Message]) -> list[dict[str, object]]:
    """The oracle's ledger row of every change event; tombstones are skipped."""
    rows = []
    for msg in msgs:
        verdict = outcome(spec, msg)
        if msg.value() is None:
            assert verdict.status == "skip"
            assert verdict.reason == "tombstone"
            continue
        assert verdict.status == "ledger", (verdict, msg.value())
        assert verdict.row is not None
        rows.append(verdict.row)
    return rows


# --- tests -----------------------------------------------------------------------------------


def test_stack_up_sources_runs_everything(home: Settings, sources_stack: StackState) -> None:
    status = stack_status(home)
    assert status.healthy, status.render()
    names = {s.name: s.state for s in status.sources.servers}
    assert names == {"mariadb": "running", "postgres": "running", "connect": "running"}
    assert status.sources.connectors == [
        "cdc-mariadb: RUNNING (task 0 RUNNING)",
        "cdc-postgres: RUNNING (task 0 RUNNING)",
    ]
    text = status.render()
    for word in ("mariadb:", "postgres:", "connect:", "cdc-mariadb", "cdc-postgres"):
        assert word in text
    # Every server listens on loopback only, on the ports recorded in the state file.
    recorded = sources.load_state(home)["ports"]
    assert {s.port for s in status.sources.servers} == {
        recorded["mariadb"],
        recorded["postgres"],
        recorded["connect"],
    }
    assert sources.mariadb_execute(home, "SELECT @@bind_address, @@binlog_format;").split() == [
        "127.0.0.1",
        "ROW",
    ]
    settings_rows = sources.postgres_execute(
        home, "SELECT current_setting('listen_addresses'), current_setting('wal_level');"
    )
    assert settings_rows.strip() == "127.0.0.1|logical"
    urls = sources.jdbc_urls(home)
    assert [(db, server) for db, server, _ in urls] == [
        ("app", "mariadb"),
        ("shop", "mariadb"),
        ("shop", "postgres"),
    ]
    assert urls[2][2].startswith(f"jdbc:postgresql://127.0.0.1:{recorded['postgres']}/shop?")
    # A second `stack up --sources` keeps what runs.
    pids = {s.name: s.pid for s in status.sources.servers}
    stack_up(home, sources=True)
    assert {s.name: s.pid for s in stack_status(home).sources.servers} == pids


def test_the_worker_reaches_kafka_through_sasl_ssl_with_its_secrets_in_a_file(
    home: Settings, sources_stack: StackState
) -> None:
    """Kafka Connect as on a company's secured Kafka: the worker, its connectors' clients and
    Debezium's schema history clients use the SASL_SSL listener as the SCRAM user (the events
    the other tests read got through it). No password is in the worker's properties, in a
    connector's config (what the REST API and the config topic hold) or in the process list:
    each names it in the owner-only secrets file through Kafka's FileConfigProvider."""
    from cdc_assets_dev.stack import connect
    from cdc_assets_dev.stack.local_stack import tls_material

    assert sources_stack.sasl_ssl_bootstrap is not None
    material = tls_material(home)
    files = connect.connect_files(home)
    worker = files.worker_properties.read_text(encoding="utf-8")
    assert f"bootstrap.servers={sources_stack.sasl_ssl_bootstrap}" in worker
    for prefix in ("", "producer.", "consumer.", "admin."):
        assert f"{prefix}security.protocol=SASL_SSL" in worker
        assert f"{prefix}sasl.mechanism=SCRAM-SHA-512" in worker
    secrets_file = files.base / connect.SECRETS_NAME
    assert secrets_file.stat().st_mode & 0o077 == 0
    port = connect.running_worker(home)[1]
    configs = {}
    for name in ("cdc-mariadb", "cdc-postgres"):
        status, body = connect.rest(port, "GET", f"/connectors/{name}/config")
        assert status == 200, body
        configs[name] = body
    maria = configs["cdc-mariadb"]
    assert maria["schema.history.internal.kafka.bootstrap.servers"] == (
        sources_stack.sasl_ssl_bootstrap
    )
    for clients in ("producer", "consumer"):
        prefix = f"schema.history.internal.{clients}."
        assert maria[prefix + "security.protocol"] == "SASL_SSL"
        assert maria[prefix + "sasl.jaas.config"].startswith("${file:")
    secrets = (material.password, sources.cdc_password(home))
    pid = connect.running_worker(home)[0]
    cmdline = " ".join(local_process.cmdline(pid))
    for text in (worker, json.dumps(configs), cmdline):
        assert not [s for s in secrets if s in text]


def test_example_tables_exist_as_the_specs_say(
    home: Settings, sources_stack: StackState, specs: dict[str, TableSpec]
) -> None:
    # The live PostgreSQL table, read back from its catalog as a CREATE TABLE, is the spec.
    columns = sources.postgres_execute(
        home,
        "SELECT attname || ' ' || format_type(atttypid, atttypmod) "
        "|| CASE WHEN attnotnull THEN ' NOT NULL' ELSE '' END FROM pg_attribute "
        "WHERE attrelid = 'public.orders'::regclass AND attnum > 0 AND NOT attisdropped "
        "ORDER BY attnum;",
        "shop",
    ).splitlines()
    key = sources.postgres_execute(
        home,
        "SELECT string_agg(a.attname, ', ') FROM pg_index i JOIN pg_attribute a "
        "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
        "WHERE i.indrelid = 'public.orders'::regclass AND i.indisprimary;",
        "shop",
    ).strip()
    live = "CREATE TABLE orders (" + ", ".join([*columns, f"PRIMARY KEY ({key})"]) + ")"
    _, plan = plan_from_ddl(specs["orders"], live)
    assert plan.supported, (live, plan.describe())
    assert not plan.changes, (live, plan.describe())
    for table in sources.EXAMPLE_TABLES:
        _, plan = plan_from_ddl(specs[table.spec_name], table.ddl())
        assert plan.supported, plan.describe()
        assert not plan.changes, plan.describe()
    assert sources.mariadb_execute(home, "SHOW TABLES;", "app").split() == ["users"]
    assert sources.mariadb_execute(home, "SHOW TABLES;", "shop").split() == ["order_items"]


def test_mariadb_users_changes_reach_the_ledger(
    home: Settings, sources_stack: StackState, specs: dict[str, TableSpec]
) -> None:
    spec, topic, bootstrap = specs["users"], "app.app.users", sources_stack.bootstrap_servers
    start = end_offset(bootstrap, topic)
    sources.mariadb_execute(
        home,
        """
        START TRANSACTION;
        INSERT INTO users (id, email, display_name, country, is_active, login_count, created_ms,
                           updated_at)
        VALUES (101, 'ada@example.org', 'Ada', 'GB', 1, 0, 1767225600123,
                '2026-01-01 00:00:00.125'),
               (102, 'bob@example.org', NULL, NULL, 0, 3, 1767225600999, NULL);
        COMMIT;
        UPDATE users SET login_count = login_count + 1, is_active = 0 WHERE id = 101;
        DELETE FROM users WHERE id = 102;
        """,
        "app",
    )
    msgs = read(bootstrap, topic, start, 5)
    assert [payload(m)["op"] if m.value() else None for m in msgs] == ["c", "c", "u", "d", None]
    assert json.loads(msgs[4].key() or b"{}")["payload"] == {"id": 102}
    rows = ledger_rows(spec, msgs)
    first, second, update, delete = rows
    assert first["id"] == 101
    assert first["email"] == "ada@example.org"
    assert first["is_active"] is True
    assert first["login_count"] == 0
    assert first["created_at"] == datetime(2026, 1, 1, 0, 0, 0, 123000, tzinfo=UTC)
    assert first["updated_at"] == datetime(2026, 1, 1, 0, 0, 0, 125000)
    assert second["display_name"] is None
    assert second["is_active"] is False
    assert update["is_active"] is False
    assert update["login_count"] == 1
    assert delete["_op"] == "d"
    assert delete["id"] == 102
    # One multi-row INSERT: the same binlog event, told apart by the row number.
    assert (first["_seq_major"], first["_seq_minor"]) == (
        second["_seq_major"],
        second["_seq_minor"],
    )
    assert (first["_seq_row"], second["_seq_row"]) == (0, 1)
    positions = [(r["_seq_major"], r["_seq_minor"], r["_seq_row"]) for r in rows]
    assert positions == sorted(positions)
    source = payload(msgs[0])["source"]
    assert source["connector"] == "mariadb"
    assert source["file"].startswith("mariadb-bin.")
    assert payload(msgs[0])["transaction"]["id"] == payload(msgs[1])["transaction"]["id"]


def test_mariadb_order_items_changes_and_the_schema_change_topic(
    home: Settings, sources_stack: StackState, specs: dict[str, TableSpec]
) -> None:
    spec, topic, bootstrap = (
        specs["order_items"],
        "shop.shop.order_items",
        sources_stack.bootstrap_servers,
    )
    start = end_offset(bootstrap, topic)
    ddl_start = end_offset(bootstrap, "mariadb")
    sources.mariadb_execute(
        home,
        """
        INSERT INTO order_items VALUES
          (7, 1, 'SKU-1', 4294967295, 12345678.91, '{"color": "red"}',
           '2026-01-02 03:04:05.123456');
        UPDATE order_items SET quantity = 2, unit_price = -0.05 WHERE order_id = 7;
        ALTER TABLE order_items ADD COLUMN gift_wrap BOOLEAN NULL;
        INSERT INTO order_items (order_id, line_no, sku, quantity, unit_price, added_at, gift_wrap)
        VALUES (7, 2, 'SKU-2', 1, 1.00, '2026-01-02 03:04:06', 1);
        DELETE FROM order_items WHERE order_id = 7 AND line_no = 1;
        """,
        "shop",
    )
    msgs = read(bootstrap, topic, start, 5)
    assert [payload(m)["op"] if m.value() else None for m in msgs] == ["c", "u", "c", "d", None]
    created, updated, after_alter, deleted = ledger_rows(spec, msgs)
    assert created["quantity"] == 4294967295  # INT UNSIGNED arrives as int64
    assert created["unit_price"] == Decimal("12345678.91")
    assert json.loads(str(created["attributes"])) == {"color": "red"}
    assert created["added_at"] == datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    assert updated["quantity"] == 2
    assert updated["unit_price"] == Decimal("-0.05")
    # The new column is in the event before the spec knows it: the ledger row is written
    # without it, and the raw image keeps it.
    assert after_alter["line_no"] == 2
    assert "gift_wrap" not in after_alter
    raw_image = after_alter["_row_json"]
    assert isinstance(raw_image, dict)
    assert raw_image["gift_wrap"] == 1
    assert deleted["_op"] == "d"
    assert deleted["line_no"] == 1

    # The schema-change topic (topic.prefix "mariadb") receives the ALTER with the new table.
    ddl_msgs = read(bootstrap, "mariadb", ddl_start, 1)
    alter = payload(ddl_msgs[0])
    assert alter["ddl"] == "ALTER TABLE order_items ADD COLUMN gift_wrap BOOLEAN NULL"
    assert alter["databaseName"] == "shop"
    change = alter["tableChanges"][0]
    assert change["type"] == "ALTER"
    assert change["table"]["columns"][-1]["name"] == "gift_wrap"
    assert outcome(spec, ddl_msgs[0]).reason == "schema change event"
    parsed = parse_schema_change(ddl_msgs[0].value())
    assert [(c.database, c.table) for c in parsed] == [("shop", "order_items")]
    _, plan = plan_from_ddl(spec, parsed[0].create_table, [parsed[0].ddl])
    assert plan.supported, plan.describe()
    assert any("gift_wrap" in line for line in plan.describe().splitlines())


def test_postgres_orders_changes_reach_the_ledger(
    home: Settings, sources_stack: StackState, specs: dict[str, TableSpec]
) -> None:
    spec, topic, bootstrap = specs["orders"], "shop.public.orders", sources_stack.bootstrap_servers
    start = end_offset(bootstrap, topic)
    # 400 md5 digests are about 12 KiB that pglz cannot shrink below 2 KiB: stored out of line
    # (TOAST), so an update that leaves `note` alone does not send it.
    sources.postgres_execute(
        home,
        """
        INSERT INTO public.orders VALUES
          (501, 11, 'new', 1234567890.12, 1.50, 'EUR', 0.1234,
           '2026-01-02 03:04:05.123456+02', '2026-01-03 00:00:00.5', '2026-01-05', 'short');
        INSERT INTO public.orders (order_id, user_id, status, amount, currency, placed_at, note)
        SELECT 502, 12, 'new', 10.00, 'USD', '2026-01-02T00:00:00Z',
               string_agg(md5(g::text), '') FROM generate_series(1, 400) AS g;
        UPDATE public.orders SET status = 'paid' WHERE order_id = 502;
        DELETE FROM public.orders WHERE order_id = 501;
        """,
        "shop",
    )
    msgs = read(bootstrap, topic, start, 5)
    assert [payload(m)["op"] if m.value() else None for m in msgs] == ["c", "c", "u", "d", None]
    small, big, toasted, deleted = ledger_rows(spec, msgs)
    assert small["amount"] == Decimal("1234567890.12")
    assert small["tax"] == Decimal("1.50")
    assert small["discount_rate"] == Decimal("0.1234")
    assert small["placed_at"] == datetime(2026, 1, 2, 1, 4, 5, 123456, tzinfo=UTC)
    assert small["shipped_at"] == datetime(2026, 1, 3, 0, 0, 0, 500000)
    assert small["delivery_date"] == date(2026, 1, 5)
    assert small["currency"] == "EUR"
    assert small["note"] == "short"
    assert isinstance(big["note"], str)
    assert len(big["note"]) == 400 * 32
    # TOAST: the unchanged out-of-line value is Debezium's placeholder, which the ledger marks
    # unavailable instead of storing.
    assert payload(msgs[2])["after"]["note"] == TOAST_PLACEHOLDER
    assert toasted["status"] == "paid"
    assert toasted["note"] is None
    assert toasted["_unavailable"] == "note"
    # REPLICA IDENTITY DEFAULT: an update has no before image; a delete's before image has the
    # key, NOT NULL columns as zero values ("", 0, epoch) and nullable ones as null.
    assert payload(msgs[2])["before"] is None
    before = payload(msgs[3])["before"]
    assert before["order_id"] == 501
    assert before["tax"] is None
    assert before["note"] is None
    assert (before["user_id"], before["status"], before["currency"]) == (0, "", "")
    assert before["placed_at"] == "1970-01-01T00:00:00Z"
    assert deleted["_op"] == "d"
    assert deleted["order_id"] == 501
    lsns = [r["_seq_major"] for r in (small, big, toasted, deleted)]
    assert lsns == sorted(lsns)
    assert all(isinstance(x, int) for x in lsns)


def test_transaction_metadata_and_heartbeat_topics(
    home: Settings, sources_stack: StackState, specs: dict[str, TableSpec]
) -> None:
    bootstrap = sources_stack.bootstrap_servers
    starts = {t: end_offset(bootstrap, t) for t in ("mariadb.transaction", "shop.transaction")}
    users_start = end_offset(bootstrap, "app.app.users")
    orders_start = end_offset(bootstrap, "shop.public.orders")
    sources.mariadb_execute(
        home, "INSERT INTO users (id, email, created_ms) VALUES (201, 'tx@example.org', 1);", "app"
    )
    sources.postgres_execute(
        home,
        "INSERT INTO public.orders (order_id, user_id, status, amount, currency, placed_at) "
        "VALUES (601, 1, 'new', 1, 'EUR', now());",
        "shop",
    )
    user_event = payload(read(bootstrap, "app.app.users", users_start, 1)[0])
    order_event = payload(read(bootstrap, "shop.public.orders", orders_start, 1)[0])

    maria = [
        payload(m) for m in read(bootstrap, "mariadb.transaction", starts["mariadb.transaction"], 2)
    ]
    assert [m["status"] for m in maria] == ["BEGIN", "END"]
    assert maria[0]["id"] == maria[1]["id"] == user_event["transaction"]["id"]  # the GTID
    assert maria[1]["data_collections"] == [{"data_collection": "app.users", "event_count": 1}]

    pg = [payload(m) for m in read(bootstrap, "shop.transaction", starts["shop.transaction"], 2)]
    assert [m["status"] for m in pg] == ["BEGIN", "END"]
    # PostgreSQL's ids are "txId:lsn": BEGIN carries the change events' id, END the commit LSN,
    # so only the txId part ties BEGIN and END together.
    assert pg[0]["id"] == order_event["transaction"]["id"]
    assert pg[0]["id"].split(":")[0] == pg[1]["id"].split(":")[0]
    assert pg[1]["data_collections"] == [{"data_collection": "public.orders", "event_count": 1}]

    # Heartbeats go to topics of their own; on a table topic the oracle would skip them.
    for prefix, spec in (("mariadb", specs["users"]), ("shop", specs["orders"])):
        beat = read(bootstrap, f"__debezium-heartbeat.{prefix}", 0, 1)[0]
        assert set(payload(beat)) == {"ts_ms"}
        assert outcome(spec, beat).reason == "heartbeat"
    tx_record = read(bootstrap, "mariadb.transaction", starts["mariadb.transaction"], 1)[0]
    assert outcome(specs["users"], tx_record).reason == "transaction metadata"


# Column schemas where the real connector and our generator are known to differ.
KNOWN_SCHEMA_DIFFERENCES = {
    # MariaDB's JSON is LONGTEXT with a CHECK: a plain string, not io.debezium.data.Json.
    ("order_items", "attributes"): "name",
}


def test_generated_events_have_the_shape_of_real_ones(
    home: Settings, sources_stack: StackState, specs: dict[str, TableSpec]
) -> None:
    """Every field our generator writes exists in the real event, and each column has the same
    Connect type, semantic name and parameters (real events add ts_us/ts_ns, docs, defaults)."""
    bootstrap = sources_stack.bootstrap_servers
    starts = {name: end_offset(bootstrap, spec.source.topic) for name, spec in specs.items()}
    sources.mariadb_execute(
        home, "INSERT INTO users (id, email, created_ms) VALUES (301, 's@example.org', 1);", "app"
    )
    sources.mariadb_execute(
        home,
        "INSERT INTO order_items (order_id, line_no, sku, quantity, unit_price, added_at) "
        "VALUES (301, 1, 'S', 1, 1, '2026-01-01 00:00:00');",
        "shop",
    )
    sources.postgres_execute(
        home,
        "INSERT INTO public.orders (order_id, user_id, status, amount, currency, placed_at) "
        "VALUES (301, 1, 'new', 1, 'EUR', now());",
        "shop",
    )
    for name, spec in specs.items():
        real_msg = read(bootstrap, spec.source.topic, starts[name], 1)[0]
        real = json.loads(real_msg.value() or b"")
        generated = json.loads(
            DebeziumEventFactory(spec, embed_schema=True)
            .create(random_row(spec, random.Random(7)))
            .value
            or b""
        )
        assert set(generated["payload"]) <= set(real["payload"]), name
        assert set(generated["payload"]["source"]) <= set(real["payload"]["source"]), name
        real_fields = {f["field"]: f for f in real["schema"]["fields"][1]["fields"]}
        gen_fields = {f["field"]: f for f in generated["schema"]["fields"][1]["fields"]}
        assert list(real_fields)[: len(spec.columns)] == list(gen_fields), name
        for column, gen in gen_fields.items():
            for attribute in ("type", "optional", "name", "parameters"):
                if KNOWN_SCHEMA_DIFFERENCES.get((name, column)) == attribute:
                    continue
                assert real_fields[column].get(attribute) == gen.get(attribute), (
                    name,
                    column,
                    attribute,
                    real_fields[column],
                    gen,
                )
        real_key = json.loads(real_msg.key() or b"")["payload"]
        assert set(real_key) == set(spec.primary_key)


def test_snapshot_schema_change_records_plan_no_change(
    home: Settings, sources_stack: StackState, specs: dict[str, TableSpec]
) -> None:
    """The CREATE TABLE records of the connector's first snapshot describe the tables as created
    from the specs' DDL, so the push path should plan no change for them."""
    bootstrap = sources_stack.bootstrap_servers
    records = read(bootstrap, "mariadb", 0, end_offset(bootstrap, "mariadb"))
    plans = []
    for msg in records:
        for change in parse_schema_change(msg.value()):
            if change.table in specs and change.ddl.startswith("CREATE TABLE"):
                _, plan = plan_from_ddl(specs[change.table], change.create_table, [change.ddl])
                plans.append(plan)
    assert len(plans) == 2
    assert all(p.supported and not p.changes for p in plans), [p.describe() for p in plans]


def test_live_sources_information_schema_and_row_counts(
    home: Settings, sources_stack: StackState, specs: dict[str, TableSpec], spark: Any
) -> None:
    """Pull detection and the source checks read the real databases through Spark's JDBC: the
    information_schema of each example table describes its spec (no change), and the row-count
    and column reads agree with the database's own client."""
    from cdc_assets.pipeline.bootstrap.source_schema import source_create_table
    from cdc_assets.pipeline.health.health import source_columns, source_row_count
    from cdc_assets.schema.changes import AddColumn, WidenType

    urls = {(db, server): url for db, server, url in sources.jdbc_urls(home)}
    for spec in specs.values():
        server = "postgres" if spec.source.connector == "postgresql" else "mariadb"
        url = urls[(spec.source.database, server)]
        ddl = source_create_table(spark, url, spec)
        assert ddl is not None
        sensitive = [c.name for c in spec.columns if c.sensitive]
        _, plan = plan_from_ddl(spec, ddl, sensitive=sensitive)
        assert plan.supported, plan.describe()
        # the schema-change test of this module may have added its column already
        added = {c.name for c in plan.changes if isinstance(c, AddColumn)}
        assert added <= ALTER_ADDED, plan.describe()
        assert not [c for c in plan.changes if isinstance(c, WidenType)], plan.describe()
        live = [c.lower() for c in source_columns(spark, url, spec)]
        assert [c for c in live if c not in ALTER_ADDED] == [c.name for c in spec.columns]
        # the database's own client counts the same rows (nothing writes while this test runs)
        if server == "mariadb":
            counted = sources.mariadb_execute(
                home, f"SELECT count(*) FROM `{spec.source.database}`.`{spec.source.table}`;"
            )
        else:
            counted = sources.postgres_execute(
                home,
                f'SELECT count(*) FROM "{spec.source.schema_ or "public"}"."{spec.source.table}";',
                spec.source.database,
            )
        assert source_row_count(spark, url, spec) == int(counted.strip())
