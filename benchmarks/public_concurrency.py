"""Benchmark: a fleet's busy cycles on this checkout against an earlier commit of the project,
taking turns on the same stack (issue 59, item 1: several tables of a run at once by public means
instead of a private executor; at most 1.1x).

Each side is a child process running that side's code (``PYTHONPATH`` on a ``git worktree`` of
the earlier commit, or on this checkout), with a Spark driver of its own on ``local[2]`` and the
in-process driver's cycles (the ``ingest_ledgers`` run of the tables whose topics grew, then
``upsert_bases`` of those, ``CDC_ASSETS_TABLES_AT_ONCE`` tables at once). Each side has its own
copy of the fleet (same specs and events, its own topics and namespace); only one side works at a
time, in alternating order (before, after, then after, before), ``--warm`` rounds unmeasured,
then ``--measure`` rounds measured. At the end every base of one side must equal the other's
row for row (read with pyiceberg), or the script fails. Wall and CPU seconds (the child and its
JVM). Prints a table, writes ``benchmarks/results/public_concurrency.json`` and ``.png``.

    python benchmarks/public_concurrency.py [--before 059152e] [--tables 30] [--width 3]
        [--warm 2] [--measure 4]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import ROOT, make_home, results_plot, save_results
from fleet_scale import EVENTS_PER_TABLE, generate_specs

# The last commit with the private executor (jobs/executor.py).
BEFORE = "059152e"

CHILD = r"""
import json, sys, time
import psutil
import dagster as dg
import cdc_assets
from cdc_assets.jobs.inprocess import PipelineDriver
from cdc_assets.resources import build_resources
from cdc_assets.settings import load_settings

def tree_cpu():
    total = 0.0
    me = psutil.Process()
    for proc in [me, *me.children(recursive=True)]:
        try:
            t = proc.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total

settings = load_settings()
resources = build_resources(settings)
resources["spark"] = resources["spark"].model_copy(update={"master": "local[2]"})
driver = PipelineDriver(settings, dg.DagsterInstance.ephemeral(), resource_overrides=resources)
print(json.dumps({"code": cdc_assets.__file__}), flush=True)
for line in sys.stdin:
    command = line.strip()
    if command == "quit":
        break
    out = {}
    if command == "onboard":
        driver.onboard()
    elif command == "cycle":
        cpu = tree_cpu()
        started = time.perf_counter()
        ingest = driver.ingest()
        ingest_s = time.perf_counter() - started
        upsert = driver.upsert()
        wall = time.perf_counter() - started
        out = {
            "wall_s": wall,
            "ingest_s": ingest_s,
            "upsert_s": wall - ingest_s,
            "cpu_s": tree_cpu() - cpu,
            "records": sum(int(m.get("records_read", 0) or 0) for m in ingest.values()),
            "upserted": len(upsert),
        }
    print(json.dumps(out), flush=True)
"""


class Side:
    """One side's child process: its code tree, its fleet, its commands."""

    def __init__(self, label: str, tree: Path, home: Any, specs_dir: Path, width: int) -> None:
        self.label = label
        self.specs_dir = specs_dir
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(tree), str(tree / "dev")]),
            "CDC_ASSETS_HOME": str(home.home),
            "CDC_ASSETS_SPECS": str(specs_dir),
            "CDC_ASSETS_TABLES_AT_ONCE": str(width),
        }
        self.child = subprocess.Popen(
            [sys.executable, "-c", CHILD],
            cwd=tree,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        code = self._read()["code"]
        if not str(code).startswith(str(tree)):
            raise SystemExit(f"{label}: imported {code}, not the code of {tree}")

    def _read(self) -> dict[str, Any]:
        assert self.child.stdout is not None
        line = self.child.stdout.readline()
        if not line:
            raise SystemExit(f"{self.label}: the child ended (exit {self.child.wait()})")
        result: dict[str, Any] = json.loads(line)
        return result

    def ask(self, command: str) -> dict[str, Any]:
        assert self.child.stdin is not None
        self.child.stdin.write(command + "\n")
        self.child.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.child.poll() is None:
            self.ask_quit()

    def ask_quit(self) -> None:
        assert self.child.stdin is not None
        self.child.stdin.write("quit\n")
        self.child.stdin.flush()
        self.child.wait(120)


def produce_part(specs: list[Any], bootstrap: str, part: int, parts: int) -> None:
    """The ``part``-th of ``parts`` equal slices of each table's workload (same seed per table,
    so both sides' copies of a table get the same events)."""
    from cdc_assets_dev.demo.events import produce, workload

    for i, spec in enumerate(specs):
        records = workload(spec, random.Random(i), keys=30, events=parts * EVENTS_PER_TABLE)
        n = len(records) // parts
        produce(records[part * n : (part + 1) * n], spec.source.topic, bootstrap)


def base_rows(catalog: Any, spec: Any) -> list[tuple[Any, ...]]:
    from cdc_assets.schema.layers import base_layout

    layout = base_layout(spec)
    table = catalog.load_table(f"{layout.namespace}.{layout.name}").scan().to_arrow()
    keys = [c.sink_name for c in spec.columns]
    rows = table.select(keys).to_pylist()
    return sorted(tuple(str(r[k]) for k in keys) for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default=BEFORE, help="the earlier commit")
    parser.add_argument("--tables", type=int, default=30)
    parser.add_argument("--width", type=int, default=3, help="CDC_ASSETS_TABLES_AT_ONCE")
    parser.add_argument("--warm", type=int, default=2, help="busy rounds not measured")
    parser.add_argument("--measure", type=int, default=4, help="busy rounds measured")
    args = parser.parse_args()
    parts = 1 + args.warm + args.measure

    from cdc_assets.resources import build_resources
    from cdc_assets.spec import load_specs
    from cdc_assets_dev.stack.local_stack import stack_down, stack_up

    with tempfile.TemporaryDirectory() as tmp:
        worktree = Path(tmp) / "before"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(worktree), args.before],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        home = make_home(Path(tmp))
        state = stack_up(home)
        sides: dict[str, Side] = {}
        try:
            fleets: dict[str, list[Any]] = {}
            for label, tree in (("before", worktree), ("after", ROOT)):
                spec_dir = Path(tmp) / f"specs_{label}"
                generate_specs(
                    args.tables, spec_dir, prefix=label[0], namespace=f"pc_{label}", buckets=1
                )
                fleets[label] = load_specs(spec_dir)
                sides[label] = Side(label, tree, home, spec_dir, args.width)
                sides[label].ask("onboard")
                produce_part(fleets[label], state.bootstrap_servers, 0, parts)
                first = sides[label].ask("cycle")
                print(f"  {label}: first cycle {first['wall_s']:.1f} s", file=sys.stderr)
            rounds: dict[str, list[dict[str, float]]] = {label: [] for label in sides}
            for part in range(1, parts):
                order = list(sides) if part % 2 else list(sides)[::-1]
                for label in order:
                    produce_part(fleets[label], state.bootstrap_servers, part, parts)
                    result = sides[label].ask("cycle")
                    measured = part > args.warm
                    print(
                        f"  round {part} ({'measured' if measured else 'warm-up'}), {label}: "
                        f"{result['wall_s']:.1f} s, {result['records']} records",
                        file=sys.stderr,
                    )
                    if measured:
                        rounds[label].append(result)
            for side in sides.values():
                side.close()
            catalog = build_resources(home)["iceberg"].load_catalog()
            for before, after in zip(fleets["before"], fleets["after"], strict=True):
                if base_rows(catalog, before) != base_rows(catalog, after):
                    raise SystemExit(f"base of {after.name} differs from {before.name}'s")
            print(f"  every base of one side equals the other's ({args.tables} tables)")
        finally:
            for side in sides.values():
                if side.child.poll() is None:
                    side.child.kill()
            stack_down(home, purge=True)
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT, check=False
            )
    report(rounds, args)


def report(rounds: dict[str, list[dict[str, float]]], args: Any) -> None:
    def median(label: str, key: str) -> float:
        return statistics.median(r[key] for r in rounds[label]) / args.tables

    print(
        f"\n{args.tables} tables, ~{EVENTS_PER_TABLE} events each per busy cycle, "
        f"{args.width} at once, the sides taking turns; medians of {args.measure} busy cycles, "
        "per table"
    )
    print(f"  {'side':>8} {'busy cycle':>10} {'ratio':>6} {'ingest':>7} {'upsert':>7} {'CPU':>6}")
    rows = {}
    for label in rounds:
        ratio = median(label, "wall_s") / median("before", "wall_s")
        cpu_ratio = median(label, "cpu_s") / median("before", "cpu_s")
        rows[label] = {
            "busy_cycle_s_per_table": median(label, "wall_s"),
            "ratio": ratio,
            "cpu_s_per_table": median(label, "cpu_s"),
            "cpu_ratio": cpu_ratio,
        }
        print(
            f"  {label:>8} {median(label, 'wall_s'):8.3f} s {ratio:6.2f}"
            f" {median(label, 'ingest_s'):5.3f} s {median(label, 'upsert_s'):5.3f} s"
            f" {median(label, 'cpu_s'):4.2f} s"
        )
    save_results(
        "public_concurrency",
        {
            "before": args.before,
            "tables": args.tables,
            "width": args.width,
            "summary": rows,
            "rounds": rounds,
        },
    )
    with results_plot("public_concurrency", figsize=(6, 3.6)) as ax:
        for label, runs in rounds.items():
            walls = [r["wall_s"] / args.tables for r in runs]
            ax.plot(range(1, len(runs) + 1), walls, marker="o", label=label)
        ax.set(
            title=f"busy cycle per table, {args.tables} tables, {args.width} at once",
            xlabel="measured round",
            ylabel="s per table",
        )
        ax.legend(
            title=f"private executor ({args.before}) / tables op", fontsize=8, title_fontsize=8
        )


if __name__ == "__main__":
    main()
