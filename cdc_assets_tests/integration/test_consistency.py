"""Consistency groups on the real stack: orders and their lines written in shared source
transactions, ingested, historised and cut in random orders; the ``consistent`` views must
always equal the source as it stood right after the cut transaction (never half of one).

The expected state is the generator's own: the source tables after each transaction, kept as
the transactions are built. Seeds are random per run (printed on failure) plus fixed ones.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from confluent_kafka.admin import NewTopic

from cdc_assets.cli import console, main
from cdc_assets.definitions import build_defs
from cdc_assets.jobs.upsert import upsert_assets
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.pipeline.upsert.consistency import (
    ConsistencyError,
    cut_history,
    update_cut,
    view_name,
)
from cdc_assets.pipeline.upsert.history import compare_history, update_history
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.sensors.new_offsets import current_hour_key
from cdc_assets.settings import ENV_HOME, ENV_SPECS, Settings
from cdc_assets.spec.models import TableSpec
from cdc_assets.spec.versions import write_spec
from cdc_assets_dev.demo.events import DebeziumEventFactory, KafkaRecord, produce
from cdc_assets_dev.demo.events.transactions import TransactionLog
from cdc_assets_tests.integration.test_ingest import FOREVER
from cdc_assets_tests.integration.test_upsert import ingest
from cdc_assets_tests.support.daemon import dagster_home, running_daemon

State = dict[str, dict[tuple[Any, ...], Any]]
DAEMON_TIMEOUT_S = 300.0


def group_specs(kafka: KafkaResource) -> tuple[TableSpec, TableSpec, str]:
    """An orders and an order-lines table of one MariaDB server in one group, on fresh topics."""
    tag = uuid.uuid4().hex[:8]
    txn_topic = f"it.txn.{tag}"
    topics = [f"it.orders.{tag}", f"it.lines.{tag}", txn_topic]
    admin = kafka.admin()
    for future in admin.create_topics(
        [NewTopic(t, num_partitions=1, replication_factor=1, config=FOREVER) for t in topics]
    ).values():
        future.result(30)
    group = {"group": "shop", "transaction_topic": txn_topic, "max_lag_seconds": 60}
    common = {
        "spec_version": 1,
        "sink": {"namespace": f"it_{tag}"},
        "history": {"mode": "scd2"},
        "consistency": group,
    }
    orders = TableSpec.model_validate(
        {
            **common,
            "name": "orders",
            "source": {
                "connector": "mariadb",
                "database": "shop",
                "table": "orders",
                "topic": topics[0],
            },
            "columns": [
                {"id": 1, "name": "order_id", "type": "bigint", "nullable": False},
                {"id": 2, "name": "status", "type": "varchar(20)", "nullable": False},
            ],
            "primary_key": ["order_id"],
        }
    )
    lines = TableSpec.model_validate(
        {
            **common,
            "name": "order_lines",
            "source": {
                "connector": "mariadb",
                "database": "shop",
                "table": "order_lines",
                "topic": topics[1],
            },
            "columns": [
                {"id": 1, "name": "order_id", "type": "bigint", "nullable": False},
                {"id": 2, "name": "line_no", "type": "int", "nullable": False},
                {"id": 3, "name": "quantity", "type": "int", "nullable": False},
            ],
            "primary_key": ["order_id", "line_no"],
        }
    )
    return orders, lines, txn_topic


def generate(
    rng: random.Random,
    orders: TableSpec,
    lines: TableSpec,
    count: int,
    factories: tuple[DebeziumEventFactory, DebeziumEventFactory] | None = None,
    state: State | None = None,
) -> tuple[dict[str, list[Any]], list[Any], dict[str, State]]:
    """``count`` transactions over orders and their lines: the data records per table, the
    transaction topic's records and the source state after each transaction (starting from
    ``state``, with the ``factories`` that made it)."""
    f_orders, f_lines = factories or (DebeziumEventFactory(orders), DebeziumEventFactory(lines))
    log = TransactionLog([f_orders, f_lines])
    records: dict[str, list[Any]] = {"orders": [], "order_lines": []}
    state = state or {"orders": {}, "order_lines": {}}
    after: dict[str, State] = {}
    next_id = 1
    for _ in range(count):
        live = sorted(state["orders"])
        choice = rng.random()
        with log.transaction() as txid:
            if not live or choice < 0.45:  # a new order with its lines
                oid = next_id
                next_id += 1
                row = {"order_id": oid, "status": "new"}
                records["orders"].append(f_orders.create(row))
                state["orders"][(oid,)] = "new"
                for n in range(1, rng.randint(1, 4) + 1):
                    line = {"order_id": oid, "line_no": n, "quantity": rng.randint(1, 9)}
                    records["order_lines"].append(f_lines.create(line))
                    state["order_lines"][(oid, n)] = line["quantity"]
            elif choice < 0.8:  # the order moves on and every line changes with it
                (oid,) = rng.choice(live)
                status = rng.choice(["paid", "packed", "shipped"])
                old = {"order_id": oid, "status": state["orders"][(oid,)]}
                records["orders"].append(f_orders.update(old, {**old, "status": status}))
                state["orders"][(oid,)] = status
                for key in sorted(k for k in state["order_lines"] if k[0] == oid):
                    before = {"order_id": oid, "line_no": key[1]}
                    before["quantity"] = state["order_lines"][key]
                    qty = before["quantity"] + 10
                    records["order_lines"].append(
                        f_lines.update(before, {**before, "quantity": qty})
                    )
                    state["order_lines"][key] = qty
            else:  # the order and its lines go
                (oid,) = rng.choice(live)
                for key in sorted(k for k in state["order_lines"] if k[0] == oid):
                    row = {"order_id": oid, "line_no": key[1], "quantity": 0}
                    row["quantity"] = state["order_lines"].pop(key)
                    records["order_lines"].append(f_lines.delete(row))
                old = {"order_id": oid, "status": state["orders"].pop((oid,))}
                records["orders"].append(f_orders.delete(old))
        after[txid] = {t: dict(rows) for t, rows in state.items()}
    return records, log.records, after


def read_views(spark: Any, specs: list[TableSpec]) -> State:
    out: State = {}
    for spec in specs:
        rows = spark.sql(f"SELECT * FROM lake.{spec.sink.namespace}.{view_name(spec)}").collect()
        if spec.name == "orders":
            out[spec.name] = {(r["order_id"],): r["status"] for r in rows}
        else:
            out[spec.name] = {(r["order_id"], r["line_no"]): r["quantity"] for r in rows}
    return out


def check_cut(spark: Any, specs: list[TableSpec], result: Any, after: dict[str, State]) -> None:
    if result.cut_offset is None:
        return
    assert result.txn_id in after, result
    assert read_views(spark, specs) == after[result.txn_id], f"views at {result.txn_id}"


@pytest.mark.parametrize("seed", [7, random.randrange(10**6)])
def test_views_equal_the_source_after_the_cut_transaction_in_any_order(
    spark: Any, iceberg: IcebergCatalogResource, kafka: KafkaResource, seed: int
) -> None:
    rng = random.Random(seed)
    orders, lines, txn_topic = group_specs(kafka)
    specs = [orders, lines]
    for spec in specs:
        ensure_tables(spark, "lake", spec)
    records, txn_records, after = generate(rng, orders, lines, 30)
    queues = {
        orders.source.topic: list(records["orders"]),
        lines.source.topic: list(records["order_lines"]),
        txn_topic: list(txn_records),
    }
    bootstrap = kafka.resolved_bootstrap()
    catalog = iceberg.load_catalog()
    cuts: list[int] = []

    def cut() -> None:
        result = update_cut(spark, "lake", catalog, kafka, "shop", specs)
        check_cut(spark, specs, result, after)
        if result.cut_offset is not None:
            assert not cuts or result.cut_offset >= cuts[-1], f"cut moved back (seed {seed})"
            cuts.append(result.cut_offset)

    steps = [
        lambda: ingest(spark, iceberg, kafka, orders),
        lambda: ingest(spark, iceberg, kafka, lines),
        lambda: update_history(spark, "lake", catalog, orders),
        lambda: update_history(spark, "lake", catalog, lines),
        cut,
    ]
    for _ in range(14):
        topic = rng.choice([t for t, q in queues.items() if q] or [txn_topic])
        # Transaction records in small steps: the histories run ahead of the known transactions.
        most = 4 if topic == txn_topic else max(1, len(queues[topic]) // 2)
        take = rng.randint(1, most)
        chunk, queues[topic] = queues[topic][:take], queues[topic][take:]
        if chunk:
            produce(chunk, topic, bootstrap)
        for step in rng.sample(steps, rng.randint(1, 3)):
            step()
        if rng.random() < 0.5:
            cut()
    for topic, rest in queues.items():
        if rest:
            produce(rest, topic, bootstrap)
    for step in steps:
        step()
    final = update_cut(spark, "lake", catalog, kafka, "shop", specs)
    last = list(after)[-1]
    assert (final.txn_id, final.pending, final.lag_ms) == (last, 0, 0), f"seed {seed}"
    assert read_views(spark, specs) == after[last]
    published = [r["cut_offset"] for r in cut_history(spark, "lake", "shop", specs)]
    assert published == sorted(published)
    for spec in specs:
        comparison = compare_history(spark, "lake", catalog, spec)
        assert (comparison.differences, comparison.open_keys) == (0, 0), comparison.examples
        tags = catalog.load_table(f"{spec.sink.namespace}.{spec.name}_history").metadata.refs
        assert "consistent" in tags


def test_a_missing_change_holds_the_cut_and_shows_as_lag(
    spark: Any, iceberg: IcebergCatalogResource, kafka: KafkaResource
) -> None:
    """A change of a transaction that has not reached a table's ledger holds the cut before
    that transaction, however many later ones are complete: the views show the source right
    before it, although both histories already hold the later transactions."""
    orders, lines, txn_topic = group_specs(kafka)
    specs = [orders, lines]
    for spec in specs:
        ensure_tables(spark, "lake", spec)
    records, txn_records, after = generate(random.Random(3), orders, lines, 8)
    order = list(after)

    def txn_of(record: Any) -> str:
        return str(json.loads(record.value)["transaction"]["id"])

    # A line of the third transaction with lines, not the first one: the cut has somewhere to be.
    with_lines = list(dict.fromkeys(txn_of(r) for r in records["order_lines"]))
    held = next(r for r in records["order_lines"] if txn_of(r) == with_lines[2])
    blocked = order.index(txn_of(held))
    bootstrap = kafka.resolved_bootstrap()
    produce(records["orders"], orders.source.topic, bootstrap)
    produce([r for r in records["order_lines"] if r is not held], lines.source.topic, bootstrap)
    produce(txn_records, txn_topic, bootstrap)
    catalog = iceberg.load_catalog()
    for spec in specs:
        ingest(spark, iceberg, kafka, spec)
        update_history(spark, "lake", catalog, spec)
    result = update_cut(spark, "lake", catalog, kafka, "shop", specs)
    assert result.txn_id == order[blocked - 1]
    assert result.pending == len(order) - blocked
    assert result.lag_ms > 0
    assert read_views(spark, specs) == after[order[blocked - 1]]
    produce([held], lines.source.topic, bootstrap)  # arrives late, lands in its place
    ingest(spark, iceberg, kafka, lines)
    update_history(spark, "lake", catalog, lines)
    result = update_cut(spark, "lake", catalog, kafka, "shop", specs)
    assert (result.txn_id, result.pending, result.lag_ms) == (order[-1], 0, 0)
    assert read_views(spark, specs) == after[order[-1]]


def test_a_transaction_topic_record_it_cannot_read_stops_with_a_clear_error(
    spark: Any, iceberg: IcebergCatalogResource, kafka: KafkaResource
) -> None:
    orders, lines, txn_topic = group_specs(kafka)
    for spec in (orders, lines):
        ensure_tables(spark, "lake", spec)
    produce([KafkaRecord(b"k", b'{"status": "COMMITTED"}')], txn_topic, kafka.resolved_bootstrap())
    with pytest.raises(ConsistencyError, match="not Debezium BEGIN/END transaction records"):
        update_cut(spark, "lake", iceberg.load_catalog(), kafka, "shop", [orders, lines])


def test_the_group_asset_and_its_check_through_the_jobs(
    it_settings: Settings, spark: Any, kafka: KafkaResource, resources: dict[str, Any]
) -> None:
    """Through Dagster: the ingest job, then `upsert_bases` (histories, then the group asset),
    whose metadata names the cut; the group's check passes and the views are the source."""
    orders, lines, txn_topic = group_specs(kafka)
    specs = [orders, lines]
    for spec in specs:
        ensure_tables(spark, "lake", spec)
    records, txn_records, after = generate(random.Random(8), orders, lines, 10)
    bootstrap = kafka.resolved_bootstrap()
    produce(records["orders"], orders.source.topic, bootstrap)
    produce(records["order_lines"], lines.source.topic, bootstrap)
    produce(txn_records, txn_topic, bootstrap)
    defs = build_defs(specs=specs, settings=it_settings, resource_overrides=resources)
    instance = dg.DagsterInstance.ephemeral()
    ingest_run = defs.resolve_job_def("ingest_ledgers").execute_in_process(
        instance=instance, partition_key=current_hour_key(datetime.now(UTC))
    )
    assert ingest_run.success
    run = defs.resolve_job_def("upsert_bases").execute_in_process(
        instance=instance, asset_selection=upsert_assets(specs)
    )
    assert run.success
    (materialization,) = [
        m
        for m in run.asset_materializations_for_node("consistent__shop")
        if m.asset_key == dg.AssetKey(["consistent", "shop"])
    ]
    meta = {k: v.value for k, v in materialization.metadata.items()}
    last = list(after)[-1]
    assert (meta["cut_txn_id"], meta["pending_transactions"], meta["moved"]) == (last, 0, True)
    (evaluation,) = [
        e
        for e in run.get_asset_check_evaluations()
        if e.check_name == "cut_moves_forward_within_lag"
    ]
    assert evaluation.passed, evaluation.description
    assert read_views(spark, specs) == after[last]


def test_the_daemon_reaches_the_last_transaction_and_never_shows_half_of_one(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    tmp_path: Path,
) -> None:
    """Through a real `dagster-daemon`: the micro-batch sensor starts a run per table whose
    topic grew, concurrently where it does, each with the group asset. Whenever the views are
    read meanwhile they equal the source after their cut transaction; at the end, after the
    last one."""
    orders, lines, txn_topic = group_specs(kafka)
    specs = [orders, lines]
    specs_dir = tmp_path / "specs"
    specs_dir.mkdir()
    for spec in specs:
        write_spec(spec, specs_dir / f"{spec.name}.yaml")
        ensure_tables(spark, "lake", spec)
    records, txn_records, after = generate(random.Random(21), orders, lines, 24)
    bootstrap = kafka.resolved_bootstrap()
    half = {t: len(r) // 2 for t, r in records.items()}
    produce(records["orders"][: half["orders"]], orders.source.topic, bootstrap)
    produce(records["order_lines"], lines.source.topic, bootstrap)
    produce(txn_records, txn_topic, bootstrap)
    env = {"CDC_ASSETS_HOME": str(it_settings.home), "CDC_ASSETS_SPECS": str(specs_dir)}
    home = dagster_home(tmp_path)
    log = tmp_path / "daemon.log"
    instance = dg.DagsterInstance.from_config(str(home))
    last = list(after)[-1]
    seen: set[str] = set()
    with running_daemon(home, env, log) as daemon:
        time.sleep(5)
        produce(records["orders"][half["orders"] :], orders.source.topic, bootstrap)
        deadline = time.monotonic() + DAEMON_TIMEOUT_S
        while True:
            assert daemon.poll() is None, log.read_text()[-4000:]
            cut = published(spark, specs)
            if cut is not None:
                seen.add(cut)
                views = read_views(spark, specs)
                if published(spark, specs) == cut:  # not moved while it was read
                    assert views == after[cut], f"views at {cut}"
            runs = list(instance.get_runs())
            if cut == last and runs and all(r.is_finished for r in runs):
                break
            assert time.monotonic() < deadline, (
                f"cut {cut}, runs {[(r.job_name, r.status.value) for r in runs]}\n"
                + log.read_text()[-3000:]
            )
            time.sleep(2)
    failed = [r for r in runs if r.status != dg.DagsterRunStatus.SUCCESS]
    assert not failed, [(r.job_name, r.status.value) for r in failed]
    assert read_views(spark, specs) == after[last]


def published(spark: Any, specs: list[TableSpec]) -> str | None:
    """The newest published cut's transaction (None before the first)."""
    try:
        rows = cut_history(spark, "lake", "shop", specs)
    except Exception:  # the group's tables are created by its first run
        return None
    return str(max(rows, key=lambda r: r["cut_offset"])["txn_id"]) if rows else None


def test_a_group_declared_on_tables_that_already_hold_changes(
    spark: Any, iceberg: IcebergCatalogResource, kafka: KafkaResource
) -> None:
    """Tables that ran without the group first: their ledgers hold changes without transaction
    ids. The transactions that ended before the group's first run are taken as they are (they
    cannot be checked), the later ones are checked; rows from before stay visible."""
    orders, lines, txn_topic = group_specs(kafka)
    plain = [s.model_copy(update={"consistency": None}) for s in (orders, lines)]
    for spec in plain:
        ensure_tables(spark, "lake", spec)
    f_orders, f_lines = DebeziumEventFactory(plain[0]), DebeziumEventFactory(plain[1])
    state: State = {"orders": {}, "order_lines": {}}
    before_orders, before_lines = [], []
    for oid in (1000, 1001):
        before_orders.append(f_orders.create({"order_id": oid, "status": "old"}))
        state["orders"][(oid,)] = "old"
        before_lines.append(f_lines.create({"order_id": oid, "line_no": 1, "quantity": 5}))
        state["order_lines"][(oid, 1)] = 5
    bootstrap = kafka.resolved_bootstrap()
    produce(before_orders, orders.source.topic, bootstrap)
    produce(before_lines, lines.source.topic, bootstrap)
    catalog = iceberg.load_catalog()
    for spec in plain:
        ingest(spark, iceberg, kafka, spec)
    # The group is declared; transactions go on.
    records, txn_records, after = generate(
        random.Random(5), orders, lines, 8, (f_orders, f_lines), state
    )
    order = list(after)
    first_half = 2 * 4  # BEGIN and END of the first four transactions
    produce(records["orders"], orders.source.topic, bootstrap)
    produce(records["order_lines"], lines.source.topic, bootstrap)
    produce(txn_records[:first_half], txn_topic, bootstrap)
    specs = [orders, lines]
    for spec in specs:
        ingest(spark, iceberg, kafka, spec)
        update_history(spark, "lake", catalog, spec)
    result = update_cut(spark, "lake", catalog, kafka, "shop", specs)
    assert result.txn_id == order[3]
    assert read_views(spark, specs) == after[order[3]]
    produce(txn_records[first_half:], txn_topic, bootstrap)
    result = update_cut(spark, "lake", catalog, kafka, "shop", specs)
    assert (result.txn_id, result.pending) == (order[-1], 0)
    assert read_views(spark, specs) == after[order[-1]]


def test_the_cli_moves_the_cut_and_says_where_it_stands(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    orders, lines, txn_topic = group_specs(kafka)
    specs = [orders, lines]
    specs_dir = tmp_path / "specs"
    specs_dir.mkdir()
    for spec in specs:
        write_spec(spec, specs_dir / f"{spec.name}.yaml")
        ensure_tables(spark, "lake", spec)
    records, txn_records, after = generate(random.Random(4), orders, lines, 3)
    bootstrap = kafka.resolved_bootstrap()
    produce(records["orders"], orders.source.topic, bootstrap)
    produce(records["order_lines"], lines.source.topic, bootstrap)
    produce(txn_records, txn_topic, bootstrap)
    catalog = iceberg.load_catalog()
    for spec in specs:
        ingest(spark, iceberg, kafka, spec)
        update_history(spark, "lake", catalog, spec)
    monkeypatch.setenv(ENV_HOME, str(it_settings.home))
    monkeypatch.setenv(ENV_SPECS, str(specs_dir))
    with console.capture() as captured:
        assert main(["consistent", "shop"]) == 0
        assert main(["consistent", "nope"]) == 2
    out = captured.get()
    assert f"shop: cut at transaction {list(after)[-1]}" in out
    assert "moved); 0 transactions pending" in out
    assert "no consistency group 'nope'" in out
    assert "(groups: shop)" in out
