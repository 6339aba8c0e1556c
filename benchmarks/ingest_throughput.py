"""Benchmark: Kafka -> CDC ledger throughput of `ingest_incremental` against a plain Spark ceiling.

The script starts its own local stack (Kafka broker, SQLite catalog, warehouse) in a temporary
CDC home that links the project's jar cache, produces N Debezium events of the `users` spec to a
fresh topic, and measures on the same offsets, with one warmed-up `local[2]` Spark session
(both cases first run on a separate warm-up topic, so the JIT has compiled the generated code of
both before anything is timed; measured repeats alternate between the cases):

- spark_parse_parquet: Spark's Kafka source, from_json of the value into the typed users payload,
  the after image + op written to Parquet (the ceiling for any ingest on this machine);
- spark_parse_image_parquet: the same plus the row image kept as JSON text (to_json of the parsed
  image, the cheapest of the ways tried): the design notes' "parse + keep the row image + write
  Parquet", which a ledger that can backfill from its own row images must do at least;
- cdc_ingest: our ingest_incremental into an empty users ledger (+ dead letters);
- cdc_ingest_sql_reader: the same with the envelope read by Spark's from_json instead of the
  project's JVM function (spark.cdcassets.envelopeReader=sql): what the function buys;
- cdc_ingest_protected: cdc_ingest with the users spec's email hashed, display name encrypted
  and country masked (docs/sensitive-data.md): what protecting sensitive columns costs (the
  HMACs, the encryption and the row image written again).

It also measures the produce-to-visible latency of a 1,000-event batch, samples the peak RSS of
the driver JVM and of this Python process, checks every count, prints a table and writes JSON and
a PNG plot to benchmarks/results/. The stack is torn down (and purged) at the end, even on error.
A measured run that fails (say the driver runs out of memory) is reported as failed, with how
long it ran and how much memory it held, instead of ending the benchmark without results.

    python benchmarks/ingest_throughput.py [--events 1000000] [--partitions 2] [--repeats 3]
        [--warmup-events 200000] [--driver-memory 2g] [--cases spark_parse_parquet,cdc_ingest]
        [--spark-conf KEY=VALUE]
        [--phases] [--profile] [--stacks]

For finding where the time goes: --phases re-runs the ingest's pieces one at a time (Kafka read,
classify, persist + summary, ledger projection, Parquet and Iceberg writes); --profile enables
Spark's event log and prints every Spark job of each run with its stages and task CPU/GC time;
--stacks samples the task threads with jstack; --spark-conf tries a Spark setting (a JVM flag
goes in spark.driver.extraJavaOptions). On a shared machine compare "CPU-s ours" rather than
seconds: it does not grow when another process takes a core.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import random
import re
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench_common import busy_cpu_s, code_version, driver_jvm_pid, make_home, tree_cpu_s

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"

BASELINE, BASELINE_IMAGE, OURS = "spark_parse_parquet", "spark_parse_image_parquet", "cdc_ingest"
# The same ingest with Spark's own functions reading the envelope instead of the project's
# function (what a session without cdc-assets-udf.jar runs).
OURS_SQL = "cdc_ingest_sql_reader"
OURS_PROTECTED = "cdc_ingest_protected"
CASES = (BASELINE, BASELINE_IMAGE, OURS, OURS_SQL, OURS_PROTECTED)
READERS = {OURS: "jvm", OURS_SQL: "sql", OURS_PROTECTED: "jvm"}
# The key of the protected case: a benchmark's, not a secret.
BENCH_PROTECTION_KEY = "benchmark protection key, not a secret"


def protected_spec(spec: Any) -> Any:
    """The users spec with its email hashed, display name encrypted and country masked."""
    from cdc_assets.spec.ddl_import import with_protections

    return with_protections(
        spec, {"email": "hash", "display_name": "encrypt", "country": "mask_shape"}
    )


BASELINES = (BASELINE, BASELINE_IMAGE)
# An id no random value of the users row contains: every template is cut at it and the real id
# is spliced in, so a few thousand encoded envelopes serve a million events.
SENTINEL = 8_765_432_109_876_543
TEMPLATE_POOL = 1500
SAMPLE_EVERY_S = 0.2
# A long-running driver or Connect server has long compiled its hot generated code; a few
# thousand events are not enough for the JIT to get to the ingest's large generated methods.
WARMUP_EVENTS = 200_000
LATENCY_EVENTS = 1000
LATENCY_REPEATS = 3
# Typed Debezium MySQL `source` block: the baseline parses it fully, as the ingest does.
SOURCE_SCHEMA = (
    "struct<version:string,connector:string,name:string,ts_ms:bigint,snapshot:string,db:string,"
    "`table`:string,server_id:bigint,gtid:string,file:string,pos:bigint,`row`:int,"
    "thread:bigint,query:string>"
)


# --- data ------------------------------------------------------------------------------------


@dataclass
class Templates:
    """Encoded envelopes cut at the sentinel id: joining the parts with an id gives a record."""

    creates: list[list[bytes]]
    updates: list[list[bytes]]
    deletes: list[list[bytes]]
    key: list[bytes]


@dataclass
class ProduceStats:
    topic: str
    events: int
    records: int
    tombstones: int
    ops: dict[str, int]
    keys: int
    seconds: float
    last_ack: float  # perf_counter of the last delivery report


def build_templates(spec: Any, pool: int, seed: int) -> Templates:
    from cdc_assets_dev.demo.events import DebeziumEventFactory, random_row

    factory = DebeziumEventFactory(spec)
    rng = random.Random(seed)
    key_column = spec.primary_key[0]
    needle = str(SENTINEL).encode()

    def cut(value: bytes | None, expected: int) -> list[bytes]:
        assert value is not None
        parts = value.split(needle)
        if len(parts) != expected + 1:
            raise RuntimeError(f"sentinel id found {len(parts) - 1} times, expected {expected}")
        return parts

    def row() -> dict[str, object]:
        return random_row(spec, rng, {key_column: SENTINEL})

    creates, updates, deletes = [], [], []
    for i in range(pool):
        before = row()
        creates.append(cut(factory.create(before).value, 1))
        updates.append(cut(factory.update(before, row()).value, 2))
        if i % 3 == 0:
            deletes.append(cut(factory.delete(before).value, 1))
    key = cut(factory.key_bytes({key_column: SENTINEL}), 1)
    return Templates(creates, updates, deletes, key)


def create_topic(kafka: Any, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import NewTopic

    # Held until the result arrives: a collected client cancels its pending requests.
    admin = kafka.admin()
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)]
    )
    futures[topic].result(30)


def produce_workload(
    kafka: Any, topic: str, events: int, templates: Templates, seed: int
) -> ProduceStats:
    """Produce ``events`` change events over ``events // 5`` keys, plus a tombstone per delete.

    Keys are created in order, updated at random, sometimes deleted (delete + tombstone) and
    re-created: the op mix of a busy OLTP table. Only the id and the template vary per event.
    """
    from confluent_kafka import Producer

    failures: list[str] = []
    acked = [0.0]

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))
        acked[0] = time.perf_counter()

    producer = Producer(
        {
            "bootstrap.servers": kafka.resolved_bootstrap(),
            "acks": "all",
            "enable.idempotence": False,
            "compression.type": "none",
            "linger.ms": 50,
            "batch.num.messages": 100_000,
            "batch.size": 1_000_000,  # the broker's default message.max.bytes caps a batch
            # A bounded queue: the default 1 GiB would stay in this process's RSS afterwards.
            "queue.buffering.max.messages": 200_000,
            "queue.buffering.max.kbytes": 131_072,
            "partitioner": "murmur2_random",  # Kafka Connect's: a key lands where Debezium puts it
            "on_delivery": on_delivery,
        }
    )
    rng = random.Random(seed)
    keys = max(events // 5, 1)
    next_id, live, deleted = 1, [], []
    ops = {"c": 0, "u": 0, "d": 0}
    creates, updates, deletes = templates.creates, templates.updates, templates.deletes
    key_head, key_tail = templates.key
    tombstones = 0
    produce, poll = producer.produce, producer.poll

    def send(value: bytes | None, key: bytes) -> None:
        while True:
            try:
                produce(topic, value, key)
                return
            except BufferError:
                poll(0.1)  # local queue full: let deliveries drain

    started = time.perf_counter()
    for i in range(events):
        roll = rng.random()
        if (roll < 0.25 and next_id <= keys) or len(live) < 2:
            if next_id <= keys or not deleted:
                row_id, next_id = next_id, next_id + 1
            else:
                row_id = deleted.pop()
            op, parts = "c", creates[i % len(creates)]
            live.append(row_id)
        elif roll < 0.28 and deleted:
            row_id = deleted.pop(rng.randrange(len(deleted)))
            op, parts = "c", creates[i % len(creates)]
            live.append(row_id)
        elif roll < 0.33:
            at = rng.randrange(len(live))
            row_id, live[at] = live[at], live[-1]
            live.pop()
            deleted.append(row_id)
            op, parts = "d", deletes[i % len(deletes)]
        else:
            row_id = live[rng.randrange(len(live))]
            op, parts = "u", updates[i % len(updates)]
        text = str(row_id).encode()
        key = key_head + text + key_tail
        send(text.join(parts), key)
        ops[op] += 1
        if op == "d":
            send(None, key)
            tombstones += 1
        if i & 0x3FF == 0:
            poll(0)
    remaining = producer.flush(120)
    seconds = time.perf_counter() - started
    if remaining or failures:
        raise RuntimeError(f"{remaining} undelivered, {len(failures)} failed: {failures[:3]}")
    offsets = kafka.topic_offsets(topic)
    stored = sum(p.latest - p.earliest for p in offsets)
    if stored != events + tombstones:
        raise RuntimeError(f"{topic} holds {stored} records, produced {events + tombstones}")
    return ProduceStats(
        topic, events, events + tombstones, tombstones, ops, keys, seconds, acked[0]
    )


# --- sampling --------------------------------------------------------------------------------


class PeakSampler:
    """Peak RSS of the driver JVM and of this process, and peak JVM heap used, every 0.2 s.

    Also CPU seconds used by this process tree and by everything else on the (shared) machine
    while it runs: another busy process on two cores shows up in ``other_cpu_s``. A JVM that
    dies meanwhile just stops being sampled.
    """

    def __init__(self, jvm_pid: int | None, heap_probe: Callable[[], int] | None) -> None:
        import psutil

        self._me = psutil.Process()
        self._jvm = psutil.Process(jvm_pid) if jvm_pid else None
        self._heap_probe = heap_probe
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.jvm_rss = self.py_rss = self.heap_used = 0
        self.own_cpu_s = self.other_cpu_s = 0.0
        self._cpu0 = (0.0, 0.0)

    def _sample(self) -> None:
        import psutil

        self.py_rss = max(self.py_rss, self._me.memory_info().rss)
        if self._jvm is not None:
            try:
                self.jvm_rss = max(self.jvm_rss, self._jvm.memory_info().rss)
            except psutil.Error:
                self._jvm = None
        if self._heap_probe is not None:
            try:
                self.heap_used = max(self.heap_used, self._heap_probe())
            except Exception:  # py4j raises several kinds once the JVM is gone
                self._heap_probe = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(SAMPLE_EVERY_S)

    def __enter__(self) -> PeakSampler:
        self._cpu0 = (tree_cpu_s(), busy_cpu_s())
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        own, busy = tree_cpu_s() - self._cpu0[0], busy_cpu_s() - self._cpu0[1]
        self.own_cpu_s, self.other_cpu_s = own, max(busy - own, 0.0)


class StackSampler:
    """A poor man's profiler: a jstack thread dump of the driver JVM every second, counting
    the frames of Spark's task threads (leaf frame = where the CPU is, inclusive = on the stack).

    Thread dumps stop the JVM at a safepoint for a moment, so runs measured with it are slower;
    the counts are safepoint-biased but show which code dominates.
    """

    TASK_THREAD = '"Executor task launch worker'
    EVERY_S = 1.0

    def __init__(self, jvm_pid: int | None) -> None:
        self._pid = jvm_pid
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.samples = 0
        self.leaf: Counter[str] = Counter()
        self.inclusive: Counter[str] = Counter()
        self.from_generated: Counter[str] = Counter()

    @staticmethod
    def frame(line: str) -> str:
        method = line.strip().removeprefix("at ").split("(")[0]
        return re.sub(r"\$\$Lambda\$\d+/0x[0-9a-f]+", "$$Lambda", method)

    def _dump(self) -> None:
        import subprocess

        done = subprocess.run(
            ["jstack", str(self._pid)], capture_output=True, text=True, timeout=30, check=False
        )
        for block in done.stdout.split("\n\n"):
            lines = block.strip().splitlines()
            if not lines or not lines[0].startswith(self.TASK_THREAD):
                continue
            if "java.lang.Thread.State: RUNNABLE" not in block:
                continue
            frames = [self.frame(x) for x in lines if x.strip().startswith("at ")]
            if frames:
                self.samples += 1
                self.leaf[frames[0]] += 1
                self.inclusive.update(set(frames))
                # What whole-stage generated code spends its time on: its own body, or the
                # function it called (JSON parser, string function, cache builder, ...).
                generated = [i for i, f in enumerate(frames) if ".GeneratedClass$" in f]
                if generated:
                    at = generated[0]
                    callee = "(generated code itself)" if at == 0 else frames[at - 1]
                    self.from_generated[callee] += 1

    def _run(self) -> None:
        while not self._stop.wait(self.EVERY_S):
            self._dump()

    def __enter__(self) -> StackSampler:
        if self._pid is not None and shutil.which("jstack"):
            self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def report(self, top: int = 15) -> dict[str, Any]:
        # Frames on (nearly) every stack are the thread's plumbing, not a hot spot.
        plumbing = 0.98 * self.samples
        return {
            "samples": self.samples,
            "leaf": self.leaf.most_common(top),
            "inclusive": [(f, n) for f, n in self.inclusive.most_common() if n < plumbing][:top],
            "from_generated": self.from_generated.most_common(top),
        }


def short_error(exc: BaseException) -> str:
    """One line for a failed run: the JVM error if Spark reports one, else the exception."""
    text = str(exc)
    found = re.search(r"java\.lang\.\w+(?:Error|Exception)[^\n]*", text)
    if found:
        return found.group(0)[:200]
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"{type(exc).__name__}: {first}"[:200]


# --- measurements ----------------------------------------------------------------------------


@dataclass
class Measurement:
    """One timed piece of Spark work; ``error`` is set when it failed, after ``seconds``."""

    name: str
    seconds: float = 0.0
    error: str | None = None
    jvm_rss: int = 0
    py_rss: int = 0
    heap_used: int = 0
    own_cpu_s: float = 0.0
    other_cpu_s: float = 0.0
    rows_written: int = 0
    counts: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    jobs: list[dict[str, Any]] = field(default_factory=list)


def payload_schema(spec: Any) -> str:
    """The users envelope with typed images, as a hand-written Spark job would declare it."""
    from cdc_assets.schema.wire import Wire, plan_fields
    from cdc_assets.sql.ddl import quote

    types = {
        Wire.INT: "int",
        Wire.LONG: "bigint",
        Wire.BOOLEAN: "boolean",
        Wire.BOOLEAN_INT: "int",
        Wire.TIMESTAMP_MILLIS: "bigint",
        Wire.DOUBLE: "double",
    }
    row = ",".join(f"{quote(p.name)}:{types.get(p.wire, 'string')}" for p in plan_fields(spec))
    return (
        f"struct<before:struct<{row}>,after:struct<{row}>,op:string,"
        f"source:{SOURCE_SCHEMA},ts_ms:bigint>"
    )


def isolated(spec: Any, topic: str, namespace: str) -> Any:
    return spec.model_copy(
        update={
            "source": spec.source.model_copy(update={"topic_": topic}),
            "sink": spec.sink.model_copy(update={"namespace": namespace}),
        }
    )


class JvmDiedError(RuntimeError):
    """The driver JVM is gone (an OutOfMemoryError ends it in local mode): no more Spark work."""


class Bench:
    """Everything one benchmark session shares: stack resources, Spark session, spec."""

    def __init__(self, settings: Any, spec: Any, args: argparse.Namespace, scratch: Path) -> None:
        from cdc_assets.resources import build_resources

        self.spec, self.args, self.scratch = spec, args, scratch
        resources = build_resources(settings)
        extra = {"spark.ui.showConsoleProgress": "false"}
        extra |= dict(kv.split("=", 1) for kv in args.spark_conf)
        self.event_dir = scratch / "events"
        if args.profile:
            # The event log records every job and stage with its timings and task metrics; it is
            # the only profiler left with the UI disabled. One plain file is simplest to read.
            self.event_dir.mkdir()
            extra |= {
                "spark.eventLog.enabled": "true",
                "spark.eventLog.dir": self.event_dir.as_uri(),
                "spark.eventLog.rolling.enabled": "false",
                "spark.eventLog.compress": "false",
            }
        self.spark_resource = resources["spark"].model_copy(
            update={
                "master": "local[2]",
                "app_name": "ingest-throughput",
                "driver_memory": args.driver_memory,
                "extra_conf": extra,
            }
        )
        self.kafka = resources["kafka"]
        self.iceberg = resources["iceberg"].load_catalog()
        self.catalog_name = settings.catalog_name
        self.spark: Any = None
        self.jvm_pid: int | None = None
        self.heap: Callable[[], int] | None = None
        self.dead: str | None = None

    def start_spark(self) -> None:
        self.spark = self.spark_resource.get_session()
        self.jvm_pid = driver_jvm_pid()
        runtime = self.spark.sparkContext._jvm.java.lang.Runtime.getRuntime()
        self.heap = lambda: int(runtime.totalMemory() - runtime.freeMemory())

    def stop_spark(self) -> None:
        if self.spark is None:
            return
        try:
            self.spark.stop()
        except Exception as exc:  # a dead JVM cannot be stopped cleanly; nothing is left to stop
            print(f"  spark.stop failed: {short_error(exc)}", file=sys.stderr)

    def jvm_alive(self) -> bool:
        import psutil

        if self.jvm_pid is None:
            return False
        try:
            # A JVM that died stays a zombie until pyspark reaps it.
            return psutil.Process(self.jvm_pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def timed(self, name: str, label: str, action: Callable[[Measurement], None]) -> Measurement:
        """Run ``action`` under a job description, sampled and timed; failures are recorded."""
        m = Measurement(name)
        if self.dead is not None:
            m.error = f"skipped: {self.dead}"
            return m
        self.spark.sparkContext.setJobDescription(label)
        stacks = StackSampler(self.jvm_pid if self.args.stacks else None)
        with PeakSampler(self.jvm_pid, self.heap) as peak, stacks:
            began = time.perf_counter()
            try:
                action(m)
            except Exception as exc:
                m.error = short_error(exc)
            m.seconds = time.perf_counter() - began
        if self.args.stacks:
            m.extra["stacks"] = stacks.report()
        alive = self.jvm_alive()
        if m.error is not None:
            # After an OutOfMemoryError Spark's uncaught-exception handler shuts the driver down
            # (in local mode the executor is the driver), and for a few seconds it still answers
            # with odd errors: give it time to go before deciding whether the session lives.
            deadline = time.monotonic() + 15
            while alive and time.monotonic() < deadline:
                time.sleep(0.5)
                alive = self.jvm_alive()
        if alive:
            try:
                self.spark.sparkContext.setJobDescription(None)
                m.extra["codegen"] = self.codegen_sizes()
            except Exception:  # py4j raises several kinds when the JVM is dying right now
                alive = False
        if not alive:
            self.dead = f"the driver JVM died in {label} ({m.error})"
            m.error = f"driver JVM died (its log above says why): {m.error}"
        m.jvm_rss, m.py_rss, m.heap_used = peak.jvm_rss, peak.py_rss, peak.heap_used
        m.own_cpu_s, m.other_cpu_s = peak.own_cpu_s, peak.other_cpu_s
        if self.args.profile and alive:
            m.jobs = event_log_jobs(self.event_dir, label)
        return m

    def codegen_sizes(self) -> dict[str, int]:
        """Bytecode sizes of the methods Spark generated so far in this JVM (a sample kept by
        Spark's codegen metrics): HotSpot never JIT-compiles a method above 8,000 bytes."""
        jvm = self.spark.sparkContext._jvm
        metrics = jvm.org.apache.spark.metrics.source.CodegenMetrics
        snapshot = metrics.METRIC_GENERATED_METHOD_BYTECODE_SIZE().getSnapshot()
        # One call for the whole array: py4j would fetch a Java array element by element.
        text = jvm.java.util.Arrays.toString(snapshot.getValues()).strip("[]")
        sizes = [int(v) for v in text.split(",") if v.strip()]
        return {
            "methods_sampled": len(sizes),
            "max_bytes": max(sizes, default=0),
            "over_8000_bytes": sum(1 for v in sizes if v > 8000),
        }

    def offsets(self, topic: str) -> tuple[dict[int, int], dict[int, int]]:
        parts = self.kafka.topic_offsets(topic)
        return {p.partition: p.earliest for p in parts}, {p.partition: p.latest for p in parts}

    def baseline(self, topic: str, label: str, case: str = BASELINE) -> Measurement:
        from pyspark.sql import functions as F

        from cdc_assets.pipeline.ingest.ingest import read_kafka

        start, end = self.offsets(topic)
        out = self.scratch / f"parquet-{uuid.uuid4().hex[:8]}"

        def action(_m: Measurement) -> None:
            records = read_kafka(self.spark, self.kafka, topic, start, end)
            parsed = records.select(
                F.from_json(F.col("value").cast("string"), payload_schema(self.spec)).alias("e")
            )
            columns = [F.col("e.after.*"), F.col("e.op")]
            if case == BASELINE_IMAGE:
                # The applied image as JSON text. Measured on the same records, to_json of the
                # parsed image cost less than get_json_object of the value (27.7 against 19.9
                # CPU-s) and less than parsing the envelope with the images as strings and the
                # image once more (22.7).
                image = "CASE WHEN e.op = 'd' THEN to_json(e.before) ELSE to_json(e.after) END"
                columns.append(F.expr(image).alias("row_json"))
            parsed.select(*columns).write.parquet(str(out))

        m = self.timed(case, label, action)
        if m.error is None:
            m.rows_written = self.spark.read.parquet(str(out)).count()
        shutil.rmtree(out, ignore_errors=True)
        return m

    def prepare_ledger(self, topic: str, *, protected: bool = False) -> Any:
        """The users spec (``protected``: with protected columns) on ``topic`` with a fresh
        namespace, so its ledger starts empty."""
        from cdc_assets.pipeline.shared.tables import ensure_tables

        if self.dead is not None:
            raise JvmDiedError(self.dead)
        chosen = protected_spec(self.spec) if protected else self.spec
        spec = isolated(chosen, topic, f"bench_{uuid.uuid4().hex[:8]}")
        ensure_tables(self.spark, self.catalog_name, spec)
        return spec

    def table_summary(self, spec: Any, layer: str, key: str) -> int:
        from cdc_assets.schema.layers import all_layouts

        layout = all_layouts(spec)[layer]
        snapshot = self.iceberg.load_table(f"{layout.namespace}.{layout.name}").current_snapshot()
        return int(snapshot.summary[key]) if snapshot else 0

    def cdc_ingest(self, topic: str, label: str, case: str = OURS) -> Measurement:
        from cdc_assets.pipeline.ingest.envelope_reader import READER_CONF
        from cdc_assets.pipeline.ingest.ingest import ingest_incremental
        from cdc_assets.pipeline.shared.batch_cache import session_conf

        if self.dead is not None:
            return Measurement(case, error=f"skipped: {self.dead}")
        spec = self.prepare_ledger(topic, protected=case == OURS_PROTECTED)

        def action(m: Measurement) -> None:
            with session_conf(self.spark, {READER_CONF: READERS[case]}):
                result = ingest_incremental(
                    self.spark, self.catalog_name, self.iceberg, self.kafka, spec
                )
            m.counts = {
                "read": result.read,
                "ledger": result.ledger,
                "dead": result.dead,
                "skipped": result.skipped,
                "skip_reasons": result.skip_reasons,
                "dead_reasons": result.dead_reasons,
                "ingest_result_seconds": result.seconds,
            }

        m = self.timed(case, label, action)
        if m.error is None:
            m.rows_written = self.table_summary(spec, "cdc", "total-records")
            m.counts["dead_letter_rows"] = self.table_summary(spec, "dead_letter", "total-records")
            m.extra["ledger_data_files"] = self.table_summary(spec, "cdc", "total-data-files")
        return m

    def phases(self, topic: str) -> list[Measurement]:
        """The ingest's work re-run piece by piece on the same offsets, each piece timed alone.

        Mirrors ingest_incremental: the Kafka read alone, classify + prepare into a no-op sink
        (all the computing, nothing kept), the same persisted and counted (its summary query),
        then the ledger rows from the cache into a no-op sink, Parquet, and the Iceberg ledger
        with the table's hash distribution and without it.
        """
        from pyspark import StorageLevel

        from cdc_assets.pipeline.ingest.ingest import (
            classify_records,
            ledger_identifier,
            ledger_rows,
            prepare,
            read_kafka,
        )
        from cdc_assets.pipeline.shared.batch_cache import COMPRESSED_CONF, session_conf

        start, end = self.offsets(topic)

        def records() -> Any:
            return read_kafka(self.spark, self.kafka, topic, start, end)

        def noop(df: Any) -> None:
            df.write.format("noop").mode("overwrite").save()

        def step(name: str, action: Callable[[Measurement], None]) -> Measurement:
            m = self.timed(name, f"phase {name}", action)
            out.append(m)
            print(f"  phase {name}: {m.seconds:.1f}s {m.error or ''}", file=sys.stderr)
            if m.error is not None and self.dead is None:
                raise RuntimeError(m.error)  # later pieces need this one
            return m

        def append(spec: Any, mode: str | None) -> Callable[[Measurement], None]:
            def action(m: Measurement) -> None:
                writer = ledger_rows(cached, self.spec).writeTo(
                    ledger_identifier(self.catalog_name, spec)
                )
                if mode is not None:
                    # Iceberg's per-write override of the table's write.distribution-mode.
                    writer = writer.option("distribution-mode", mode)
                writer.append()
                m.extra["data_files"] = self.table_summary(spec, "cdc", "total-data-files")

            return action

        def summary(m: Measurement) -> None:
            cached.groupBy("_status", "_reason", "dt", "hr").count().collect()
            infos = self.spark.sparkContext._jsc.sc().getRDDStorageInfo()
            m.extra["cached_memory_bytes"] = sum(int(i.memSize()) for i in infos)
            m.extra["cached_disk_bytes"] = sum(int(i.diskSize()) for i in infos)

        out: list[Measurement] = []
        if self.dead is not None:
            return out
        spec_hash, spec_none = self.prepare_ledger(topic), self.prepare_ledger(topic)

        def prepared() -> Any:
            return prepare(classify_records(records(), self.spec), self.spec)

        # As ingest_incremental caches its batch (cached_batch), declared here for the whole run.
        with session_conf(self.spark, {COMPRESSED_CONF: "false"}):
            cached = prepared().persist(StorageLevel.MEMORY_AND_DISK_DESER)
        parquet = self.scratch / f"ledger-{uuid.uuid4().hex[:8]}"
        try:
            step("kafka_read_noop", lambda _m: noop(records()))
            step("classify_prepare_noop", lambda _m: noop(prepared()))
            step("classify_prepare_persist_summary", summary)
            step("ledger_rows_from_cache_noop", lambda _m: noop(ledger_rows(cached, self.spec)))
            step(
                "ledger_rows_from_cache_parquet",
                lambda _m: ledger_rows(cached, self.spec).write.parquet(str(parquet)),
            )
            step("ledger_append_from_cache_hash", append(spec_hash, None))
            step("ledger_append_from_cache_none", append(spec_none, "none"))
        except RuntimeError:
            pass  # recorded in its measurement
        finally:
            shutil.rmtree(parquet, ignore_errors=True)
            if self.dead is None:
                cached.unpersist()
        return out

    def latency(self, templates: Templates, seed: int) -> dict[str, Any]:
        """Produce a 1,000-event batch to a fresh topic; from its last ack to a full pyiceberg
        scan of the ledger, through one ingest_incremental call."""
        from cdc_assets.pipeline.ingest.ingest import ingest_incremental
        from cdc_assets.schema.layers import ledger_layout

        runs = []
        for i in range(LATENCY_REPEATS):
            topic = f"bench.latency.{uuid.uuid4().hex[:8]}"
            create_topic(self.kafka, topic, self.args.partitions)
            spec = self.prepare_ledger(topic)
            layout = ledger_layout(spec)
            produced = produce_workload(self.kafka, topic, LATENCY_EVENTS, templates, seed + i)
            t0 = produced.last_ack
            result = ingest_incremental(
                self.spark, self.catalog_name, self.iceberg, self.kafka, spec
            )
            ingest_s = time.perf_counter() - t0
            while True:
                table = self.iceberg.load_table(f"{layout.namespace}.{layout.name}")
                seen = table.scan(selected_fields=("_kafka_offset",)).to_arrow().num_rows
                if seen >= produced.events:
                    break
                time.sleep(0.05)
            visible = time.perf_counter() - t0
            if result.ledger != produced.events:
                raise RuntimeError(f"latency run ledgered {result.ledger} of {produced.events}")
            runs.append({"visible_s": visible, "until_ingest_returned_s": ingest_s, "rows": seen})
            print(f"  latency {i + 1}: {visible:.2f}s", file=sys.stderr)
        return {
            "events": LATENCY_EVENTS,
            "median_visible_s": statistics.median(r["visible_s"] for r in runs),
            "median_until_ingest_returned_s": statistics.median(
                r["until_ingest_returned_s"] for r in runs
            ),
            "runs": runs,
        }


# --- profiling -------------------------------------------------------------------------------


def relative(text: str) -> str:
    """Spark call sites name source files by absolute path: keep results machine-independent."""
    return text.replace(f"{ROOT}{os.sep}", "")


def event_log_jobs(event_dir: Path, description: str) -> list[dict[str, Any]]:
    """Jobs run under one job description, from the Spark event log: call site, duration,
    stages, tasks and summed task time (run, CPU, GC)."""
    files = sorted(p for p in event_dir.rglob("*") if p.is_file())
    jobs: dict[int, dict[str, Any]] = {}
    stage_job: dict[int, int] = {}
    stage_info: dict[int, dict[str, Any]] = {}
    task_ms: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for path in files:
        with path.open(encoding="utf-8") as handle:
            for line in handle:
                event = json.loads(line)
                kind = event.get("Event")
                if kind == "SparkListenerJobStart":
                    props = event.get("Properties") or {}
                    if props.get("spark.job.description") != description:
                        continue
                    job = event["Job ID"]
                    jobs[job] = {
                        "job": job,
                        "call_site": relative(props.get("callSite.short", "?")),
                        "start": event["Submission Time"],
                        "stages": [],
                    }
                    for stage in event.get("Stage Infos", []):
                        stage_job[stage["Stage ID"]] = job
                elif kind == "SparkListenerJobEnd" and event["Job ID"] in jobs:
                    jobs[event["Job ID"]]["end"] = event["Completion Time"]
                elif kind == "SparkListenerStageCompleted":
                    info = event["Stage Info"]
                    if info["Stage ID"] in stage_job and "Submission Time" in info:
                        stage_info[info["Stage ID"]] = {
                            "stage": info["Stage ID"],
                            "name": relative(info["Stage Name"]),
                            "tasks": info["Number of Tasks"],
                            "ms": info["Completion Time"] - info["Submission Time"],
                        }
                elif kind == "SparkListenerTaskEnd" and event["Stage ID"] in stage_job:
                    metrics = event.get("Task Metrics") or {}
                    acc = task_ms[event["Stage ID"]]
                    acc["run_ms"] += metrics.get("Executor Run Time", 0)
                    acc["cpu_ms"] += metrics.get("Executor CPU Time", 0) / 1e6
                    acc["gc_ms"] += metrics.get("JVM GC Time", 0)
                    acc["spill_disk_bytes"] += metrics.get("Disk Bytes Spilled", 0)
    for stage_id, info in stage_info.items():
        info.update({k: round(v) for k, v in task_ms[stage_id].items()})
        jobs[stage_job[stage_id]]["stages"].append(info)
    out = []
    for job in sorted(jobs.values(), key=lambda j: j["job"]):
        job["ms"] = job.get("end", job["start"]) - job["start"]
        out.append(job)
    return out


def print_jobs(m: Measurement) -> None:
    total = sum(j["ms"] for j in m.jobs) / 1000
    print(f"\n{m.name}: {len(m.jobs)} Spark jobs, {total:.1f}s of {m.seconds:.1f}s wall")
    for job in m.jobs:
        print(f"  job {job['job']:>3} {job['ms'] / 1000:>7.2f}s  {job['call_site']}")
        for s in job["stages"]:
            print(
                f"      stage {s['stage']:>3} {s['ms'] / 1000:>7.2f}s {s['tasks']:>4} tasks"
                f"  run {s.get('run_ms', 0) / 1000:>6.1f}s cpu {s.get('cpu_ms', 0) / 1000:>6.1f}s"
                f" gc {s.get('gc_ms', 0) / 1000:>5.1f}s  {s['name'][:60]}"
            )


def print_stacks(m: Measurement) -> None:
    stacks = m.extra.get("stacks")
    if not stacks or not stacks["samples"]:
        return
    n = stacks["samples"]
    print(f"\n{m.name}: {n} stack samples of running task threads")
    titles = (
        ("leaf frames", "leaf"),
        ("called from generated code (or in it)", "from_generated"),
        ("on the stack", "inclusive"),
    )
    for title, key in titles:
        print(f"  {title}:")
        for frame, count in stacks.get(key, []):
            print(f"    {100 * count / n:5.1f}%  {frame[-110:]}")


# --- main ------------------------------------------------------------------------------------


def summarise(runs: list[Measurement], events: int) -> dict[str, Any]:
    ok = [r for r in runs if r.error is None]
    seconds = statistics.median(r.seconds for r in ok) if ok else None
    return {
        "case": runs[0].name,
        "seconds": seconds,
        "events_per_s": events / seconds if seconds else None,
        "runs": [asdict(r) for r in runs],
        "error": next((r.error for r in runs if r.error is not None), None),
        "rows_written": ok[0].rows_written if ok else None,
        "jvm_rss_peak": max(r.jvm_rss for r in runs),
        "py_rss_peak": max(r.py_rss for r in runs),
        "jvm_heap_used_peak": max(r.heap_used for r in runs),
        "own_cpu_s": statistics.median(r.own_cpu_s for r in runs),
        "other_cpu_s": statistics.median(r.other_cpu_s for r in runs),
    }


def check_counts(produced: ProduceStats, runs: list[Measurement]) -> list[str]:
    problems = []
    for r in runs:
        if r.error is not None:
            problems.append(f"{r.name} failed after {r.seconds:.1f}s: {r.error}")
            continue
        if r.name in BASELINES:
            if r.rows_written != produced.records:
                problems.append(f"baseline wrote {r.rows_written} rows of {produced.records}")
            continue
        c = r.counts
        if c["read"] != produced.records:
            problems.append(f"read {c['read']} != produced {produced.records}")
        if c["ledger"] + c["dead"] + c["skipped"] != c["read"]:
            problems.append(f"ledger + dead + skipped != read: {c}")
        if c["ledger"] != produced.events or r.rows_written != produced.events:
            problems.append(
                f"ledger {c['ledger']} / rows {r.rows_written} != events {produced.events}"
            )
    return problems


def mib(value: float) -> str:
    return f"{value / 2**20:.0f}"


def print_report(
    args: argparse.Namespace,
    produced: ProduceStats,
    rows: list[dict[str, Any]],
    phases: list[Measurement],
    latency: dict[str, Any] | None,
    info: dict[str, Any],
) -> None:
    base = next((r for r in rows if r["case"] == BASELINE and r["seconds"]), None)
    with_image = next((r for r in rows if r["case"] == BASELINE_IMAGE and r["seconds"]), None)
    print(
        f"\nKafka -> ledger, {produced.events:,} events ({produced.records:,} records with "
        f"tombstones) of `users` on {args.partitions} partitions, Spark local[2], driver memory "
        f"{args.driver_memory}, median of {args.repeats}"
        + (f", {' '.join(args.spark_conf)}" if args.spark_conf else "")
        + f"\ncode: {info['code']}\n"
    )
    header = (
        f"{'case':<26}{'seconds':>9}{'events/s':>11}{'time ratio':>12}{'tput ratio':>12}"
        f"{'vs image':>10}"
        f"{'JVM RSS MiB':>13}{'heap MiB':>10}{'py RSS MiB':>12}{'rows written':>14}"
        f"{'CPU-s ours':>12}{'CPU-s other':>13}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        if r["seconds"] is None:
            failed = r["runs"][-1]["seconds"]
            timing = f"{'FAILED':>9}{'-':>11}{'-':>12}{'-':>12}{'-':>10}"
            written = f"{'-':>14}"
            note = f"\n  {'':<20}failed after {failed:.1f}s: {r['error']}"
        else:
            ratio_t = f"{r['seconds'] / base['seconds']:.2f}" if base else "-"
            ratio_e = f"{r['events_per_s'] / base['events_per_s']:.2f}" if base else "-"
            ratio_i = f"{r['seconds'] / with_image['seconds']:.2f}" if with_image else "-"
            timing = (
                f"{r['seconds']:>9.1f}{r['events_per_s']:>11,.0f}{ratio_t:>12}{ratio_e:>12}"
                f"{ratio_i:>10}"
            )
            written = f"{r['rows_written']:>14,}"
            note = ""
        print(
            f"{r['case']:<26}{timing}{mib(r['jvm_rss_peak']):>13}{mib(r['jvm_heap_used_peak']):>10}"
            f"{mib(r['py_rss_peak']):>12}{written}{r['own_cpu_s']:>12.1f}{r['other_cpu_s']:>13.1f}"
            f"{note}"
        )
    ours = next((r for r in rows if r["case"] == OURS and r["seconds"]), None)
    if ours is not None:
        c = ours["runs"][0]["counts"]
        print(
            f"\ncdc_ingest counts: read {c['read']:,} = ledger {c['ledger']:,} + dead "
            f"{c['dead']:,} + skipped {c['skipped']:,} {c['skip_reasons']}"
        )
    for r in rows:
        codegen = r["runs"][-1]["extra"].get("codegen")
        if codegen:
            print(
                f"after {r['case']}: generated methods sampled {codegen['methods_sampled']}, "
                f"largest {codegen['max_bytes']:,} bytes of bytecode, "
                f"{codegen['over_8000_bytes']} above HotSpot's 8,000-byte JIT limit"
            )
    print(f"events produced by op: {produced.ops}, {produced.tombstones:,} tombstones")
    print(
        f"produce (not measured above): {produced.records:,} records in {produced.seconds:.1f}s "
        f"= {produced.records / produced.seconds:,.0f} records/s"
    )
    if latency is not None:
        print(
            f"produce -> visible in the ledger, {LATENCY_EVENTS:,} events: median "
            f"{latency['median_visible_s']:.2f}s (ingest_incremental returned after "
            f"{latency['median_until_ingest_returned_s']:.2f}s), {LATENCY_REPEATS} runs"
        )
    print(
        f"spark start {info['spark_start_s']:.1f}s, warm-up {info['warmup_s']:.1f}s; load average "
        f"{info['load_average_before'][0]:.2f} before, {info['load_average_after'][0]:.2f} after "
        f"({os.cpu_count()} CPUs)"
    )
    print(
        "\n'time ratio' = seconds / baseline (<1 is faster); 'tput ratio' = events/s / baseline;"
        "\n'vs image' = seconds / the baseline that also keeps the row image (the design notes')."
        "\nRSS is the peak sampled every 0.2 s; a JVM keeps the heap it has grown to, so a later"
        "\nrun's JVM RSS includes what earlier runs committed. 'heap' is the peak used heap."
        "\n'CPU-s ours' = CPU seconds of this process, the driver JVM and the broker during the"
        "\nrun; 'CPU-s other' = everything else on the machine (2 cores: wall x 2 is the budget)."
    )
    if phases:
        print(f"\nIngest pieces run alone on the same {produced.records:,} records\n")
        print(f"{'phase':<34}{'seconds':>9}{'events/s':>11}{'CPU-s ours':>12}{'CPU-s other':>13}")
        for ph in phases:
            notes = []
            if "cached_memory_bytes" in ph.extra:
                notes.append(
                    f"cached {mib(ph.extra['cached_memory_bytes'])} MiB in memory, "
                    f"{mib(ph.extra['cached_disk_bytes'])} MiB on disk"
                )
            if "data_files" in ph.extra:
                notes.append(f"{ph.extra['data_files']} data files")
            if ph.error is not None:
                notes.append(f"FAILED: {ph.error}")
            rate = f"{produced.events / ph.seconds:>11,.0f}" if ph.error is None else f"{'-':>11}"
            print(
                f"{ph.name:<34}{ph.seconds:>9.1f}{rate}{ph.own_cpu_s:>12.1f}"
                f"{ph.other_cpu_s:>13.1f}  {'; '.join(notes)}"
            )
    if args.profile:
        for r in rows:
            for run in r["runs"]:
                print_jobs(Measurement(**run))
        for ph in phases:
            print_jobs(ph)
    if args.stacks:
        for m in [*(Measurement(**run) for r in rows for run in r["runs"]), *phases]:
            print_stacks(m)


def write_plot(
    rows: list[dict[str, Any]], produced: ProduceStats, args: argparse.Namespace
) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot written", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(9, 4.5))
    labels = [r["case"] for r in rows]
    values = [r["events_per_s"] or 0 for r in rows]
    colors = {
        BASELINE: "#888888",
        BASELINE_IMAGE: "#bbbbbb",
        OURS: "#1f77b4",
        OURS_SQL: "#9ecae1",
        OURS_PROTECTED: "#d62728",
    }
    bars = ax.bar(labels, values, color=[colors[r["case"]] for r in rows])
    top = max([*values, 1])
    for bar, r in zip(bars, rows, strict=True):
        memory = f"JVM RSS {mib(r['jvm_rss_peak'])} MiB\nheap {mib(r['jvm_heap_used_peak'])} MiB"
        if r["seconds"] is None:
            failed = r["runs"][-1]["seconds"]
            text = f"FAILED after {failed:.0f}s\n{r['error'][:40]}\n{memory}"
        else:
            text = f"{r['events_per_s']:,.0f} ev/s\n{r['seconds']:.1f}s\n{memory}"
        ax.annotate(
            text,
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_ylim(0, top * 1.5)
    ax.set_ylabel("events / s")
    ax.set_title(
        f"Kafka -> ledger, {produced.events:,} users events, local[2], {args.driver_memory} driver"
    )
    fig.tight_layout()
    fig.savefig(RESULTS / "ingest_throughput.png", dpi=120)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--warmup-events",
        type=int,
        default=WARMUP_EVENTS,
        help="events both cases run once, unmeasured, before the measured runs",
    )
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument(
        "--driver-memory", default="2g", help="Spark driver memory (SparkResource's default: 2g)"
    )
    parser.add_argument(
        "--cases", default=",".join(CASES), help=f"comma-separated subset of {', '.join(CASES)}"
    )
    parser.add_argument(
        "--phases", action="store_true", help="also time the ingest's pieces one by one"
    )
    parser.add_argument(
        "--profile", action="store_true", help="Spark event log: print the jobs of every run"
    )
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark setting for an experiment (repeatable)",
    )
    parser.add_argument(
        "--stacks",
        action="store_true",
        help="sample the task threads' stacks with jstack every second (slows the runs down)",
    )
    args = parser.parse_args()
    args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = set(args.cases) - set(CASES)
    if unknown or not args.cases:
        parser.error(f"--cases takes a subset of {', '.join(CASES)}")
    return args


def main() -> None:
    args = parse_args()
    # SIGTERM would skip the finally below and leave a broker running.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    from cdc_assets.spec import load_spec
    from cdc_assets_dev.stack.local_stack import stack_down, stack_up

    tmp = Path(tempfile.mkdtemp(prefix="cdc-ingest-bench-"))
    settings = None
    bench: Bench | None = None
    # The code under test is imported right after its version is read, so both agree even if
    # someone commits while the benchmark runs.
    info: dict[str, Any] = {"code": code_version(), "load_average_before": os.getloadavg()}
    importlib.import_module("cdc_assets.pipeline.ingest.ingest")
    from cdc_assets.settings import ENV_PROTECTION_KEY

    os.environ.setdefault(ENV_PROTECTION_KEY, BENCH_PROTECTION_KEY)
    measured: dict[str, list[Measurement]] = {case: [] for case in args.cases}
    phases: list[Measurement] = []
    latency = None
    try:
        settings = make_home(tmp)
        stack_up(settings)
        spec = load_spec(ROOT / "table_specs" / "users.yaml")
        bench = Bench(settings, spec, args, tmp)
        templates = build_templates(spec, TEMPLATE_POOL, args.seed)

        warm_topic = f"bench.warmup.{uuid.uuid4().hex[:8]}"
        create_topic(bench.kafka, warm_topic, args.partitions)
        warm_events = min(args.warmup_events, args.events)
        produce_workload(bench.kafka, warm_topic, warm_events, templates, args.seed)
        topic = f"bench.users.{uuid.uuid4().hex[:8]}"
        create_topic(bench.kafka, topic, args.partitions)
        produced = produce_workload(bench.kafka, topic, args.events, templates, args.seed + 1)
        print(
            f"  produced {produced.records:,} records ({produced.events:,} events) in "
            f"{produced.seconds:.1f}s: {produced.records / produced.seconds:,.0f} records/s",
            file=sys.stderr,
        )

        began = time.perf_counter()
        bench.start_spark()
        info["spark_start_s"] = time.perf_counter() - began
        began = time.perf_counter()
        # Every case the run measures, so the JIT has compiled each one's code first.
        warmups = [
            bench.cdc_ingest(warm_topic, f"warmup {case}", case)
            if case in READERS
            else bench.baseline(warm_topic, f"warmup {case}", case)
            for case in args.cases
        ]
        for warm in warmups:
            if warm.error is not None:
                raise RuntimeError(f"warm-up {warm.name} failed: {warm.error}")
        info["warmup_s"] = time.perf_counter() - began
        info["warmup_events"] = warm_events
        print(
            f"  spark start {info['spark_start_s']:.1f}s, warm-up {info['warmup_s']:.1f}s",
            file=sys.stderr,
        )
        # Before the big runs: a run that kills the driver JVM must not cost this measurement.
        latency = bench.latency(templates, args.seed + 100)

        # Interleaved (baseline, ours, baseline, ...): this shared machine's speed drifts over
        # minutes, and each pair then sees about the same machine.
        for i in range(args.repeats):
            for case in args.cases:
                label = f"{case} {i + 1}"
                if case in READERS:
                    m = bench.cdc_ingest(topic, label, case)
                else:
                    m = bench.baseline(topic, label, case)
                measured[case].append(m)
                print(f"  measured {label}: {m.seconds:.1f}s {m.error or ''}", file=sys.stderr)
        if args.phases:
            phases = bench.phases(topic)
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

    rows = [summarise(runs, produced.events) for runs in measured.values()]
    problems = check_counts(produced, [m for runs in measured.values() for m in runs])
    problems += [f"phase {p.name}: {p.error}" for p in phases if p.error is not None]
    print_report(args, produced, rows, phases, latency, info)

    by_case = {r["case"]: r for r in rows}
    ratios: dict[str, Any] = {}
    ours = by_case.get(OURS, {})
    for name in BASELINES:
        base = by_case.get(name, {})
        if base.get("seconds") and ours.get("seconds"):
            key = "" if name == BASELINE else f"{name}_"
            ratios[f"{key}time_ratio"] = ours["seconds"] / base["seconds"]
            ratios[f"{key}throughput_ratio"] = ours["events_per_s"] / base["events_per_s"]
    spark_only = by_case.get(OURS_SQL, {})
    if spark_only.get("own_cpu_s") and ours.get("own_cpu_s"):
        # What the project's envelope function buys over Spark's own functions (< 1: faster).
        ratios["jvm_reader_vs_sql_reader_cpu_ratio"] = ours["own_cpu_s"] / spark_only["own_cpu_s"]
        ratios["jvm_reader_vs_sql_reader_time_ratio"] = ours["seconds"] / spark_only["seconds"]
    protected = by_case.get(OURS_PROTECTED, {})
    if protected.get("own_cpu_s") and ours.get("own_cpu_s"):
        # What protecting three columns costs over the same ingest without (> 1: slower).
        ratios["protected_vs_plain_cpu_ratio"] = protected["own_cpu_s"] / ours["own_cpu_s"]
        ratios["protected_vs_plain_time_ratio"] = protected["seconds"] / ours["seconds"]
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "ingest_throughput.json"
    document = {
        "events": args.events,
        "partitions": args.partitions,
        "repeats": args.repeats,
        "driver_memory": args.driver_memory,
        "spark_conf": args.spark_conf,
        "spark_master": "local[2]",
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        **info,
        "produce": asdict(produced) | {"last_ack": None},
        "rows": rows,
        "cdc_ingest_vs_baseline": ratios,
        "latency": latency,
        "phases": [asdict(p) for p in phases],
        "problems": problems,
    }
    out.write_text(json.dumps(document, indent=2) + "\n")
    write_plot(rows, produced, args)
    print(f"\nwrote {out.relative_to(ROOT)} and ingest_throughput.png")
    if problems:
        raise SystemExit("problems:\n  " + "\n  ".join(problems))


if __name__ == "__main__":
    main()
