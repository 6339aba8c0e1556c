"""Benchmark: a fleet's busy cycle with small windows left in the ledger for base's MERGE to read
(``pipeline.upsert.leaves_window_in_ledger``), against every window written to the bucketed
table first (the baseline, ``DIRECT_MAX_ROWS = 0``), in the same process on the same events.

Two copies of one fleet (the example shapes: MySQL, PostgreSQL, MariaDB), each onboarded and
given a first cycle; then ``--rounds`` busy cycles of ~100 events per table each, the two modes
in turns whose order alternates (the cycle measured first in a round runs on a colder driver),
reported as medians. The in-process driver runs the real jobs with two tables at once (the
default). Both copies' bases must be equal row for row, or the script fails. Prints a table,
writes ``benchmarks/results/upsert_direct.json`` and ``.png``.

    python benchmarks/upsert_direct.py [--tables 30] [--rounds 4]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import ROOT, code_version, make_home
from fleet_scale import EVENTS_PER_TABLE, generate_specs
from fleet_threads import base_rows, cycle, spark_jobs

RESULTS = ROOT / "benchmarks" / "results"
MODES = {"written": 0, "left in ledger": None}  # DIRECT_MAX_ROWS; None: the default


def produce_rounds(specs: list[Any], bootstrap: str, rounds: int, part: int) -> None:
    """Part ``part`` of ``rounds + 1`` parts of one workload per table, ~EVENTS_PER_TABLE events
    each (every part continues the one before: positions keep growing)."""
    from cdc_assets.demo.events import produce, workload

    for i, spec in enumerate(specs):
        events = (rounds + 1) * EVENTS_PER_TABLE
        records = workload(spec, random.Random(i), keys=30, events=events)
        size = -(-len(records) // (rounds + 1))
        produce(records[part * size : (part + 1) * size], spec.source.topic, bootstrap)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()

    import dagster as dg

    from cdc_assets.jobs.inprocess import PipelineDriver
    from cdc_assets.pipeline import upsert as upsert_module
    from cdc_assets.resources import build_resources
    from cdc_assets.spec import load_specs
    from cdc_assets.stack.local_stack import stack_down, stack_up

    default = upsert_module.DIRECT_MAX_ROWS

    def use(mode: str) -> None:
        limit = MODES[mode]
        upsert_module.DIRECT_MAX_ROWS = default if limit is None else limit

    rows: dict[str, dict[str, Any]] = {m: {"busy_rounds": []} for m in MODES}
    with tempfile.TemporaryDirectory() as tmp, dg.DagsterInstance.ephemeral() as instance:
        home = make_home(Path(tmp))
        state = stack_up(home)
        bootstrap = state.bootstrap_servers
        try:
            resources = build_resources(home)
            resources["spark"] = resources["spark"].model_copy(update={"master": "local[2]"})
            spark = resources["spark"].get_session()
            catalog = resources["spark"].catalog.name
            drivers, fleets = {}, {}
            for i, mode in enumerate(MODES):
                spec_dir = Path(tmp) / f"specs_{i}"
                generate_specs(args.tables, spec_dir, prefix=f"direct{i}", namespace=f"d{i}")
                fleets[mode] = load_specs(spec_dir)
                settings = replace(home, specs_dir=spec_dir, tables_at_once=2)
                drivers[mode] = PipelineDriver(settings, instance, resource_overrides=resources)
            for mode in MODES:
                use(mode)
                drivers[mode].onboard()
                produce_rounds(fleets[mode], bootstrap, args.rounds, 0)
                rows[mode]["first"] = cycle(drivers[mode])
            for round_ in range(1, args.rounds + 1):
                order = list(MODES) if round_ % 2 else list(reversed(MODES))
                for mode in order:
                    use(mode)
                    produce_rounds(fleets[mode], bootstrap, args.rounds, round_)
                    before = spark_jobs(spark)
                    busy = cycle(drivers[mode])
                    busy["spark_jobs"] = len(spark_jobs(spark) - before)
                    rows[mode]["busy_rounds"].append(busy)
                    print(f"  round {round_}, {mode}: {busy}", file=sys.stderr)
            use("left in ledger")
            written, ledger = (base_rows(spark, catalog, fleets[m]) for m in MODES)
            # Same shapes and events, other names: compare table by table in fleet order.
            for a, b in zip(fleets["written"], fleets["left in ledger"], strict=True):
                if written[a.name] != ledger[b.name]:
                    raise SystemExit(f"{a.name} and {b.name}: the bases differ")
        finally:
            stack_down(home, purge=True)
    for r in rows.values():
        rounds = r["busy_rounds"]
        r["busy"] = {k: statistics.median(b[k] for b in rounds) for k in rounds[0]}
    report(rows, args.tables)


def report(rows: dict[str, dict[str, Any]], tables: int) -> None:
    base = rows["written"]["busy"]
    print(
        f"\n{tables} tables, busy cycles of ~100 events per table, two tables at once; medians "
        "of the rounds, seconds per table, ratio to the baseline"
    )
    print(
        f"  {'windows':<15} {'cycle':>7} {'ratio':>6} {'ingest':>7} {'upsert':>7} {'ratio':>6} "
        f"{'jobs/table':>10}"
    )
    for mode, r in rows.items():
        b = r["busy"]
        print(
            f"  {mode:<15} {b['wall_s'] / tables:7.2f} {b['wall_s'] / base['wall_s']:6.2f} "
            f"{b['ingest_s'] / tables:7.2f} {b['upsert_s'] / tables:7.2f} "
            f"{b['upsert_s'] / base['upsert_s']:6.2f} {b['spark_jobs'] / tables:10.1f}"
        )
    print("  every base equal between the two modes, row for row")
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {"code": code_version(), "tables": tables, "modes": rows}
    (RESULTS / "upsert_direct.json").write_text(json.dumps(payload, indent=2))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2))
    labels = list(rows)
    ingest = [rows[m]["busy"]["ingest_s"] / tables for m in labels]
    upsert = [rows[m]["busy"]["upsert_s"] / tables for m in labels]
    ax.barh(labels, ingest, label="ingest run")
    ax.barh(labels, upsert, left=ingest, label="upsert run")
    ax.set(title=f"busy cycle per table ({tables} tables, real jobs)", xlabel="s per table")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "upsert_direct.png", dpi=110)


if __name__ == "__main__":
    main()
