"""Benchmark: what a run worker loads before its first step: the whole code location, as under
Dagster's default run launcher, against a worker whose ``CDC_ASSETS_RUN_TABLES`` names the run's
tables (a Kubernetes run pod given it by the sensors' ``dagster-k8s/config`` tag), for fleets of
N generated specs and runs of k tables.

Each measurement is a fresh interpreter doing what ``dagster api execute_run`` does before the
run's first step: import the definitions module, then build the run's job for its asset
selection (the ``ingest_ledgers`` job over k tables' ledgers). The baseline is
the whole location, on the same specs, in this script; the order of the two
alternates between repeats. Wall and CPU seconds (the child's user + system time). No JVM starts.
Prints a table, writes benchmarks/results/run_worker_load.json and .png.

    python benchmarks/run_worker_load.py [--tables 100,1000] [--run-tables 1,20] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_common import ROOT, code_version
from fleet_scale import generate_specs

RESULTS = ROOT / "benchmarks" / "results"

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import importlib
import dagster as dg
from cdc_assets.assets.keys import asset_key
defs = importlib.import_module("cdc_assets.definitions").defs
keys = frozenset(asset_key("cdc", t) for t in sys.argv[1].split(","))
job = defs.resolve_job_def("ingest_ledgers").get_subset(asset_selection=keys)
assert set(job.asset_layer.executable_asset_keys) == set(keys)
print(json.dumps({"wall_s": time.perf_counter() - t0}))
"""


def measure(spec_dir: Path, home: Path, tables: list[str], scoped: bool) -> dict[str, float]:
    env = {
        **os.environ,
        "CDC_ASSETS_HOME": str(home),
        "CDC_ASSETS_SPECS": str(spec_dir),
    }
    env.pop("CDC_ASSETS_RUN_TABLES", None)
    if scoped:
        env["CDC_ASSETS_RUN_TABLES"] = ",".join(tables)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, ",".join(tables)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": json.loads(done.stdout.strip().splitlines()[-1])["wall_s"], "cpu_s": cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", default="100,1000")
    parser.add_argument("--run-tables", default="1,20")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(n) for n in args.tables.split(",")]
    widths = [int(k) for k in args.run_tables.split(",")]

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            spec_dir = Path(tmp) / f"specs{n}"
            names = generate_specs(n, spec_dir, buckets=1)
            for k in widths:
                run = names[:k]
                samples: dict[bool, list[dict[str, float]]] = {True: [], False: []}
                for i in range(args.repeats):
                    for scoped in (i % 2 == 0, i % 2 == 1):
                        samples[scoped].append(measure(spec_dir, Path(tmp) / "home", run, scoped))
                for scoped in (False, True):
                    got = samples[scoped]
                    rows.append(
                        {
                            "specs": n,
                            "run_tables": k,
                            "worker": "run's tables (k8s tag)" if scoped else "whole location",
                            "wall_s": statistics.median(s["wall_s"] for s in got),
                            "cpu_s": statistics.median(s["cpu_s"] for s in got),
                        }
                    )
                base, ours = rows[-2], rows[-1]
                ours["ratio"], base["ratio"] = ours["cpu_s"] / base["cpu_s"], 1.0
                print(f"  measured {n} specs, {k}-table run", file=sys.stderr)

    print(f"\nA run worker's load before its first step, median of {args.repeats} (seconds)\n")
    header = f"{'specs':>6}{'run tables':>11}  {'worker':<26}{'wall':>7}{'cpu':>7}{'cpu ratio':>10}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['specs']:>6}{r['run_tables']:>11}  {r['worker']:<26}{r['wall_s']:>7.2f}"
            f"{r['cpu_s']:>7.2f}{r['ratio']:>10.2f}"
        )
    print("\nbaseline: the same worker loading the whole code location (Dagster's default).")

    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "run_worker_load.json"
    out.write_text(
        json.dumps({"commit": code_version(), "repeats": args.repeats, "rows": rows}, indent=2)
    )
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 3.5))
        labels = [f"{r['specs']} specs, {r['run_tables']}-table run\n{r['worker']}" for r in rows]
        ax.barh(labels, [r["cpu_s"] for r in rows], color=["C0", "C1"] * (len(rows) // 2))
        ax.set_xlabel("CPU seconds before the first step (median)")
        ax.set_title("A run worker's definitions load")
        fig.tight_layout()
        fig.savefig(RESULTS / "run_worker_load.png", dpi=120)
    except ImportError:
        print("matplotlib not installed: no plot written", file=sys.stderr)
    print(f"\nwrote {out} and run_worker_load.png")


if __name__ == "__main__":
    main()
