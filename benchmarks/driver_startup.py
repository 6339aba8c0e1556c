"""Benchmark: a fresh local driver with and without the class archive (`jars.class_archive`).

Every Dagster run, CLI command and test process starts a Spark driver JVM of its own; this
measures what that costs before any work, and on the first statements. Each variant runs in a
process of its own (the archive is an option of the driver's JVM), the order alternating between
rounds: the process builds `SparkResource`'s configuration (the baseline removes the archive
from it), starts the driver, then creates an Iceberg table on a scratch catalog, inserts,
MERGEs and reads it. Per process: seconds to a session, to the end of the statements, the CPU
of the process tree and the driver JVM's resident memory at the end. Prints the medians and
their ratios, writes ``benchmarks/results/driver_startup.json`` and ``.png``.

    python benchmarks/driver_startup.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import driver_jvm_pid, results_plot, save_results, tree_cpu_s

VARIANTS = {"plain": "without the archive (baseline)", "archive": "with the class archive"}
STATEMENTS = (
    "CREATE NAMESPACE IF NOT EXISTS bench.ns",
    "CREATE TABLE bench.ns.t (id bigint, v string) USING iceberg PARTITIONED BY (bucket(4, id))",
    "INSERT INTO bench.ns.t SELECT id, CAST(id AS STRING) FROM range(1000)",
    "MERGE INTO bench.ns.t t USING (SELECT id, 'x' AS v FROM range(500, 1500)) s "
    "ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *",
    "SELECT v, count(*) FROM bench.ns.t GROUP BY v",
)


def child(variant: str) -> dict[str, Any]:
    began = time.monotonic()
    import psutil
    from pyspark.sql import SparkSession

    from cdc_assets.resources import build_resources
    from cdc_assets.resources.config import DRIVER_JAVA_OPTIONS, CatalogConfig, spark_catalog_conf
    from cdc_assets.settings import load_settings

    settings = load_settings()
    conf = build_resources(settings)["spark"].model_copy(update={"master": "local[2]"}).conf()
    options = conf[DRIVER_JAVA_OPTIONS].split()
    mapped = any(o.startswith("-XX:SharedArchiveFile=") for o in options)
    if variant == "plain":
        options = [o for o in options if not o.startswith("-XX:SharedArchiveFile=")]
    elif not mapped:
        raise SystemExit("no class archive for this JVM and these jars: run `cdc-assets jars`")
    conf[DRIVER_JAVA_OPTIONS] = " ".join(options)
    scratch = Path(tempfile.mkdtemp(prefix="driver-startup-"))
    catalog = CatalogConfig(
        name="bench",
        type="jdbc",
        uri=f"jdbc:sqlite:{scratch / 'catalog.db'}",
        warehouse=(scratch / "warehouse").as_uri(),
        properties={},
    )
    conf.update(spark_catalog_conf(catalog))
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    ready = time.monotonic()
    for statement in STATEMENTS:
        session.sql(statement).collect()
    done = time.monotonic()
    pid = driver_jvm_pid()
    rss = psutil.Process(pid).memory_info().rss if pid else 0
    cpu = tree_cpu_s()
    session.stop()
    return {
        "variant": variant,
        "session_s": ready - began,
        "statements_s": done - ready,
        "total_s": done - began,
        "cpu_s": cpu,
        "rss_mib": rss / 2**20,
    }


KEYS = ("session_s", "statements_s", "total_s", "cpu_s", "rss_mib")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", choices=sorted(VARIANTS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return
    runs: list[dict[str, Any]] = []
    names = list(VARIANTS)
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            done = subprocess.run(
                [sys.executable, __file__, "--child", name],
                stdout=subprocess.PIPE,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise SystemExit(f"{name} driver failed (exit {done.returncode})")
            run = json.loads(done.stdout.strip().splitlines()[-1])
            print(
                f"  round {r + 1} {name:>8}: session {run['session_s']:.1f} s, "
                f"statements {run['statements_s']:.1f} s",
                flush=True,
            )
            runs.append(run)
    medians = {
        name: {k: statistics.median(r[k] for r in runs if r["variant"] == name) for k in KEYS}
        for name in VARIANTS
    }
    base = medians["plain"]
    print(f"\nA fresh local driver, medians of {args.rounds} processes per variant")
    print(
        f"  {'driver':>32} {'to a session':>12} {'statements':>10} {'total':>7} {'ratio':>6}"
        f" {'CPU':>6} {'ratio':>6} {'JVM RSS':>8}"
    )
    for name, m in medians.items():
        print(
            f"  {VARIANTS[name]:>32} {m['session_s']:10.2f} s {m['statements_s']:8.2f} s"
            f" {m['total_s']:5.2f} s {m['total_s'] / base['total_s']:6.2f}"
            f" {m['cpu_s']:4.1f} s {m['cpu_s'] / base['cpu_s']:6.2f} {m['rss_mib']:5.0f} MiB"
        )
    save_results("driver_startup", {"labels": VARIANTS, "medians": medians, "runs": runs})
    with results_plot("driver_startup") as ax:
        for i, name in enumerate(VARIANTS):
            m = medians[name]
            ax.barh(i, m["session_s"], color="C0", label="to a session" if i == 0 else None)
            ax.barh(
                i,
                m["statements_s"],
                left=m["session_s"],
                color="C1",
                label="five statements" if i == 0 else None,
            )
        ax.set_yticks(range(len(VARIANTS)), list(VARIANTS.values()))
        ax.set(title="a fresh local driver (medians)", xlabel="seconds")
        ax.legend(fontsize=8)


if __name__ == "__main__":
    main()
