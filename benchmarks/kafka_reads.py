"""Benchmark: what a small Kafka read costs a table's ingest, and what reading many topics in one
Spark job would save (issue 20, part 4: "reading many topics in one Spark job").

N topics of ~100 small records each on the local broker, one ``local[2]`` driver configured like
the pipeline's. Per topic, medians over ``--rounds`` rounds after one warm-up round:

- **one read per topic** (the baseline): the ingest's own reader (``pipeline.ingest.read_kafka``,
  Spark's Kafka batch source over exact offsets), collected;
- **planning only**: the same reads planned but not run (the driver's offset checks);
- **one read of every topic**: one Kafka source over all N topics, collected;
- **shared read handed back**: the same one read as Arrow, split by topic, and each topic's rows
  made a DataFrame of their own and counted: what a shared read costs before each table's decode
  can start on its own rows.

Prints a table, writes ``benchmarks/results/kafka_reads.json`` and ``.png``.

    python benchmarks/kafka_reads.py [--topics 40] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import local_driver, results_plot, save_results, tree_cpu_s

RECORDS_PER_TOPIC = 100
CASES = {
    "per_topic": "one read per topic (baseline)",
    "planning": "planning only, per topic",
    "one_read": "one read of every topic",
    "handed_back": "one read, handed back per topic",
}


def produce_topics(topics: list[str], bootstrap: str) -> None:
    from cdc_assets_dev.demo.events import KafkaRecord, produce

    for topic in topics:
        records = [
            KafkaRecord(
                json.dumps({"id": i}).encode(),
                json.dumps({"op": "c", "after": {"id": i, "name": f"n{i}"}}).encode(),
            )
            for i in range(RECORDS_PER_TOPIC)
        ]
        produce(records, topic, bootstrap)


def many_topics(spark: Any, kafka: Any, ends: dict[str, dict[int, int]]) -> Any:
    """One Kafka batch source over every topic's offsets from 0 to its end, with the ingest's
    reader options."""
    from cdc_assets.pipeline.ingest.ingest import FETCH_MAX_WAIT_MS

    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka.resolved_bootstrap())
        .option("subscribe", ",".join(ends))
        .option("startingOffsets", json.dumps({t: {str(p): 0 for p in e} for t, e in ends.items()}))
        .option(
            "endingOffsets",
            json.dumps({t: {str(p): o for p, o in e.items()} for t, e in ends.items()}),
        )
        .option("failOnDataLoss", "true")
        .option("includeHeaders", "true")
        .option("kafka.fetch.max.wait.ms", str(FETCH_MAX_WAIT_MS))
    )
    return reader.load()


def hand_back(spark: Any, kafka: Any, ends: dict[str, dict[int, int]]) -> None:
    import pyarrow.compute as pc

    table = many_topics(spark, kafka, ends).toArrow()
    for topic in ends:
        rows = table.filter(pc.equal(table["topic"], topic))
        frame = spark.createDataFrame(rows)
        assert frame.count() == RECORDS_PER_TOPIC


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from cdc_assets.pipeline.ingest.ingest import read_kafka

    with tempfile.TemporaryDirectory() as tmp, local_driver(Path(tmp)) as (_, state, res):
        spark, kafka = res["spark"].get_session(), res["kafka"]
        topics = [f"kafka_reads.t{i:04d}" for i in range(args.topics)]
        produce_topics(topics, state.bootstrap_servers)
        ends = kafka.latest_offsets(topics)

        def per_topic() -> None:
            for t in topics:
                rows = read_kafka(spark, kafka, t, dict.fromkeys(ends[t], 0), ends[t]).collect()
                assert len(rows) == RECORDS_PER_TOPIC

        def planning() -> None:
            for t in topics:
                frame = read_kafka(spark, kafka, t, dict.fromkeys(ends[t], 0), ends[t])
                frame._jdf.queryExecution().executedPlan()

        def one_read() -> None:
            assert len(many_topics(spark, kafka, ends).collect()) == len(topics) * 100

        runs: dict[str, Callable[[], None]] = {
            "per_topic": per_topic,
            "planning": planning,
            "one_read": one_read,
            "handed_back": lambda: hand_back(spark, kafka, ends),
        }
        samples: dict[str, list[dict[str, float]]] = {case: [] for case in CASES}
        for round_ in range(args.rounds + 1):
            for case, run in runs.items():
                cpu, started = tree_cpu_s(), time.perf_counter()
                run()
                wall, used = time.perf_counter() - started, tree_cpu_s() - cpu
                print(f"  round {round_}, {case}: {wall:.2f} s", file=sys.stderr)
                if round_:  # round 0 warms the driver up
                    samples[case].append({"wall_s": wall, "cpu_s": used})
    report(samples, len(topics))


def report(samples: dict[str, list[dict[str, float]]], topics: int) -> None:
    def per_topic_ms(case: str, key: str) -> float:
        return statistics.median(s[key] for s in samples[case]) / topics * 1000

    base = per_topic_ms("per_topic", "wall_s")
    print(
        f"\n{topics} topics of {RECORDS_PER_TOPIC} records; per topic, medians of "
        f"{len(samples['per_topic'])} rounds on a warm driver"
    )
    print(f"  {'case':<34} {'wall':>9} {'ratio':>6} {'CPU':>9}")
    for case, label in CASES.items():
        wall = per_topic_ms(case, "wall_s")
        print(
            f"  {label:<34} {wall:6.1f} ms {wall / base:6.2f} {per_topic_ms(case, 'cpu_s'):6.1f} ms"
        )
    save_results("kafka_reads", {"topics": topics, "samples": samples})
    with results_plot("kafka_reads", figsize=(6, 3.4)) as ax:
        labels = list(CASES.values())
        ax.barh(labels, [per_topic_ms(c, "wall_s") for c in CASES], label="wall")
        ax.barh(labels, [per_topic_ms(c, "cpu_s") for c in CASES], alpha=0.4, label="CPU")
        ax.invert_yaxis()
        ax.set(title=f"a small Kafka read, per topic ({topics} topics)", xlabel="ms per topic")
        ax.legend(fontsize=8)


if __name__ == "__main__":
    main()
