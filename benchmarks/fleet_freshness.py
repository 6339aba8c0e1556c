"""Benchmark: freshness of one hot table while the rest of a fleet trickles (issue 20, part 4).

For each fleet size N, generates N specs (``fleet_scale.generate_specs``: three shapes, one of
them a composite key), creates their topics on a broker of its own and onboards them. Then, for
``--seconds``, a feeder thread writes change events: the hot table (the fleet's first) gets
``--hot-rate`` events a second, and each of the other N - 1 tables one event every
``--interval`` minutes on average (a Poisson stream over the fleet, each event to a table picked
at random). Meanwhile the in-process driver runs what the daemon's sensors would request, as
often as the ``new_kafka_offsets`` sensor may tick (every 5 s): the ingest run of the tables whose
topics grew, then the upsert of those tables.

A hot event's freshness is the time from its send to the end of the first upsert after which
base's watermark covers its offset (what a reader of base sees). The baseline is N = 1, the hot
table alone, in the same script. The trickling tables see their first change during the
measurement (nothing warms them up before), which is what a fleet's quiet tables cost.

``--daemon`` measures the same through a deployment's own path instead: the stack's Spark Connect
server, then per fleet size a Dagster home of its own and ``dagster-daemon run`` on the
workspace, whose sensors start every ingest and upsert run in a process of its own (at most two at
once), each loading the N specs' definitions. A hot event's freshness is then the commit time of
the first base snapshot whose watermark covers it, minus its send time. The runs' launch (queue,
process start, definitions load) and step times are reported per job.

``--worker`` (with ``--daemon``) measures each fleet size twice in the same script, on fresh
tables each time: the hot table kept by the micro-batch runs (the baseline), then by a continuous
worker (its spec names ``pipeline.worker``; the ``continuous_workers`` sensor starts it), and
reports both latencies and the machine's CPU seconds per hot event in each (``/proc/stat``: the
daemon, its runs and the Spark Connect server all count), as a ratio.

Prints a table, writes ``benchmarks/results/fleet_freshness.json`` and ``.png`` (with
``--daemon``: ``fleet_freshness_daemon.*``; with ``--worker``: ``fleet_freshness_worker.*``).

    python benchmarks/fleet_freshness.py [--tables 1,100,1000] [--seconds 300] [--hot-rate 2]
        [--interval 60] [--buckets 1] [--daemon [--worker]]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import ROOT, code_version, make_home, start_daemon
from fleet_scale import generate_specs

RESULTS = ROOT / "benchmarks" / "results"
TARGET_P95_S = 120.0
# How often the new_kafka_offsets sensor may tick (its minimum_interval_seconds).
TICK_S = 5.0


@dataclass
class Feeder:
    """A thread writing the hot table's events at a steady rate and the others' as a Poisson
    stream; records each hot event's send time by its offset (one partition per topic)."""

    specs: list[Any]
    bootstrap: str
    hot_rate: float
    fleet_rate: float  # trickle events a second over the N - 1 other tables
    seed: int = 20
    sent_at: dict[int, float] = field(default_factory=dict)
    trickled: set[str] = field(default_factory=set)
    trickle_events: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _queues: dict[str, list[Any]] = field(default_factory=dict)

    def _next(self, spec: Any, rng: random.Random) -> Any:
        """The table's next record of a workload of its own (generated on first use)."""
        from cdc_assets_dev.demo.events import workload

        queue = self._queues.get(spec.name)
        if not queue:
            queue = workload(spec, rng, keys=30, events=200, markers=False)
            self._queues[spec.name] = queue
        return queue.pop(0)

    def send(self, producer: Any, spec: Any, rng: random.Random, hot: bool) -> None:
        record = self._next(spec, rng)
        sent = time.perf_counter()
        offsets: list[int] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                raise RuntimeError(f"{spec.source.topic}: {err}")
            offsets.append(msg.offset())

        producer.produce(
            spec.source.topic, value=record.value, key=record.key, on_delivery=delivered
        )
        producer.flush(30)
        if not offsets:
            raise RuntimeError(f"{spec.source.topic}: a record was not delivered")
        if hot:
            self.sent_at[offsets[0]] = sent

    def start(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 0})
        rng = random.Random(self.seed)
        hot, others = self.specs[0], self.specs[1:]

        def run() -> None:
            now = time.perf_counter()
            next_hot = now
            next_trickle = now + rng.expovariate(self.fleet_rate) if others else float("inf")
            while not self._stop.is_set():
                wait = min(next_hot, next_trickle) - time.perf_counter()
                if wait > 0 and self._stop.wait(wait):
                    break
                if next_hot <= next_trickle:
                    self.send(producer, hot, rng, hot=True)
                    next_hot += 1.0 / self.hot_rate
                else:
                    spec = rng.choice(others)
                    self.send(producer, spec, rng, hot=False)
                    self.trickled.add(spec.name)
                    self.trickle_events += 1
                    next_trickle += rng.expovariate(self.fleet_rate)

        self._thread = threading.Thread(target=run, name="feeder", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)


def create_topics(specs: list[Any], bootstrap: str) -> None:
    """Every table's topic, one partition (so that a hot event's offset orders it)."""
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(s.source.topic, num_partitions=1, replication_factor=1) for s in specs]
    for i in range(0, len(topics), 200):
        for future in admin.create_topics(topics[i : i + 200]).values():
            future.result(60)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def measure(
    settings: Any, specs: list[Any], bootstrap: str, args: argparse.Namespace
) -> dict[str, Any]:
    import dagster as dg

    from cdc_assets.jobs.inprocess import PipelineDriver
    from cdc_assets.pipeline.shared.watermark import base_state
    from cdc_assets.resources import build_resources
    from cdc_assets.schema.layers import base_layout

    resources = build_resources(settings)
    resources["spark"] = resources["spark"].model_copy(update={"master": "local[2]"})
    n = len(specs)
    others = n - 1
    feeder = Feeder(
        specs, bootstrap, args.hot_rate, others / (args.interval * 60.0) if others else 0.0
    )
    hot_base = base_layout(specs[0])
    with dg.DagsterInstance.ephemeral() as instance:
        driver = PipelineDriver(settings, instance, resource_overrides=resources)
        started = time.perf_counter()
        driver.onboard()
        onboard_s = time.perf_counter() - started
        print(f"  {n} tables onboarded in {onboard_s:.1f} s", file=sys.stderr)
        catalog = resources["iceberg"].load_catalog()

        def hot_applied() -> int:
            table = catalog.load_table(f"{hot_base.namespace}.{hot_base.name}")
            return int(base_state(table).watermark.get(0, 0))

        # The hot table's first cycle (its first events) before the clock starts: the driver's
        # warm-up and the table's first-cycle work are not what a steady hot table sees.
        warm = _producer(bootstrap)
        for _ in range(10):
            feeder.send(warm, specs[0], random.Random(1), hot=True)
        driver.ingest()
        driver.upsert()
        feeder.sent_at.clear()
        seen = hot_applied()
        latencies: list[float] = []
        cycles: list[dict[str, Any]] = []

        def cycle() -> None:
            nonlocal seen
            t0 = time.perf_counter()
            ingested = driver.ingest()
            t1 = time.perf_counter()
            upserted = driver.upsert()
            t2 = time.perf_counter()
            applied = hot_applied()
            for offset in range(seen, applied):
                if offset in feeder.sent_at:
                    latencies.append(t2 - feeder.sent_at[offset])
            seen = max(seen, applied)
            cycles.append(
                {
                    "ingest_s": t1 - t0,
                    "upsert_s": t2 - t1,
                    "tables": sum(1 for m in ingested.values() if m),
                    "upserted": len(upserted),
                }
            )

        feeder.start()
        phase_start = time.perf_counter()
        last = 0.0
        while time.perf_counter() - phase_start < args.seconds:
            time.sleep(max(0.0, last + TICK_S - time.perf_counter()))
            last = time.perf_counter()
            cycle()
            print(
                f"  {n} tables, {time.perf_counter() - phase_start:5.0f} s: cycle "
                f"{cycles[-1]['ingest_s'] + cycles[-1]['upsert_s']:5.1f} s over "
                f"{cycles[-1]['tables']} tables; hot p95 so far "
                f"{percentile(latencies, 0.95):.1f} s",
                file=sys.stderr,
            )
        feeder.stop()
        wall = time.perf_counter() - phase_start
        # What was sent before the feeder stopped is applied by the next cycles: every hot
        # event gets its freshness (none is left out for being late).
        for _ in range(10):
            if seen > max(feeder.sent_at, default=-1):
                break
            cycle()
    busy = sum(c["ingest_s"] + c["upsert_s"] for c in cycles)
    return {
        "tables": n,
        "onboard_s": onboard_s,
        "hot_events": len(feeder.sent_at),
        "hot_applied": len(latencies),
        "trickle_events": feeder.trickle_events,
        "trickled_tables": len(feeder.trickled),
        "phase_s": wall,
        "cycles": len(cycles),
        "cycle_mean_s": busy / len(cycles) if cycles else 0.0,
        "cycle_max_s": max((c["ingest_s"] + c["upsert_s"] for c in cycles), default=0.0),
        "tables_per_cycle": statistics.mean(c["tables"] for c in cycles) if cycles else 0.0,
        "busy_share": busy / wall if wall else 0.0,
        "p50_s": percentile(latencies, 0.50),
        "p95_s": percentile(latencies, 0.95),
        "max_s": max(latencies, default=float("nan")),
        "latencies": [round(x, 3) for x in latencies],
    }


def machine_cpu_s() -> float:
    """CPU seconds every core of this machine spent busy since boot (``/proc/stat``)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def measure_daemon(
    settings: Any, specs: list[Any], bootstrap: str, args: argparse.Namespace, tmp: Path
) -> dict[str, Any]:
    """``measure`` through ``dagster-daemon run``: the sensors start the runs, each a process
    (and, when the hot spec names a ``pipeline.worker``, the worker that keeps it)."""
    import dagster as dg
    from source_freshness import base_watermarks, run_summary

    from cdc_assets.cli.common import DAGSTER_YAML
    from cdc_assets.jobs.inprocess import PipelineDriver
    from cdc_assets.resources import build_resources

    n = len(specs)
    others = n - 1
    feeder = Feeder(
        specs, bootstrap, args.hot_rate, others / (args.interval * 60.0) if others else 0.0
    )
    dagster_home = tmp / f"dagster_{settings.specs_dir.name}"
    dagster_home.mkdir()
    (dagster_home / "dagster.yaml").write_text(DAGSTER_YAML)
    env = {
        **os.environ,
        "CDC_ASSETS_HOME": str(settings.home),
        "CDC_ASSETS_SPECS": str(settings.specs_dir),
        "DAGSTER_HOME": str(dagster_home),
    }
    os.environ.update({k: env[k] for k in ("CDC_ASSETS_HOME", "CDC_ASSETS_SPECS", "DAGSTER_HOME")})
    catalog = build_resources(settings)["iceberg"].load_catalog()
    hot = specs[0]
    wall_offset = time.time() - time.perf_counter()
    log_path = tmp / f"daemon_{settings.specs_dir.name}.log"
    daemon = None
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        started = time.perf_counter()
        PipelineDriver(settings, instance).onboard()
        onboard_s = time.perf_counter() - started
        print(f"  {n} tables onboarded in {onboard_s:.1f} s", file=sys.stderr)
        try:
            with open(log_path, "wb") as log:
                # Its code server and run workers in its process group: stopped with it.
                daemon = start_daemon(env, log, own_group=True)

            def applied() -> int:
                marks = base_watermarks(catalog, hot)
                return marks[-1][1].get(0, 0) if marks else 0

            def wait_applied(offset: int, settle: float) -> None:
                deadline = time.perf_counter() + settle
                while applied() <= offset:
                    if time.perf_counter() > deadline:
                        tail = log_path.read_text(errors="replace").splitlines()[-30:]
                        raise SystemExit(
                            f"{n} tables: base of {hot.name} did not reach offset {offset} in "
                            f"{settle:.0f} s; daemon log tail:\n" + "\n".join(tail)
                        )
                    time.sleep(1)

            # The hot table's first events, and the daemon's start (code location load, the
            # Connect server's warm-up), before the clock starts.
            warm = _producer(bootstrap)
            for _ in range(10):
                feeder.send(warm, hot, random.Random(1), hot=True)
            wait_applied(max(feeder.sent_at), args.settle)
            feeder.sent_at.clear()
            since = time.time()
            cpu_before = machine_cpu_s()
            feeder.start()
            phase_start = time.perf_counter()
            while time.perf_counter() - phase_start < args.seconds:
                time.sleep(min(30.0, args.seconds - (time.perf_counter() - phase_start)))
                print(
                    f"  {n} tables, {time.perf_counter() - phase_start:5.0f} s: hot base at "
                    f"offset {applied()}, {max(feeder.sent_at, default=0) + 1} sent",
                    file=sys.stderr,
                )
            feeder.stop()
            wall = time.perf_counter() - phase_start
            wait_applied(max(feeder.sent_at), args.settle)
            cpu_s = machine_cpu_s() - cpu_before
            marks = base_watermarks(catalog, hot)
            latencies = []
            for offset, sent in sorted(feeder.sent_at.items()):
                at = next(ms for ms, mark in marks if mark.get(0, 0) > offset)
                latencies.append(at / 1000 - (sent + wall_offset))
            runs = run_summary(instance, [s.name for s in specs], since)
        finally:
            if daemon is not None:
                # The daemon, its code server and the runs still going (their files are in the
                # stack's directory, which the next fleet size or stack_down removes).
                os.killpg(daemon.pid, signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    daemon.wait(60)
                time.sleep(5)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(daemon.pid, signal.SIGKILL)
    for job, line in runs.items():
        print(f"  {n} tables, {job}: {line}", file=sys.stderr)
    return {
        "tables": n,
        "onboard_s": onboard_s,
        "hot_events": len(feeder.sent_at),
        "hot_applied": len(latencies),
        "trickle_events": feeder.trickle_events,
        "trickled_tables": len(feeder.trickled),
        "phase_s": wall,
        "cpu_s": round(cpu_s, 1),
        "cpu_ms_per_hot_event": round(1000 * cpu_s / max(1, len(feeder.sent_at)), 1),
        "runs": runs,
        "p50_s": percentile(latencies, 0.50),
        "p95_s": percentile(latencies, 0.95),
        "max_s": max(latencies, default=float("nan")),
        "latencies": [round(x, 3) for x in latencies],
    }


def _producer(bootstrap: str) -> Any:
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", default="1,100,1000", help="fleet sizes (1 is the baseline)")
    parser.add_argument("--seconds", type=float, default=300.0, help="length of each measurement")
    parser.add_argument("--hot-rate", type=float, default=2.0, help="hot events a second")
    parser.add_argument(
        "--interval", type=float, default=60.0, help="mean minutes between a quiet table's changes"
    )
    parser.add_argument("--buckets", type=int, default=1, help="base's bucket count")
    parser.add_argument(
        "--daemon", action="store_true", help="through dagster-daemon and Spark Connect"
    )
    parser.add_argument(
        "--settle", type=float, default=900.0, help="max wait for the hot base (--daemon)"
    )
    parser.add_argument(
        "--worker",
        action="store_true",
        help="with --daemon: each size by runs, then with the hot table on a continuous worker",
    )
    args = parser.parse_args()
    if args.worker and not args.daemon:
        parser.error("--worker measures through the daemon: add --daemon")
    counts = sorted({int(n) for n in args.tables.split(",") if n})

    from cdc_assets.spec import load_specs
    from cdc_assets_dev.stack.local_stack import stack_down, stack_up

    rows: dict[int, dict[str, Any]] = {}
    worker_rows: dict[int, dict[str, dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = make_home(Path(tmp))
        if args.daemon:
            from cdc_assets.jars.maven import ensure_jars

            ensure_jars("connect", base, quiet=True)
        state = stack_up(base, spark_connect=args.daemon)
        try:
            for n in counts:
                if args.worker:
                    worker_rows[n] = {
                        mode: measure_mode(n, mode, base, state.bootstrap_servers, args, tmp)
                        for mode in ("runs", "worker")
                    }
                    continue
                spec_dir = Path(tmp) / f"specs_{n}"
                generate_specs(
                    n, spec_dir, prefix=f"fresh{n}", namespace=f"fresh{n}", buckets=args.buckets
                )
                specs = sorted(load_specs(spec_dir), key=lambda s: s.name)  # hot: the first
                create_topics(specs, state.bootstrap_servers)
                settings = replace(base, specs_dir=spec_dir)
                if args.daemon:
                    rows[n] = measure_daemon(
                        settings, specs, state.bootstrap_servers, args, Path(tmp)
                    )
                else:
                    rows[n] = measure(settings, specs, state.bootstrap_servers, args)
                print(f"  {n}: { {k: v for k, v in rows[n].items() if k != 'latencies'} }")
        finally:
            stack_down(base, purge=True)
    if args.worker:
        report_worker(worker_rows, args)
        return
    report(rows, args)


def measure_mode(
    n: int, mode: str, base: Any, bootstrap: str, args: argparse.Namespace, tmp: str
) -> dict[str, Any]:
    """One fleet size on tables of its own, the hot one kept by runs or by a worker."""
    import yaml

    from cdc_assets.spec import load_specs

    tag = f"{mode[0]}{n}"
    spec_dir = Path(tmp) / f"specs_{tag}"
    names = generate_specs(
        n, spec_dir, prefix=f"fresh{tag}", namespace=f"fresh{tag}", buckets=args.buckets
    )
    if mode == "worker":
        hot = spec_dir / f"{sorted(names)[0]}.yaml"
        data = yaml.safe_load(hot.read_text())
        data["pipeline"] = {**data.get("pipeline", {}), "worker": "hot"}
        hot.write_text(yaml.safe_dump(data, sort_keys=False))
    specs = sorted(load_specs(spec_dir), key=lambda s: s.name)  # hot: the first
    create_topics(specs, bootstrap)
    row = measure_daemon(replace(base, specs_dir=spec_dir), specs, bootstrap, args, Path(tmp))
    print(f"  {n} ({mode}): { {k: v for k, v in row.items() if k != 'latencies'} }")
    return row


def report_worker(rows: dict[int, dict[str, dict[str, Any]]], args: argparse.Namespace) -> None:
    """The runs-against-worker table, JSON and plot."""
    print(
        f"\nFreshness of one hot table ({args.hot_rate:g} events/s), by micro-batch runs and by a "
        f"continuous worker, through dagster-daemon; {args.seconds:g} s each"
    )
    print(
        f"  {'tables':>6} {'mode':>7} {'p50':>7} {'p95':>7} {'max':>7} {'p95 ratio':>9} "
        f"{'CPU ms/event':>12} {'CPU ratio':>9}"
    )
    for n, modes in sorted(rows.items()):
        runs = modes["runs"]
        for mode, r in modes.items():
            print(
                f"  {n:>6} {mode:>7} {r['p50_s']:>6.1f}s {r['p95_s']:>6.1f}s {r['max_s']:>6.1f}s "
                f"{r['p95_s'] / runs['p95_s']:>9.2f} {r['cpu_ms_per_hot_event']:>12.0f} "
                f"{r['cpu_ms_per_hot_event'] / runs['cpu_ms_per_hot_event']:>9.2f}"
            )
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {
        "code": code_version(),
        "mode": "dagster-daemon: micro-batch runs, then a continuous worker",
        "hot_rate": args.hot_rate,
        "interval_minutes": args.interval,
        "seconds": args.seconds,
        "buckets": args.buckets,
        "rows": {str(n): modes for n, modes in sorted(rows.items())},
    }
    (RESULTS / "fleet_freshness_worker.json").write_text(json.dumps(payload, indent=2))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for n, modes in sorted(rows.items()):
        for mode, r in modes.items():
            values = sorted(r["latencies"])
            if values:
                ax.plot(
                    values, [(i + 1) / len(values) for i in range(len(values))], label=f"{n} {mode}"
                )
    ax.axhline(0.95, ls=":", c="grey")
    ax.set(
        title="hot table freshness (CDF): runs against a continuous worker",
        xlabel="send to visible in base (s)",
        ylabel="share of hot events",
    )
    ax.legend(title="tables, mode")
    fig.tight_layout()
    fig.savefig(RESULTS / "fleet_freshness_worker.png", dpi=110)


def report(measured: dict[int, dict[str, Any]], args: argparse.Namespace) -> None:
    name = "fleet_freshness_daemon" if args.daemon else "fleet_freshness"
    path = RESULTS / f"{name}.json"
    code = code_version()
    rows = {n: {**r, "code": code} for n, r in measured.items()}
    if path.exists():
        # A run of some sizes keeps the other sizes' rows, each with the commit it measured.
        previous = json.loads(path.read_text())
        for n, row in previous.get("rows", {}).items():
            rows.setdefault(int(n), {**row, "code": row.get("code", previous["code"])})
    baseline = rows.get(1) or rows[min(rows)]
    print(
        f"\nFreshness of one hot table ({args.hot_rate:g} events/s) while the others change once "
        f"per {args.interval:g} min on average; {args.seconds:g} s each, buckets {args.buckets}"
        + (", through dagster-daemon" if args.daemon else "")
    )
    print(
        f"  {'tables':>6} {'hot p50':>8} {'hot p95':>8} {'ratio':>6} {'max':>7} {'cycles':>6} "
        f"{'mean cycle':>10} {'tables/cycle':>12} {'busy':>5} {'trickled':>8} {'onboard':>8}"
    )
    for n, r in sorted(rows.items()):
        # The daemon's runs are not cycles of this process: those columns stay empty.
        cycle = (
            f"{r['cycles']:>6} {r['cycle_mean_s']:>9.1f}s {r['tables_per_cycle']:>12.1f} "
            f"{r['busy_share']:>5.0%}"
            if "cycles" in r
            else f"{'-':>6} {'-':>10} {'-':>12} {'-':>5}"
        )
        print(
            f"  {n:>6} {r['p50_s']:>7.1f}s {r['p95_s']:>7.1f}s "
            f"{r['p95_s'] / baseline['p95_s']:>6.2f} {r['max_s']:>6.1f}s {cycle} "
            f"{r['trickled_tables']:>8} {r['onboard_s']:>7.0f}s"
            + ("" if r["code"] == code else f"  (at {r['code']})")
        )
        for job, line in r.get("runs", {}).items():
            print(f"         {job}: {line}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {
        "code": code,
        "mode": "dagster-daemon" if args.daemon else "in-process driver",
        "target_p95_s": TARGET_P95_S,
        "hot_rate": args.hot_rate,
        "interval_minutes": args.interval,
        "seconds": args.seconds,
        "buckets": args.buckets,
        "tick_s": TICK_S,
        "rows": {str(n): r for n, r in sorted(rows.items())},
    }
    path.write_text(json.dumps(payload, indent=2))
    plot(rows, name)


def plot(rows: dict[int, dict[str, Any]], name: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for n, r in sorted(rows.items()):
        values = sorted(r["latencies"])
        if values:
            ax.plot(values, [(i + 1) / len(values) for i in range(len(values))], label=f"{n}")
    ax.axvline(TARGET_P95_S, ls="--", c="grey")
    ax.axhline(0.95, ls=":", c="grey")
    where = "dagster-daemon" if name.endswith("daemon") else "in-process driver"
    ax.set(
        title=f"hot table freshness (CDF) by fleet size, {where}",
        xlabel="send to visible in base (s)",
        ylabel="share of hot events",
    )
    ax.legend(title="tables")
    fig.tight_layout()
    fig.savefig(RESULTS / f"{name}.png", dpi=110)


if __name__ == "__main__":
    main()
