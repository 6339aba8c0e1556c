"""Benchmark: schema evolution latency, from a schema-change event in Kafka to the new column's
values in base, on the local stack (real broker, Spark, Iceberg).

Each round adds a column at the "source": Debezium's schema-change record and a batch of row
events that carry the new field are produced, the pipeline first ingests them with the old spec
(values only in the row images), then one tick of the `schema_changes` sensor, the evolution run it
requests (Iceberg schemas, spec file, backfill from the ledger), and one ingest + upsert. The
baseline is a plain pipeline cycle (produce a batch, ingest, upsert) on the same table in the same
process. Prints a table, writes JSON and a PNG plot to benchmarks/results/. The sensor's own
interval (30 s by default) comes on top in a deployment.

    python benchmarks/schema_evolution.py [--rounds 3] [--events 400]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_common import code_version, make_home  # noqa: E402


def _shift(records: list[Any], files: int) -> list[Any]:
    """Move the events ``files`` binlog files on, so each batch comes after the one before."""
    from cdc_assets_dev.demo.events import KafkaRecord

    out = []
    for r in records:
        if r.value is None:
            out.append(r)
            continue
        doc = json.loads(r.value)
        env = doc.get("payload", doc)
        src = env.get("source") if isinstance(env, dict) else None
        if isinstance(src, dict) and src.get("file"):
            stem, number = src["file"].rsplit(".", 1)
            src["file"] = f"{stem}.{int(number) + files:06d}"
        out.append(KafkaRecord(r.key, json.dumps(doc).encode(), r.row))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--events", type=int, default=400, help="row events per batch")
    args = parser.parse_args()

    import dagster as dg
    from confluent_kafka.admin import NewTopic

    from cdc_assets.definitions import build_defs
    from cdc_assets.pipeline.ingest.ingest import ingest_incremental
    from cdc_assets.pipeline.shared.tables import ensure_tables
    from cdc_assets.pipeline.upsert.upsert import build_bucketed, merge_base
    from cdc_assets.resources import build_resources
    from cdc_assets.schema.evolution import apply_plan, classify
    from cdc_assets.spec import load_specs
    from cdc_assets.spec.load import load_spec
    from cdc_assets.spec.models import ColumnSpec, TableSpec
    from cdc_assets.spec.versions import write_spec
    from cdc_assets_dev.demo.events import DebeziumEventFactory, produce, workload
    from cdc_assets_dev.stack.local_stack import stack_down, stack_up

    tmp = Path(tempfile.mkdtemp(prefix="cdc-bench-evolve-"))
    settings = make_home(tmp)
    stack_up(settings)
    rows: list[dict[str, Any]] = []
    try:
        res = build_resources(settings)
        res["spark"] = res["spark"].model_copy(update={"master": "local[2]"})
        spark = res["spark"].get_session()
        kafka = res["kafka"]
        iceberg = res["iceberg"]
        users = next(s for s in load_specs(ROOT / "table_specs") if s.name == "users")
        source = users.source.model_copy(
            update={"topic_": "bench.app.users", "schema_change_topic": "bench.schema"}
        )
        spec = users.model_copy(update={"source": source})
        specs_dir = tmp / "specs"
        specs_dir.mkdir()
        path = write_spec(spec, specs_dir / "users.yaml")
        # Evolution writes the spec file: this run's copy, never the project's table_specs/.
        settings = replace(settings, specs_dir=specs_dir)
        admin = kafka.admin()
        for topic in ("bench.app.users", "bench.schema"):
            admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[
                topic
            ].result(30)
        ensure_tables(spark, "lake", spec)
        bootstrap = kafka.resolved_bootstrap()
        rng = random.Random(7)
        batch = 0

        def cycle(current: TableSpec, records: list[Any]) -> tuple[float, float]:
            t0 = time.perf_counter()
            ingest_incremental(spark, "lake", iceberg.load_catalog(), kafka, current)
            t1 = time.perf_counter()
            build_bucketed(spark, "lake", iceberg.load_catalog(), current)
            merge_base(spark, "lake", iceberg.load_catalog(), current)
            return t1 - t0, time.perf_counter() - t1

        # warm-up and baseline: plain cycles on the same table
        baseline = []
        for _ in range(2):
            records = _shift(workload(spec, rng, keys=200, events=args.events), batch * 100)
            batch += 1
            t0 = time.perf_counter()
            produce(records, source.topic, bootstrap)
            cycle(spec, records)
            baseline.append(time.perf_counter() - t0)
        base_cycle = baseline[-1]

        instance = dg.DagsterInstance.ephemeral()
        cursor = None
        for i in range(args.rounds):
            current = load_spec(path)
            name = f"extra_{i}"
            columns = [*current.columns, ColumnSpec(id=100 + i, name=name, type="varchar(30)")]
            proposed = TableSpec.model_validate(
                current.model_copy(
                    update={"columns": columns, "spec_version": current.spec_version + 1}
                ).model_dump(by_alias=True)
            )
            nxt = apply_plan(current, classify(current, proposed))
            records = _shift(workload(nxt, rng, keys=200, events=args.events), batch * 100)
            batch += 1
            started = time.perf_counter()
            ddl = f"ALTER TABLE users ADD COLUMN {name} varchar(30)"
            produce([DebeziumEventFactory(nxt).schema_change(ddl)], "bench.schema", bootstrap)
            produce(records, source.topic, bootstrap)
            t_pre = time.perf_counter()
            ingest_incremental(spark, "lake", iceberg.load_catalog(), kafka, current)
            t_sensor = time.perf_counter()
            defs = build_defs(specs=[current], settings=settings, resource_overrides=res)
            sensor = defs.get_sensor_def("schema_changes")
            result = sensor(
                dg.build_sensor_context(
                    instance=instance, resources={"kafka": kafka}, cursor=cursor
                )
            )
            cursor = result.cursor
            (request,) = result.run_requests
            t_run = time.perf_counter()
            from cdc_assets.assets.keys import node_name
            from cdc_assets.jobs.evolve import EVOLVE_JOB

            run = defs.resolve_job_def(EVOLVE_JOB).execute_in_process(
                instance=instance,
                run_config=request.run_config,
                asset_selection=list(request.asset_selection or []),
            )
            mats = run.asset_materializations_for_node(node_name("schema", "users"))
            phases = mats[-1].metadata["seconds"].value
            t_cycle = time.perf_counter()
            evolved = load_spec(path)
            ingest_s, upsert_s = cycle(evolved, records)
            done = time.perf_counter()
            filled = spark.sql(f"SELECT count({name}) AS n FROM lake.app.users").collect()[0]["n"]
            rows.append(
                {
                    "round": i + 1,
                    "column": name,
                    "produce_s": round(t_pre - started, 2),
                    "old_spec_ingest_s": round(t_sensor - t_pre, 2),
                    "sensor_tick_s": round(t_run - t_sensor, 2),
                    "evolve_run_s": round(t_cycle - t_run, 2),
                    "iceberg_s": phases.get("iceberg"),
                    "spec_s": phases.get("spec"),
                    "backfill_s": phases.get("backfill"),
                    "ingest_s": round(ingest_s, 2),
                    "upsert_s": round(upsert_s, 2),
                    "event_to_base_s": round(done - started, 2),
                    "baseline_cycle_s": round(base_cycle, 2),
                    "ratio_vs_cycle": round((done - started) / base_cycle, 2),
                    "rows_with_values": int(filled),
                }
            )
    finally:
        stack_down(settings, purge=True)

    header = list(rows[0])
    print(" | ".join(header))
    for row in rows:
        print(" | ".join(str(row[h]) for h in header))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {
        "benchmark": "schema_evolution",
        "code_version": code_version(),
        "events_per_batch": args.events,
        "target_s": 120,
        "rounds": rows,
    }
    (RESULTS / "schema_evolution.json").write_text(json.dumps(out, indent=2))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    parts = [
        "produce_s",
        "old_spec_ingest_s",
        "sensor_tick_s",
        "evolve_run_s",
        "ingest_s",
        "upsert_s",
    ]
    bottom = [0.0] * len(rows)
    for part in parts:
        values = [float(r[part]) for r in rows]
        ax.bar([r["round"] for r in rows], values, bottom=bottom, label=part)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.axhline(base_cycle, color="black", linestyle="--", label="plain cycle (baseline)")
    ax.set_xlabel("round (one added column each)")
    ax.set_ylabel("seconds, schema-change event -> values in base")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "schema_evolution.png", dpi=100)
    print(f"wrote {RESULTS / 'schema_evolution.json'}")


if __name__ == "__main__":
    main()
