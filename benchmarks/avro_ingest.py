"""Benchmark: Avro through the schema registry against JSON, same change events, same script.

One workload of Debezium change events (users shape by default) is produced three times, each to
a topic of its own: JSON without schemas (the baseline), JSON with embedded schemas, and Avro
framed by the stack's registry (the Connect schemas converted as Kafka Connect's Avro converter
does). For each format the script reports Kafka bytes per event (record values), then ingests the
topic into a fresh ledger with the product's ingest (`ingest_incremental`), ``--repeats`` times
in one warmed-up `local[2]` session, and reports the median time, events per second and the
ratio to the baseline. Every ledger must hold the same rows (same count of ledger rows, no dead
letter) or the script fails. Prints a table, writes ``benchmarks/results/avro_ingest.json`` and
``.png``.

    python benchmarks/avro_ingest.py [--events 200000] [--keys 20000] [--repeats 3] [--table users]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_common import code_version, make_home  # noqa: E402

FORMATS = ("json", "json+schema", "avro")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--table", default="users")
    args = parser.parse_args()

    from confluent_kafka.admin import NewTopic

    from cdc_assets.pipeline.ingest.ingest import ingest_incremental
    from cdc_assets.pipeline.shared.tables import ensure_tables
    from cdc_assets.resources import build_resources
    from cdc_assets.spec import load_specs
    from cdc_assets_dev.demo.events import produce, workload
    from cdc_assets_dev.demo.events.avro import RegistryFraming
    from cdc_assets_dev.stack import schema_registry
    from cdc_assets_dev.stack.local_stack import stack_down, stack_up

    tmp = Path(tempfile.mkdtemp(prefix="cdc-bench-avro-"))
    settings = make_home(tmp)
    stack_up(settings, registry=True)
    rows: list[dict[str, Any]] = []
    try:
        registry = schema_registry.running(settings)
        assert registry is not None
        res = build_resources(settings)
        res["spark"] = res["spark"].model_copy(update={"master": "local[2]"})
        spark = res["spark"].get_session()
        kafka = res["kafka"].model_copy(update={"schema_registry_url": registry.url})
        iceberg = res["iceberg"]
        spec0 = next(s for s in load_specs(ROOT / "table_specs") if s.name == args.table)
        print(f"generating {args.events} events ...", flush=True)
        plain = workload(spec0, random.Random(3), keys=args.keys, events=args.events)
        embedded = workload(
            spec0, random.Random(3), keys=args.keys, events=args.events, embed_schema=True
        )
        admin = kafka.admin()
        bootstrap = kafka.resolved_bootstrap()

        def topic_spec(fmt: str, run: int) -> Any:
            tag = uuid.uuid4().hex[:6]
            name = fmt.replace("+", "_")
            source = spec0.source.model_copy(update={"topic_": f"bench.{name}.{tag}"})
            sink = spec0.sink.model_copy(update={"namespace": f"bench_{tag}_{run}"})
            return spec0.model_copy(update={"source": source, "sink": sink})

        topics: dict[str, Any] = {}
        for fmt in FORMATS:
            spec = topic_spec(fmt, 0)
            topic = spec.source.topic
            admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[
                topic
            ].result(30)
            records = plain if fmt == "json" else embedded
            if fmt == "avro":
                framing = RegistryFraming(registry.url, topic)
                records = [framing.frame(r) for r in records]
            payload = sum(len(r.value) for r in records if r.value is not None)
            t0 = time.perf_counter()
            produce(records, topic, bootstrap)
            topics[fmt] = (spec, payload / len(records), time.perf_counter() - t0)
            print(f"{fmt}: {payload / len(records):.0f} bytes per record", flush=True)

        def ingest_once(fmt: str, run: int) -> tuple[float, Any]:
            spec = topics[fmt][0]
            # a fresh ledger over the same topic: the same records read again
            fresh = spec.model_copy(
                update={
                    "sink": spec.sink.model_copy(
                        update={"namespace": f"{spec.sink.namespace}_{run}"}
                    )
                }
            )
            ensure_tables(spark, "lake", fresh)
            t0 = time.perf_counter()
            result = ingest_incremental(spark, "lake", iceberg.load_catalog(), kafka, fresh)
            return time.perf_counter() - t0, result

        ingest_once("json", 99)  # warm-up: JIT and codegen before any measured run
        times: dict[str, list[float]] = {f: [] for f in FORMATS}
        counts: dict[str, tuple[int, int, int]] = {}
        for run in range(args.repeats):
            for fmt in FORMATS:  # interleaved, so drift of the machine hits every format
                seconds, result = ingest_once(fmt, run + 1)
                times[fmt].append(seconds)
                counts[fmt] = (result.read, result.ledger, result.dead)
                print(f"run {run + 1} {fmt}: {seconds:.1f} s", flush=True)
        if len({c[1:] for c in counts.values()}) != 1 or counts["avro"][2] != 0:
            raise SystemExit(f"the formats' ledgers differ: {counts}")
        base = statistics.median(times["json"])
        for fmt in FORMATS:
            _spec, per_record, produce_s = topics[fmt]
            median = statistics.median(times[fmt])
            rows.append(
                {
                    "format": fmt,
                    "bytes_per_record": round(per_record, 1),
                    "bytes_ratio": round(per_record / topics["json"][1], 2),
                    "ingest_median_s": round(median, 2),
                    "ingest_runs_s": [round(t, 2) for t in times[fmt]],
                    "produce_s": round(produce_s, 2),
                    "events_per_s": round(counts[fmt][0] / median),
                    "time_ratio": round(median / base, 2),
                    "ledger_rows": counts[fmt][1],
                }
            )
    finally:
        stack_down(settings, purge=True)

    header = ["format", "bytes_per_record", "bytes_ratio", "ingest_median_s", "events_per_s"]
    header += ["time_ratio", "ledger_rows"]
    print(" | ".join(header))
    for row in rows:
        print(" | ".join(str(row[h]) for h in header))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {
        "benchmark": "avro_ingest",
        "code_version": code_version(),
        "table": args.table,
        "events": args.events,
        "keys": args.keys,
        "repeats": args.repeats,
        "baseline": "json",
        "results": rows,
    }
    (RESULTS / "avro_ingest.json").write_text(json.dumps(out, indent=2))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    names = [r["format"] for r in rows]
    left.bar(names, [r["bytes_per_record"] for r in rows], color="tab:blue")
    left.set_ylabel("Kafka bytes per record (value)")
    right.bar(names, [r["events_per_s"] for r in rows], color="tab:green")
    right.set_ylabel("ingest, events per second")
    fig.suptitle(f"{args.events} {args.table} events, local[2], median of {args.repeats}")
    fig.tight_layout()
    fig.savefig(RESULTS / "avro_ingest.png", dpi=100)
    print(f"wrote {RESULTS / 'avro_ingest.json'}")


if __name__ == "__main__":
    main()
