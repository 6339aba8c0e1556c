"""Benchmark: a fleet's busy cycle with several tables at once in one Spark driver (issue 20,
part 4), against one table after another (the baseline, what an `ingest_ledgers` plus
`upsert_bases` run does today).

Each table's work is the pipeline's own: ``ingest_incremental``, ``build_bucketed`` and
``merge_base``. With ``k`` workers, ``k`` tables run at once, each worker on its own Spark
session of the one driver (``SparkSession.newSession``: the same executors and catalogs, its own
SQL settings, which carry each commit's snapshot properties) and its own pyiceberg catalog. The
fixed cost of a small table is mostly the driver's round trips (planning, Iceberg commits,
catalog reads), which overlap; whether that pays on 2 cores is what this measures.

Every worker count gets its own copy of the fleet (same specs, same events, its own topics and
namespace). It runs the first cycle after table creation, then a steady busy cycle with the next
~100 events per table; every base must then equal the baseline's row for row, or the script
fails. Prints a table, writes ``benchmarks/results/fleet_threads.json`` and ``.png``.

    python benchmarks/fleet_threads.py [--tables 30] [--workers 1,2,4]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import ROOT, code_version, make_home
from fleet_scale import generate_specs, produce_workloads

RESULTS = ROOT / "benchmarks" / "results"


class Fleet:
    """One copy of the fleet: its specs, and the pipeline over them with ``workers`` at once."""

    def __init__(self, specs: list[Any], resources: dict[str, Any], workers: int) -> None:
        self.specs = specs
        self.resources = resources
        self.workers = workers
        self.spark = resources["spark"].get_session()
        self.catalog = resources["spark"].catalog.name
        self.local = threading.local()

    def _session(self) -> tuple[Any, Any]:
        """This thread's Spark session and pyiceberg catalog (the baseline: the main ones)."""
        if not hasattr(self.local, "spark"):
            one = self.workers == 1
            self.local.spark = self.spark if one else self.spark.newSession()
            self.local.iceberg = self.resources["iceberg"].load_catalog()
        return self.local.spark, self.local.iceberg

    def _table(self, spec: Any) -> dict[str, float]:
        from cdc_assets.pipeline.ingest import ingest_incremental
        from cdc_assets.pipeline.upsert import build_bucketed, merge_base

        spark, iceberg = self._session()
        timings = {}
        started = time.perf_counter()
        ingest_incremental(spark, self.catalog, iceberg, self.resources["kafka"], spec)
        timings["ingest"] = time.perf_counter() - started
        started = time.perf_counter()
        build_bucketed(spark, self.catalog, iceberg, spec)
        timings["bucketed"] = time.perf_counter() - started
        started = time.perf_counter()
        merge_base(spark, self.catalog, iceberg, spec)
        timings["merge"] = time.perf_counter() - started
        return timings

    def cycle(self) -> dict[str, float]:
        """Every table's ingest, bucketed and MERGE; wall seconds and the summed step seconds."""
        started = time.perf_counter()
        if self.workers == 1:
            per_table = [self._table(spec) for spec in self.specs]
        else:
            with ThreadPoolExecutor(self.workers, thread_name_prefix="table") as pool:
                per_table = list(pool.map(self._table, self.specs))
        out = {"wall_s": time.perf_counter() - started}
        for step in ("ingest", "bucketed", "merge"):
            out[f"{step}_s"] = sum(t[step] for t in per_table)
        return out

    def base_rows(self) -> dict[str, list[tuple[Any, ...]]]:
        from cdc_assets.schema.layers import base_layout

        out = {}
        for spec in self.specs:
            layout = base_layout(spec)
            columns = ", ".join(f"`{c.sink_name}`" for c in spec.columns if not c.dropped)
            rows = self.spark.sql(
                f"SELECT {columns} FROM {self.catalog}.{layout.namespace}.{layout.name}"
            ).collect()
            out[spec.name] = sorted(tuple(r) for r in rows)
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=30)
    parser.add_argument("--workers", default="1,2,4", help="tables at once; 1 is the baseline")
    args = parser.parse_args()
    workers = sorted({1, *(int(k) for k in args.workers.split(",") if k)})

    from cdc_assets.pipeline.tables import ensure_tables
    from cdc_assets.resources import build_resources
    from cdc_assets.spec import load_specs
    from cdc_assets.stack.local_stack import stack_down, stack_up

    rows: dict[int, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        home = make_home(Path(tmp))
        state = stack_up(home)
        try:
            resources = build_resources(home)
            resources["spark"] = resources["spark"].model_copy(update={"master": "local[2]"})
            reference: dict[str, list[tuple[Any, ...]]] | None = None
            for k in workers:
                spec_dir = Path(tmp) / f"specs_{k}"
                generate_specs(args.tables, spec_dir, prefix=f"threads{k}", namespace=f"w{k}")
                specs = load_specs(spec_dir)
                fleet = Fleet(specs, resources, k)
                for spec in specs:
                    ensure_tables(fleet.spark, fleet.catalog, spec)
                produce_workloads(specs, state.bootstrap_servers, 0)
                first = fleet.cycle()
                produce_workloads(specs, state.bootstrap_servers, 1)
                busy = fleet.cycle()
                bases = fleet.base_rows()
                if reference is None:
                    reference = bases
                elif bases != reference:
                    differ = [t for t in bases if bases[t] != reference.get(t)]
                    raise SystemExit(f"{k} workers: bases differ from the baseline's: {differ}")
                rows[k] = {"first": first, "busy": busy}
                print(f"  {k} workers: first {first}, busy {busy}", file=sys.stderr)
        finally:
            stack_down(home, purge=True)
    report(rows, args.tables)


def report(rows: dict[int, dict[str, Any]], tables: int) -> None:
    base = rows[1]
    print(f"\n{tables} tables, ~100 events each per cycle; wall seconds (per table), ratio to 1")
    print(f"  {'workers':>7} {'first cycle':>18} {'ratio':>6} {'busy cycle':>18} {'ratio':>6}")
    for k, r in sorted(rows.items()):
        cells = []
        for label in ("first", "busy"):
            wall = r[label]["wall_s"]
            cells.append(
                f"{wall:8.1f} s ({wall / tables:4.2f} s) {wall / base[label]['wall_s']:6.2f}"
            )
        print(f"  {k:>7} " + " ".join(cells))
    print("  every base equal to the baseline's, row for row")
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {
        "code": code_version(),
        "tables": tables,
        "workers": {str(k): r for k, r in rows.items()},
    }
    (RESULTS / "fleet_threads.json").write_text(json.dumps(payload, indent=2))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    ks = sorted(rows)
    for label, marker in (("first", "s"), ("busy", "o")):
        ax.plot(ks, [rows[k][label]["wall_s"] / tables for k in ks], marker=marker, label=label)
    ax.set(
        title=f"cycle cost per table ({tables} tables, one driver)",
        xlabel="tables at once",
        ylabel="s per table",
        xticks=ks,
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "fleet_threads.png", dpi=110)


if __name__ == "__main__":
    main()
