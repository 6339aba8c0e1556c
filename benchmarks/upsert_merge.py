"""Benchmark: ledger -> base upsert, our bucketed + storage-partitioned MERGE against two peers.

The script starts its own local stack in a temporary CDC home that links the project's jar cache,
creates the `users` tables in a fresh namespace, writes a base of N rows in the users shape with
Spark (base watermark = the first ledger offset), and for each changed fraction writes a ledger
in which that fraction of the keys changed twice (the last change of 10% of them a delete), with
the consumed offsets in the ledger's snapshot summary as the ingest leaves them. Then, from the
same starting base each time (base and tombstones are set back to their initial snapshots
between runs), with one warmed-up `local[2]` Spark session:

- plain_merge (a): one MERGE INTO base USING (newest change per key by ROW_NUMBER() over the
  ledger's new rows): WHEN MATCHED AND op = 'd' THEN DELETE, WHEN MATCHED THEN UPDATE, WHEN NOT
  MATCHED AND op <> 'd' THEN INSERT (the seeds' shape);
- cdc_upsert (b): `build_bucketed` + `merge_base` from cdc_assets/pipeline/upsert/upsert.py, what
the
  product runs (ordering guard, tombstones, watermark in the same commit);
- pyiceberg_upsert (c): pyiceberg's `Table.upsert` on the same base, given the newest change per
  key where that change is not a delete (it has no delete branch), as an in-memory Arrow table
  (read from Spark before the clock starts; that time is reported as `prep`).

Every run is checked against the expected base built from the generator (count, distinct keys
and a checksum of every base column; pyiceberg_upsert keeps the deleted keys, so its expected
base is ours plus their original rows): the three cases did the same work. Reports wall time,
the ratios b/a and b/c, files and bytes each run wrote (snapshot summaries of every table it
committed to), whether base was shuffled into the join, peak RSS of the driver JVM and of this
process, and CPU seconds of this process tree and of the rest of the machine. Prints a table and
writes JSON and a PNG plot to benchmarks/results/. The stack is torn down (and purged) at the end.

    python benchmarks/upsert_merge.py [--rows 5000000] [--changed 0.01,0.05,0.2] [--repeats 1]
        [--buckets 16] [--driver-memory 2g] [--shuffle-partitions N] [--cases a,b,c]
        [--spark-conf KEY=VALUE] [--explain]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench_common import busy_cpu_s, code_version, driver_jvm_pid, make_home, tree_cpu_s

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"

PLAIN, OURS, PYICEBERG = "plain_merge", "cdc_upsert", "pyiceberg_upsert"
OURS_UNPRUNED = "cdc_upsert_unpruned"  # ours with merge_base(prune=False): the pruning lever
CASES = (PLAIN, OURS, PYICEBERG, OURS_UNPRUNED)
SHORT = {"a": PLAIN, "b": OURS, "c": PYICEBERG, "b0": OURS_UNPRUNED}
SAMPLE_EVERY_S = 0.2
WARMUP_ROWS = 100_000
WARMUP_CHANGED = 0.05
DELETE_SHARE = 0.10
# Base rows were written before the ledger's changes: an older source position.
BASE_SEQ_MAJOR, CHANGE_SEQ_MAJOR = 1, 2
CHANGES_START_MICROS = 1_767_312_000_000_000  # 2026-01-02T00:00:00Z
SUMMARY_KEYS = (
    "added-data-files",
    "added-delete-files",
    "added-files-size",
    "added-records",
    "added-position-deletes",
    "deleted-data-files",
    "deleted-records",
    "removed-files-size",
)

FIRST = [
    "ada",
    "alan",
    "grace",
    "linus",
    "barbara",
    "edsger",
    "donald",
    "margaret",
    "ken",
    "dennis",
    "frances",
    "john",
    "radia",
    "leslie",
    "tim",
    "katherine",
    "guido",
    "bjarne",
    "niklaus",
    "sophie",
    "anita",
    "jean",
    "hedy",
    "claude",
    "shafi",
    "yukihiro",
    "mary",
]
LAST = [
    "lovelace",
    "turing",
    "hopper",
    "torvalds",
    "liskov",
    "dijkstra",
    "knuth",
    "hamilton",
    "thompson",
    "ritchie",
    "allen",
    "mccarthy",
    "perlman",
    "lamport",
    "berners",
    "johnson",
    "rossum",
    "stroustrup",
    "wirth",
    "wilson",
    "borg",
    "sammet",
    "lamarr",
    "shannon",
    "goldwasser",
    "matsumoto",
    "kenyon",
]
DOMAINS = ("example.com", "mail.example.org", "corp.example.net", "users.example.io")
COUNTRIES = [
    "US",
    "DE",
    "FR",
    "GB",
    "IN",
    "BR",
    "JP",
    "CA",
    "AU",
    "NL",
    "SE",
    "PL",
    "ES",
    "IT",
    "MX",
    "KR",
]


# --- data ------------------------------------------------------------------------------------


def _array(values: tuple[str, ...] | list[str]) -> str:
    return "array(" + ", ".join(f"'{v}'" for v in values) + ")"


def _pick(values: tuple[str, ...] | list[str], hash_expr: str) -> str:
    return f"element_at({_array(values)}, CAST(pmod({hash_expr}, {len(values)}) AS INT) + 1)"


def image_exprs(salt: str) -> dict[str, str]:
    """SQL for one users row image of key ``id``; ``salt`` (an SQL int expression) is the version.

    Email, country and creation time belong to the key; the name, activity, login count and
    update time change with every version. Version 0 is the base row.
    """

    def h(n: int, versioned: bool = True) -> str:
        return f"xxhash64(id, {salt}, {n})" if versioned else f"xxhash64(id, {n})"

    first, last = _pick(FIRST, h(1, False)), _pick(LAST, h(2, False))
    new_first, new_last = _pick(FIRST, h(3)), _pick(LAST, h(4))
    domain = _pick(DOMAINS, h(5, False))
    return {
        "id": "id",
        "email": f"concat({first}, '.', {last}, CAST(id AS STRING), '@', {domain})",
        "display_name": f"concat(initcap({new_first}), ' ', initcap({new_last}))",
        "country": _pick(COUNTRIES, h(6, False)),
        "is_active": f"pmod({h(7)}, 10) <> 0",
        "login_count": f"CAST(pmod({h(8)}, 5000) AS INT)",
        "created_at": f"timestamp_millis(1420070400000 + pmod({h(9, False)}, 347155200000))",
        "updated_at": (
            f"CAST(timestamp_millis(CASE WHEN {salt} = 0 "
            f"THEN 1735689600000 + pmod({h(10)}, 31536000000) "
            f"ELSE {CHANGES_START_MICROS // 1000} + {salt} * 3600000 + pmod({h(10)}, 3600000) END) "
            "AS TIMESTAMP_NTZ)"
        ),
    }


def json_expr(image: dict[str, str]) -> str:
    """The row image as Debezium's MySQL connector writes it (epoch millis for created_ms)."""
    fields = []
    for name, expr in image.items():
        if name == "created_at":
            fields.append(f"'created_ms', unix_millis({expr})")
        elif name == "updated_at":
            fields.append(f"'updated_at', date_format({expr}, \"yyyy-MM-dd'T'HH:mm:ss.SSS\")")
        elif name == "is_active":
            fields.append(f"'is_active', CAST({expr} AS INT)")
        else:
            fields.append(f"'{name}', {expr}")
    return f"to_json(named_struct({', '.join(fields)}))"


def render_base_rows(rows: int) -> str:
    image = image_exprs("0")
    cols = [f"{expr} AS {name}" for name, expr in image.items()]
    cols += [
        "'r' AS _op",
        f"CAST({image['updated_at']} AS TIMESTAMP) AS _source_ts",
        f"CAST({BASE_SEQ_MAJOR} AS BIGINT) AS _seq_major",
        "CAST(id AS BIGINT) AS _seq_minor",
        "CAST(0 AS BIGINT) AS _seq_row",
        "0 AS _kafka_partition",
        "CAST(id - 1 AS BIGINT) AS _kafka_offset",
    ]
    return f"SELECT {', '.join(cols)} FROM range(1, {rows + 1})"


# Skewed workload (benchmarks/upsert_scaling.py): this share of the changed keys among the
# newest HOT_KEYS share of the keys, as OLTP tables mostly change; the hot-set workload has
# all of them there (inserts and updates of recent rows only).
HOT_CHANGES, HOT_KEYS = 0.9, 0.1
WORKLOAD_HOT_CHANGES = {"skewed": HOT_CHANGES, "hot": 1.0}


def render_changed_keys(rows: int, changed: float, seed: int, skew: str = "uniform") -> str:
    """The changed keys: a uniform ``changed`` share of them, or (``skew`` ``skewed`` or
    ``hot``) as many keys with HOT_CHANGES of them (all for ``hot``) among the newest
    HOT_KEYS of the keys."""
    pick = f"pmod(xxhash64(id, {seed}, 1), 1000000)"
    if skew == "uniform":
        ppm = round(changed * 1_000_000)
        return f"SELECT id FROM range(1, {rows + 1}) WHERE {pick} < {ppm}"
    share = WORKLOAD_HOT_CHANGES[skew]
    hot_from = round(rows * (1 - HOT_KEYS))
    hot = min(round(changed * share / HOT_KEYS * 1_000_000), 1_000_000)
    cold = round(changed * (1 - share) / (1 - HOT_KEYS) * 1_000_000)
    return (
        f"SELECT id FROM range(1, {rows + 1}) WHERE "
        f"(id > {hot_from} AND {pick} < {hot}) OR (id <= {hot_from} AND {pick} < {cold})"
    )


def render_changes(rows: int, changed: float, seed: int, keys: int, skew: str = "uniform") -> str:
    """Two changes per changed key (the second a delete for DELETE_SHARE of them), in the ledger
    layout plus ``change_no`` and ``is_delete``; Kafka partition 0, offsets from ``rows`` on, all
    first changes before all second changes, keys shuffled; source positions follow the offsets
    and the source times spread over one day."""
    delete_pm = round(DELETE_SHARE * 1000)
    img = "CASE WHEN is_delete THEN 1 ELSE change_no END"
    image, before = image_exprs(img), image_exprs("change_no - 1")
    ordered = (
        f"SELECT id, change_no, is_delete, CAST({rows} - 1 + row_number() OVER "
        f"(ORDER BY change_no, xxhash64(id, {seed}, 3)) AS BIGINT) AS off FROM ("
        f"SELECT id, n AS change_no, "
        f"(n = 2 AND pmod(xxhash64(id, {seed}, 2), 1000) < {delete_pm}) AS is_delete "
        f"FROM ({render_changed_keys(rows, changed, seed, skew)}) "
        "LATERAL VIEW explode(array(1, 2)) e AS n)"
    )
    step = 86_400_000_000 // max(2 * keys, 1)
    source_ts = f"timestamp_micros({CHANGES_START_MICROS} + (off - {rows}) * {step})"
    cols = [f"{expr} AS {name}" for name, expr in image.items()]
    cols += [
        "CASE WHEN is_delete THEN 'd' ELSE 'u' END AS _op",
        f"{source_ts} AS _source_ts",
        f"CAST({CHANGE_SEQ_MAJOR} AS BIGINT) AS _seq_major",
        "off AS _seq_minor",
        "CAST(0 AS BIGINT) AS _seq_row",
        "0 AS _kafka_partition",
        "off AS _kafka_offset",
        f"{source_ts} + INTERVAL 50 MILLISECONDS AS _kafka_ts",
        f"{json_expr(image)} AS _row_json",
        f"{json_expr(before)} AS _before_json",
        "CAST(NULL AS STRING) AS _unavailable",
        f"{source_ts} + INTERVAL 2 SECONDS AS _processed_at",
        "change_no",
        "is_delete",
    ]
    return f"SELECT {', '.join(cols)} FROM ({ordered})"


def last_execution_id(spark: Any) -> int:
    """The id of the newest SQL execution of the session's app (-1: none yet)."""
    store = spark._jsparkSession.sharedState().statusStore()
    executions = spark._jvm.scala.jdk.javaapi.CollectionConverters.asJava(store.executionsList())
    return max((int(e.executionId()) for e in executions), default=-1)


# --- sampling --------------------------------------------------------------------------------


class Peaks:
    """Peak RSS of the driver JVM and of this process every 0.2 s, and CPU seconds used by this
    process tree and by the rest of the (shared) machine while it runs."""

    def __init__(self, jvm_pid: int | None) -> None:
        import psutil

        self._me = psutil.Process()
        self._jvm = psutil.Process(jvm_pid) if jvm_pid else None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.jvm_rss = self.py_rss = 0
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

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY_S):
            self._sample()

    def __enter__(self) -> Peaks:
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


# --- the benchmark ---------------------------------------------------------------------------


@dataclass
class Check:
    rows: int
    keys: int
    checksum: int

    def same(self, other: Check) -> bool:
        return (self.rows, self.keys, self.checksum) == (other.rows, other.keys, other.checksum)


@dataclass
class Run:
    case: str
    changed: float
    seconds: float = 0.0
    prep_s: float = 0.0  # pyiceberg: reading the change batch out of Spark (not in seconds)
    steps: dict[str, float] = field(default_factory=dict)
    written: dict[str, dict[str, int]] = field(default_factory=dict)
    base_shuffled: bool | None = None
    rows_in: int = 0
    check: dict[str, int] = field(default_factory=dict)
    ok: bool = False
    problem: str | None = None
    jvm_rss: int = 0
    py_rss: int = 0
    own_cpu_s: float = 0.0
    other_cpu_s: float = 0.0
    error: str | None = None
    # Spark SQL execution ids of the timed action: (last before it, last at its end).
    sql_executions: tuple[int, int] = (-1, -1)


@dataclass
class Workload:
    changed: float
    keys: int
    ledger_rows: int
    deletes: int
    expected: Check  # base after applying every change (a, b)
    expected_pyiceberg: Check  # the same with the deleted keys' original rows kept (c)
    seconds: float


def isolated(spec: Any, namespace: str, buckets: int) -> Any:
    return spec.model_copy(
        update={
            "sink": spec.sink.model_copy(update={"namespace": namespace}),
            "base": spec.base.model_copy(update={"buckets": buckets}),
        }
    )


def short_error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


class Bench:
    """One stack, one Spark session, one spec in its own namespace."""

    def __init__(self, settings: Any, args: argparse.Namespace) -> None:
        from cdc_assets.resources import build_resources

        self.args = args
        resources = build_resources(settings)
        extra = {"spark.ui.showConsoleProgress": "false"}
        extra |= dict(kv.split("=", 1) for kv in args.spark_conf)
        update: dict[str, Any] = {
            "master": "local[2]",
            "app_name": "upsert-merge",
            "driver_memory": args.driver_memory,
            "extra_conf": extra,
        }
        if args.shuffle_partitions:
            update["shuffle_partitions"] = args.shuffle_partitions
        self.spark_resource = resources["spark"].model_copy(update=update)
        self.iceberg_resource = resources["iceberg"]
        self.catalog = settings.catalog_name
        self.spark: Any = None
        self.jvm_pid: int | None = None

    def start_spark(self) -> None:
        self.spark = self.spark_resource.get_session()
        self.jvm_pid = driver_jvm_pid()

    def stop_spark(self) -> None:
        if self.spark is not None:
            try:
                self.spark.stop()
            except Exception as exc:
                print(f"  spark.stop failed: {short_error(exc)}", file=sys.stderr)

    def iceberg(self) -> Any:
        return self.iceberg_resource.load_catalog()


class Table:
    """One spec's tables in the benchmark: set up, reset between runs, measured, checked."""

    def __init__(self, bench: Bench, spec: Any, rows: int, seed: int, scratch: Path) -> None:
        from cdc_assets.pipeline.upsert.upsert import plain_identifier, spark_identifier
        from cdc_assets.schema.layers import (
            base_layout,
            bucketed_layout,
            ledger_layout,
            tombstones_layout,
        )

        self.bench, self.spec, self.rows, self.seed, self.scratch = bench, spec, rows, seed, scratch
        self.layouts = {
            "base": base_layout(spec),
            "ledger": ledger_layout(spec),
            "bucketed": bucketed_layout(spec),
            "tombstones": tombstones_layout(spec),
        }
        self.ids = {k: spark_identifier(bench.catalog, v) for k, v in self.layouts.items()}
        self.plain = {k: plain_identifier(bench.catalog, v) for k, v in self.layouts.items()}
        self.base_columns = self.layouts["base"].column_names
        self.initial: dict[str, int] = {}
        self.changes_path: Path | None = None
        self.skew = "uniform"  # see render_changed_keys

    @property
    def spark(self) -> Any:
        return self.bench.spark

    def load(self, layer: str) -> Any:
        layout = self.layouts[layer]
        return self.bench.iceberg().load_table(f"{layout.namespace}.{layout.name}")

    def create(self) -> float:
        """Tables, the base rows with their upsert state, an empty tombstones snapshot."""
        from cdc_assets.pipeline.shared.tables import ensure_tables
        from cdc_assets.pipeline.shared.watermark import (
            UpsertState,
            commit_properties_only,
            snapshot_properties,
        )

        started = time.perf_counter()
        ensure_tables(self.spark, self.bench.catalog, self.spec)
        if getattr(self.bench.args, "unordered", False):
            # The layout before tables had a key order: files hash-distributed by bucket only.
            for layer in ("base", "tombstones"):
                self.spark.sql(f"ALTER TABLE {self.ids[layer]} WRITE DISTRIBUTED BY PARTITION")
        state = UpsertState(watermark={0: self.rows})
        with snapshot_properties(self.spark, {**state.properties(), "cdc.kind": "bench-base"}):
            self.spark.sql(f"INSERT INTO {self.ids['base']} {render_base_rows(self.rows)}")
        commit_properties_only(self.load("tombstones"), {"cdc.kind": "bench-init"})
        for layer in ("base", "tombstones"):
            self.initial[layer] = self.load(layer).current_snapshot().snapshot_id
        return time.perf_counter() - started

    def base_files(self) -> dict[str, int]:
        files = self.load("base").inspect.files()
        sizes = files.column("file_size_in_bytes").to_pylist()
        content = files.column("content").to_pylist()
        return {
            "data_files": sum(1 for c in content if c == 0),
            "delete_files": sum(1 for c in content if c != 0),
            "bytes": sum(sizes),
        }

    def write_ledger(self, changed: float) -> Workload:
        """Replace the ledger with this fraction's changes; compute the expected bases."""
        from cdc_assets.pipeline.shared.offsets import (
            KIND_PROPERTY,
            OFFSETS_PROPERTY,
            TOPIC_PROPERTY,
            encode_offsets,
        )
        from cdc_assets.pipeline.shared.watermark import snapshot_properties

        started = time.perf_counter()
        kind = self.skew
        path = self.scratch / f"changes_{self.layouts['base'].namespace}_{changed}_{kind}"
        shutil.rmtree(path, ignore_errors=True)
        keys = self.spark.sql(render_changed_keys(self.rows, changed, self.seed, self.skew)).count()
        select_changes = render_changes(self.rows, changed, self.seed, keys, self.skew)
        self.spark.sql(select_changes).write.parquet(str(path))
        self.changes_path = path
        changes = self.spark.read.parquet(str(path))
        changes.createOrReplaceTempView("bench_changes")
        stats = self.spark.sql(
            "SELECT count(*) AS n, count(DISTINCT id) AS keys, sum(CAST(is_delete AS INT)) AS d, "
            "max(_kafka_offset) AS last FROM bench_changes"
        ).collect()[0]
        ledger_cols = self.layouts["ledger"].column_names
        data = [c for c in ledger_cols if c not in ("dt", "hr")]
        select = (
            f"SELECT {', '.join(data)}, date_format(_kafka_ts, 'yyyy-MM-dd') AS dt, "
            f"hour(_kafka_ts) AS hr FROM bench_changes"
        )
        props = {
            OFFSETS_PROPERTY: encode_offsets({0: int(stats["last"]) + 1}),
            TOPIC_PROPERTY: self.spec.source.topic,
            KIND_PROPERTY: "bench-ledger",
        }
        with snapshot_properties(self.spark, props):
            self.spark.sql(f"INSERT OVERWRITE {self.ids['ledger']} {select}")

        # The expected base, from the generator's own change numbers (no dedupe logic).
        base0 = f"{self.ids['base']} VERSION AS OF {self.initial['base']}"
        cols = ", ".join(self.base_columns)
        self.spark.sql(
            f"SELECT {cols} FROM {base0} b LEFT ANTI JOIN bench_changes c ON b.id = c.id "
            f"UNION ALL SELECT {cols} FROM bench_changes WHERE change_no = 2 AND NOT is_delete"
        ).createOrReplaceTempView("bench_expected")
        self.spark.sql(
            f"SELECT {cols} FROM {base0} b LEFT SEMI JOIN "
            f"(SELECT id FROM bench_changes WHERE is_delete) d ON b.id = d.id"
        ).createOrReplaceTempView("bench_deleted_originals")
        expected = self.check_of("bench_expected")
        originals = self.check_of("bench_deleted_originals")
        with_originals = Check(
            expected.rows + originals.rows,
            expected.keys + originals.keys,
            expected.checksum + originals.checksum,
        )
        return Workload(
            changed=changed,
            keys=int(stats["keys"]),
            ledger_rows=int(stats["n"]),
            deletes=int(stats["d"]),
            expected=expected,
            expected_pyiceberg=with_originals,
            seconds=time.perf_counter() - started,
        )

    def check_of(self, relation: str) -> Check:
        cols = ", ".join(self.base_columns)
        row = self.spark.sql(
            f"SELECT count(*) AS n, count(DISTINCT id) AS k, "
            f"coalesce(sum(CAST(xxhash64({cols}) AS DECIMAL(38, 0))), 0) AS s FROM {relation}"
        ).collect()[0]
        return Check(int(row["n"]), int(row["k"]), int(row["s"]))

    def reset(self) -> None:
        """Base and tombstones back to their initial snapshots (the bucketed table is replaced
        by every build)."""
        for layer in ("base", "tombstones"):
            namespace, name = self.layouts[layer].namespace, self.layouts[layer].name
            self.spark.sql(
                f"CALL {self.bench.catalog}.system.set_current_snapshot("
                f"table => '{self.bench.catalog}.{namespace}.{name}', "
                f"snapshot_id => {self.initial[layer]})"
            )

    def snapshot_ids(self) -> dict[str, set[int]]:
        out = {}
        for layer in ("base", "bucketed", "tombstones"):
            out[layer] = {s.snapshot_id for s in self.load(layer).snapshots()}
        return out

    def written_since(self, before: dict[str, set[int]]) -> dict[str, dict[str, int]]:
        """Summary counters of the snapshots each table gained (current lineage only)."""
        from pyiceberg.table.snapshots import ancestors_of

        out: dict[str, dict[str, int]] = {}
        for layer, known in before.items():
            table = self.load(layer)
            current = table.current_snapshot()
            totals = dict.fromkeys(SUMMARY_KEYS, 0)
            totals["snapshots"] = 0
            if current is not None:
                for snap in ancestors_of(current, table.metadata):
                    if snap.snapshot_id in known:
                        break
                    totals["snapshots"] += 1
                    props = snap.summary.additional_properties if snap.summary else {}
                    for key in SUMMARY_KEYS:
                        totals[key] += int(props.get(key, 0))
            if totals["snapshots"]:
                out[layer] = totals
        return out

    # --- the three cases ---

    def plain_merge_sql(self) -> str:
        from cdc_assets.sql.ddl import quote

        start, end = self.rows, self.rows + 2 * 10**12
        cols = self.base_columns
        sets = ", ".join(f"t.{quote(c)} = s.{quote(c)}" for c in cols if c != "id")
        source = (
            f"SELECT {', '.join(quote(c) for c in cols)} FROM (SELECT *, ROW_NUMBER() OVER ("
            f"PARTITION BY id ORDER BY _seq_major DESC, _seq_minor DESC, _seq_row DESC, "
            f"_kafka_partition DESC, _kafka_offset DESC) AS rn FROM {self.ids['ledger']} "
            f"WHERE _kafka_partition = 0 AND _kafka_offset >= {start} AND _kafka_offset < {end} "
            f"AND _op IN ('c', 'u', 'd', 'r')) WHERE rn = 1"
        )
        return (
            f"MERGE INTO {self.ids['base']} t USING ({source}) s ON t.id = s.id "
            f"WHEN MATCHED AND s._op = 'd' THEN DELETE "
            f"WHEN MATCHED THEN UPDATE SET {sets} "
            f"WHEN NOT MATCHED AND s._op <> 'd' THEN INSERT ({', '.join(quote(c) for c in cols)}) "
            f"VALUES ({', '.join('s.' + quote(c) for c in cols)})"
        )

    def run_plain(self, run: Run) -> Callable[[], None]:
        from cdc_assets.pipeline.upsert.upsert import merge_plan
        from cdc_assets.sql.plan import shuffles_between_scan_and_join

        sql = self.plain_merge_sql()
        shuffles = shuffles_between_scan_and_join(merge_plan(self.spark, sql), self.plain["base"])
        run.base_shuffled = None if shuffles is None else any(shuffles)
        if self.bench.args.explain:
            print(merge_plan(self.spark, sql), file=sys.stderr)

        def action() -> None:
            self.spark.sql(sql)

        return action

    def run_ours(self, run: Run, prune: bool = True) -> Callable[[], None]:
        from cdc_assets.pipeline.upsert.upsert import build_bucketed, merge_base

        def action() -> None:
            began = time.perf_counter()
            built = build_bucketed(self.spark, self.bench.catalog, self.bench.iceberg(), self.spec)
            run.steps["build_bucketed"] = time.perf_counter() - began
            if self.bench.args.explain:  # the plan merge_base will run, after the build
                from cdc_assets.pipeline.upsert.upsert import PLACEHOLDER_CONNECTORS
                from cdc_assets.sql.upsert import render_base_merge

                sql = render_base_merge(
                    self.spec,
                    self.ids["base"],
                    self.ids["bucketed"],
                    keep_unavailable=self.spec.source.connector in PLACEHOLDER_CONNECTORS,
                )
                print(self.spark.sql(f"EXPLAIN {sql}").collect()[0][0], file=sys.stderr)
            began = time.perf_counter()
            merged = merge_base(
                self.spark, self.bench.catalog, self.bench.iceberg(), self.spec, prune=prune
            )
            run.steps["merge_base"] = time.perf_counter() - began
            run.rows_in = built.rows
            if not merged.applied:
                raise RuntimeError(f"merge_base did not apply: {merged}")
            sp = merged.storage_partitioned
            run.base_shuffled = None if sp is None else not sp

        return action

    def run_pyiceberg(self, run: Run) -> Callable[[], None]:
        """The newest change per key, deletes left out, as Arrow in the base's schema."""
        from cdc_assets.sql.ddl import quote

        began = time.perf_counter()
        cols = ", ".join(quote(c) for c in self.base_columns)
        newest = self.spark.sql(
            f"SELECT {cols} FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY id ORDER BY "
            f"_seq_major DESC, _seq_minor DESC, _seq_row DESC, _kafka_partition DESC, "
            f"_kafka_offset DESC) AS rn FROM {self.ids['ledger']} "
            f"WHERE _kafka_partition = 0 AND _kafka_offset >= {self.rows}) "
            f"WHERE rn = 1 AND _op <> 'd'"
        ).toArrow()
        table = self.load("base")
        batch = newest.cast(table.schema().as_arrow())
        run.prep_s = time.perf_counter() - began
        run.rows_in = batch.num_rows

        def action() -> None:
            result = table.upsert(batch)
            run.steps["rows_updated"] = float(result.rows_updated)
            run.steps["rows_inserted"] = float(result.rows_inserted)

        return action

    def measure(self, case: str, workload: Workload) -> Run:
        run = Run(case, workload.changed)
        self.reset()
        try:
            prepare = {
                PLAIN: self.run_plain,
                OURS: self.run_ours,
                PYICEBERG: self.run_pyiceberg,
                OURS_UNPRUNED: lambda run: self.run_ours(run, prune=False),
            }
            action = prepare[case](run)
            before = self.snapshot_ids()
            first_sql = last_execution_id(self.spark)
            began = time.perf_counter()
            with Peaks(self.bench.jvm_pid) as peaks:
                try:
                    action()
                finally:
                    run.seconds = time.perf_counter() - began
            run.sql_executions = (first_sql, last_execution_id(self.spark))
            run.jvm_rss, run.py_rss = peaks.jvm_rss, peaks.py_rss
            run.own_cpu_s, run.other_cpu_s = peaks.own_cpu_s, peaks.other_cpu_s
            run.written = self.written_since(before)
            got = self.check_of(self.ids["base"])
            run.check = asdict(got)
            want = workload.expected_pyiceberg if case == PYICEBERG else workload.expected
            run.ok = got.same(want)
            if not run.ok:
                run.problem = f"base {got} != expected {want}"
        except Exception as exc:
            run.error = short_error(exc)
        finally:
            try:
                self.reset()
            except Exception as exc:
                run.error = run.error or f"reset failed: {short_error(exc)}"
        return run


# --- report ----------------------------------------------------------------------------------


def summarise(runs: list[Run]) -> dict[str, Any]:
    ok = [r for r in runs if r.error is None]
    first = ok[0] if ok else runs[0]
    return {
        "case": runs[0].case,
        "changed": runs[0].changed,
        "seconds": statistics.median(r.seconds for r in ok) if ok else None,
        "prep_s": statistics.median(r.prep_s for r in ok) if ok else None,
        # per step, the median over the runs (the first run alone is often the slowest)
        "steps": {
            k: statistics.median(r.steps[k] for r in ok if k in r.steps) for k in first.steps
        },
        "written": first.written,
        "data_files_written": sum(t["added-data-files"] for t in first.written.values()),
        "delete_files_written": sum(t["added-delete-files"] for t in first.written.values()),
        "bytes_written": sum(t["added-files-size"] for t in first.written.values()),
        "base_shuffled": first.base_shuffled,
        "rows_in": first.rows_in,
        "verified": all(r.ok for r in runs),
        "problem": next((r.problem for r in runs if r.problem), None),
        "error": next((r.error for r in runs if r.error), None),
        "jvm_rss_peak": max(r.jvm_rss for r in runs),
        "py_rss_peak": max(r.py_rss for r in runs),
        "own_cpu_s": statistics.median(r.own_cpu_s for r in runs),
        "other_cpu_s": statistics.median(r.other_cpu_s for r in runs),
        "runs": [asdict(r) for r in runs],
    }


def mib(value: float) -> str:
    return f"{value / 2**20:,.0f}"


def ratios_for(rows: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    out: dict[str, dict[str, float | None]] = {}
    for changed in sorted({r["changed"] for r in rows}):
        by = {r["case"]: r["seconds"] for r in rows if r["changed"] == changed}
        b, a, c = by.get(OURS), by.get(PLAIN), by.get(PYICEBERG)
        out[f"{changed:g}"] = {
            "b_over_a": b / a if a and b else None,
            "b_over_c": b / c if c and b else None,
        }
    return out


def print_report(
    args: argparse.Namespace,
    workloads: list[Workload],
    rows: list[dict[str, Any]],
    ratios: dict[str, dict[str, float | None]],
    info: dict[str, Any],
) -> None:
    print(
        f"\nUpsert into a base of {args.rows:,} `users` rows ({args.buckets} buckets), each "
        f"changed key changed twice, {DELETE_SHARE:.0%} of them ending in a delete; Spark "
        f"local[2], driver memory {args.driver_memory}, shuffle partitions "
        f"{info['shuffle_partitions']}, median of {args.repeats}"
        + (f", {' '.join(args.spark_conf)}" if args.spark_conf else "")
        + f"\ncode: {info['code']}\n"
    )
    header = (
        f"{'changed':>8}{'keys':>9}{'case':>18}{'seconds':>9}{'prep s':>8}{'files':>7}"
        f"{'del files':>10}{'MiB written':>12}{'base shuffled':>14}{'verified':>9}"
        f"{'JVM RSS MiB':>12}{'py RSS MiB':>11}{'CPU-s ours':>11}{'CPU-s other':>12}"
    )
    print(header)
    print("-" * len(header))
    for w in workloads:
        for r in (r for r in rows if r["changed"] == w.changed):
            secs = f"{r['seconds']:>9.1f}" if r["seconds"] is not None else f"{'FAILED':>9}"
            prep = f"{r['prep_s']:>8.1f}" if r["case"] == PYICEBERG and r["prep_s"] else f"{'':>8}"
            shuffled = {None: "-", True: "yes", False: "no"}[r["base_shuffled"]]
            print(
                f"{w.changed:>8.0%}{w.keys:>9,}{r['case']:>18}{secs}{prep}"
                f"{r['data_files_written']:>7}{r['delete_files_written']:>10}"
                f"{mib(r['bytes_written']):>12}{shuffled:>14}{'yes' if r['verified'] else 'NO':>9}"
                f"{mib(r['jvm_rss_peak']):>12}{mib(r['py_rss_peak']):>11}"
                f"{r['own_cpu_s']:>11.1f}{r['other_cpu_s']:>12.1f}"
            )
            if r["error"] or r["problem"]:
                print(f"{'':>17}{r['error'] or r['problem']}")
    print("\nratios (seconds; targets: b/a <= 0.5, b/c <= 1.0)")
    for w in workloads:
        ratio = ratios[f"{w.changed:g}"]
        parts = []
        for name, target in (("b_over_a", 0.5), ("b_over_c", 1.0)):
            value = ratio[name]
            if value is None:
                parts.append(f"{name.replace('_over_', '/')} -")
            else:
                mark = "met" if value <= target else "MISSED"
                parts.append(f"{name.replace('_over_', '/')} {value:.2f} ({mark})")
        print(f"  {w.changed:>5.0%} changed: " + ", ".join(parts))
    ours = [r for r in rows if r["case"] == OURS and r["seconds"] is not None]
    if ours:
        print(
            "\ncdc_upsert steps (s): "
            + "; ".join(
                f"{r['changed']:.0%}: build_bucketed {r['steps'].get('build_bucketed', 0):.1f} + "
                f"merge_base {r['steps'].get('merge_base', 0):.1f}"
                for r in ours
            )
        )
    print(
        f"\nsetup (not measured above): base of {args.rows:,} rows written in "
        f"{info['base_write_s']:.1f}s ({info['base_files']['data_files']} data files, "
        f"{mib(info['base_files']['bytes'])} MiB); ledgers: "
        + ", ".join(
            f"{w.changed:.0%} {w.ledger_rows:,} rows ({w.deletes:,} deletes) {w.seconds:.1f}s"
            for w in workloads
        )
    )
    print(
        f"spark start {info['spark_start_s']:.1f}s, warm-up {info['warmup_s']:.1f}s; load average "
        f"{info['load_average_before'][0]:.2f} before, {info['load_average_after'][0]:.2f} after "
        f"({os.cpu_count()} CPUs)"
    )
    print(
        "\n'files' / 'del files' / 'MiB written' = data files, delete files and bytes added by the"
        "\nrun's commits to every table (cdc_upsert: bucketed temp + tombstones + base)."
        "\n'prep s' = pyiceberg only: reading its change batch out of Spark into Arrow, outside"
        "\n'seconds'. 'base shuffled' = an Exchange between the scan of base and the join."
        "\n'verified' = base's count, distinct keys and checksum equal the expected base built"
        "\nfrom the generator (pyiceberg: plus the deleted keys' original rows, it cannot delete)."
        "\n'CPU-s other' = CPU seconds of everything else on the machine during the run."
    )


def write_plot(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot written", file=sys.stderr)
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {
        PLAIN: ("#888888", "o", "(a) plain MERGE, ROW_NUMBER"),
        OURS: ("#1f77b4", "s", "(b) bucketed + SPJ MERGE (ours)"),
        PYICEBERG: ("#ff7f0e", "^", "(c) pyiceberg upsert (no deletes)"),
    }
    for case, (color, marker, label) in styles.items():
        points = sorted(
            (r["changed"] * 100, r["seconds"], r["bytes_written"])
            for r in rows
            if r["case"] == case and r["seconds"] is not None
        )
        if not points:
            continue
        xs = [p[0] for p in points]
        left.plot(xs, [p[1] for p in points], marker=marker, color=color, label=label)
        for x, y, _ in points:
            left.annotate(
                f"{y:.1f}s", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8
            )
        right.plot(xs, [p[2] / 2**20 for p in points], marker=marker, color=color, label=label)
    for ax in (left, right):
        ax.set_xlabel("% of keys changed (each twice)")
        ax.grid(alpha=0.3)
    left.set_ylabel("wall seconds")
    left.set_ylim(bottom=0)
    left.set_title(f"Upsert time, base {args.rows:,} users rows, local[2]")
    right.set_ylabel("MiB written (all tables)")
    right.set_ylim(bottom=0)
    right.set_title("Bytes written per run")
    left.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.results_dir / "upsert_merge.png", dpi=120)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--changed", default="0.01,0.05,0.2", help="fractions of keys changed")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--buckets", type=int, default=None, help="default: the users spec's")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--driver-memory", default="2g", help="SparkResource's default: 2g")
    parser.add_argument(
        "--shuffle-partitions", type=int, default=None, help="default: SparkResource's"
    )
    parser.add_argument("--cases", default="a,b,c", help="subset of a (plain), b (ours), c")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--no-warmup", action="store_true")
    parser.add_argument("--explain", action="store_true", help="print the MERGE plans")
    parser.add_argument(
        "--results-dir", type=Path, default=RESULTS, help="where the JSON and PNG go"
    )
    args = parser.parse_args()
    args.changed = [float(x) for x in args.changed.split(",") if x.strip()]
    try:
        args.cases = [SHORT.get(c.strip(), c.strip()) for c in args.cases.split(",") if c.strip()]
    except KeyError:
        parser.error("--cases takes a subset of a, b, c")
    if not args.cases or set(args.cases) - set(CASES):
        parser.error("--cases takes a subset of a, b, c")
    args.cases = [c for c in CASES if c in args.cases]
    if PYICEBERG in args.cases and importlib.util.find_spec("pyiceberg_core") is None:
        parser.error(
            "pyiceberg_upsert writes into bucket-partitioned base and needs pyiceberg-core: "
            "pip install 'pyiceberg[pyiceberg-core]==0.12.0' (or leave it out: --cases a,b)"
        )
    return args


def main() -> None:
    args = parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    from cdc_assets.spec import load_spec
    from cdc_assets_dev.stack.local_stack import stack_down, stack_up

    tmp = Path(tempfile.mkdtemp(prefix="cdc-upsert-bench-"))
    settings = None
    bench: Bench | None = None
    info: dict[str, Any] = {"code": code_version(), "load_average_before": os.getloadavg()}
    workloads: list[Workload] = []
    measured: dict[tuple[float, str], list[Run]] = {}
    try:
        settings = make_home(tmp)
        stack_up(settings)
        spec = load_spec(ROOT / "table_specs" / "users.yaml")
        args.buckets = args.buckets or spec.base.buckets
        bench = Bench(settings, args)
        began = time.perf_counter()
        bench.start_spark()
        info["spark_start_s"] = time.perf_counter() - began
        info["shuffle_partitions"] = bench.spark.conf.get("spark.sql.shuffle.partitions")
        info["aqe"] = bench.spark.conf.get("spark.sql.adaptive.enabled")
        scratch = tmp / "scratch"
        scratch.mkdir()

        began = time.perf_counter()
        if not args.no_warmup:
            warm_rows = min(WARMUP_ROWS, args.rows)
            warm = Table(
                bench, isolated(spec, "bench_warmup", args.buckets), warm_rows, args.seed, scratch
            )
            warm.create()
            warm_work = warm.write_ledger(WARMUP_CHANGED)
            for case in args.cases:
                run = warm.measure(case, warm_work)
                if run.error or not run.ok:
                    raise RuntimeError(f"warm-up {case} failed: {run.error or run.problem}")
        info["warmup_s"] = time.perf_counter() - began
        print(
            f"  spark start {info['spark_start_s']:.1f}s, warm-up {info['warmup_s']:.1f}s",
            file=sys.stderr,
        )

        table = Table(
            bench,
            isolated(spec, f"bench_{uuid.uuid4().hex[:6]}", args.buckets),
            args.rows,
            args.seed,
            scratch,
        )
        info["base_write_s"] = table.create()
        info["base_files"] = table.base_files()
        info["base_check"] = asdict(table.check_of(table.ids["base"]))
        print(
            f"  base of {args.rows:,} rows written in {info['base_write_s']:.1f}s "
            f"{info['base_files']}",
            file=sys.stderr,
        )
        for changed in args.changed:
            work = table.write_ledger(changed)
            workloads.append(work)
            print(
                f"  ledger {changed:.0%}: {work.keys:,} keys, {work.ledger_rows:,} rows, "
                f"{work.deletes:,} deletes ({work.seconds:.1f}s)",
                file=sys.stderr,
            )
            for case in args.cases:
                for i in range(args.repeats):
                    run = table.measure(case, work)
                    measured.setdefault((changed, case), []).append(run)
                    print(
                        f"  measured {changed:.0%} {case} {i + 1}: {run.seconds:.1f}s "
                        f"ok={run.ok} {run.error or run.problem or ''}",
                        file=sys.stderr,
                    )
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

    rows = [summarise(runs) for runs in measured.values()]
    ratios = ratios_for(rows)
    print_report(args, workloads, rows, ratios, info)
    problems = [
        f"{r['changed']:.0%} {r['case']}: {r['error'] or r['problem']}"
        for r in rows
        if r["error"] or not r["verified"]
    ]
    args.results_dir.mkdir(parents=True, exist_ok=True)
    out = args.results_dir / "upsert_merge.json"
    document = {
        "rows": args.rows,
        "changed": args.changed,
        "delete_share": DELETE_SHARE,
        "changes_per_key": 2,
        "buckets": args.buckets,
        "repeats": args.repeats,
        "driver_memory": args.driver_memory,
        "spark_conf": args.spark_conf,
        "spark_master": "local[2]",
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        **info,
        "workloads": [asdict(w) for w in workloads],
        "results": rows,
        "ratios": ratios,
        "targets": {"b_over_a_max": 0.5, "b_over_c_max": 1.0},
        "pyiceberg_reference_design_md": {
            "1M_rows_49k_keys_s": 4.0,
            "5M_rows_244k_keys_s": 25.2,
        },
        "problems": problems,
    }
    out.write_text(json.dumps(document, indent=2, default=str) + "\n")
    write_plot(rows, args)
    print(f"\nwrote {out} and upsert_merge.png")
    if problems:
        raise SystemExit("problems:\n  " + "\n  ".join(problems))


if __name__ == "__main__":
    main()
