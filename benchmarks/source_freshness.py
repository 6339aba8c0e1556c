"""Benchmark: end-to-end freshness on the local stack, from COMMIT in the source database to the
row visible in base, with the pipeline on its normal cadence.

A stack of its own with real sources (`stack up --sources`: MariaDB, PostgreSQL, Kafka Connect with
Debezium), the example tables onboarded, then the Dagster daemon (`dagster-daemon run` on
workspace.yaml) runs the definitions as a deployment would: the sensors (`new_kafka_offsets`,
`ledger_updated`, `schema_changes`) on their own intervals and every run in a process of its own.
Meanwhile a seeded workload changes the three example tables through the databases' clients in
small batches for ``--seconds``. When base has caught up, every change event on the topics is
matched with the first base snapshot whose watermark covers it:

    freshness = commit time of that snapshot - source.ts_ms (the source's commit time)

The baseline is Debezium's own delivery latency for the same events (Kafka timestamp - source
ts_ms). MariaDB stamps binlog events in whole seconds, so its figures are up to 1 s high. Prints a
table, writes JSON and a PNG plot to benchmarks/results/.

    python benchmarks/source_freshness.py [--seconds 180] [--batch 4] [--pause 2]
        [--warmup 60] [--spark connect|driver] [--keepers runs,worker]

``--keepers runs,worker`` measures the same seeded workload twice in one script, each on a stack
of its own: kept by the sensors' micro-batch runs, then by one continuous worker for every table
(``pipeline.worker`` set in the copied specs; the ``continuous_workers`` sensor starts it), its
tables all in cycles at once (``CDC_ASSETS_WORKER_TABLES_AT_ONCE``); ``worker-serial`` is the
same worker with its tables one after another, the default. Each
also records the machine's busy CPU from the workload's start until base caught up, per change
event; the table compares both.

``--fleet N`` (with ``--tables`` naming one MariaDB table) makes that table the hot one of a fleet
of N source tables: N - 1 copies of it in database ``fleet`` (``source_fleet.py``), each with a
spec, captured by a Debezium connector of their own, kept by the sensors' runs (in both keepers),
and changed as a Poisson stream of one change per table every ``--interval`` minutes on average.
The fleet's changes get a row of their own; CPU per event counts them too.

A warm-up of the same workload runs first and is not measured (``--warmup 0`` measures a cold
start): a deployment's Spark Connect server runs for days, and a fresh one spends its first
minutes compiling.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
TARGET_S = 60.0  # the first freshness issue's target on real sources
FLEET_TARGET_S = 30.0  # issue 58's, at 1,000 tables
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_common import busy_cpu_s, code_version, make_home, start_daemon  # noqa: E402


def topic_events(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """(partition, offset, source ts_ms, Kafka timestamp) of every change event on ``topic``."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "freshness", "enable.auto.commit": False}
    )
    out = []
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        for partition in sorted(meta.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            consumer.assign([TopicPartition(topic, partition, low)])
            at = low
            while at < high:
                msg = consumer.poll(10)
                if msg is None:
                    break
                if msg.error() is not None:
                    continue
                at = (msg.offset() or 0) + 1
                value = msg.value()
                if not value:
                    continue  # tombstone
                payload = json.loads(value).get("payload", {})
                if payload.get("op") not in ("c", "u", "d"):
                    continue
                out.append(
                    {
                        "partition": partition,
                        "offset": msg.offset(),
                        "source_ms": int(payload["source"]["ts_ms"]),
                        "kafka_ms": int(msg.timestamp()[1]),
                    }
                )
    finally:
        consumer.close()
    return out


def base_watermarks(catalog: Any, spec: Any) -> list[tuple[int, dict[int, int]]]:
    """(commit time ms, watermark) of every base snapshot that recorded one, oldest first."""
    from cdc_assets.pipeline.shared.offsets import decode_offsets
    from cdc_assets.pipeline.shared.watermark import WATERMARK
    from cdc_assets.schema.layers import base_layout

    layout = base_layout(spec)
    table = catalog.load_table(f"{layout.namespace}.{layout.name}")
    out = []
    for snapshot in sorted(table.snapshots(), key=lambda s: s.timestamp_ms):
        text = snapshot.summary.get(WATERMARK) if snapshot.summary else None
        if text:
            out.append((snapshot.timestamp_ms, decode_offsets(text)))
    return out


def visible_at(event: dict[str, Any], marks: list[tuple[int, dict[int, int]]]) -> int | None:
    for at, watermark in marks:
        if watermark.get(event["partition"], 0) > event["offset"]:
            return at
    return None


def end_offsets(bootstrap: str, topics: list[str]) -> dict[str, dict[int, int]]:
    """The current end offset of every partition of ``topics``."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "freshness-end"})
    out: dict[str, dict[int, int]] = {}
    try:
        for topic in topics:
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            out[topic] = {
                p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in partitions
            }
    finally:
        consumer.close()
    return out


def caught_up(bootstrap: str, catalog: Any, specs: list[Any]) -> bool:
    ends = end_offsets(bootstrap, [s.source.topic for s in specs])
    for spec in specs:
        marks = base_watermarks(catalog, spec)
        newest = marks[-1][1] if marks else {}
        if any(newest.get(p, 0) < high for p, high in ends[spec.source.topic].items()):
            return False
    return True


def drive(workload: Any, seconds: float, batch: int, pause: float) -> int:
    """Run the workload in batches for ``seconds``; the number of batches."""
    started, batches = time.monotonic(), 0
    while time.monotonic() - started < seconds:
        workload.run(batch)
        batches += 1
        time.sleep(pause)
    return batches


def wait_caught_up(
    instance: Any, bootstrap: str, catalog: Any, specs: list[Any], settle: float, log: Path
) -> bool:
    """Wait until base covers every event on the topics; on timeout print what the runs did."""
    import dagster as dg

    deadline = time.monotonic() + settle
    while not caught_up(bootstrap, catalog, specs):
        if time.monotonic() > deadline:
            print("base did not catch up in time; runs by job and status:", file=sys.stderr)
            for job, status in sorted(
                Counter((r.job_name, r.status.value) for r in instance.get_runs()).items()
            ):
                print(f"  {job[0]} {job[1]}: {status}", file=sys.stderr)
            failed = instance.get_runs(
                filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]), limit=1
            )
            for run in failed:
                for entry in instance.all_logs(run.run_id):
                    dagster_event = entry.dagster_event
                    if dagster_event is not None and dagster_event.is_failure:
                        print(str(dagster_event.event_specific_data)[:3000], file=sys.stderr)
            tail = log.read_text(errors="replace").splitlines()[-40:]
            print("daemon log tail:\n" + "\n".join(tail), file=sys.stderr)
            return False
        time.sleep(5)
    return True


def run_summary(instance: Any, tables: list[str], since: float) -> dict[str, str]:
    """Per job: successful runs created after ``since`` (epoch s), their median wall time (created
    to ended), split into launch (created to the run's start: queue, process start, definitions
    load) and the median time per run spent in each kind of step (materializing a layer, or asset
    checks)."""
    import dagster as dg

    out = {}
    records = [
        r
        for r in instance.get_run_records(
            filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.SUCCESS])
        )
        if r.create_timestamp.timestamp() >= since
    ]
    steps = {"tables": "tables", "table_checks": "checks"}
    for job in sorted({r.dagster_run.job_name for r in records}):
        runs = [r for r in records if r.dagster_run.job_name == job and r.end_time]
        took = [r.end_time - r.create_timestamp.timestamp() for r in runs]
        launch = [r.start_time - r.create_timestamp.timestamp() for r in runs if r.start_time]
        per_kind: dict[str, list[float]] = {}
        for r in runs:
            spent: Counter[str] = Counter()
            for entry in instance.all_logs(
                r.dagster_run.run_id, of_type=dg.DagsterEventType.STEP_SUCCESS
            ):
                kind = steps.get(entry.step_key or "", entry.step_key or "other")
                spent[kind] += entry.dagster_event.event_specific_data.duration_ms / 1000
            for kind, seconds in spent.items():
                per_kind.setdefault(kind, []).append(seconds)
        parts = [f"launch {statistics.median(launch):.1f} s"] if launch else []
        parts += [f"{k} {statistics.median(v):.1f} s" for k, v in sorted(per_kind.items())]
        out[job] = f"{len(took)} runs, median {statistics.median(took):.1f} s ({', '.join(parts)})"
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=180.0, help="how long the workload runs")
    parser.add_argument("--batch", type=int, default=4, help="statements per table per batch")
    parser.add_argument("--pause", type=float, default=2.0, help="seconds between batches")
    parser.add_argument("--settle", type=float, default=300.0, help="max wait for base to catch up")
    parser.add_argument(
        "--warmup",
        type=float,
        default=60.0,
        help="seconds of the same workload before the measured one, not measured (0: cold start)",
    )
    parser.add_argument(
        "--spark",
        choices=["connect", "driver"],
        default="connect",
        help="runs share the stack's Spark Connect server, or start a driver each",
    )
    parser.add_argument(
        "--keepers",
        default="runs",
        help="comma-separated: runs (the sensors' micro-batch runs) and/or worker (one "
        "continuous worker keeps every table); each measured on a stack of its own, in turn",
    )
    parser.add_argument(
        "--tables",
        default=None,
        help="comma-separated spec names to keep and change (default: every example table); "
        "the views are left out when some tables are",
    )
    parser.add_argument(
        "--fleet",
        type=int,
        default=0,
        help="N: the one --tables table is hot in a fleet of N source tables; the N - 1 others "
        "are copies of it in MariaDB database `fleet`, captured by a connector of their own, "
        "and change as a Poisson stream (see --interval)",
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=60.0,
        help="with --fleet: minutes between two changes of one fleet table, on average",
    )
    parser.add_argument("--out", default=None, help="JSON path (default: by --spark)")
    args = parser.parse_args()
    keepers = [k.strip() for k in args.keepers.split(",") if k.strip()]
    if not set(keepers) <= {"runs", "worker", "worker-serial"}:
        parser.error("--keepers takes runs, worker and/or worker-serial")
    if args.fleet and len([t for t in (args.tables or "").split(",") if t.strip()]) != 1:
        parser.error("--fleet N needs --tables naming the one hot table (a MariaDB one)")
    results = {}
    for keeper in keepers:
        result = measure(args, keeper)
        if result is None:
            return 1
        results[keeper] = result
    if len(results) == 1:
        [(keeper, result)] = results.items()
        name = "source_freshness" + ("" if args.spark == "connect" else "_driver")
        if keeper == "worker":
            name = "source_freshness_worker"
    else:
        name = "source_freshness_keepers"
        result = {"benchmark": "source_freshness", "keepers": results}
        compare(results)
    if args.tables:  # a subset of the tables: a file of its own, not the three tables' figures
        name += "_" + "_".join(t.strip() for t in args.tables.split(",") if t.strip())
    if args.fleet:
        name += f"_fleet{args.fleet}"
    out = Path(args.out or RESULTS / f"{name}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    plot(
        {k: r["freshness_s"] for k, r in results.items()},
        next(iter(results.values()))["debezium_s"],
        out.with_suffix(".png"),
        fleet={k: r["fleet_freshness_s"] for k, r in results.items() if r.get("fleet_freshness_s")},
        target=FLEET_TARGET_S if args.fleet else TARGET_S,
    )
    print(f"\nwrote {out} and {out.with_suffix('.png')}")
    return 0


def compare(results: dict[str, dict[str, Any]]) -> None:
    """The keepers side by side: freshness of every table's events, and machine CPU per event."""
    print(
        f"\n{'keeper':<13} {'events':>7} {'median s':>9} {'p95 s':>7} {'CPU s/event':>12} "
        f"{'x runs':>7}"
    )
    base = results.get("runs")
    for keeper, r in results.items():
        total = next(t for t in r["tables"] if t["table"] == "all")
        ratio = r["cpu_per_event_s"] / base["cpu_per_event_s"] if base else float("nan")
        print(
            f"{keeper:<13} {total['events']:>7} {total['median_s']:>9.1f} {total['p95_s']:>7.1f} "
            f"{r['cpu_per_event_s']:>12.4f} {ratio:>7.2f}"
        )


def measure(args: argparse.Namespace, keeper: str) -> dict[str, Any] | None:
    """One stack of its own, the workload, and its freshness with ``keeper`` keeping the tables
    (None: base did not catch up)."""
    from cdc_assets.cli import ensure_dagster_home
    from cdc_assets.jars.maven import ensure_jars
    from cdc_assets.jobs.inprocess import PipelineDriver
    from cdc_assets.resources import build_resources
    from cdc_assets.spec import load_specs
    from cdc_assets_dev.demo.live import Workload, next_key_base
    from cdc_assets_dev.stack.local_stack import stack_down, stack_up

    tmp = Path(tempfile.mkdtemp(prefix="cdc-freshness-"))
    tmp.chmod(0o711)  # PostgreSQL runs as the postgres system user and must reach its data
    daemon: subprocess.Popen[bytes] | None = None
    trickle = None
    # This keeper's home goes into the environment (the driver reads it from there); the next
    # keeper's make_home must find the project's jar cache, not this home's, once it is gone.
    saved_env = {
        k: os.environ.get(k) for k in ("CDC_ASSETS_HOME", "CDC_ASSETS_SPECS", "DAGSTER_HOME")
    }
    settings = make_home(tmp)
    try:
        ensure_jars("connect", settings, quiet=True)
        specs_dir = tmp / "specs"
        shutil.copytree(ROOT / "table_specs", specs_dir)
        if args.tables:
            _keep_tables(specs_dir, [t.strip() for t in args.tables.split(",") if t.strip()])
        if keeper in ("worker", "worker-serial"):
            _name_worker(specs_dir, "source")
        settings = replace(settings, specs_dir=specs_dir)
        hot_names = {path.stem for path in specs_dir.glob("*.yaml")}
        print("stack up --sources ...", flush=True)
        state = stack_up(settings, sources=True, spark_connect=args.spark == "connect")
        fleet_names: list[str] = []
        if args.fleet:
            fleet_names = _make_fleet(settings, state.bootstrap_servers, specs_dir, args.fleet)
        dagster_home = ensure_dagster_home(settings)
        env = {
            **os.environ,
            "CDC_ASSETS_HOME": str(settings.home),
            "CDC_ASSETS_SPECS": str(specs_dir),
            "DAGSTER_HOME": str(dagster_home),
        }
        if keeper == "worker":  # the worker's tables all in a cycle at once
            env["CDC_ASSETS_WORKER_TABLES_AT_ONCE"] = str(len(hot_names))
        elif keeper == "worker-serial":  # one after another (the default)
            env["CDC_ASSETS_WORKER_TABLES_AT_ONCE"] = "1"
        os.environ.update(
            {k: env[k] for k in ("CDC_ASSETS_HOME", "CDC_ASSETS_SPECS", "DAGSTER_HOME")}
        )
        import dagster as dg

        instance = dg.DagsterInstance.get()
        print("onboard_tables ...", flush=True)
        onboard_started = time.monotonic()
        PipelineDriver(settings, instance).onboard()
        onboard_s = time.monotonic() - onboard_started
        print(f"onboarded in {onboard_s:.0f} s", flush=True)
        every_spec = load_specs(specs_dir)
        specs = [s for s in every_spec if s.name in hot_names]
        fleet = {s.source.table: s for s in every_spec if s.name not in hot_names}
        if fleet_names:
            from source_fleet import Trickle

            rate = len(fleet_names) / (args.interval * 60)
            trickle = Trickle(settings, fleet_names, rate)
        log = open(tmp / "daemon.log", "wb")  # noqa: SIM115 - open for the daemon's lifetime
        # Its own process group: the runs it launched (a continuous worker runs until stopped)
        # end with it, before the stack goes down and before the next keeper is measured.
        daemon = start_daemon(env, log, own_group=True)
        workload = Workload(settings, specs, seed=7, key_base=next_key_base(settings, specs))
        catalog = build_resources(settings)["iceberg"].load_catalog()
        bootstrap, topics = state.bootstrap_servers, [s.source.topic for s in specs]
        if trickle is not None:
            trickle.start()  # through the warm-up too: the fleet is never quiet

        def touched() -> list[Any]:
            """The hot tables, and the fleet's tables the trickle changed so far."""
            return specs + [fleet[t] for t in sorted(trickle.touched)] if trickle else specs

        if args.warmup > 0:
            # A deployment's Spark Connect server runs for days; its first minutes (JIT, Spark's
            # generated code) cost two to three times the CPU per step of a warm one. Warm it on
            # the same workload, let base catch up, and measure only what comes after.
            print(f"warm-up workload for {args.warmup:.0f} s (not measured) ...", flush=True)
            drive(workload, args.warmup, args.batch, args.pause)
            if not wait_caught_up(
                instance, bootstrap, catalog, touched(), args.settle, tmp / "daemon.log"
            ):
                return None
        measured_from = end_offsets(bootstrap, topics)
        fleet_from = (
            end_offsets(bootstrap, [s.source.topic for s in fleet.values()]) if fleet else {}
        )
        warm_trickle = trickle.statements if trickle else 0
        measured_since, warm_statements = time.time(), dict(workload.statements_run)
        print(f"workload for {args.seconds:.0f} s ({keeper}) ...", flush=True)
        started = time.monotonic()
        cpu_before = busy_cpu_s()
        batches = drive(workload, args.seconds, args.batch, args.pause)
        if trickle is not None:
            trickle.stop()
        workload_s = time.monotonic() - started
        print(f"{batches} batches; waiting for base to catch up ...", flush=True)
        if not wait_caught_up(
            instance, bootstrap, catalog, touched(), args.settle, tmp / "daemon.log"
        ):
            return None
        settle_s = time.monotonic() - started - workload_s
        cpu_s = busy_cpu_s() - cpu_before

        rows = []
        all_fresh: list[float] = []
        all_dbz: list[float] = []
        for spec in specs:
            first = measured_from[spec.source.topic]
            events = [
                e
                for e in topic_events(bootstrap, spec.source.topic)
                if e["offset"] >= first.get(e["partition"], 0)
            ]
            marks = base_watermarks(catalog, spec)
            fresh = []
            for event in events:
                at = visible_at(event, marks)
                if at is not None:
                    fresh.append((at - event["source_ms"]) / 1000)
            dbz = [(e["kafka_ms"] - e["source_ms"]) / 1000 for e in events]
            all_fresh += fresh
            all_dbz += dbz
            rows.append(
                {
                    "table": spec.name,
                    "events": len(events),
                    "base_commits": len(marks),
                    "median_s": statistics.median(fresh),
                    "p95_s": percentile(fresh, 0.95),
                    "max_s": max(fresh),
                    "debezium_median_s": statistics.median(dbz),
                    "debezium_p95_s": percentile(dbz, 0.95),
                }
            )
        total = {
            "table": "all",
            "events": len(all_fresh),
            "base_commits": sum(r["base_commits"] for r in rows),
            "median_s": statistics.median(all_fresh),
            "p95_s": percentile(all_fresh, 0.95),
            "max_s": max(all_fresh),
            "debezium_median_s": statistics.median(all_dbz),
            "debezium_p95_s": percentile(all_dbz, 0.95),
        }
        rows.append(total)
        events_measured = total["events"]
        fleet_fresh: list[float] = []
        if trickle is not None:
            # The fleet's changes in the measured window, all tables as one row (not in "all").
            fleet_dbz: list[float] = []
            fleet_commits = 0
            for name in sorted(trickle.touched):
                spec = fleet[name]
                first = fleet_from.get(spec.source.topic, {})
                marks = base_watermarks(catalog, spec)
                fleet_commits += len(marks)
                for event in topic_events(bootstrap, spec.source.topic):
                    if event["offset"] < first.get(event["partition"], 0):
                        continue
                    fleet_dbz.append((event["kafka_ms"] - event["source_ms"]) / 1000)
                    at = visible_at(event, marks)
                    if at is not None:
                        fleet_fresh.append((at - event["source_ms"]) / 1000)
            events_measured += len(fleet_fresh)
            if fleet_fresh:
                rows.append(
                    {
                        "table": f"fleet ({len(fleet_names)})",
                        "events": len(fleet_fresh),
                        "base_commits": fleet_commits,
                        "median_s": statistics.median(fleet_fresh),
                        "p95_s": percentile(fleet_fresh, 0.95),
                        "max_s": max(fleet_fresh),
                        "debezium_median_s": statistics.median(fleet_dbz),
                        "debezium_p95_s": percentile(fleet_dbz, 0.95),
                    }
                )
        print()
        print(
            f"{'table':<12} {'events':>7} {'commits':>7} {'median s':>9} {'p95 s':>7} "
            f"{'max s':>7} {'dbz med':>8} {'dbz p95':>8} {'ratio':>6}"
        )
        for r in rows:
            print(
                f"{r['table']:<12} {r['events']:>7} {r['base_commits']:>7} {r['median_s']:>9.1f} "
                f"{r['p95_s']:>7.1f} {r['max_s']:>7.1f} {r['debezium_median_s']:>8.2f} "
                f"{r['debezium_p95_s']:>8.2f} "
                f"{r['median_s'] / max(r['debezium_median_s'], 0.001):>6.0f}"
            )
        result = {
            "benchmark": "source_freshness",
            "keeper": keeper,
            "code": code_version(),
            "cpus": os.cpu_count(),
            "load_average_before": list(os.getloadavg()),
            "warmup_s": args.warmup,
            "workload_s": workload_s,
            "settle_s": settle_s,
            "batches": batches,
            "batch_statements_per_table": args.batch,
            "pause_s": args.pause,
            "statements_run": {
                server: n - warm_statements.get(server, 0)
                for server, n in workload.statements_run.items()
            },
            "tables": rows,
            "target_s": 60,
            "spark": args.spark,
            "runs": run_summary(instance, [s.name for s in every_spec], measured_since),
            "fleet": len(fleet_names) + len(specs) if fleet_names else None,
            "fleet_interval_minutes": args.interval if fleet_names else None,
            "fleet_statements": trickle.statements - warm_trickle if trickle else 0,
            "fleet_tables_changed": len(trickle.touched) if trickle else 0,
            "onboard_s": onboard_s,
            # Machine-wide busy CPU from the workload's start until base caught up, per change
            # event (the databases, Debezium and the broker included, the same in both keepers;
            # with --fleet, the fleet's events count too).
            "cpu_s": cpu_s,
            "cpu_per_event_s": cpu_s / max(events_measured, 1),
            "freshness_s": all_fresh,
            "fleet_freshness_s": fleet_fresh if trickle is not None else [],
            "debezium_s": all_dbz,
        }
        for job, line in result["runs"].items():
            print(f"{job}: {line}")
        return result
    finally:
        if trickle is not None:
            trickle.stop()
        if daemon is not None:
            os.killpg(daemon.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                daemon.wait(30)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(daemon.pid, signal.SIGKILL)  # run workers that outlived the daemon
            daemon.wait(30)
        stack_down(settings, purge=True)
        shutil.rmtree(tmp, ignore_errors=True)
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _make_fleet(settings: Any, bootstrap: str, specs_dir: Path, n: int) -> list[str]:
    """The fleet's source tables, their connector and their specs (``source_fleet``), copies of
    the one spec in ``specs_dir``; the tables' names."""
    import source_fleet

    from cdc_assets.spec import load_specs

    (hot,) = load_specs(specs_dir)
    if hot.source.connector != "mysql":
        raise SystemExit(f"--fleet copies a MariaDB table; {hot.name} is not one")
    print(f"fleet: {n - 1} more tables in MariaDB database {source_fleet.DATABASE} ...", flush=True)
    started = time.monotonic()
    template = (hot.source.database, hot.source.table)
    names = source_fleet.create_tables(settings, bootstrap, template, n)
    source_fleet.capture(settings, bootstrap, names)
    source_fleet.write_specs(specs_dir, hot.name, names)
    print(f"fleet: created and captured in {time.monotonic() - started:.0f} s", flush=True)
    return names


def _keep_tables(specs_dir: Path, names: list[str]) -> None:
    """Only the specs named ``names`` in ``specs_dir``, and no views (they join other tables)."""
    kept = {path.stem for path in specs_dir.glob("*.yaml")}
    if not set(names) <= kept:
        raise SystemExit(f"--tables: no spec named {sorted(set(names) - kept)} in table_specs")
    for path in specs_dir.glob("*.yaml"):
        if path.stem not in names:
            path.unlink()
    shutil.rmtree(specs_dir / "views", ignore_errors=True)


def _name_worker(specs_dir: Path, worker: str) -> None:
    """Every spec in ``specs_dir`` kept by one continuous worker (``pipeline.worker``)."""
    import yaml

    for path in sorted(specs_dir.glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        data["pipeline"] = {**(data.get("pipeline") or {}), "worker": worker}
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


def plot(
    fresh: dict[str, list[float]],
    dbz: list[float],
    path: Path,
    *,
    fleet: dict[str, list[float]] | None = None,
    target: float = 60.0,
) -> None:
    """CDF of each keeper's freshness (and of the fleet's other tables'), and of Debezium's
    delivery."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    hot = "hot table, " if fleet else ""
    curves = [(v, f"commit -> visible in base ({hot}{k})", "-") for k, v in fresh.items()]
    curves += [
        (v, f"commit -> visible in base (the fleet's other tables, {k})", ":")
        for k, v in (fleet or {}).items()
    ]
    for values, label, style in [*curves, (dbz, "commit -> in Kafka (Debezium)", "-")]:
        ordered = sorted(values)
        ax.plot(
            ordered,
            [i / len(ordered) for i in range(1, len(ordered) + 1)],
            style,
            label=label,
        )
    ax.axvline(target, color="grey", linestyle="--", label=f"target {target:g} s")
    ax.set_xlabel("seconds")
    ax.set_ylabel("share of change events")
    ax.set_title("End-to-end freshness on the local stack (2 cores)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
