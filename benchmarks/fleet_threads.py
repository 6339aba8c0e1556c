"""Benchmark: a fleet's cycles with several tables of a run at once (issue 20, part 4), and with
fewer buckets per base, against one table after another with the examples' 16 buckets (the
baseline: ``tables_at_once: 1``, the first ``--buckets``).

The cycles are the in-process driver's (what the daemon's sensors request: the ``ingest_ledgers``
run of the tables whose topics grew, then ``upsert_bases`` of those), on the
``tables`` op with ``tables_at_once`` = k (``assets/tables.py``): up to k tables of a run at once in
threads of the one driver, each on a Spark session of its own. The fixed cost of a small table
is mostly the driver's round trips (planning, Iceberg commits, catalog reads), which overlap;
whether that pays on 2 cores is what this measures.

Every (bucket count, width) pair gets its own copy of the fleet (same specs but for
``base.buckets``, same events, its own topics and namespace). It runs the first cycle after
onboarding, then a steady busy cycle with the next ~100 events per table; every base must then
equal the baseline's row for row, or the script fails. Per pair it also counts the busy
cycle's Spark jobs and runs a floor (``floor``: one INSERT and one MERGE per table, the least a
design with a ledger and a base per table commits), so that the fixed cost can be read as a
ratio to what the same driver can do at all. Prints a table, writes
``benchmarks/results/fleet_threads.json`` and ``.png``.

    python benchmarks/fleet_threads.py [--tables 30] [--workers 1,2,4] [--buckets 16,1]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import ROOT, code_version, local_driver
from fleet_scale import generate_specs, produce_workloads

RESULTS = ROOT / "benchmarks" / "results"


def cycle(driver: Any) -> dict[str, float]:
    """One ingest run and one upsert run of the tables with new events; wall seconds."""
    started = time.perf_counter()
    ingest = driver.ingest()
    ingest_s = time.perf_counter() - started
    upsert = driver.upsert()
    wall = time.perf_counter() - started
    return {
        "wall_s": wall,
        "ingest_s": ingest_s,
        "upsert_s": wall - ingest_s,
        "records": sum(int(m.get("records_read", 0) or 0) for m in ingest.values()),
        "upserted": len(upsert),
    }


def spark_jobs(spark: Any) -> set[int]:
    """Ids of the Spark jobs the driver has run (outside job groups), for jobs per table."""
    return set(spark.sparkContext.statusTracker().getJobIdsForGroup())


# The floor's tables: a ledger-like and a base-like table per fleet table, with base's and the
# ledger's table properties (merge-on-read, hash distribution, format 2).
FLOOR_BASE_PROPS = (
    "'format-version'='2', 'write.delete.mode'='merge-on-read', "
    "'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read', "
    "'write.distribution-mode'='hash'"
)


def floor(spark: Any, tables: int, k: int, buckets: int) -> dict[str, float]:
    """The least a busy cycle of this design can cost per table, through the same driver: one
    commit to a ledger-like table (INSERT of 100 rows) and one to a base-like table of
    ``buckets`` buckets (MERGE of 100 keys), per table, k tables at once (threads with sessions
    of their own, as the run executor's). Tables are made and written once untimed, then one
    round is timed."""
    from concurrent.futures import ThreadPoolExecutor

    ns = f"floor_{buckets}_{k}"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {ns}")
    for i in range(tables):
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS {ns}.l{i} (id BIGINT, v STRING) USING iceberg "
            "TBLPROPERTIES ('format-version'='2', 'write.distribution-mode'='hash')"
        )
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS {ns}.b{i} (id BIGINT, v STRING) USING iceberg "
            f"PARTITIONED BY (bucket({buckets}, id)) TBLPROPERTIES ({FLOOR_BASE_PROPS})"
        )

    def one(session: Any, i: int, tag: str) -> None:
        session.sql(f"INSERT INTO {ns}.l{i} SELECT id, '{tag}' FROM range(100)")
        session.sql(
            f"MERGE INTO {ns}.b{i} t USING (SELECT id * 3 AS id, '{tag}' AS v FROM range(100)) s "
            "ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *"
        )

    def round_(tag: str) -> float:
        sessions: dict[int, Any] = {}

        def task(i: int) -> None:
            me = threading.get_ident()
            if me not in sessions:
                sessions[me] = spark.newSession()
            one(sessions[me], i, tag)

        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=k) as pool:
            list(pool.map(task, range(tables)))
        return time.perf_counter() - started

    round_("warm")
    before = spark_jobs(spark)
    wall = round_("timed")
    return {"wall_s": wall, "spark_jobs": len(spark_jobs(spark) - before)}


def base_rows(spark: Any, catalog: str, specs: list[Any]) -> dict[str, list[tuple[Any, ...]]]:
    from cdc_assets.schema.layers import base_layout

    out = {}
    for spec in specs:
        layout = base_layout(spec)
        columns = ", ".join(f"`{c.sink_name}`" for c in spec.columns if not c.dropped)
        rows = spark.sql(f"SELECT {columns} FROM {catalog}.{layout.namespace}.{layout.name}")
        out[spec.name] = sorted(tuple(r) for r in rows.collect())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=30)
    parser.add_argument("--workers", default="1,2,4", help="tables at once; 1 is the baseline")
    parser.add_argument(
        "--buckets", default="16", help="base bucket counts; the first is the baseline's"
    )
    args = parser.parse_args()
    workers = sorted({1, *(int(k) for k in args.workers.split(",") if k)})
    counts = list(dict.fromkeys(int(b) for b in args.buckets.split(",") if b))

    import dagster as dg

    from cdc_assets.jobs.inprocess import PipelineDriver
    from cdc_assets.spec import load_specs

    rows: dict[tuple[int, int], dict[str, Any]] = {}
    # One local[2] driver for every run of this process (the runs share its session).
    with (
        tempfile.TemporaryDirectory() as tmp,
        local_driver(Path(tmp)) as (home, state, resources),
    ):
        spark = resources["spark"].get_session()
        catalog = resources["spark"].catalog.name
        reference: dict[str, list[tuple[Any, ...]]] | None = None
        for b, k in ((b, k) for b in counts for k in workers):
            spec_dir = Path(tmp) / f"specs_{b}_{k}"
            tag = f"{b}_{k}"
            generate_specs(
                args.tables, spec_dir, prefix=f"threads{tag}", namespace=f"w{tag}", buckets=b
            )
            specs = load_specs(spec_dir)
            settings = replace(home, specs_dir=spec_dir, tables_at_once=k)
            with dg.DagsterInstance.ephemeral() as instance:
                driver = PipelineDriver(settings, instance, resource_overrides=resources)
                driver.onboard()
                produce_workloads(specs, state.bootstrap_servers, 0)
                first = cycle(driver)
                produce_workloads(specs, state.bootstrap_servers, 1)
                jobs_before = spark_jobs(spark)
                busy = cycle(driver)
                busy["spark_jobs"] = len(spark_jobs(spark) - jobs_before)
            bases = base_rows(spark, catalog, specs)
            if reference is None:
                reference = bases
            elif bases != reference:
                differ = [t for t in bases if bases[t] != reference.get(t)]
                raise SystemExit(
                    f"{b} buckets, {k} at once: bases differ from the baseline's: {differ}"
                )
            low = floor(spark, args.tables, k, b)
            rows[(b, k)] = {"first": first, "busy": busy, "floor": low}
            print(f"  {b} buckets, {k} at once: first {first}, busy {busy}", file=sys.stderr)
    report(rows, args.tables)


def report(rows: dict[tuple[int, int], dict[str, Any]], tables: int) -> None:
    base = next(iter(rows.values()))
    print(
        f"\n{tables} tables, ~100 events each per cycle; wall seconds (per table), ratio to the "
        "first row"
    )
    print(
        f"  {'buckets':>7} {'at once':>7} {'first cycle':>18} {'ratio':>6} {'busy cycle':>18} "
        f"{'ratio':>6} {'jobs/table':>10} {'floor':>18} {'busy/floor':>10}"
    )
    for (b, k), r in rows.items():
        cells = []
        for label in ("first", "busy"):
            wall = r[label]["wall_s"]
            cells.append(
                f"{wall:8.1f} s ({wall / tables:4.2f} s) {wall / base[label]['wall_s']:6.2f}"
            )
        jobs = r["busy"].get("spark_jobs", 0) / tables
        low = r["floor"]["wall_s"]
        cells.append(
            f"{jobs:10.1f} {low:8.1f} s ({low / tables:4.2f} s) {r['busy']['wall_s'] / low:10.2f}"
        )
        print(f"  {b:>7} {k:>7} " + " ".join(cells))
    print("  every base equal to the baseline's, row for row")
    print(
        "  floor: one INSERT of 100 rows and one MERGE of 100 keys per table (into that many "
        "buckets), same driver, same width"
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {
        "code": code_version(),
        "tables": tables,
        "runs": [{"buckets": b, "workers": k, **r} for (b, k), r in rows.items()],
    }
    (RESULTS / "fleet_threads.json").write_text(json.dumps(payload, indent=2))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for b in dict.fromkeys(b for b, _ in rows):
        ks = [k for bb, k in rows if bb == b]
        for label, marker in (("busy", "o"), ("floor", "^")):
            ax.plot(
                ks,
                [rows[(b, k)][label]["wall_s"] / tables for k in ks],
                marker=marker,
                label=f"{label}, {b} buckets",
            )
    ax.set(
        title=f"busy cycle per table ({tables} tables, one driver, real jobs)",
        xlabel="tables at once",
        ylabel="s per table",
        xticks=sorted({k for _, k in rows}),
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "fleet_threads.png", dpi=110)


if __name__ == "__main__":
    main()
