"""Benchmark: a fleet's cycles with the upsert of small tables interpreted, against the same
upsert with generated code (the baseline, what every table got before).

The upsert's statements (the window probe, bucketed's ``INSERT OVERWRITE``, the MERGEs into the
tombstones and base) are code of their own per table, with the window's offsets and snapshot ids
as literals, so Spark's code cache never serves them again: a profile of a fleet's busy cycle
(JFR on the driver JVM) put 15% of its samples in compiling generated code. Since 1a4da93 the
upsert runs interpreted when everything its statements read is under ``INTERPRETED_ROWS``
(``pipeline/shared/small_work.py``). This script runs the in-process driver's cycles (the
``ingest_ledgers`` run, then ``upsert_bases``; ``tables_at_once`` 2, one bucket per base) over
fresh copies of one fleet, alternating the two ways round by round in one driver, after one
untimed round that warms the driver. Every base must equal the first copy's row for row, or the
script fails. Prints a table of the medians, writes ``benchmarks/results/interpreted_upsert.json``
and ``.png``.

    python benchmarks/interpreted_upsert.py [--tables 16] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import ROOT, code_version, local_driver
from fleet_scale import generate_specs, produce_workloads
from fleet_threads import base_rows, cycle

RESULTS = ROOT / "benchmarks" / "results"
MODES = ("generated", "interpreted")  # the baseline first


def run_copy(
    tag: str, tables: int, home: Any, tmp: Path, resources: Any, bootstrap: str
) -> tuple[dict[str, Any], list[Any]]:
    """Onboard a fresh copy of the fleet, run its first cycle and one busy cycle."""
    import dagster as dg

    from cdc_assets.jobs.inprocess import PipelineDriver
    from cdc_assets.spec import load_specs

    spec_dir = tmp / f"specs_{tag}"
    generate_specs(tables, spec_dir, prefix=f"iu{tag}", namespace=f"iu{tag}", buckets=1)
    specs = load_specs(spec_dir)
    settings = replace(home, specs_dir=spec_dir, tables_at_once=2)
    with dg.DagsterInstance.ephemeral() as instance:
        driver = PipelineDriver(settings, instance, resource_overrides=resources)
        driver.onboard()
        produce_workloads(specs, bootstrap, 0)
        first = cycle(driver)
        produce_workloads(specs, bootstrap, 1)
        busy = cycle(driver)
    return {"first": first, "busy": busy}, specs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per way")
    args = parser.parse_args()

    from cdc_assets.pipeline.shared import small_work
    from cdc_assets.pipeline.upsert import upsert as upsert_module

    def generated(rows: int | None) -> dict[str, str]:
        return {}

    ways = {"generated": generated, "interpreted": small_work.interpreted_conf}
    runs: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        local_driver(Path(tmp)) as (home, state, resources),
    ):
        spark = resources["spark"].get_session()
        catalog = resources["spark"].catalog.name
        reference: list[list[tuple[Any, ...]]] | None = None
        plan = [("warm", "interpreted")] + [
            (f"{mode[0]}{r}", mode)
            for r in range(args.rounds)
            for mode in (MODES if r % 2 == 0 else MODES[::-1])
        ]
        for tag, mode in plan:
            upsert_module.interpreted_conf = ways[mode]  # type: ignore[assignment]
            try:
                timing, specs = run_copy(
                    tag, args.tables, home, Path(tmp), resources, state.bootstrap_servers
                )
            finally:
                upsert_module.interpreted_conf = small_work.interpreted_conf
            bases = base_rows(spark, catalog, specs)
            ordered = [bases[s.name] for s in specs]
            if reference is None:
                reference = ordered
            elif ordered != reference:
                raise SystemExit(f"round {tag} ({mode}): bases differ from the first copy's")
            print(f"  {tag} {mode}: {timing}", file=sys.stderr)
            if tag != "warm":
                runs.append({"round": tag, "mode": mode, **timing})
    report(runs, args.tables)


def report(runs: list[dict[str, Any]], tables: int) -> None:
    def median(mode: str, cycle_: str, part: str) -> float:
        return statistics.median(r[cycle_][part] for r in runs if r["mode"] == mode)

    print(
        f"\n{tables} tables, ~100 events each per cycle, 2 at once, 1 bucket; medians of "
        f"{len(runs) // 2} rounds per way, wall seconds (per table), ratio to generated code"
    )
    print(f"  {'upsert code':>12} {'cycle':>6} {'whole':>18} {'ratio':>6} {'upsert part':>12}")
    summary: dict[str, Any] = {}
    for cycle_ in ("first", "busy"):
        for mode in MODES:
            wall = median(mode, cycle_, "wall_s")
            ratio = wall / median(MODES[0], cycle_, "wall_s")
            part = median(mode, cycle_, "upsert_s")
            summary[f"{mode}_{cycle_}"] = {"wall_s": wall, "upsert_s": part, "ratio": ratio}
            print(
                f"  {mode:>12} {cycle_:>6} {wall:8.1f} s ({wall / tables:4.2f} s) "
                f"{ratio:6.2f} {part:10.1f} s"
            )
    print("  every base equal to the first copy's, row for row")
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {"code": code_version(), "tables": tables, "summary": summary, "runs": runs}
    (RESULTS / "interpreted_upsert.json").write_text(json.dumps(payload, indent=2))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for mode, marker in zip(MODES, ("o", "s"), strict=True):
        mine = [r for r in runs if r["mode"] == mode]
        ax.plot(
            [r["round"][1:] for r in mine],
            [r["busy"]["wall_s"] / tables for r in mine],
            marker=marker,
            label=f"busy cycle, upsert {mode}",
        )
    ax.set(
        title=f"busy cycle per table ({tables} tables, 2 at once)",
        xlabel="round",
        ylabel="s per table",
        ylim=(0, None),
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "interpreted_upsert.png", dpi=110)


if __name__ == "__main__":
    main()
