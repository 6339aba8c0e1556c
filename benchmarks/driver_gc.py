"""Benchmark: a local driver's garbage collector, G1 (the JVM's default, the baseline) against
the throughput collector (``-XX:+UseParallelGC``, the project's), on busy fleet cycles.

The collector is a setting of the driver's JVM, so each variant runs in a driver of its own (a
child process of this script, with its own stack), the order alternating between rounds. A
child onboards ``--tables`` generated specs (one bucket per base), runs a first cycle, then
``--warm`` busy cycles unmeasured and ``--measure`` measured ones of ~100 new events per table:
the in-process driver's ``ingest_ledgers`` run of the tables whose topics grew, then
``upsert_bases``, ``tables_at_once`` as configured (``fleet_threads.cycle``). Per cycle: wall
time, the CPU of this process tree (driver JVM, Python, broker), and the CPU of the driver
JVM's collector threads (read per thread from ``/proc``; the barriers the collector puts in the
application's own code are in the total only). Prints a table of the medians, writes
``benchmarks/results/driver_gc.json`` and ``.png``.

    python benchmarks/driver_gc.py [--rounds 2] [--tables 30] [--warm 2] [--measure 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import (
    driver_jvm_pid,
    local_driver,
    results_plot,
    save_results,
    tree_cpu_s,
)
from fleet_scale import generate_specs
from fleet_threads import cycle
from fleet_widths import produce_part

from cdc_assets.resources.config import DRIVER_JAVA_OPTIONS, JIT_OPTIONS, SERIAL_PLANNING

# The driver's options but for the collector; the first is the baseline.
VARIANTS = {
    "g1": {DRIVER_JAVA_OPTIONS: f"{JIT_OPTIONS} {SERIAL_PLANNING} -XX:+UseG1GC"},
    "parallel": {},  # the project's own settings
}
LABELS = {"g1": "G1 (the JVM's default)", "parallel": "throughput collector (the project's)"}
# Thread names of the collectors' own threads (G1's and the parallel collector's).
GC_THREADS = ("GC Thread", "ParGC Thread", "G1 ")


def gc_threads_cpu_s(pid: int | None) -> float:
    """CPU seconds of the collector threads of JVM ``pid`` so far."""
    if pid is None:
        return 0.0
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            stat = (task / "stat").read_text()
        except OSError:
            continue  # the thread ended
        if name.startswith(GC_THREADS):
            fields = stat[stat.rfind(")") + 2 :].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def child(variant: str, tables: int, warm: int, measure: int) -> dict[str, Any]:
    import dagster as dg

    from cdc_assets.jobs.inprocess import PipelineDriver
    from cdc_assets.spec import load_specs

    parts = 1 + warm + measure
    with tempfile.TemporaryDirectory() as tmp, local_driver(Path(tmp)) as (home, state, res):
        spark = res["spark"]
        res["spark"] = spark.model_copy(
            update={"extra_conf": {**spark.extra_conf, **VARIANTS[variant]}}
        )
        spec_dir = Path(tmp) / "specs"
        generate_specs(tables, spec_dir, prefix="gc", namespace="gc", buckets=1)
        specs = load_specs(spec_dir)
        driver = PipelineDriver(
            replace(home, specs_dir=spec_dir),
            dg.DagsterInstance.ephemeral(),
            resource_overrides=res,
        )
        driver.onboard()
        produce_part(specs, state.bootstrap_servers, 0, parts)
        cycle(driver)
        jvm = driver_jvm_pid()
        collector = res["spark"].get_session()._jvm.java.lang.management.ManagementFactory
        names = [b.getName() for b in collector.getGarbageCollectorMXBeans()]
        cycles = []
        for part in range(1, parts):
            produce_part(specs, state.bootstrap_servers, part, parts)
            cpu, gc = tree_cpu_s(), gc_threads_cpu_s(jvm)
            result = cycle(driver)
            result["cpu_s"] = tree_cpu_s() - cpu
            result["gc_cpu_s"] = gc_threads_cpu_s(jvm) - gc
            result["measured"] = part > warm
            print(
                f"    {variant} cycle {part}: {result['wall_s']:.1f} s, "
                f"CPU {result['cpu_s']:.1f} s",
                file=sys.stderr,
                flush=True,
            )
            cycles.append(result)
    return {"variant": variant, "collectors": names, "cycles": cycles}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tables", type=int, default=30)
    parser.add_argument("--warm", type=int, default=2, help="busy cycles not measured")
    parser.add_argument("--measure", type=int, default=4, help="busy cycles measured")
    parser.add_argument("--child", choices=sorted(VARIANTS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.tables, args.warm, args.measure)))
        return
    runs: list[dict[str, Any]] = []
    names = list(VARIANTS)
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            command = [sys.executable, __file__, "--child", name]
            for flag in ("tables", "warm", "measure"):
                command += [f"--{flag}", str(getattr(args, flag))]
            done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"{name} driver failed (exit {done.returncode})")
            run = json.loads(done.stdout.strip().splitlines()[-1])
            measured = [c for c in run["cycles"] if c["measured"]]
            run["median"] = {
                k: statistics.median(c[k] for c in measured) / args.tables
                for k in ("wall_s", "ingest_s", "upsert_s", "cpu_s", "gc_cpu_s")
            }
            print(
                f"  round {r + 1} {name:>8} ({', '.join(run['collectors'])}): "
                f"{run['median']['wall_s']:.3f} s per table",
                flush=True,
            )
            runs.append(run)
    report(runs, args)


def report(runs: list[dict[str, Any]], args: argparse.Namespace) -> None:
    keys = ("wall_s", "ingest_s", "upsert_s", "cpu_s", "gc_cpu_s")
    medians = {
        name: {
            k: statistics.median(r["median"][k] for r in runs if r["variant"] == name) for k in keys
        }
        for name in VARIANTS
    }
    base = medians["g1"]
    print(
        f"\n{args.tables} tables, ~100 events each per busy cycle; per table, medians of "
        f"{args.measure} busy cycles per driver and of {args.rounds} drivers per collector"
    )
    print(
        f"  {'collector':>38} {'busy cycle':>10} {'ratio':>6} {'ingest':>7} {'upsert':>7} "
        f"{'CPU':>6} {'ratio':>6} {'GC threads':>10}"
    )
    for name, m in medians.items():
        print(
            f"  {LABELS[name]:>38} {m['wall_s']:8.3f} s {m['wall_s'] / base['wall_s']:6.2f}"
            f" {m['ingest_s']:5.3f} s {m['upsert_s']:5.3f} s {m['cpu_s']:4.2f} s"
            f" {m['cpu_s'] / base['cpu_s']:6.2f} {m['gc_cpu_s']:8.3f} s"
        )
    save_results(
        "driver_gc", {"tables": args.tables, "labels": LABELS, "medians": medians, "runs": runs}
    )
    with results_plot("driver_gc") as ax:
        for name in VARIANTS:
            for i, run in enumerate(r for r in runs if r["variant"] == name):
                walls = [c["wall_s"] / args.tables for c in run["cycles"]]
                ax.plot(
                    range(1, len(walls) + 1),
                    walls,
                    marker="o",
                    color="C0" if name == "g1" else "C1",
                    label=LABELS[name] if i == 0 else None,
                )
        ax.axvline(args.warm + 0.5, color="grey", linewidth=0.8, linestyle=":")
        ax.set(
            title=f"busy cycles per table on a fresh driver ({args.tables} tables)",
            xlabel="busy cycle (measured right of the dotted line)",
            ylabel="s per table",
        )
        ax.legend(fontsize=8)


if __name__ == "__main__":
    main()
