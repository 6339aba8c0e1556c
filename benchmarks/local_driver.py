"""Benchmark: small Iceberg commits on a local driver with the project's JVM settings against
Hadoop's and Iceberg's defaults (the baseline).

Two settings of a local driver's JVM (``resources/config.py``) cut the fixed cost of a small
commit. Without Hadoop's native library, Hadoop's ``file:`` file system starts a ``chmod``
process for every file it creates and writes a ``.crc`` file beside each; the project's
``LocalFiles`` does neither. And Iceberg plans scans in its worker pool, whose iterator polls
every 10 ms; the project's driver plans them in the calling thread. Each is a setting of the
driver's JVM, so each variant runs in a driver of its own (a child process of this script), the
order changing between rounds; each round times ``--ops`` commits of each kind into a table of
its own: an ``INSERT`` of 100 rows and a ``MERGE`` of 100 keys (half of them new), the floor of a
fleet cycle's per-table work (``fleet_threads.py``). Variants: ``hadoop`` (both defaults),
``files`` (``LocalFiles``, planning in the pool), ``project`` (both of the project's settings).
Prints a table of the medians, writes ``benchmarks/results/local_driver.json`` and ``.png``.

    python benchmarks/local_driver.py [--rounds 3] [--ops 30] [--buckets 1]
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
from bench_common import make_home, results_plot, save_results

from cdc_assets.resources.config import DRIVER_JAVA_OPTIONS, JIT_OPTIONS

# Hadoop's checksummed local file system, what a driver uses without the project's.
HADOOP_FS = {"spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.LocalFileSystem"}
# Without the property that plans Iceberg's scans in the calling thread.
POOLED_PLANNING = {DRIVER_JAVA_OPTIONS: JIT_OPTIONS}
# The first is the baseline.
VARIANTS = {
    "hadoop": {**HADOOP_FS, **POOLED_PLANNING},
    "files": POOLED_PLANNING,
    "project": {},
}
LABELS = {
    "hadoop": "Hadoop's file system, planning in Iceberg's pool",
    "files": "LocalFiles, planning in Iceberg's pool",
    "project": "LocalFiles, planning in the calling thread",
}


def child(variant: str, ops: int, buckets: int) -> dict[str, Any]:
    """Time ``ops`` INSERTs and MERGEs in a fresh driver with ``variant``'s settings."""
    from cdc_assets.resources import build_resources

    with tempfile.TemporaryDirectory() as tmp:
        home = make_home(Path(tmp))
        home.stack_dir.mkdir(parents=True, exist_ok=True)  # the catalog's SQLite file
        resource = build_resources(home)["spark"].model_copy(
            update={"master": "local[2]", "remote": None, "extra_conf": VARIANTS[variant]}
        )
        spark = resource.get_session()
        jvm = spark._jvm
        fs = jvm.org.apache.hadoop.fs.FileSystem.get(
            jvm.java.net.URI("file:///"), spark._jsc.hadoopConfiguration()
        )
        spark.sql("CREATE NAMESPACE IF NOT EXISTS bench")
        spark.sql(
            "CREATE TABLE bench.t (id bigint, v string) USING iceberg "
            f"PARTITIONED BY (bucket({buckets}, id)) "
            "TBLPROPERTIES ('write.delete.mode'='merge-on-read', "
            "'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read')"
        )
        for i in range(3):  # warm-up: the JIT, Iceberg's and the catalog's first use
            spark.sql(f"INSERT INTO bench.t SELECT id, 'w' FROM range({i * 100}, {i * 100 + 100})")
        timings: dict[str, list[float]] = {"insert": [], "merge": []}
        for i in range(ops):
            start = 1_000 + i * 100
            t0 = time.perf_counter()
            spark.sql(f"INSERT INTO bench.t SELECT id, 'a' FROM range({start}, {start + 100})")
            timings["insert"].append(time.perf_counter() - t0)
            low = 1_000 + i * 100 + 50
            t0 = time.perf_counter()
            spark.sql(
                "MERGE INTO bench.t t USING "
                f"(SELECT id, 'b' AS v FROM range({low}, {low + 100})) s ON t.id = s.id "
                "WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *"
            )
            timings["merge"].append(time.perf_counter() - t0)
        files = [p for p in Path(tmp).rglob("*") if p.is_file() and "warehouse" in p.parts]
        planning = jvm.org.apache.iceberg.SystemConfigs.SCAN_THREAD_POOL_ENABLED.value()
        return {
            "variant": variant,
            "class": fs.getClass().getName(),
            "planning_in_pool": bool(planning),
            "insert_s": statistics.median(timings["insert"]),
            "merge_s": statistics.median(timings["merge"]),
            "files": len(files),
            "crc_files": sum(1 for p in files if p.name.endswith(".crc")),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ops", type=int, default=30)
    parser.add_argument("--buckets", type=int, default=1)
    parser.add_argument("--child", choices=sorted(VARIANTS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.ops, args.buckets)))
        return
    runs: list[dict[str, Any]] = []
    names = list(VARIANTS)
    for r in range(args.rounds):
        shift = r % len(names)  # each variant goes first in some round
        for name in names[shift:] + names[:shift]:
            done = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    name,
                    "--ops",
                    str(args.ops),
                    "--buckets",
                    str(args.buckets),
                ],
                capture_output=True,
                text=True,
                check=False,
                env=os.environ,
            )
            if done.returncode != 0:
                raise SystemExit(f"{name} driver failed:\n{done.stderr[-4000:]}")
            row = json.loads(done.stdout.strip().splitlines()[-1])
            print(
                f"  round {r + 1} {name:>8}: INSERT {row['insert_s'] * 1000:5.0f} ms, "
                f"MERGE {row['merge_s'] * 1000:5.0f} ms ({row['class']}, "
                f"planning in pool: {row['planning_in_pool']})",
                flush=True,
            )
            runs.append(row)
    report(runs, args)


def report(runs: list[dict[str, Any]], args: argparse.Namespace) -> None:
    medians = {
        name: {
            k: statistics.median(r[k] for r in runs if r["variant"] == name)
            for k in ("insert_s", "merge_s", "files", "crc_files")
        }
        for name in VARIANTS
    }
    base = medians["hadoop"]
    print(
        f"\n{args.ops} commits of each kind per driver, {args.rounds} drivers each, "
        f"{args.buckets} bucket(s); medians, ratio to Hadoop's and Iceberg's defaults"
    )
    print(
        f"  {'variant':>48} {'INSERT':>8} {'ratio':>6} {'MERGE':>8} {'ratio':>6} "
        f"{'files':>6} {'.crc':>6}"
    )
    for name, m in medians.items():
        print(
            f"  {LABELS[name]:>48} {m['insert_s'] * 1000:5.0f} ms "
            f"{m['insert_s'] / base['insert_s']:6.2f} "
            f"{m['merge_s'] * 1000:5.0f} ms {m['merge_s'] / base['merge_s']:6.2f} "
            f"{m['files']:6.0f} {m['crc_files']:6.0f}"
        )
    save_results(
        "local_driver",
        {
            "ops": args.ops,
            "buckets": args.buckets,
            "labels": LABELS,
            "medians": medians,
            "runs": runs,
        },
    )
    with results_plot("local_driver") as ax:
        kinds = ("insert_s", "merge_s")
        width = 0.27
        for i, name in enumerate(VARIANTS):
            ax.bar(
                [k + (i - 1) * width for k in range(len(kinds))],
                [medians[name][k] * 1000 for k in kinds],
                width,
                label=LABELS[name],
            )
        ax.set_xticks(range(len(kinds)), ["INSERT of 100 rows", "MERGE of 100 keys"])
        ax.set(title="one small Iceberg commit, local driver", ylabel="median ms")
        ax.legend(fontsize=7)


if __name__ == "__main__":
    main()
