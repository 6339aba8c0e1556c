"""Benchmark: how the upsert's cost grows with base at a fixed change set (issue 24).

For each base size (default 2M, 10M, 50M rows in the users shape) the same number of keys
changes (default 100k, each twice, 10% of them deleted by the second change): spread uniformly
over the keys, skewed (90% of the changed keys among the newest 10% of the keys) and hot (all of
them there, as in tables whose recent rows take the updates). Each workload runs the plain MERGE
(a), the product's upsert (b: ``build_bucketed`` + ``merge_base``) and, with ``--cases b0``, the
product's upsert without key-range pruning, from the same starting base, with the set-up, checks
and reset of ``upsert_merge.py`` (every run's base is verified against the generator's expected
base). Base is written as the product writes it (sorted by key within each bucket);
``--file-mb`` sets its target file size, so that a bucket holds several files. Besides wall
time, each run reports what it read from base, from Spark's SQL metrics of every Iceberg scan of
base in the run (``number of result data files``, ``total data file size (bytes)``, ``number of
output rows``), and what it wrote (snapshot summaries).

Prints a table, writes ``benchmarks/results/upsert_scaling.json`` and ``.png``, and reads the
figures against the issue's targets: from the smallest to the largest base, (b) grows by at
most 1.5x; on the skewed workload (b) reads at most 20% of base's data files; (b) beats (a)
from 10M rows up; and the share of files (b) reads on the hot workload, and b/b0.

    python benchmarks/upsert_scaling.py [--rows 2000000,10000000,50000000] [--keys 100000]
        [--repeats 2] [--cases a,b,b0] [--workloads uniform,skewed,hot] [--file-mb 16]
        [--format-version 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

import upsert_merge as um
from bench_common import code_version, make_home

SCAN_METRICS = {
    "number of result data files": "files",
    "total data file size (bytes)": "bytes",
    "number of output rows": "rows",
    "number of result delete files": "delete_files",
}
TARGETS = {"b_growth_max": 1.5, "skewed_b_files_share_max": 0.2, "b_beats_a_from_rows": 10_000_000}


def _java_list(spark: Any, seq: Any) -> Any:
    return spark._jvm.scala.jdk.javaapi.CollectionConverters.asJava(seq)


def base_scans(spark: Any, executions: tuple[int, int], table: str) -> dict[str, int]:
    """Totals of SCAN_METRICS over every Iceberg scan of ``table`` (``namespace.name``) in the
    SQL executions of a timed run (ids in ``(after, upto]``): what the run read from base."""
    after, upto = executions
    # ns.users, not ns.users_cdc or ns.users_bucketed
    named = re.compile(rf"(?<!\w){re.escape(table)}(?!\w)")
    store = spark._jsparkSession.sharedState().statusStore()
    totals = dict.fromkeys(SCAN_METRICS.values(), 0)
    totals["scans"] = 0
    for execution in _java_list(spark, store.executionsList()):
        run_id = int(execution.executionId())
        if not after < run_id <= upto:
            continue
        values = _java_list(spark, store.executionMetrics(run_id))
        for node in _java_list(spark, store.planGraph(run_id).allNodes()):
            if not str(node.name()).startswith("BatchScan") or not named.search(str(node.desc())):
                continue
            totals["scans"] += 1
            for metric in _java_list(spark, node.metrics()):
                name = SCAN_METRICS.get(str(metric.name()))
                value = values.get(metric.accumulatorId())
                if name is not None and value is not None:
                    totals[name] += int(str(value).split()[0].replace(",", ""))
    return totals


def measure(table: um.Table, case: str, work: um.Workload) -> dict[str, Any]:
    layout = table.layouts["base"]
    run = table.measure(case, work)
    scans = base_scans(table.spark, run.sql_executions, f"{layout.namespace}.{layout.name}")
    return {**asdict(run), "base_read": scans}


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if r["error"] is None and r["ok"]]
    first = ok[0] if ok else runs[0]
    return {
        "seconds": statistics.median(r["seconds"] for r in ok) if ok else None,
        "steps": {
            k: statistics.median(r["steps"][k] for r in ok if k in r["steps"])
            for k in first["steps"]
        },
        "base_read": first["base_read"],
        "written": first["written"],
        "verified": bool(runs) and all(r["ok"] for r in runs),
        "error": next((r["error"] or r["problem"] for r in runs if not r["ok"]), None),
        "runs": runs,
    }


def readings(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures against TARGETS (None where a case or size was not measured)."""

    def seconds(rows: int, workload: str, case: str) -> float | None:
        return next(
            (
                r["seconds"]
                for r in results
                if (r["rows"], r["workload"], r["case"]) == (rows, workload, case)
            ),
            None,
        )

    sizes = sorted({r["rows"] for r in results})
    out: dict[str, Any] = {}
    small, large = seconds(sizes[0], "uniform", um.OURS), seconds(sizes[-1], "uniform", um.OURS)
    out["b_growth"] = large / small if small and large else None
    out["a_growth"] = (
        (seconds(sizes[-1], "uniform", um.PLAIN) or 0) / s
        if (s := seconds(sizes[0], "uniform", um.PLAIN))
        else None
    )
    for workload in ("skewed", "hot"):
        out[f"{workload}_b_files_share"] = {
            str(r["rows"]): r["base_read"]["files"] / r["base_files"]["data_files"]
            for r in results
            if r["workload"] == workload and r["case"] == um.OURS and r["base_files"]["data_files"]
        }
    workloads = ("uniform", "skewed", "hot")
    out["b_over_a"] = {
        f"{rows}/{workload}": (b / a if (b := seconds(rows, workload, um.OURS)) and a else None)
        for rows in sizes
        for workload in workloads
        if (a := seconds(rows, workload, um.PLAIN))
    }
    # The pruning lever: ours with it over ours without it, same base, same changes.
    out["b_over_b0"] = {
        f"{rows}/{workload}": (b / b0 if (b := seconds(rows, workload, um.OURS)) and b0 else None)
        for rows in sizes
        for workload in workloads
        if (b0 := seconds(rows, workload, um.OURS_UNPRUNED))
    }
    return out


def print_report(results: list[dict[str, Any]], reading: dict[str, Any]) -> None:
    print(
        f"\n{'base rows':>11} {'workload':>8} {'case':>12} {'seconds':>8} {'base files read':>16} "
        f"{'MiB read':>9} {'rows read':>11} {'files written':>13} ok"
    )
    for r in results:
        read = r["base_read"]
        written = sum(t.get("added-data-files", 0) for t in r["written"].values())
        written += sum(t.get("added-delete-files", 0) for t in r["written"].values())
        seconds = f"{r['seconds']:.1f}" if r["seconds"] is not None else "-"
        print(
            f"{r['rows']:>11,} {r['workload']:>8} {r['case']:>12} {seconds:>8} "
            f"{read['files']:>7,} of {r['base_files']['data_files']:<6,} "
            f"{read['bytes'] / 2**20:>9,.0f} {read['rows']:>11,} {written:>13,} "
            f"{'yes' if r['verified'] else 'NO ' + str(r['error'])}"
        )
    print(f"\nreadings against the targets {TARGETS}:")
    print(json.dumps(reading, indent=2))


def write_plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for workload, style in (("uniform", "-"), ("skewed", "--"), ("hot", ":")):
        for case, color in (
            (um.PLAIN, "tab:gray"),
            (um.OURS, "tab:blue"),
            (um.OURS_UNPRUNED, "tab:orange"),
        ):
            points = sorted(
                (
                    r["rows"],
                    r["seconds"],
                    r["base_read"]["files"] / max(r["base_files"]["data_files"], 1),
                )
                for r in results
                if r["workload"] == workload and r["case"] == case and r["seconds"] is not None
            )
            if not points:
                continue
            label = f"{case} ({workload})"
            xs = [p[0] / 1e6 for p in points]
            left.plot(xs, [p[1] for p in points], style, marker="o", color=color, label=label)
            right.plot(
                xs, [100 * p[2] for p in points], style, marker="o", color=color, label=label
            )
    left.set(xlabel="base rows (millions)", ylabel="seconds", title="upsert of a fixed change set")
    right.set(xlabel="base rows (millions)", ylabel="% of base data files read", title="base read")
    sizes = sorted({r["rows"] / 1e6 for r in results})
    right.set_ylim(0, 105)
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_xticks(sizes, [f"{x:g}M" for x in sizes])
        ax.minorticks_off()
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="2000000,10000000,50000000")
    parser.add_argument("--keys", type=int, default=100_000, help="changed keys per workload")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--cases",
        default="a,b",
        help="subset of a (plain MERGE), b (ours), b0 (ours without key-range pruning)",
    )
    parser.add_argument(
        "--workloads",
        default="uniform,skewed,hot",
        help="uniform, skewed (90%% of changes on the newest 10%% of keys), hot (all of them)",
    )
    parser.add_argument(
        "--file-mb",
        type=int,
        default=None,
        help="base's write.target-file-size-bytes in MiB (default: Iceberg's, 512)",
    )
    parser.add_argument(
        "--format-version",
        type=int,
        default=None,
        help="base's Iceberg format version (default: the product's, 2; 3 has deletion vectors)",
    )
    parser.add_argument(
        "--unordered",
        action="store_true",
        help="base and tombstones without the product's key order (files not sorted by key)",
    )
    parser.add_argument("--buckets", type=int, default=None, help="default: the users spec's")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--results-dir", type=Path, default=um.RESULTS)
    parser.add_argument(
        "--plot-only", action="store_true", help="redraw the plot from the JSON, run nothing"
    )
    args = parser.parse_args()
    args.rows = [int(x) for x in args.rows.split(",") if x.strip()]
    args.cases = [um.SHORT[c.strip()] for c in args.cases.split(",") if c.strip()]
    if set(args.cases) - {um.PLAIN, um.OURS, um.OURS_UNPRUNED}:
        parser.error("--cases takes a subset of a, b, b0")
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if set(args.workloads) - {"uniform", *um.WORKLOAD_HOT_CHANGES}:
        parser.error("--workloads takes a subset of uniform, skewed, hot")
    # What upsert_merge.Bench reads from its arguments.
    args.spark_conf, args.shuffle_partitions, args.explain = [], None, False
    return args


def main() -> None:
    args = parse_args()
    if args.plot_only:
        document = json.loads((args.results_dir / "upsert_scaling.json").read_text())
        write_plot(document["results"], args.results_dir / "upsert_scaling.png")
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    from cdc_assets.spec import load_spec
    from cdc_assets_dev.stack.local_stack import stack_down, stack_up

    tmp = Path(tempfile.mkdtemp(prefix="cdc-upsert-scaling-"))
    settings = None
    bench: um.Bench | None = None
    info: dict[str, Any] = {"code": code_version(), "load_average_before": os.getloadavg()}
    results: list[dict[str, Any]] = []
    workloads = args.workloads
    try:
        settings = make_home(tmp)
        stack_up(settings)
        spec = load_spec(um.ROOT / "table_specs" / "users.yaml")
        props: dict[str, str] = {}
        if args.file_mb:
            props["write.target-file-size-bytes"] = str(args.file_mb * 2**20)
        if args.format_version:
            props["format-version"] = str(args.format_version)
        if props:
            base = spec.base.model_copy(update={"properties": {**spec.base.properties, **props}})
            spec = spec.model_copy(update={"base": base})
        args.buckets = args.buckets or spec.base.buckets
        bench = um.Bench(settings, args)
        bench.start_spark()
        scratch = tmp / "scratch"
        scratch.mkdir()
        warm = um.Table(
            bench, um.isolated(spec, "bench_warmup", args.buckets), um.WARMUP_ROWS, 1, scratch
        )
        warm.create()
        warm_work = warm.write_ledger(um.WARMUP_CHANGED)
        for case in args.cases:
            measure(warm, case, warm_work)
        for rows in args.rows:
            namespace = f"bench_{uuid.uuid4().hex[:6]}"
            table = um.Table(
                bench, um.isolated(spec, namespace, args.buckets), rows, args.seed, scratch
            )
            began = time.perf_counter()
            table.create()
            files = table.base_files()
            print(
                f"  base of {rows:,} rows in {time.perf_counter() - began:.0f}s: {files}",
                file=sys.stderr,
            )
            for workload in workloads:
                table.skew = workload
                work = table.write_ledger(args.keys / rows)
                for case in args.cases:
                    runs = []
                    for _ in range(args.repeats):
                        runs.append(measure(table, case, work))
                        last = runs[-1]
                        print(
                            f"  {rows:,} {workload} {case}: {last['seconds']:.1f}s, base read "
                            f"{last['base_read']['files']} of {files['data_files']} files, "
                            f"ok={last['ok']} {last['error'] or last['problem'] or ''}",
                            file=sys.stderr,
                        )
                    results.append(
                        {
                            "rows": rows,
                            "workload": workload,
                            "case": case,
                            "keys": work.keys,
                            "ledger_rows": work.ledger_rows,
                            "base_files": files,
                            **summarise(runs),
                        }
                    )
            # Free the disk before the next size: base and ledger are not read again.
            bench.spark.sql(f"DROP TABLE IF EXISTS {table.ids['base']} PURGE")
            bench.spark.sql(f"DROP TABLE IF EXISTS {table.ids['ledger']} PURGE")
            if table.changes_path is not None:
                shutil.rmtree(table.changes_path.parent, ignore_errors=True)
                table.changes_path.parent.mkdir(exist_ok=True)
    finally:
        try:
            if bench is not None:
                bench.stop_spark()
        finally:
            try:
                if settings is not None:
                    stack_down(settings, purge=True)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    info["load_average_after"] = os.getloadavg()
    reading = readings(results)
    print_report(results, reading)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    out = args.results_dir / "upsert_scaling.json"
    document = {
        "rows": args.rows,
        "keys": args.keys,
        "repeats": args.repeats,
        "buckets": args.buckets,
        "file_mb": args.file_mb,
        "key_ordered": not args.unordered,
        "format_version": args.format_version or 2,
        "hot_changes": um.HOT_CHANGES,
        "hot_keys": um.HOT_KEYS,
        "driver_memory": args.driver_memory,
        "spark_master": "local[2]",
        "cpus": os.cpu_count(),
        **info,
        "targets": TARGETS,
        "readings": reading,
        "results": results,
    }
    out.write_text(json.dumps(document, indent=2, default=str) + "\n")
    write_plot(results, args.results_dir / "upsert_scaling.png")
    print(f"\nwrote {out} and upsert_scaling.png")
    failed = [f"{r['rows']} {r['workload']} {r['case']}" for r in results if not r["verified"]]
    if failed:
        raise SystemExit(f"runs not verified: {failed}")


if __name__ == "__main__":
    main()
