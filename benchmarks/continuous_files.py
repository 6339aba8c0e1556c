"""Benchmark: base's files and what readers pay under a continuous worker, with and without the
worker's own compaction (issue 58, item 3).

For each mode one users table of ``--rows`` rows is loaded through the product's path (Debezium
snapshot reads in Kafka, ingest, upsert), then a continuous worker (the ``continuous_tables``
job, in this process) keeps it for ``--seconds`` while changes arrive at ``--rate`` events a
second (90% updates of keys among the newest 10%, 10% inserts), committing at most every
``--interval`` seconds. One mode per ``--bounds`` value of
``base.maintenance.compact_files_per_bucket``: 0 (``schedule``) leaves base to the scheduled
maintenance (daily by default), i.e. uncompacted within the run; any other bound has the worker
compact base when it holds more files per bucket.

Every 15 s it samples base's data and delete files (snapshot summary) and its upsert commits
(compactions not counted). When the changes stop it times how long the worker takes to catch up
(base holding every live key); then it is stopped and the reader's queries are timed in the
same session as ``upsert_read_side.py`` does (full scan, median of 3; 20 point lookups),
against the table right after the load (the baseline, same script and data). Base must hold
exactly the live keys. Prints a table, writes ``benchmarks/results/continuous_files.json``
and ``.png``.

    python benchmarks/continuous_files.py [--rows 50000] [--seconds 300] [--rate 50]
        [--interval 2] [--bounds 0,24,8,4]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench_common import ROOT, code_version, make_home
from upsert_read_side import ReadSide

RESULTS = ROOT / "benchmarks" / "results"
SAMPLE_S = 15.0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--rate", type=float, default=50.0, help="change events per second")
    parser.add_argument("--interval", type=float, default=2.0, help="commit_interval_seconds")
    parser.add_argument(
        "--bounds", default="0,24,8,4", help="compact_files_per_bucket of each mode (0: schedule)"
    )
    parser.add_argument("--seed", type=int, default=58)
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args()
    args.bounds = [int(b) for b in args.bounds.split(",") if b.strip()]
    return args


def mode_name(bound: int) -> str:
    return "schedule" if bound == 0 else f"worker-{bound}"


def base_files(catalog: Any, spec: Any) -> tuple[int, int, int]:
    """(data files, delete files, upsert commits) of base now: every snapshot but the
    compactions' (``replace``)."""
    from cdc_assets.pipeline.maintenance.maintenance import summary_count
    from cdc_assets.schema.layers import base_layout

    layout = base_layout(spec)
    table = catalog.load_table(f"{layout.namespace}.{layout.name}")
    summary = table.current_snapshot().summary
    return (
        summary_count(summary, "total-data-files"),
        summary_count(summary, "total-delete-files"),
        sum(1 for s in table.snapshots() if s.summary.operation.value != "replace"),
    )


def run_mode(
    settings: Any, res: dict[str, Any], bound: int, args: argparse.Namespace, tmp: Path
) -> dict[str, Any]:
    import dagster as dg
    from confluent_kafka.admin import NewTopic

    from cdc_assets.definitions import build_defs
    from cdc_assets.jobs.continuous import CONTINUOUS_JOB, WORKER_TAG, worker_run_config
    from cdc_assets.pipeline.shared.tables import ensure_tables
    from cdc_assets.spec import load_spec
    from cdc_assets.spec.versions import write_spec
    from cdc_assets_dev.demo.events import produce

    users = load_spec(ROOT / "table_specs" / "users.yaml")
    mode = mode_name(bound)
    safe = mode.replace("-", "_")
    topic = f"bench.continuous_{safe}.users"
    maintenance = users.base.maintenance.model_copy(update={"compact_files_per_bucket": bound})
    spec = users.model_copy(
        update={
            "name": f"users_{safe}",
            "source": users.source.model_copy(update={"topic_": topic}),
            "sink": users.sink.model_copy(update={"namespace": f"continuous_{safe}"}),
            "base": users.base.model_copy(update={"maintenance": maintenance}),
            "pipeline": users.pipeline.model_copy(update={"worker": safe}),
        }
    )
    specs_dir = tmp / f"specs_{mode}"
    specs_dir.mkdir()
    write_spec(spec, specs_dir / f"{spec.name}.yaml")
    admin = res["kafka"].admin()
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(30)
    ensure_tables(res["spark"].get_session(), "lake", spec)
    table = ReadSide(res, spec, random.Random(args.seed))
    began = time.perf_counter()
    table.load(args.rows)
    print(
        f"  {mode}: {args.rows:,} rows loaded in {time.perf_counter() - began:.0f}s",
        file=sys.stderr,
    )
    points = [table.measure("loaded", 0)]
    catalog = res["iceberg"].load_catalog()
    snapshots_at_start = base_files(catalog, spec)[2]

    defs = build_defs(
        specs=[spec], settings=replace(settings, specs_dir=specs_dir), resource_overrides=res
    )
    bootstrap = res["kafka"].resolved_bootstrap()
    outcome: dict[str, Any] = {}
    with dg.instance_for_test() as instance:

        def work() -> None:
            outcome["result"] = defs.resolve_job_def(CONTINUOUS_JOB).execute_in_process(
                instance=instance,
                run_config=worker_run_config(
                    safe,
                    [spec.name],
                    idle_seconds=0.2,
                    heartbeat_seconds=10,
                    commit_interval_seconds=args.interval,
                ),
                tags={WORKER_TAG: safe, "cdc/tables": spec.name},
                raise_on_error=False,
            )

        worker = threading.Thread(target=work, name="worker", daemon=True)
        worker.start()
        samples = []
        started = time.monotonic()
        next_sample = started
        sent = 0
        while (elapsed := time.monotonic() - started) < args.seconds:
            due = int(elapsed * args.rate) - sent
            if due > 0:
                produce(table.changes(due), topic, bootstrap)
                sent += due
            if time.monotonic() >= next_sample:
                data, deletes, snapshots = base_files(catalog, spec)
                samples.append(
                    {
                        "seconds": round(elapsed, 1),
                        "data_files": data,
                        "delete_files": deletes,
                        "commits": snapshots - snapshots_at_start,
                    }
                )
                print(f"  {mode}: {samples[-1]}", file=sys.stderr)
                next_sample += SAMPLE_S
            if not worker.is_alive():
                raise RuntimeError(f"{mode}: the worker stopped: {outcome}")
            time.sleep(0.5)
        # Caught up: base holds every live key (updates are checked by count and by the scans).
        stopped = time.monotonic()
        deadline = stopped + 300
        while table.spark.sql(f"SELECT count(*) AS n FROM {table.base}").collect()[0]["n"] != len(
            table.live
        ):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{mode}: the worker did not catch up in 300 s")
            time.sleep(2)
        catch_up_s = time.monotonic() - stopped
        time.sleep(3 * args.interval)  # the last updates of keys it already had
        [record] = instance.get_run_records(dg.RunsFilter(job_name=CONTINUOUS_JOB))
        instance.report_run_canceling(record.dagster_run)
        worker.join(300)
    result = outcome["result"]
    if not result.success:
        raise RuntimeError(f"{mode}: the worker run failed")
    compactions = [
        e.event_specific_data.asset_observation.metadata  # type: ignore[union-attr]
        for e in result.all_events
        if e.event_type == dg.DagsterEventType.ASSET_OBSERVATION
    ]
    cycles = result.output_for_node("run_worker")
    data, deletes, snapshots = base_files(catalog, spec)
    points.append(table.measure(f"after {args.seconds:.0f} s", snapshots - snapshots_at_start))
    print(f"  {mode}: {points[-1]}", file=sys.stderr)
    return {
        "mode": mode,
        "compact_files_per_bucket": spec.base.maintenance.compact_files_per_bucket,
        "buckets": spec.base.buckets,
        "events": sent,
        "cycles": cycles["cycles"],
        "commits": snapshots - snapshots_at_start,
        "catch_up_s": round(catch_up_s, 1),
        "compactions": len(compactions),
        "compaction_s": round(sum(float(m["seconds"].value) for m in compactions), 1),
        "max_files": max(s["data_files"] + s["delete_files"] for s in samples),
        "samples": samples,
        "points": points,
    }


def print_report(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(
        f"\n{args.rows:,} rows, {args.seconds:.0f} s at {args.rate:g} events/s, commits at most "
        f"every {args.interval:g} s\n"
        f"{'mode':>9} {'commits':>7} {'catch-up s':>10} {'compactions':>11} "
        f"{'compacting s':>12} {'max files':>9} "
        f"{'data files':>10} {'delete files':>12} {'full scan s':>11} {'x loaded':>8} "
        f"{'lookup ms':>9} {'x loaded':>8}"
    )
    for r in results:
        first, last = r["points"]
        print(
            f"{r['mode']:>9} {r['commits']:>7} {r['catch_up_s']:>10} {r['compactions']:>11} "
            f"{r['compaction_s']:>12} "
            f"{r['max_files']:>9} {last['data_files']:>10} {last['delete_files']:>12} "
            f"{last['full_scan_s']:>11.2f} {last['full_scan_s'] / first['full_scan_s']:>8.2f} "
            f"{1000 * last['lookup_median_s']:>9.0f} "
            f"{last['lookup_median_s'] / first['lookup_median_s']:>8.2f}"
        )


def write_plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in results:
        xs = [s["seconds"] for s in r["samples"]]
        ax.plot(xs, [s["data_files"] + s["delete_files"] for s in r["samples"]], label=r["mode"])
    ax.set(
        xlabel="seconds of continuous commits",
        ylabel="base data + delete files",
        title="base's files under a continuous worker",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    args = parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    # cdc_assets.definitions builds the project's definitions when imported, from this directory.
    os.environ.setdefault("CDC_ASSETS_SPECS", str(ROOT / "table_specs"))
    from cdc_assets.resources import build_resources
    from cdc_assets_dev.stack.local_stack import stack_down, stack_up

    tmp = Path(tempfile.mkdtemp(prefix="cdc-continuous-files-"))
    settings = None
    results: list[dict[str, Any]] = []
    info: dict[str, Any] = {"code": code_version(), "load_average_before": os.getloadavg()}
    try:
        settings = make_home(tmp)
        stack_up(settings)
        res = build_resources(settings)
        res["spark"] = res["spark"].model_copy(update={"master": "local[2]"})
        for bound in args.bounds:
            results.append(run_mode(settings, res, bound, args, tmp))
    finally:
        try:
            if settings is not None:
                stack_down(settings, purge=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    info["load_average_after"] = os.getloadavg()
    print_report(results, args)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    out = args.results_dir / "continuous_files.json"
    document = {
        "rows": args.rows,
        "seconds": args.seconds,
        "rate": args.rate,
        "interval": args.interval,
        "spark_master": "local[2]",
        **info,
        "results": results,
    }
    out.write_text(json.dumps(document, indent=2, default=str))
    write_plot(results, args.results_dir / "continuous_files.png")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
