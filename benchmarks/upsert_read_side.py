"""Benchmark: what readers of base pay after many upserts, and what maintenance gives back
(issue 24, part 3).

For each Iceberg format version (default 2 and 3) one users table of ``--rows`` rows is loaded
through the product's own path (Debezium snapshot reads produced to Kafka, ingest, upsert), then
``--upserts`` cycles each produce ``--changes`` events (90% updates of keys among the newest 10%,
10% inserts of new keys), ingest and upsert. After 0, 10, 25 and all cycles, and once more after
the product's maintenance (``maintain_table``: compaction, delete-file rewrite, expiry), it times
the reader's two typical queries on base in the same Spark session:

- a full scan: ``SELECT count(*), sum(login_count), max(email)`` (median of 3);
- point lookups: ``SELECT * WHERE id = <k>`` for 20 existing keys (median and worst);

and counts base's data and delete files (Spark's ``files`` metadata table). The baseline is the
same table before any upsert. Prints a table, writes ``benchmarks/results/upsert_read_side.json``
and ``.png``.

    python benchmarks/upsert_read_side.py [--rows 200000] [--upserts 50] [--changes 2000]
        [--formats 2,3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_common import ROOT, code_version, make_home

RESULTS = ROOT / "benchmarks" / "results"
MEASURED_AFTER = (0, 10, 25)
LOOKUPS = 20
HOT_KEYS, INSERTS = 0.1, 0.1


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--upserts", type=int, default=50)
    parser.add_argument("--changes", type=int, default=2_000, help="events per upsert cycle")
    parser.add_argument("--formats", default="2,3", help="Iceberg format versions of base")
    parser.add_argument("--seed", type=int, default=24)
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args()
    args.formats = [int(f) for f in args.formats.split(",") if f.strip()]
    return args


def timed(action: Any) -> float:
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


class ReadSide:
    """One table of one format version: loaded, upserted, measured."""

    def __init__(self, res: dict[str, Any], spec: Any, rng: random.Random) -> None:
        from cdc_assets.pipeline.upsert.upsert import spark_identifier
        from cdc_assets.schema.layers import base_layout
        from cdc_assets_dev.demo.events import DebeziumEventFactory

        self.res, self.spec, self.rng = res, spec, rng
        self.spark = res["spark"].get_session()
        self.factory = DebeziumEventFactory(spec)
        self.base = spark_identifier("lake", base_layout(spec))
        self.live: dict[int, dict[str, object]] = {}
        self.next_key = 0

    def catalog(self) -> Any:
        return self.res["iceberg"].load_catalog()

    def _row(self, n: int) -> dict[str, object]:
        from cdc_assets_dev.demo.events.rows import make_key, random_row

        return random_row(self.spec, self.rng, make_key(self.spec, n))

    def produce_and_upsert(self, records: list[Any]) -> dict[str, float]:
        from cdc_assets.pipeline.ingest.ingest import ingest_incremental
        from cdc_assets.pipeline.upsert.upsert import build_bucketed, merge_base
        from cdc_assets_dev.demo.events import produce

        kafka = self.res["kafka"]
        produce(records, self.spec.source.topic, kafka.resolved_bootstrap())
        ingest_s = timed(
            lambda: ingest_incremental(self.spark, "lake", self.catalog(), kafka, self.spec)
        )
        built: list[Any] = []
        bucketed_s = timed(
            lambda: built.append(build_bucketed(self.spark, "lake", self.catalog(), self.spec))
        )
        merged: list[Any] = []
        merge_s = timed(
            lambda: merged.append(merge_base(self.spark, "lake", self.catalog(), self.spec))
        )
        if not merged[0].applied:
            raise RuntimeError(f"the upsert did not apply: {merged[0]}")
        return {"ingest_s": ingest_s, "bucketed_s": bucketed_s, "merge_s": merge_s}

    def load(self, rows: int) -> dict[str, float]:
        records = []
        for _ in range(rows):
            n = self.next_key
            self.next_key += 1
            self.live[n] = self._row(n)
            records.append(self.factory.read(self.live[n]))
        return self.produce_and_upsert(records)

    def cycle(self, changes: int) -> dict[str, float]:
        """Updates of keys among the newest HOT_KEYS of the live keys, and inserts."""
        return self.produce_and_upsert(self.changes(changes))

    def changes(self, changes: int) -> list[Any]:
        """The events of one cycle (the live rows follow them)."""
        hot_from = int(self.next_key * (1 - HOT_KEYS))
        records = []
        for _ in range(changes):
            if self.rng.random() < INSERTS:
                n = self.next_key
                self.next_key += 1
                self.live[n] = self._row(n)
                records.append(self.factory.create(self.live[n]))
            else:
                n = self.rng.randrange(hot_from, self.next_key)
                before, after = self.live[n], self._row(n)
                self.live[n] = after
                records.append(self.factory.update(before, after))
        return records

    def measure(self, label: str, upserts: int) -> dict[str, Any]:
        sql = self.spark.sql
        scans = [
            timed(
                lambda: sql(
                    f"SELECT count(*), sum(login_count), max(email) FROM {self.base}"
                ).collect()
            )
            for _ in range(3)
        ]
        keys = self.rng.sample(sorted(self.live), LOOKUPS)
        lookups = [
            timed(lambda k=k: sql(f"SELECT * FROM {self.base} WHERE id = {k}").collect())
            for k in keys
        ]
        count = sql(f"SELECT count(*) AS n FROM {self.base}").collect()[0]["n"]
        if count != len(self.live):
            raise RuntimeError(f"{label}: base holds {count} rows, the source {len(self.live)}")
        files = {
            int(r["content"]): int(r["n"])
            for r in sql(
                f"SELECT content, count(*) AS n FROM {self.base}.files GROUP BY content"
            ).collect()
        }
        return {
            "label": label,
            "upserts": upserts,
            "full_scan_s": statistics.median(scans),
            "lookup_median_s": statistics.median(lookups),
            "lookup_max_s": max(lookups),
            "data_files": files.get(0, 0),
            "delete_files": files.get(1, 0) + files.get(2, 0),
            "rows": count,
        }


def run_format(
    settings: Any, res: dict[str, Any], fmt: int, args: argparse.Namespace
) -> dict[str, Any]:
    from confluent_kafka.admin import NewTopic

    from cdc_assets.pipeline.maintenance.maintenance import maintain_table
    from cdc_assets.pipeline.shared.tables import ensure_tables
    from cdc_assets.spec import load_spec

    users = load_spec(ROOT / "table_specs" / "users.yaml")
    topic = f"bench.read_v{fmt}.users"
    spec = users.model_copy(
        update={
            "name": f"users_v{fmt}",  # spec names are unique in a deployment
            "source": users.source.model_copy(update={"topic_": topic}),
            "sink": users.sink.model_copy(update={"namespace": f"read_v{fmt}"}),
            "base": users.base.model_copy(
                update={"properties": {**users.base.properties, "format-version": str(fmt)}}
            ),
        }
    )
    admin = res["kafka"].admin()
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    ensure_tables(res["spark"].get_session(), "lake", spec)
    table = ReadSide(res, spec, random.Random(args.seed))
    began = time.perf_counter()
    loaded = table.load(args.rows)
    print(
        f"  v{fmt}: {args.rows:,} rows loaded in {time.perf_counter() - began:.0f}s",
        file=sys.stderr,
    )
    points = [table.measure("loaded", 0)]
    cycles = []
    for i in range(1, args.upserts + 1):
        cycles.append(table.cycle(args.changes))
        if i in MEASURED_AFTER or i == args.upserts:
            points.append(table.measure(f"after {i} upserts", i))
            print(f"  v{fmt}: {points[-1]}", file=sys.stderr)
    spark = res["spark"].get_session()
    maintenance_s = timed(
        lambda: maintain_table(spark, "lake", res["iceberg"].load_catalog(), spec)
    )
    points.append(table.measure("after maintenance", args.upserts))
    print(f"  v{fmt}: {points[-1]}", file=sys.stderr)
    return {
        "format_version": fmt,
        "load": loaded,
        "cycle_median": {k: statistics.median(c[k] for c in cycles) for k in cycles[0]},
        "maintenance_s": maintenance_s,
        "points": points,
    }


def print_report(results: list[dict[str, Any]]) -> None:
    print(
        f"\n{'format':>6} {'point':>20} {'data files':>10} {'delete files':>12} "
        f"{'full scan s':>11} {'x loaded':>8} {'lookup ms':>9} {'x loaded':>8} {'worst ms':>8}"
    )
    for r in results:
        first = r["points"][0]
        for p in r["points"]:
            print(
                f"{'v' + str(r['format_version']):>6} {p['label']:>20} {p['data_files']:>10} "
                f"{p['delete_files']:>12} {p['full_scan_s']:>11.2f} "
                f"{p['full_scan_s'] / first['full_scan_s']:>8.2f} "
                f"{1000 * p['lookup_median_s']:>9.0f} "
                f"{p['lookup_median_s'] / first['lookup_median_s']:>8.2f} "
                f"{1000 * p['lookup_max_s']:>8.0f}"
            )
        cycle = ", ".join(f"{k} {v:.2f}" for k, v in r["cycle_median"].items())
        print(f"{'':>6} median cycle: {cycle}; maintenance {r['maintenance_s']:.1f}s")


def write_plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for r, color in zip(results, ("tab:blue", "tab:orange", "tab:green"), strict=False):
        label = f"format v{r['format_version']}"
        upserted = [p for p in r["points"] if p["label"] != "after maintenance"]
        after = r["points"][-1]
        xs = [p["upserts"] for p in upserted]
        left.plot(xs, [p["full_scan_s"] for p in upserted], marker="o", color=color, label=label)
        left.plot([after["upserts"]], [after["full_scan_s"]], "*", ms=12, color=color)
        right.plot(
            xs,
            [1000 * p["lookup_median_s"] for p in upserted],
            marker="o",
            color=color,
            label=label,
        )
        right.plot([after["upserts"]], [1000 * after["lookup_median_s"]], "*", ms=12, color=color)
    left.set(
        xlabel="upserts since load", ylabel="seconds", title="full scan of base (* maintained)"
    )
    right.set(xlabel="upserts since load", ylabel="ms", title="point lookup, median (* maintained)")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    args = parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    from cdc_assets.resources import build_resources
    from cdc_assets_dev.stack.local_stack import stack_down, stack_up

    tmp = Path(tempfile.mkdtemp(prefix="cdc-read-side-"))
    settings = None
    results: list[dict[str, Any]] = []
    info: dict[str, Any] = {"code": code_version(), "load_average_before": os.getloadavg()}
    try:
        settings = make_home(tmp)
        stack_up(settings)
        res = build_resources(settings)
        res["spark"] = res["spark"].model_copy(update={"master": "local[2]"})
        for fmt in args.formats:
            try:
                results.append(run_format(settings, res, fmt, args))
            except Exception as exc:  # a format the stack cannot run is a finding, not a crash
                print(f"  v{fmt} failed: {type(exc).__name__}: {exc}"[:2000], file=sys.stderr)
                results.append({"format_version": fmt, "error": f"{type(exc).__name__}: {exc}"})
    finally:
        try:
            if settings is not None:
                stack_down(settings, purge=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    info["load_average_after"] = os.getloadavg()
    measured = [r for r in results if "points" in r]
    print_report(measured)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    out = args.results_dir / "upsert_read_side.json"
    document = {
        "rows": args.rows,
        "upserts": args.upserts,
        "changes": args.changes,
        "hot_keys": HOT_KEYS,
        "inserts": INSERTS,
        "spark_master": "local[2]",
        **info,
        "results": results,
    }
    out.write_text(json.dumps(document, indent=2, default=str))
    if measured:
        write_plot(measured, args.results_dir / "upsert_read_side.png")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
