"""The pipeline on real Debezium events converges to the source databases, row for row.

A seeded workload (``cdc_assets_dev.demo.workload``) changes MariaDB (``app.users``,
``shop.order_items``) and PostgreSQL (``shop.public.orders``) through their own clients; the
real Debezium connectors stream it; ingest and upsert build base from the whole topic into a
sink namespace of this module; then every table is read back from the source through JDBC and
compared with base with typed values (``cdc_assets.pipeline.bootstrap.source_compare``). Phases, in
order,
each ending with base equal to the source:

a. 10,000 statements per database;
b. the same while the Kafka Connect worker is killed with SIGKILL and restarted, and the
   connectors are restarted through the REST API: the replays must have happened, and change
   nothing;
c. the pipeline killed in a child process during the ledger write and after the tombstone step
   of the upsert, then run again.

The real-sources stack is the session's: other modules write the same tables and topics before
and after this one, so whole tables are compared and nothing assumes an empty source. The
workload's keys start at ``KEY_BASE``; its own model of those rows must match the source too (a
statement that failed silently would show there). Delivery is awaited with a marker row per
table, inserted and deleted after the workload: its delete is the last event of the table.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from cdc_assets.pipeline.bootstrap.source_compare import (
    compare_source,
    read_base_rows,
    read_source_rows,
    source_url_for,
)
from cdc_assets.pipeline.ingest.ingest import IngestResult, ingest_incremental
from cdc_assets.pipeline.shared.offsets import committed_offsets
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.pipeline.shared.watermark import base_state
from cdc_assets.pipeline.upsert.upsert import build_bucketed, merge_base
from cdc_assets.quality.mirror_diff import base_image, diff_mirror
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.layers import base_layout, ledger_layout
from cdc_assets.settings import ENV_KAFKA_BOOTSTRAP, ENV_PROTECTION_KEY, Settings
from cdc_assets.spec import load_specs
from cdc_assets.spec.ddl_import import with_protections
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.ddl import table_identifier
from cdc_assets_dev.demo.workload import WorkloadGenerator, script
from cdc_assets_dev.stack import connect, sources
from cdc_assets_dev.stack.local_stack import StackState
from cdc_assets_tests.conftest import PROJECT_ROOT
from cdc_assets_tests.support.child import run_until_failpoint

pytestmark = pytest.mark.integration

SEED = 20_261_122
KEY_BASE = 6_000_000_000  # far above the keys other modules write
MARKER_BASE = 6_900_000_000
PHASE_A_STATEMENTS = 10_000
PHASE_B_STATEMENTS = 2_000  # per part; three parts
PHASE_C_STATEMENTS = 1_500
DELIVERY_TIMEOUT_S = 240.0
MARIADB_TABLES = ("users", "order_items")
POSTGRES_TABLES = ("orders",)


@dataclass
class Mirror:
    """This module's view of the real-sources stack: specs in a namespace of their own, the
    workload generators, and what each phase observed."""

    home: Settings
    bootstrap: str
    specs: dict[str, TableSpec]
    urls: dict[str, str]
    mariadb: WorkloadGenerator
    postgres: WorkloadGenerator
    markers: Iterator[int] = field(default_factory=lambda: iter(range(MARKER_BASE, 2**62)))
    ingests: list[IngestResult] = field(default_factory=list)


@pytest.fixture(scope="module")
def mirror(sources_home: Settings, sources_stack: StackState, spark: Any) -> Mirror:
    tag = uuid.uuid4().hex[:6]
    specs = {}
    for spec in load_specs(PROJECT_ROOT / "table_specs"):
        namespace = f"conv_{tag}_{spec.sink.namespace}"
        specs[spec.name] = spec.model_copy(
            update={"sink": spec.sink.model_copy(update={"namespace": namespace})}
        )
        ensure_tables(spark, "lake", specs[spec.name])
    jdbc = sources.jdbc_urls(sources_home)
    urls = {}
    for name, spec in specs.items():
        url = source_url_for(spec, jdbc)
        assert url is not None, (name, jdbc)
        urls[name] = url
    return Mirror(
        home=sources_home,
        bootstrap=sources_stack.bootstrap_servers,
        specs=specs,
        urls=urls,
        mariadb=WorkloadGenerator([specs[n] for n in MARIADB_TABLES], seed=SEED, key_base=KEY_BASE),
        postgres=WorkloadGenerator(
            [specs[n] for n in POSTGRES_TABLES], seed=SEED + 1, key_base=KEY_BASE
        ),
    )


@pytest.fixture(scope="module")
def kafka(mirror: Mirror) -> KafkaResource:
    return KafkaResource(bootstrap_servers=mirror.bootstrap, home=str(mirror.home.home))


# --- the sources -------------------------------------------------------------------------------


def run_workload(mirror: Mirror, statements: int) -> Counter[str]:
    """``statements`` changes per database on both servers at once (each script through its
    client in one call: the client stops at the first error, which fails the test)."""
    scripts = {
        "mariadb": script(mirror.mariadb.statements(statements)),
        "postgres": script(mirror.postgres.statements(statements)),
    }
    failures: list[BaseException] = []

    def execute(server: str) -> None:
        try:
            if server == "mariadb":
                sources.mariadb_execute(mirror.home, scripts[server])
            else:
                sources.postgres_execute(mirror.home, scripts[server], "shop")
        except BaseException as exc:  # re-raised in the test's thread
            failures.append(exc)

    threads = [threading.Thread(target=execute, args=(s,)) for s in scripts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return Counter({s: text.count("\n") for s, text in scripts.items()})


def _marker_sql(table: str, key: int) -> tuple[str, str, str | None]:
    """(SQL that inserts and deletes a marker row, server, database)."""
    if table == "users":
        row = f"INSERT INTO app.users (id, email, created_ms) VALUES ({key}, 'marker', 0);"
        return row + f" DELETE FROM app.users WHERE id = {key};", "mariadb", None
    if table == "order_items":
        row = (
            "INSERT INTO shop.order_items (order_id, line_no, sku, quantity, unit_price, "
            f"added_at) VALUES ({key}, 1, 'marker', 0, 0, '2026-01-01 00:00:00');"
        )
        return row + f" DELETE FROM shop.order_items WHERE order_id = {key};", "mariadb", None
    row = (
        "INSERT INTO public.orders (order_id, user_id, status, amount, currency, placed_at) "
        f"VALUES ({key}, 0, 'marker', 0, 'XXX', now());"
    )
    return row + f" DELETE FROM public.orders WHERE order_id = {key};", "postgres", "shop"


def _consumer(bootstrap: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"converge-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )


def end_offsets(bootstrap: str, topics: list[str]) -> dict[str, int]:
    consumer = _consumer(bootstrap)
    try:
        return {
            t: int(consumer.get_watermark_offsets(TopicPartition(t, 0), timeout=10)[1])
            for t in topics
        }
    finally:
        consumer.close()


def wait_delivered(mirror: Mirror) -> None:
    """Write a marker row into every table and wait until each marker's delete is on its topic:
    the connectors have then streamed everything written before it."""
    topics = {name: spec.source.topic for name, spec in mirror.specs.items()}
    starts = end_offsets(mirror.bootstrap, list(topics.values()))
    pending: dict[str, dict[str, object]] = {}
    for name in topics:
        key = next(mirror.markers)
        sql, server, database = _marker_sql(name, key)
        if server == "mariadb":
            sources.mariadb_execute(mirror.home, sql)
        else:
            sources.postgres_execute(mirror.home, sql, database or "shop")
        key_column = mirror.specs[name].primary_key[0]
        pending[topics[name]] = {key_column: key}
    consumer = _consumer(mirror.bootstrap)
    consumer.assign([TopicPartition(t, 0, starts[t]) for t in pending])
    deadline = time.monotonic() + DELIVERY_TIMEOUT_S
    try:
        while pending and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None or msg.value() is None:
                continue
            event = json.loads(msg.value())["payload"]
            wanted = pending.get(msg.topic())
            image = event.get("before") or {}
            if wanted and event.get("op") == "d" and wanted.items() <= image.items():
                del pending[msg.topic()]
    finally:
        consumer.close()
    assert not pending, f"markers not delivered within {DELIVERY_TIMEOUT_S:.0f} s: {pending}"


# --- the pipeline ------------------------------------------------------------------------------


def ingest_all(mirror: Mirror, spark: Any, iceberg: IcebergCatalogResource, kafka: Any) -> None:
    for spec in mirror.specs.values():
        result = ingest_incremental(spark, "lake", iceberg.load_catalog(), kafka, spec)
        # Real events of tables the spec describes never become dead letters.
        assert result.dead == 0, (spec.name, result.dead_reasons)
        assert result.balanced, result
        mirror.ingests.append(result)


def upsert_all(mirror: Mirror, spark: Any, iceberg: IcebergCatalogResource) -> None:
    for spec in mirror.specs.values():
        build_bucketed(spark, "lake", iceberg.load_catalog(), spec)
        merge_base(spark, "lake", iceberg.load_catalog(), spec)


def assert_converged(mirror: Mirror, spark: Any) -> dict[str, int]:
    """Base equals the source for every table, and the source holds what the workload's model
    says for the keys it wrote; the rows per table."""
    rows = {}
    problems = []
    for name, spec in mirror.specs.items():
        source = read_source_rows(spark, mirror.urls[name], spec)
        diff = diff_mirror(spec, source, read_base_rows(spark, "lake", spec))
        rows[name] = diff.source_rows
        if not diff.equal:
            keys = [*diff.missing_keys, *diff.extra_keys, *(k for k, _ in diff.examples)][:5]
            try:
                story = topic_story(mirror.bootstrap, spec, keys)
            except Exception as exc:  # the diagnosis must not hide the difference
                story = f"    (the topic could not be read: {exc!r})"
            problems.append(diff.summary() + "\n  their events on the topic:\n" + story)
        generator = mirror.mariadb if name in MARIADB_TABLES else mirror.postgres
        key = spec.primary_key[0]
        written = [r for r in source if KEY_BASE <= int(r[key]) < MARKER_BASE]  # type: ignore[call-overload]
        model = diff_mirror(
            spec, generator.rows(name), [base_image(spec, r) for r in written], examples=3
        )
        if not model.equal:
            problems.append("workload model vs source: " + model.summary())
    assert not problems, "\n".join(problems)
    return rows


def topic_story(bootstrap: str, spec: TableSpec, keys: list[Any]) -> str:
    """Every change event of ``keys`` on the spec's topic (offset, op, source position, header
    names), one line each: whether the connector delivered what base lacks. A failure's
    diagnosis, read only when base differs from the source."""
    wanted = {tuple(str(v) for v in k) for k in keys}
    topic = spec.source.topic
    end = end_offsets(bootstrap, [topic])[topic]
    consumer = _consumer(bootstrap)
    lines: list[str] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        offset = -1
        while offset < end - 1:
            msg = consumer.poll(5)
            if msg is None:
                break
            offset = msg.offset()
            if msg.error() is not None or msg.value() is None:
                continue
            event = json.loads(msg.value())["payload"]
            image = event.get("after") or event.get("before") or {}
            key = tuple(str(image.get(c)) for c in spec.primary_key)
            if key in wanted:
                source = event.get("source", {})
                position = [source.get(f) for f in ("file", "pos", "row", "lsn") if f in source]
                names = [h for h, _ in msg.headers() or []]
                headers = [h for h in names if not h.startswith("__debezium.context.")]
                lines.append(f"    {key} @{offset}: {event['op']} {position} {headers}")
    finally:
        consumer.close()
    return "\n".join(lines) or "    (none)"


def replays(mirror: Mirror, starts: dict[str, int]) -> dict[str, int]:
    """Per topic, change events since ``starts`` that repeat an earlier event (same key, op
    and source position): what a connector sent again after a restart."""
    consumer = _consumer(mirror.bootstrap)
    ends = end_offsets(mirror.bootstrap, list(starts))
    counts: dict[str, int] = {}
    try:
        for topic, start in starts.items():
            consumer.assign([TopicPartition(topic, 0, start)])
            seen: set[tuple[object, ...]] = set()
            repeated = 0
            offset = start
            while offset < ends[topic] - 1:
                msg = consumer.poll(5)
                if msg is None:
                    break
                offset = msg.offset()
                if msg.error() is not None or msg.value() is None:
                    continue
                event = json.loads(msg.value())["payload"]
                source = event["source"]
                position = (source.get("file"), source.get("pos"), source.get("row"))
                position += (source.get("lsn"),)
                identity = (msg.key(), event["op"], position)
                repeated += identity in seen
                seen.add(identity)
            counts[topic] = repeated
    finally:
        consumer.close()
    return counts


class Background:
    """A call running in a thread; ``join`` re-raises what it raised."""

    def __init__(self, action: Callable[[], object]) -> None:
        self.error: BaseException | None = None

        def run() -> None:
            try:
                action()
            except BaseException as exc:
                self.error = exc

        self.thread = threading.Thread(target=run)
        self.thread.start()

    def join(self) -> None:
        self.thread.join()
        if self.error is not None:
            raise self.error


# --- phases ------------------------------------------------------------------------------------


def timed(label: str, timings: dict[str, float], action: Callable[[], Any]) -> Any:
    started = time.monotonic()
    try:
        return action()
    finally:
        timings[label] = round(time.monotonic() - started, 1)


def test_a_random_workload_converges(
    mirror: Mirror, spark: Any, iceberg: IcebergCatalogResource, kafka: KafkaResource
) -> None:
    timings: dict[str, float] = {}
    lines = timed("workload", timings, lambda: run_workload(mirror, PHASE_A_STATEMENTS))
    timed("delivery", timings, lambda: wait_delivered(mirror))
    timed("ingest", timings, lambda: ingest_all(mirror, spark, iceberg, kafka))
    timed("upsert", timings, lambda: upsert_all(mirror, spark, iceberg))
    rows = timed("compare", timings, lambda: assert_converged(mirror, spark))
    print(f"phase a: {dict(lines)} script lines, rows {rows}, seconds {timings}")
    # What the demo prints: the comparison's own summary.
    users = mirror.specs["users"]
    summary = compare_source(spark, "lake", users, mirror.urls["users"]).summary()
    assert summary == f"users: source {rows['users']:,} rows, base {rows['users']:,} rows: equal"
    # the whole topic went through: at least one ledger row per change statement
    ledger_rows = sum(r.ledger for r in mirror.ingests)
    assert ledger_rows >= 3 * PHASE_A_STATEMENTS, ledger_rows
    assert all(n > 1_000 for n in rows.values()), rows


def test_a2_a_protected_mirror_of_the_same_stream_equals_the_source_protected(
    mirror: Mirror,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The users stream of real Debezium events into a second mirror whose spec hashes the
    email, encrypts the display name and masks the country: the comparison with the live
    source (which protects the source's values with the same key) finds them equal, and no
    source email is anywhere in base or in the ledger's row images."""
    monkeypatch.setenv(ENV_PROTECTION_KEY, "a key for the converge test's protected mirror")
    users = mirror.specs["users"]
    protect = {"email": "hash", "display_name": "encrypt", "country": "mask_shape"}
    spec = with_protections(users, protect)
    spec = spec.model_copy(
        update={"sink": spec.sink.model_copy(update={"namespace": f"{users.sink.namespace}_p"})}
    )
    ensure_tables(spark, "lake", spec)
    result = ingest_incremental(spark, "lake", iceberg.load_catalog(), kafka, spec)
    assert result.dead == 0, result.dead_reasons
    build_bucketed(spark, "lake", iceberg.load_catalog(), spec)
    merge_base(spark, "lake", iceberg.load_catalog(), spec)
    diff = compare_source(spark, "lake", spec, mirror.urls["users"])
    assert diff.equal, diff.summary()
    assert diff.source_rows > 1_000
    # Long enough not to occur in an image by chance (the workload writes some short ones).
    source_rows = read_source_rows(spark, mirror.urls["users"], users)
    emails = {str(r["email"]) for r in source_rows if len(str(r["email"])) >= 8}
    assert len(emails) > 500
    stored = [str(r["email"]) for r in read_base_rows(spark, "lake", spec)]
    assert all(e.startswith("hmac:1:") for e in stored)
    ledger = table_identifier("lake", ledger_layout(spec))
    images = spark.sql(f"SELECT _row_json FROM {ledger}").collect()
    found = [e for r in images for e in emails if r["_row_json"] and e in r["_row_json"]]
    assert not found[:3]


def test_b_connector_crash_and_restarts_replay_and_still_converge(
    mirror: Mirror, spark: Any, iceberg: IcebergCatalogResource, kafka: KafkaResource
) -> None:
    topics = [s.source.topic for s in mirror.specs.values()]
    starts = end_offsets(mirror.bootstrap, topics)
    timings: dict[str, float] = {}

    # The worker dies while the connectors stream a workload: killed once the topics grow, so
    # records it sent after its last offset commit are sent again by the restarted worker.
    workload = Background(lambda: run_workload(mirror, PHASE_B_STATEMENTS))
    before = sum(end_offsets(mirror.bootstrap, topics).values())
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(0.3)
        if sum(end_offsets(mirror.bootstrap, topics).values()) - before > 300:
            break
    killed = connect.kill_worker(mirror.home)
    workload.join()
    timed("restart", timings, lambda: connect.restart_worker(mirror.home, mirror.bootstrap))
    pid, port = connect.running_worker(mirror.home)
    assert pid != killed

    # A graceful restart of each connector through the REST API in the middle of the next part.
    workload = Background(lambda: run_workload(mirror, PHASE_B_STATEMENTS))
    time.sleep(2)
    for name in ("cdc-postgres", "cdc-mariadb"):
        connect.restart_connector(port, name)
    workload.join()
    run_workload(mirror, PHASE_B_STATEMENTS)

    timed("delivery", timings, lambda: wait_delivered(mirror))
    repeated = replays(mirror, starts)
    assert sum(repeated.values()) > 0, f"no event was sent twice after the crash: {repeated}"
    timed("ingest", timings, lambda: ingest_all(mirror, spark, iceberg, kafka))
    timed("upsert", timings, lambda: upsert_all(mirror, spark, iceberg))
    rows = timed("compare", timings, lambda: assert_converged(mirror, spark))
    print(f"phase b: replayed events {repeated}, rows {rows}, seconds {timings}")


INGEST_ALL = """
import json
from cdc_assets.pipeline.ingest.ingest import ingest_incremental
for path in {paths!r}:
    s = TableSpec.model_validate_json(open(path).read())
    ingest_incremental(spark, "lake", res["iceberg"].load_catalog(), res["kafka"], s)
"""

UPSERT_ALL = """
from cdc_assets.pipeline.upsert.upsert import build_bucketed, merge_base
for path in {paths!r}:
    s = TableSpec.model_validate_json(open(path).read())
    build_bucketed(spark, "lake", res["iceberg"].load_catalog(), s)
    merge_base(spark, "lake", res["iceberg"].load_catalog(), s)
"""


def test_c_pipeline_killed_mid_run_then_rerun_converges(
    mirror: Mirror,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    it_settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The child opens the session's catalog (it_settings' home) and the real sources' broker.
    monkeypatch.setenv(ENV_KAFKA_BOOTSTRAP, mirror.bootstrap)
    paths = []
    for name, spec in mirror.specs.items():
        path = tmp_path / f"{name}.json"
        path.write_text(spec.model_dump_json(by_alias=True), encoding="utf-8")
        paths.append(str(path))
    first = next(iter(mirror.specs.values()))
    catalog = iceberg.load_catalog()

    def offsets() -> dict[str, dict[int, int]]:
        return {
            n: committed_offsets(catalog.load_table(f"{s.sink.namespace}.{ledger_layout(s).name}"))
            for n, s in mirror.specs.items()
        }

    def states() -> dict[str, str]:
        return {
            n: base_state(catalog.load_table(f"{s.sink.namespace}.{base_layout(s).name}")).token()
            for n, s in mirror.specs.items()
        }

    timings: dict[str, float] = {}
    timed("workload", timings, lambda: run_workload(mirror, PHASE_C_STATEMENTS))
    timed("delivery", timings, lambda: wait_delivered(mirror))
    # Killed inside the first table's ledger write: no table's offsets moved.
    committed = offsets()
    body = INGEST_ALL.format(paths=paths)
    timed(
        "killed ingest",
        timings,
        lambda: run_until_failpoint(it_settings, first, body, "during_ledger_write", tmp_path),
    )
    assert offsets() == committed
    timed("ingest", timings, lambda: ingest_all(mirror, spark, iceberg, kafka))
    assert offsets() != committed

    # Killed in the first table's upsert between the tombstones and the base MERGE.
    bases = states()
    body = UPSERT_ALL.format(paths=paths)
    timed(
        "killed upsert",
        timings,
        lambda: run_until_failpoint(it_settings, first, body, "after_tombstones", tmp_path),
    )
    assert states() == bases
    timed("upsert", timings, lambda: upsert_all(mirror, spark, iceberg))
    assert all(states()[n] != bases[n] for n in mirror.specs)
    rows = timed("compare", timings, lambda: assert_converged(mirror, spark))
    print(f"phase c: rows {rows}, seconds {timings}")
