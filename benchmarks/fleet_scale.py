"""Benchmark: what a fleet of tables costs (issue 20, part 4), at growing table counts.

Generates N specs in three shapes (a MySQL table with one key, a PostgreSQL table, a MariaDB
table with a composite key), their topics on a local broker of its own
with a workload on each, and measures with the project's real jobs and sensors:

- definitions load for N specs in a fresh interpreter (no JVM may start);
- one ``new_kafka_offsets`` tick over N topics, against a baseline of one offsets request per
  topic on the same broker and topics;
- cycles of the in-process driver, which runs what the daemon's sensors would request (the
  ``ingest_ledgers`` run of the tables whose topics grew, then ``upsert_bases`` of those): the
  first after onboarding with ~100 new changes per table, a steady one with ~100 more, then one
  with nothing new: the per-table fixed cost, and where it goes (each layer's asset and check
  steps, and the runs' own overhead, from the runs' step statistics).

Prints a table, writes ``benchmarks/results/fleet_scale.json`` and ``.png``.

    python benchmarks/fleet_scale.py [--defs 10,100,1000] [--ticks 10,100,1000] [--cycles 10,30,100]
        [--buckets N]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import ROOT, code_version, make_home

RESULTS = ROOT / "benchmarks" / "results"
TEMPLATES = ("users.yaml", "orders.yaml", "order_items.yaml")
EVENTS_PER_TABLE = 100
TARGETS = {"defs_1000_s": 10.0, "tick_1000_s": 5.0, "cycle_1000_s": 600.0}

# What a code location does: import the module (which builds the definitions from
# CDC_ASSETS_SPECS), then resolve every definition, as the webserver and daemon do on load.
DEFS_CHILD = r"""
import json, time
t0 = time.perf_counter()
from cdc_assets.definitions import defs
t1 = time.perf_counter()
defs.get_repository_def().load_all_definitions()
t2 = time.perf_counter()
from pyspark import SparkContext
print(json.dumps({"load_s": t2 - t0, "build_s": t1 - t0, "resolve_s": t2 - t1,
                  "jvm_started": SparkContext._gateway is not None}))
"""


def generate_specs(
    count: int,
    out: Path,
    prefix: str = "fleet",
    namespace: str = "fleet",
    buckets: int | None = None,
) -> list[str]:
    """``count`` specs cycling through the example shapes, with distinct names, sources, topics
    and sink tables (and base's bucket count, when given; else the examples')."""
    out.mkdir(parents=True, exist_ok=True)
    templates = [yaml.safe_load((ROOT / "table_specs" / t).read_text()) for t in TEMPLATES]
    names = []
    for i in range(count):
        data = templates[i % len(templates)]
        name = f"t{i:05d}_{data['name']}"
        spec = {**data, "name": name}
        spec["source"] = {**data["source"], "table": name, "topic": f"{prefix}.{name}"}
        spec["source"].pop("schema_change_topic", None)
        spec["sink"] = {**data["sink"], "namespace": namespace, "table": name}
        if buckets is not None:
            spec["base"] = {**data.get("base", {}), "buckets": buckets}
        (out / f"{name}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
        names.append(name)
    return names


def measure_defs(spec_dir: Path, home: Path) -> dict[str, Any]:
    env = {"CDC_ASSETS_HOME": str(home), "CDC_ASSETS_SPECS": str(spec_dir), "PATH": "/usr/bin"}
    done = subprocess.run(
        [sys.executable, "-c", DEFS_CHILD, str(spec_dir)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"definitions child failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def produce_workloads(specs: list[Any], bootstrap: str, half: int) -> int:
    """Half ``half`` (0 or 1) of a workload of 2 x EVENTS_PER_TABLE change events on every
    table's topic (the second half continues the first: positions keep growing); returns the
    table count."""
    from cdc_assets_dev.demo.events import produce, workload

    for i, spec in enumerate(specs):
        records = workload(spec, random.Random(i), keys=30, events=2 * EVENTS_PER_TABLE)
        middle = len(records) // 2
        produce(records[middle:] if half else records[:middle], spec.source.topic, bootstrap)
    return len(specs)


def measure_tick(specs: list[Any], settings: Any, bootstrap: str) -> dict[str, float]:
    import dagster as dg

    from cdc_assets.definitions import build_defs
    from cdc_assets.resources import KafkaResource

    kafka = KafkaResource(bootstrap_servers=bootstrap, home=str(settings.home))
    defs = build_defs(specs=specs, settings=settings, resource_overrides={"kafka": kafka})
    sensor = defs.resolve_sensor_def("new_kafka_offsets")
    with dg.DagsterInstance.ephemeral() as instance:
        context = dg.build_sensor_context(instance=instance, resources={"kafka": kafka})
        sensor(context)  # warm the client and the instance
        started = time.perf_counter()
        result = sensor(dg.build_sensor_context(instance=instance, resources={"kafka": kafka}))
        tick_s = time.perf_counter() - started
    requests = len(result.run_requests or []) if isinstance(result, dg.SensorResult) else 0
    topics = [s.source.topic for s in specs]
    started = time.perf_counter()
    for topic in topics:  # the baseline: one offsets request per topic
        kafka.latest_offsets([topic])
    baseline_s = time.perf_counter() - started
    return {"tick_s": tick_s, "baseline_s": baseline_s, "requests": requests}


def step_breakdown(instance: Any, since: float) -> dict[str, float]:
    """Seconds of the runs started after ``since`` (epoch), by where they went: each step (the
    ``tables`` op, the ``table_checks`` op) and the run's own overhead (start, plan, resources,
    events) outside any step."""
    out: dict[str, float] = {}
    for record in instance.get_run_records():
        if (record.start_time or 0) < since or record.end_time is None:
            continue
        in_steps = 0.0
        for stat in instance.get_run_step_stats(record.dagster_run.run_id):
            if stat.start_time is None or stat.end_time is None:
                continue
            seconds = stat.end_time - stat.start_time
            in_steps += seconds
            out[stat.step_key] = out.get(stat.step_key, 0.0) + seconds
        run_s = record.end_time - record.start_time
        out["run overhead"] = out.get("run overhead", 0.0) + max(0.0, run_s - in_steps)
    return {k: round(v, 2) for k, v in sorted(out.items())}


def measure_cycle(settings: Any, more: Callable[[], Any]) -> dict[str, Any]:
    """Through the in-process driver, which runs what the daemon's sensors would request: the
    first cycle after onboarding (every table has new events; it also records the week's empty
    ledger hours and merges into empty bases, once per table), a steady busy cycle after
    ``more`` produced the next events of every table, and an idle cycle."""
    import dagster as dg

    from cdc_assets.jobs.inprocess import PipelineDriver
    from cdc_assets.resources import build_resources

    resources = build_resources(settings)
    # One local[2] driver for every run of this process (the runs share the active session).
    resources["spark"] = resources["spark"].model_copy(update={"master": "local[2]"})
    with dg.DagsterInstance.ephemeral() as instance:
        driver = PipelineDriver(settings, instance, resource_overrides=resources)
        driver.onboard()
        out: dict[str, Any] = {}
        for label in ("first", "busy", "idle"):
            if label == "busy":
                more()
            since = time.time()
            started = time.perf_counter()
            ingest = driver.ingest()
            ingest_s = time.perf_counter() - started
            started = time.perf_counter()
            upsert = driver.upsert()
            upsert_s = time.perf_counter() - started
            out[label] = {
                "ingest_s": ingest_s,
                "upsert_s": upsert_s,
                "records": sum(int(m.get("records_read", 0) or 0) for m in ingest.values()),
                "pipeline_ingest_s": sum(float(m.get("seconds", 0) or 0) for m in ingest.values()),
                "pipeline_upsert_s": sum(float(m.get("seconds", 0) or 0) for m in upsert.values()),
                "steps": step_breakdown(instance, since),
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--defs", default="10,100,1000", help="table counts for definitions load")
    parser.add_argument("--ticks", default="10,100,1000", help="table counts for a sensor tick")
    parser.add_argument("--cycles", default="10,30,100", help="table counts for the cycles")
    parser.add_argument(
        "--buckets", type=int, help="base's bucket count of every table (default: the examples')"
    )
    args = parser.parse_args()
    counts = {
        k: [int(n) for n in getattr(args, k).split(",") if n] for k in ("defs", "ticks", "cycles")
    }

    from cdc_assets.spec import load_specs
    from cdc_assets_dev.stack.local_stack import stack_down, stack_up

    rows: dict[str, dict[int, Any]] = {"defs": {}, "ticks": {}, "cycles": {}}
    with tempfile.TemporaryDirectory() as tmp:
        base = make_home(Path(tmp))
        state = stack_up(base)
        try:
            for n in sorted(set(counts["defs"]) | set(counts["ticks"]) | set(counts["cycles"])):
                spec_dir = Path(tmp) / f"specs_{n}"
                # Topics of their own per count: the names carry it.
                generate_specs(n, spec_dir, prefix=f"fleet{n}", buckets=args.buckets)
                specs = load_specs(spec_dir)
                settings = replace(base, specs_dir=spec_dir)
                if n in counts["defs"]:
                    rows["defs"][n] = measure_defs(spec_dir, Path(tmp))
                    print(f"  defs {n}: {rows['defs'][n]['load_s']:.2f} s", file=sys.stderr)
                if n in counts["ticks"] or n in counts["cycles"]:
                    busy = produce_workloads(specs, state.bootstrap_servers, 0)
                if n in counts["ticks"]:
                    rows["ticks"][n] = measure_tick(specs, settings, state.bootstrap_servers)
                    print(f"  tick {n}: {rows['ticks'][n]}", file=sys.stderr)
                if n in counts["cycles"]:
                    cycle = measure_cycle(
                        settings, partial(produce_workloads, specs, state.bootstrap_servers, 1)
                    )
                    cycle["busy_tables"] = busy
                    cycle["buckets"] = args.buckets or "examples' (16, 8, 8)"
                    cycle["tables_at_once"] = settings.tables_at_once
                    rows["cycles"][n] = cycle
                    print(f"  cycle {n}: {cycle}", file=sys.stderr)
        finally:
            stack_down(base, purge=True)

    measured_at = keep_previous(rows)
    report(rows, measured_at)


def keep_previous(rows: dict[str, dict[int, Any]]) -> dict[str, str]:
    """Fill the counts this run did not measure from the results file (a run of one section,
    or of one count, keeps the others' figures, each row with the commit it was measured at);
    returns the commit each section was last measured at."""
    path = RESULTS / "fleet_scale.json"
    previous = json.loads(path.read_text()) if path.exists() else {}
    measured_at = {}
    for section in ("defs", "ticks", "cycles"):
        before = previous.get("measured_at", {}).get(section, previous.get("code", "unknown"))
        kept = {
            int(n): {"code": before, **v}
            for n, v in previous.get(section, {}).items()
            if int(n) not in rows[section]
        }
        for row in rows[section].values():
            row["code"] = code_version()
        rows[section] = dict(sorted({**kept, **rows[section]}.items()))
        # Each count's row names the commit it was measured at; the section's is the newest.
        if rows[section]:
            measured_at[section] = code_version() if len(kept) < len(rows[section]) else before
    return measured_at


def report(rows: dict[str, dict[int, Any]], measured_at: dict[str, str]) -> None:
    print("\nDefinitions load (a fresh interpreter imports cdc_assets.definitions and resolves it)")
    for n, r in sorted(rows["defs"].items()):
        parts = (
            f"(build {r['build_s']:.2f} s, resolve {r['resolve_s']:.2f} s)"
            if "build_s" in r
            else ""
        )
        print(f"  {n:>5} specs  {r['load_s']:7.2f} s {parts}  JVM started: {r['jvm_started']}")
    print("\nOne new_kafka_offsets tick (seconds) against one offsets request per topic")
    for n, r in sorted(rows["ticks"].items()):
        ratio = r["tick_s"] / r["baseline_s"] if r["baseline_s"] else 0.0
        print(
            f"  {n:>5} topics tick {r['tick_s']:6.2f} s  baseline {r['baseline_s']:6.2f} s  "
            f"ratio {ratio:5.2f}  run requests {r['requests']}"
        )
    print("\nOne cycle (what the sensors would run, in this process), seconds")
    print(
        f"  {'tables':>6} {'first cycle':>12} {'per table':>10} {'busy cycle':>11} "
        f"{'per table':>10} {'idle cycle':>11}"
    )

    def total(r: dict[str, Any], label: str) -> float:
        return float(r[label]["ingest_s"] + r[label]["upsert_s"])

    for n, r in sorted(rows["cycles"].items()):
        busy = total(r, "busy")
        print(
            f"  {n:>6} {total(r, 'first'):>11.1f}s {total(r, 'first') / n:>9.2f}s "
            f"{busy:>10.1f}s {busy / n:>9.2f}s {total(r, 'idle'):>10.2f}s"
        )
    if rows["cycles"]:
        n, r = max(rows["cycles"].items())
        per_table = total(r, "busy") / n
        print(f"\nWhere a busy cycle of {n} tables went (seconds per table):")
        for where, seconds in sorted(r["busy"]["steps"].items(), key=lambda kv: -kv[1]):
            print(f"  {where:<16} {seconds / n:6.2f}")
        print(
            f"\nExtrapolated to 1,000 tables at {per_table:.2f} s per table: "
            f"{per_table * 1000 / 60:.0f} min for one busy cycle (target "
            f"{TARGETS['cycle_1000_s'] / 60:.0f} min); an idle cycle took "
            f"{total(r, 'idle'):.2f} s for {n} tables."
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload: dict[str, Any] = {
        "code": code_version(),
        "measured_at": measured_at,
        "targets": TARGETS,
        "events_per_table": EVENTS_PER_TABLE,
    }
    payload.update({k: {str(n): v for n, v in r.items()} for k, r in rows.items()})
    (RESULTS / "fleet_scale.json").write_text(json.dumps(payload, indent=2))
    plot(rows)


def plot(rows: dict[str, dict[int, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
    d = sorted(rows["defs"].items())
    axes[0].plot([n for n, _ in d], [r["load_s"] for _, r in d], marker="o")
    axes[0].axhline(TARGETS["defs_1000_s"], ls="--", c="grey")
    axes[0].set(title="definitions load", xlabel="specs", ylabel="s", xscale="log")
    t = sorted(rows["ticks"].items())
    axes[1].plot([n for n, _ in t], [r["tick_s"] for _, r in t], marker="o", label="tick")
    axes[1].plot([n for n, _ in t], [r["baseline_s"] for _, r in t], marker="x", label="per topic")
    axes[1].axhline(TARGETS["tick_1000_s"], ls="--", c="grey")
    axes[1].set(title="new_kafka_offsets tick", xlabel="topics", xscale="log")
    axes[1].legend()
    c = sorted(rows["cycles"].items())
    for label, marker in (("first", "s"), ("busy", "o"), ("idle", "x")):
        per = [(r[label]["ingest_s"] + r[label]["upsert_s"]) / n for n, r in c]
        axes[2].plot([n for n, _ in c], per, marker=marker, label=f"{label} cycle")
    axes[2].set(title="cycle cost per table", xlabel="tables", ylabel="s per table", xscale="log")
    axes[2].legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "fleet_scale.png", dpi=110)


if __name__ == "__main__":
    main()
