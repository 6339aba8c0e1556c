"""Benchmark: a small ingest batch evaluated interpreted against generated code (the baseline).

The ingest decodes each batch in one query (``sql.batch_decode``) and Spark compiles generated
code for its stages, cached by the code's text. A table's decode is code of its own, so with
many tables each batch mostly compiles its decode again; with a few it finds it cached. Below
``INTERPRETED_ROWS`` (``pipeline/shared/small_work.py``) the ingest runs without code generation.
This
script measures one batch of n records both ways, decode, summary and the ledger rows (written
to Spark's ``noop`` sink), in two drivers:

- ``fleet``: Spark's code cache holds 1 entry, so every batch compiles (a fleet of tables with
  shapes of their own);
- ``warm``: the default cache, each table's code compiled before it is timed (one table, or a
  few, ingesting again and again).

Each size runs on tables of its own, one batch each way per table, which way first alternating
between tables (``warm`` compiles each table's code once, untimed, before). Prints a table of the
medians, writes ``benchmarks/results/interpreted_ingest.json`` and ``.png``.

    python benchmarks/interpreted_ingest.py [--sizes 100,1000,5000,20000] [--repeat 3]
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
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import ROOT, code_version, make_home
from fleet_scale import generate_specs

RESULTS = ROOT / "benchmarks" / "results"
DRIVERS = {"fleet": "1", "warm": None}  # spark.sql.codegen.cache.maxEntries


def batch_seconds(spark: Any, kafka: Any, spec: Any, conf: dict[str, str]) -> float:
    """One batch of the spec's whole topic through the ingest's decode, summary and rows."""
    from cdc_assets.pipeline.ingest.ingest import (
        IngestResult,
        _summarise,
        classify_records,
        ledger_rows,
        prepare,
        read_kafka,
    )
    from cdc_assets.pipeline.shared.batch_cache import cached_batch, session_conf

    partitions = kafka.topic_offsets(spec.source.topic)
    start = {p.partition: p.earliest for p in partitions}
    end = {p.partition: p.latest for p in partitions}
    records = sum(end[p] - start[p] for p in end)
    started = time.perf_counter()
    with session_conf(spark, conf):
        frame = read_kafka(spark, kafka, spec.source.topic, start, end)
        batch = prepare(classify_records(frame, spec), spec)
        with cached_batch(spark, batch, records) as cached:
            _summarise(cached, IngestResult(spec.name, "benchmark", start, end))
            ledger_rows(cached, spec).write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


def child(args: argparse.Namespace) -> None:
    """One driver: every size's tables, interpreted then compiled; JSON lines on stdout."""
    from cdc_assets.pipeline.shared.small_work import ADAPTIVE_CONF, INTERPRETED_CONF
    from cdc_assets.resources import build_resources
    from cdc_assets.spec import load_specs

    specs = {s.name: s for s in load_specs(Path(args.specs))}
    cache = DRIVERS[args.child]
    with tempfile.TemporaryDirectory() as tmp:
        home = replace(make_home(Path(tmp)), kafka_bootstrap=args.bootstrap)
        (Path(tmp) / "stack").mkdir()
        resources = build_resources(home)
        extra = {} if cache is None else {"spark.sql.codegen.cache.maxEntries": cache}
        spark_resource = resources["spark"].model_copy(
            update={"master": "local[2]", "extra_conf": extra}
        )
        spark = spark_resource.get_session()
        kafka = resources["kafka"]
        static = {ADAPTIVE_CONF: "false"}
        batch_seconds(spark, kafka, specs[args.warmup], static)  # the JVM's own warm-up
        modes = {"interpreted_s": {**static, **INTERPRETED_CONF}, "compiled_s": static}
        for i, name in enumerate(args.tables.split(",")):
            spec = specs[name]
            if cache is None:  # untimed: the table's code is in the cache before it is timed
                batch_seconds(spark, kafka, spec, static)
            row: dict[str, Any] = {"table": name}
            # Every other table the other way round: neither mode always runs first.
            for mode in sorted(modes, reverse=bool(i % 2)):
                row[mode] = batch_seconds(spark, kafka, spec, modes[mode])
            print(json.dumps(row), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,5000,20000")
    parser.add_argument("--repeat", type=int, default=3, help="tables per size")
    parser.add_argument("--child", choices=sorted(DRIVERS), help=argparse.SUPPRESS)
    parser.add_argument("--specs", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--tables", help=argparse.SUPPRESS)
    parser.add_argument("--warmup", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    from cdc_assets.pipeline.shared.small_work import INTERPRETED_ROWS
    from cdc_assets.spec import load_specs
    from cdc_assets_dev.demo.events import produce, workload
    from cdc_assets_dev.stack.local_stack import stack_down, stack_up

    sizes = [int(n) for n in args.sizes.split(",")]
    results: dict[str, dict[int, list[dict[str, float]]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        home = make_home(Path(tmp))
        state = stack_up(home)
        try:
            spec_dir = Path(tmp) / "specs"
            # Four shapes in turn (fleet_scale); every table's code is its own per driver.
            count = 1 + len(DRIVERS) * len(sizes) * args.repeat
            generate_specs(count, spec_dir, prefix="interp", namespace="interp")
            specs = sorted(load_specs(spec_dir), key=lambda s: s.name)
            plan: dict[str, list[tuple[int, str]]] = {d: [] for d in DRIVERS}
            produce(
                workload(specs[0], random.Random(0), keys=30, events=200),
                specs[0].source.topic,
                state.bootstrap_servers,
            )
            rest = iter(specs[1:])
            for n in sizes:
                for driver in DRIVERS:
                    for _ in range(args.repeat):
                        spec = next(rest)
                        events = workload(spec, random.Random(n), keys=max(30, n // 3), events=n)
                        produce(events, spec.source.topic, state.bootstrap_servers)
                        plan[driver].append((n, spec.name))
            for driver, tables in plan.items():
                print(f"  {driver} driver: {len(tables)} batches", file=sys.stderr, flush=True)
                sizes_of = {name: n for n, name in tables}
                done = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--child",
                        driver,
                        "--specs",
                        str(spec_dir),
                        "--bootstrap",
                        state.bootstrap_servers,
                        "--tables",
                        ",".join(name for _, name in tables),
                        "--warmup",
                        specs[0].name,
                    ],
                    capture_output=True,
                    text=True,
                    check=False,
                    env=os.environ,
                )
                if done.returncode != 0:
                    raise SystemExit(f"{driver} driver failed:\n{done.stderr[-4000:]}")
                for line in done.stdout.splitlines():
                    if line.startswith("{"):
                        row = json.loads(line)
                        by_size = results.setdefault(driver, {})
                        by_size.setdefault(sizes_of[row["table"]], []).append(row)
        finally:
            stack_down(home, purge=True)
    report(results, sizes, INTERPRETED_ROWS)


def report(
    results: dict[str, dict[int, list[dict[str, float]]]], sizes: list[int], threshold: int
) -> None:
    medians: dict[str, dict[str, dict[str, float]]] = {}
    print("\none ingest batch (decode, summary, ledger rows), median seconds; ratio to compiled")
    print(f"  {'driver':>6} {'records':>8} {'interpreted':>12} {'compiled':>9} {'ratio':>6}")
    for driver, by_size in results.items():
        for n in sizes:
            rows = by_size.get(n, [])
            interpreted = statistics.median(r["interpreted_s"] for r in rows)
            compiled = statistics.median(r["compiled_s"] for r in rows)
            medians.setdefault(driver, {})[str(n)] = {
                "interpreted_s": interpreted,
                "compiled_s": compiled,
                "ratio": interpreted / compiled,
            }
            print(
                f"  {driver:>6} {n:8d} {interpreted:10.2f} s {compiled:7.2f} s "
                f"{interpreted / compiled:6.2f}"
            )
    print(f"  the ingest runs interpreted below {threshold:,} records (INTERPRETED_ROWS)")
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {
        "code": code_version(),
        "interpreted_rows": threshold,
        "medians": medians,
        "runs": {d: {str(n): rows for n, rows in s.items()} for d, s in results.items()},
    }
    (RESULTS / "interpreted_ingest.json").write_text(json.dumps(payload, indent=2))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for driver, marker in (("fleet", "o"), ("warm", "s")):
        if driver in medians:
            ax.plot(
                sizes,
                [medians[driver][str(n)]["ratio"] for n in sizes],
                marker=marker,
                label=f"{driver} driver",
            )
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.axvline(threshold, color="grey", linestyle=":", linewidth=0.8)
    ax.set(
        title="one ingest batch: interpreted / generated code",
        xlabel="records in the batch",
        ylabel="time ratio",
        xscale="log",
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "interpreted_ingest.png", dpi=110)


if __name__ == "__main__":
    main()
