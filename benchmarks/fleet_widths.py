"""Benchmark: which width (``tables_at_once``) a busy cycle of small tables wants, measured on one
warm driver with the widths taking turns (issue 20, part 4).

``fleet_threads.py`` runs its widths one after another, so a later width runs on a warmer
driver: the JIT compiler is still the largest CPU user of a fresh driver's first cycles
(docs/benchmarks.md, "The driver's warm-up"). Here every width gets its own copy of the fleet
(same specs and events, its own topics and namespace) and its own in-process driver, all in one
process and one Spark driver; each is onboarded and run through a first cycle, then the widths
take turns on busy cycles of ~100 new events per table, in alternating order (2, 3 then 3, 2),
``--warm`` rounds unmeasured, then ``--measure`` rounds measured. The baseline is the first
width. Prints a table, writes ``benchmarks/results/fleet_widths.json`` and ``.png``.

    python benchmarks/fleet_widths.py [--tables 30] [--widths 2,3,4] [--warm 2] [--measure 4]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import local_driver, results_plot, save_results, tree_cpu_s
from fleet_scale import EVENTS_PER_TABLE, generate_specs
from fleet_threads import cycle


def produce_part(specs: list[Any], bootstrap: str, part: int, parts: int) -> None:
    """The ``part``-th of ``parts`` equal slices of each table's workload (same seed per table,
    so every width's copy of a table gets the same events)."""
    from cdc_assets_dev.demo.events import produce, workload

    for i, spec in enumerate(specs):
        records = workload(spec, random.Random(i), keys=30, events=parts * EVENTS_PER_TABLE)
        n = len(records) // parts
        produce(records[part * n : (part + 1) * n], spec.source.topic, bootstrap)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", type=int, default=30)
    parser.add_argument("--widths", default="2,3,4")
    parser.add_argument("--warm", type=int, default=2, help="busy rounds not measured")
    parser.add_argument("--measure", type=int, default=4, help="busy rounds measured")
    args = parser.parse_args()
    widths = [int(k) for k in args.widths.split(",")]
    parts = 1 + args.warm + args.measure

    import dagster as dg

    from cdc_assets.jobs.inprocess import PipelineDriver
    from cdc_assets.spec import load_specs

    with tempfile.TemporaryDirectory() as tmp, local_driver(Path(tmp)) as (home, state, res):
        fleets: dict[int, tuple[list[Any], Any]] = {}
        for k in widths:
            spec_dir = Path(tmp) / f"specs_{k}"
            generate_specs(args.tables, spec_dir, prefix=f"w{k}", namespace=f"w{k}", buckets=1)
            specs = load_specs(spec_dir)
            driver = PipelineDriver(
                replace(home, specs_dir=spec_dir, tables_at_once=k),
                dg.DagsterInstance.ephemeral(),
                resource_overrides=res,
            )
            driver.onboard()
            produce_part(specs, state.bootstrap_servers, 0, parts)
            cycle(driver)
            fleets[k] = (specs, driver)
        rounds: dict[int, list[dict[str, float]]] = {k: [] for k in widths}
        for part in range(1, parts):
            for k in widths if part % 2 else widths[::-1]:
                specs, driver = fleets[k]
                produce_part(specs, state.bootstrap_servers, part, parts)
                cpu = tree_cpu_s()
                result = cycle(driver)
                result["cpu_s"] = tree_cpu_s() - cpu
                measured = part > args.warm
                print(
                    f"  round {part} ({'measured' if measured else 'warm-up'}), {k} at once: "
                    f"{result['wall_s']:.1f} s",
                    file=sys.stderr,
                )
                if measured:
                    rounds[k].append(result)
    report(rounds, args.tables)


def report(rounds: dict[int, list[dict[str, float]]], tables: int) -> None:
    def median(k: int, key: str) -> float:
        return statistics.median(r[key] for r in rounds[k]) / tables

    base = next(iter(rounds))

    def ratio(k: int) -> float:
        return median(k, "wall_s") / median(base, "wall_s")

    print(
        f"\n{tables} tables, ~{EVENTS_PER_TABLE} events each per busy cycle, one warm driver, "
        f"widths taking turns; medians of {len(rounds[base])} busy cycles, per table"
    )
    print(
        f"  {'at once':>7} {'busy cycle':>10} {'ratio':>6} {'ingest':>7} {'upsert':>7} {'CPU':>6}"
    )
    for k in rounds:
        print(
            f"  {k:>7} {median(k, 'wall_s'):8.3f} s {ratio(k):6.2f}"
            f" {median(k, 'ingest_s'):5.3f} s {median(k, 'upsert_s'):5.3f} s"
            f" {median(k, 'cpu_s'):4.2f} s"
        )
    save_results("fleet_widths", {"tables": tables, "rounds": rounds})
    with results_plot("fleet_widths", figsize=(6, 3.6)) as ax:
        for k, runs in rounds.items():
            walls = [r["wall_s"] / tables for r in runs]
            ax.plot(range(1, len(runs) + 1), walls, marker="o", label=f"{k}")
        ax.set(
            title=f"busy cycle per table, widths taking turns ({tables} tables)",
            xlabel="measured round",
            ylabel="s per table",
        )
        ax.legend(title="tables at once", fontsize=8)


if __name__ == "__main__":
    main()
