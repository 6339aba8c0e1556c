"""Benchmark: time to load Dagster definitions for the example specs and for N generated specs.

Each case runs in a fresh interpreter (as a code server would), measures spec loading, building
Definitions and resolving every definition, and checks that no JVM was started. The baseline is
the same specs with one asset job per table (the layout our shared jobs avoid), run by this
script on the same data; the floor (``dagster_floor``) is what Dagster alone costs for the same
graph: the same asset keys, partitions, check ops and shared jobs, with empty bodies; and
``fleet_ops_floor`` is that graph with each layer of all tables in one subsettable op (a design
where a run's selected tables share one step). Prints a table, writes JSON and a PNG plot to
benchmarks/results/.

    python benchmarks/definitions_load.py [--tables 1000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import dagster as dg
from pathlib import Path
from cdc_assets.assets.keys import TABLE_LAYERS, asset_key
from cdc_assets.checks.table_checks import build_table_checks
from cdc_assets.definitions import build_defs
from cdc_assets.jobs.ingest import hourly_partitions
from cdc_assets.settings import load_settings
from cdc_assets.spec import load_specs
t1 = time.perf_counter()


class Res(dg.ConfigurableResource):
    unused: int = 0


def shared_jobs():
    # The shared jobs of build_defs, by selection: one per layer group and one for the checks.
    return [
        dg.define_asset_job(name, selection=selection)
        for name, selection in (
            ("ingest", dg.AssetSelection.key_prefixes(["cdc"])),
            ("upsert", dg.AssetSelection.key_prefixes(["bucketed"], ["base"])),
            ("evolve", dg.AssetSelection.key_prefixes(["schema"])),
            ("check", dg.AssetSelection.all_asset_checks()),
        )
    ]


def floor_defs(specs):
    # What Dagster itself costs for the same graph: per table the same five asset keys, deps,
    # the ledger's hourly partitions, the same check ops with the same check keys, and the same
    # shared jobs; every body empty, one resource, no metadata.
    hourly = hourly_partitions("2026-01-01-00:00")
    per_op = [[(k.asset_key.path[0], k.name) for k in c.check_keys]
              for c in build_table_checks(specs[0])]
    assets, checks = [], []
    for spec in specs:
        deps = {"cdc": "raw", "bucketed": "cdc", "base": "bucketed"}
        for layer in TABLE_LAYERS:
            @dg.asset(key=asset_key(layer, spec.name), group_name=spec.name,
                      deps=[asset_key(deps[layer], spec.name)] if layer in deps else [],
                      partitions_def=hourly if layer == "cdc" else None)
            def body(context: dg.AssetExecutionContext, res: Res) -> None:
                return None
            assets.append(body)
        for i, op in enumerate(per_op):
            @dg.multi_asset_check(
                specs=[dg.AssetCheckSpec(name, asset=asset_key(layer, spec.name))
                       for layer, name in op],
                can_subset=True, name=f"{spec.name}_checks_{i}")
            def check(context, res: Res):
                yield from ()
            checks.append(check)
    jobs = shared_jobs()
    return dg.Definitions(assets=assets, asset_checks=checks, jobs=jobs,
                          resources={"res": Res()}, executor=dg.in_process_executor)
def fleet_ops_floor(specs):
    # The design a fleet would need for fewer ops: the same asset keys, deps, partitions, check
    # keys and shared jobs, but each layer of every table is one subsettable op (a run's selected
    # tables in one step) and every table's checks are one subsettable check op.
    hourly = hourly_partitions("2026-01-01-00:00")
    per_table = [(k.asset_key.path[0], k.name) for c in build_table_checks(specs[0])
                 for k in c.check_keys]
    deps = {"cdc": "raw", "bucketed": "cdc", "base": "bucketed"}
    assets = []
    for layer in TABLE_LAYERS:
        @dg.multi_asset(
            specs=[dg.AssetSpec(asset_key(layer, s.name), group_name=s.name,
                                deps=[asset_key(deps[layer], s.name)] if layer in deps else [],
                                skippable=True)
                   for s in specs],
            partitions_def=hourly if layer == "cdc" else None,
            can_subset=True, name=f"all_{layer}")
        def body(context: dg.AssetExecutionContext, res: Res):
            yield from ()
        assets.append(body)
    @dg.multi_asset_check(
        specs=[dg.AssetCheckSpec(name, asset=asset_key(layer, s.name))
               for s in specs for layer, name in per_table],
        can_subset=True, name="all_checks")
    def check(context, res: Res):
        yield from ()
    jobs = shared_jobs()
    return dg.Definitions(assets=assets, asset_checks=[check], jobs=jobs,
                          resources={"res": Res()}, executor=dg.in_process_executor)
settings = load_settings()
specs = load_specs(Path(sys.argv[1]))
t2 = time.perf_counter()
if sys.argv[2] == "dagster_floor":
    defs = floor_defs(specs)
elif sys.argv[2] == "fleet_ops_floor":
    defs = fleet_ops_floor(specs)
else:
    defs = build_defs(specs=specs, settings=settings)
if sys.argv[2] == "per_table_jobs":
    jobs = [dg.define_asset_job(f"sync_{s.name}", selection=dg.AssetSelection.groups(s.name))
            for s in specs]
    defs = dg.Definitions.merge(defs, dg.Definitions(jobs=jobs))
t3 = time.perf_counter()
repo = defs.get_repository_def()
repo.load_all_definitions()
t4 = time.perf_counter()
from pyspark import SparkContext
print(json.dumps({
    "import_s": t1 - t0, "specs_s": t2 - t1, "build_s": t3 - t2, "resolve_s": t4 - t3,
    "load_s": t4 - t1, "assets": len(defs.resolve_asset_graph().get_all_asset_keys()),
    "jobs": len([j for j in repo.job_names if not j.startswith("__")]),
    "jvm_started": SparkContext._gateway is not None,
}))
"""


def generate_specs(template: Path, count: int, out: Path) -> None:
    """Write ``count`` specs shaped like ``template`` with distinct names, topics and sinks."""
    data = yaml.safe_load(template.read_text())
    for i in range(count):
        name = f"t{i:05d}_{data['name']}"
        spec = {**data, "name": name}
        spec["source"] = {**data["source"], "table": name, "topic": f"bench.app.{name}"}
        spec["sink"] = {**data["sink"], "table": name}
        (out / f"{name}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))


def run_case(spec_dir: Path, variant: str, home: Path) -> dict[str, float]:
    env = {**os.environ, "CDC_ASSETS_HOME": str(home), "CDC_ASSETS_SPECS": str(spec_dir)}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(spec_dir), variant],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"benchmark child failed:\n{proc.stderr}")
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        generated = Path(tmp) / "specs"
        generated.mkdir()
        generate_specs(ROOT / "table_specs" / "users.yaml", args.tables, generated)
        cases = [
            ("examples", ROOT / "table_specs", "ours"),
            (f"{args.tables} tables", generated, "ours"),
            (f"{args.tables} tables", generated, "per_table_jobs"),
            (f"{args.tables} tables", generated, "dagster_floor"),
            (f"{args.tables} tables", generated, "fleet_ops_floor"),
        ]
        for label, spec_dir, variant in cases:
            runs = [run_case(spec_dir, variant, Path(tmp) / "home") for _ in range(args.repeats)]
            median = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            median["jvm_started"] = any(r["jvm_started"] for r in runs)
            rows.append({"case": label, "variant": variant, **median})
            print(f"  measured {label} ({variant}): {median['load_s']:.2f}s", file=sys.stderr)

    baseline, floor = rows[2]["load_s"], rows[3]["load_s"]
    print(f"\nDefinitions load, median of {args.repeats} fresh interpreters (seconds)\n")
    header = (
        f"{'case':<14}{'variant':<17}{'assets':>7}{'jobs':>6}{'specs':>8}{'build':>8}"
        f"{'resolve':>9}{'load':>8}{'vs base':>9}{'vs floor':>9}{'jvm':>5}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['case']:<14}{r['variant']:<17}{int(r['assets']):>7}{int(r['jobs']):>6}"
            f"{r['specs_s']:>8.2f}{r['build_s']:>8.2f}{r['resolve_s']:>9.2f}{r['load_s']:>8.2f}"
            f"{r['load_s'] / baseline:>9.2f}{r['load_s'] / floor:>9.2f}"
            f"{'yes' if r['jvm_started'] else 'no':>5}"
        )
    print("\n'load' = specs + build + resolve (import time excluded); 'vs base' = load / the")
    print("per-table-jobs baseline on the same generated specs; 'vs floor' = load / Dagster's")
    print("own cost for the same assets, check ops and jobs with empty bodies (dagster_floor);")
    print("fleet_ops_floor: the same graph with one subsettable op per layer for all tables.")

    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "definitions_load.json"
    out.write_text(
        json.dumps({"tables": args.tables, "repeats": args.repeats, "rows": rows}, indent=2)
    )
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 3.5))
        labels = [f"{r['case']}\n{r['variant']}" for r in rows]
        parts = ("specs_s", "build_s", "resolve_s")
        left = [0.0] * len(rows)
        for part in parts:
            values = [r[part] for r in rows]
            ax.barh(labels, values, left=left, label=part.removesuffix("_s"))
            left = [a + b for a, b in zip(left, values, strict=True)]
        ax.set_xlabel("seconds (median)")
        ax.set_title("Dagster definitions load time")
        ax.legend()
        fig.tight_layout()
        fig.savefig(RESULTS / "definitions_load.png", dpi=120)
    except ImportError:
        print("matplotlib not installed: no plot written", file=sys.stderr)
    print(f"\nwrote {out} and definitions_load.png")


if __name__ == "__main__":
    main()
