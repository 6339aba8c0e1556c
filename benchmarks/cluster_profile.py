"""Benchmark: the cluster profile (issue 21, part 6) against a `local[2]` driver, same data, same
script.

One stack of its own with the cluster profile (`stack up --cluster`: a Spark standalone master and
two one-core workers driven by the Spark Connect server, the REST catalog over the JDBC catalog
on PostgreSQL (``CDC_ASSETS_CLUSTER_CATALOG=jdbc``: that catalog directly), the warehouse in the
S3 object store). Both profiles read the same topic into their own catalogs:

- ``local[2]``: a driver of its own in the run's process, the embedded SQLite catalog and a
  warehouse directory (the defaults, as `make run` uses them);
- ``cluster``: the run is a thin Connect client; the work runs on the workers' executors.

Per profile, in one run process of its own for the whole benchmark (as a deployment's long-lived
driver; its session warmed by the onboarding first): one large
ingest and upsert (throughput), then ``--small`` rounds of a small batch each (end-to-end
freshness of a batch: from the batch in Kafka to base committed, one ingest and one upsert run).
Where the time goes, per run: Spark jobs, tasks and task run time (Spark's REST API), catalog
transactions (PostgreSQL's ``pg_stat_database``), and S3 requests by operation (the object store's
access log).

Prints a table, writes ``benchmarks/results/cluster_profile.json`` and ``.png``.

    python benchmarks/cluster_profile.py [--events 100000] [--keys 10000] [--small 3]
        [--small-events 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import ROOT, code_version, make_home

RESULTS = ROOT / "benchmarks" / "results"
PROFILES = ("local[2]", "cluster")
LOCAL_UI_PORT = 4077

# One run process: the phases named on the command line, each timed, with the Spark REST API's
# job and task figures around each (the driver's UI: the run's own, or the Connect server's).
CHILD = r"""
import json, sys, time, urllib.request
from datetime import UTC, datetime
import dagster as dg
from cdc_assets.definitions import build_defs
from cdc_assets.resources import build_resources
from cdc_assets.settings import load_settings
from cdc_assets.spec.models import TableSpec

spec = TableSpec.model_validate_json(open(sys.argv[1]).read())
ui = sys.argv[2]
settings = load_settings()
resources = build_resources(settings)
if resources["spark"].remote is None:
    resources["spark"] = resources["spark"].model_copy(update={
        "ui_enabled": True,
        "extra_conf": {"spark.ui.port": ui, "spark.ui.showConsoleProgress": "false"},
    })
defs = build_defs(specs=[spec], settings=settings, resource_overrides=resources)
resources["spark"].get_session()  # start (or reach) the driver before anything is timed

def spark_figures():
    base = f"http://127.0.0.1:{ui}/api/v1/applications"
    with urllib.request.urlopen(base, timeout=30) as r:
        app = json.loads(r.read())[0]["id"]
    with urllib.request.urlopen(f"{base}/{app}/stages?status=complete", timeout=60) as r:
        stages = json.loads(r.read())
    with urllib.request.urlopen(f"{base}/{app}/jobs", timeout=60) as r:
        jobs = json.loads(r.read())
    return {
        "jobs": len(jobs),
        "tasks": sum(s["numCompleteTasks"] for s in stages),
        "task_run_s": sum(s["executorRunTime"] for s in stages) / 1000,
    }

JOBS = {"onboard": "onboard_tables", "ingest": "ingest_ledgers", "upsert": "upsert_bases"}

# Phases arrive one batch per stdin line ("ingest,upsert"); one JSON line answers each. The run
# process lives for the whole benchmark, as a deployment's driver does (warm code paths).
with dg.instance_for_test() as instance:
    for line in sys.stdin:
        out = {}
        for phase in line.strip().split(","):
            job = JOBS[phase]
            hour = datetime.now(UTC).strftime("%Y-%m-%d-%H:00")
            kwargs = {"partition_key": hour} if phase == "ingest" else {}
            before = spark_figures()
            t0 = time.perf_counter()
            job_def = defs.resolve_job_def(job)
            result = job_def.execute_in_process(instance=instance, **kwargs)
            wall = time.perf_counter() - t0
            after = spark_figures()
            assert result.success
            out[phase] = {"wall_s": wall, **{k: after[k] - before[k] for k in before}}
        print(json.dumps(out), flush=True)
"""


class Child:
    """A run process of one profile, alive for the whole benchmark; ``run`` sends it phases."""

    def __init__(self, settings: Any, profile: str, spec_file: Path) -> None:
        env = {**os.environ, "CDC_ASSETS_HOME": str(settings.home)}
        if profile == "local[2]":
            ui = str(LOCAL_UI_PORT)
            env["CDC_ASSETS_SPARK_MASTER"] = "local[2]"
            env["CDC_ASSETS_CATALOG_URI"] = f"jdbc:sqlite:{settings.local_catalog_file}"
            env["CDC_ASSETS_WAREHOUSE"] = settings.local_warehouse.as_uri()
        else:
            from cdc_assets.local_servers import state as stack_state

            ui = str(stack_state.section(settings, "spark_connect")["ui"])
        self.profile = profile
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(spec_file), ui],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def run(self, phases: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(phases + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"{self.profile} {phases}: the run process died (see stderr above)")
        result: dict[str, Any] = json.loads(line)
        return result

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(120)


def catalog_transactions(settings: Any) -> int:
    from cdc_assets_dev.stack import catalog_server, sources

    out = sources.postgres_execute(
        settings,
        f"SELECT xact_commit + xact_rollback FROM pg_stat_database "
        f"WHERE datname = '{catalog_server.DATABASE}';",
    )
    return int(out.split()[0])


def s3_requests(settings: Any) -> Counter[str]:
    """Requests so far by S3 operation, from the gateway's access log."""
    from cdc_assets_dev.stack import object_store

    counts: Counter[str] = Counter()
    log = object_store.access_log(settings)
    if not log.exists():
        return counts
    # S3 server access log lines: the operation is the field that starts with "s3_".
    for line in log.read_text(errors="replace").splitlines():
        operation = next((f for f in line.split(" ") if f.startswith("s3_")), None)
        if operation is not None:
            counts[operation.removeprefix("s3_")] += 1
    return counts


def measured(settings: Any, child: Child, phases: str) -> dict[str, Any]:
    """child.run, with the catalog transactions and S3 requests it caused (cluster only)."""
    if child.profile != "cluster":
        return child.run(phases)
    tx0, s30 = catalog_transactions(settings), s3_requests(settings)
    result = child.run(phases)
    tx1, s31 = catalog_transactions(settings), s3_requests(settings)
    result["catalog_transactions"] = tx1 - tx0
    result["s3_requests"] = dict((s31 - s30).most_common())
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--small", type=int, default=5, help="small rounds (freshness)")
    parser.add_argument("--small-events", type=int, default=2_000)
    args = parser.parse_args()

    from cdc_assets.spec import load_specs
    from cdc_assets_dev.demo.events import produce, workload
    from cdc_assets_dev.stack.local_stack import stack_down, stack_up

    base = Path(tempfile.mkdtemp(prefix="cdc-bench-cluster-"))
    base.chmod(0o711)  # PostgreSQL runs as its own system user under root
    settings = make_home(base)
    try:
        print("starting the cluster profile (stack up --cluster) ...", flush=True)
        from cdc_assets_dev.stack.object_store import ENV_ACCESS_LOG

        os.environ[ENV_ACCESS_LOG] = "1"  # the S3 requests are counted from its access log
        state = stack_up(settings, cluster=True)
        spec = next(s for s in load_specs(ROOT / "table_specs") if s.name == "orders")
        topic = f"bench.orders.{int(time.time())}"
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": state.bootstrap_servers})
        admin.create_topics([NewTopic(topic, num_partitions=4, replication_factor=1)])[
            topic
        ].result(30)
        spec = spec.model_copy(update={"source": spec.source.model_copy(update={"topic_": topic})})
        spec_file = base / "spec.json"
        spec_file.write_text(spec.model_dump_json(by_alias=True), encoding="utf-8")
        rng = random.Random(21)

        children = {p: Child(settings, p, spec_file) for p in PROFILES}
        for profile in PROFILES:
            print(f"{profile}: onboarding", flush=True)
            measured(settings, children[profile], "onboard")
        print(f"producing {args.events:,} events over {args.keys:,} keys", flush=True)
        produce(
            workload(spec, rng, keys=args.keys, events=args.events), topic, state.bootstrap_servers
        )
        rows: dict[str, dict[str, Any]] = {p: {"small": []} for p in PROFILES}
        for profile in PROFILES:
            print(f"{profile}: large batch", flush=True)
            rows[profile]["large"] = measured(settings, children[profile], "ingest,upsert")
        for n in range(args.small):
            produce(
                workload(spec, rng, keys=args.keys, events=args.small_events),
                topic,
                state.bootstrap_servers,
            )
            for profile in PROFILES:
                print(f"{profile}: small batch {n + 1}/{args.small}", flush=True)
                rows[profile]["small"].append(
                    measured(settings, children[profile], "ingest,upsert")
                )
        for child in children.values():
            child.close()
        verify(settings, spec)
        report(rows, args)
    finally:
        stack_down(settings, purge=True)
        shutil.rmtree(base, ignore_errors=True)


def verify(settings: Any, spec: Any) -> None:
    """Both profiles' bases hold the same rows (the comparison is worthless otherwise)."""
    from dataclasses import replace

    from cdc_assets.resources import build_resources
    from cdc_assets.schema.layers import base_layout

    layout = base_layout(spec)
    local = replace(
        settings,
        catalog_uri=f"jdbc:sqlite:{settings.local_catalog_file}",
        warehouse=settings.local_warehouse.as_uri(),
    )
    tables = []
    for s in (local, settings):
        catalog = build_resources(s)["iceberg"].load_catalog()
        arrow = catalog.load_table(f"{layout.namespace}.{layout.name}").scan().to_arrow()
        tables.append(sorted(repr(sorted(row.items())) for row in arrow.to_pylist()))
    if tables[0] != tables[1]:
        raise SystemExit("the two profiles' bases differ: the benchmark is void")
    print(f"both bases hold the same {len(tables[0]):,} rows", flush=True)


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(rows: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    summary: dict[str, dict[str, float]] = {}
    for profile, r in rows.items():
        large = r["large"]
        small = r["small"]
        summary[profile] = {
            "ingest_events_per_s": args.events / large["ingest"]["wall_s"],
            "ingest_s": large["ingest"]["wall_s"],
            "upsert_s": large["upsert"]["wall_s"],
            "freshness_s": _median([s["ingest"]["wall_s"] + s["upsert"]["wall_s"] for s in small]),
            "small_tasks": _median([s["ingest"]["tasks"] + s["upsert"]["tasks"] for s in small]),
            "small_jobs": _median([s["ingest"]["jobs"] + s["upsert"]["jobs"] for s in small]),
            "small_task_run_s": _median(
                [s["ingest"]["task_run_s"] + s["upsert"]["task_run_s"] for s in small]
            ),
        }
        if profile == "cluster":
            summary[profile]["small_catalog_tx"] = _median(
                [s["catalog_transactions"] for s in small]
            )
            summary[profile]["small_s3_requests"] = _median(
                [sum(s["s3_requests"].values()) for s in small]
            )
    local, cluster = summary["local[2]"], summary["cluster"]
    print()
    print(f"{'':28}{'local[2]':>12}{'cluster':>12}{'cluster/local':>15}")
    for key, label in [
        ("ingest_events_per_s", f"ingest, {args.events:,} events/s"),
        ("ingest_s", "ingest s"),
        ("upsert_s", "upsert s"),
        ("freshness_s", f"batch of {args.small_events:,}: s"),
        ("small_jobs", "  Spark jobs"),
        ("small_tasks", "  Spark tasks"),
        ("small_task_run_s", "  task run time s"),
    ]:
        ratio = cluster[key] / local[key] if local[key] else float("nan")
        print(f"{label:28}{local[key]:>12.1f}{cluster[key]:>12.1f}{ratio:>15.2f}")
    print(
        f"cluster, per small batch: {cluster['small_catalog_tx']:.0f} catalog transactions, "
        f"{cluster['small_s3_requests']:.0f} S3 requests"
    )
    ops = rows["cluster"]["small"][-1]["s3_requests"]
    print(
        "  S3 requests of the last batch by operation: "
        + ", ".join(f"{k} {v}" for k, v in ops.items())
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {"code": code_version(), "args": vars(args), "summary": summary, "runs": rows}
    (RESULTS / "cluster_profile.json").write_text(json.dumps(payload, indent=2))
    plot(summary, args)


def plot(summary: dict[str, dict[str, float]], args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = [
        ("ingest_events_per_s", f"ingest of {args.events:,}\nevents/s"),
        ("upsert_s", "upsert after it\ns"),
        ("freshness_s", f"batch of {args.small_events:,}\ningest + upsert s"),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.2))
    for ax, (key, title) in zip(axes, metrics, strict=True):
        values = [summary[p][key] for p in PROFILES]
        ax.bar(list(PROFILES), values, color=["#4c72b0", "#dd8452"])
        ax.set_title(title, fontsize=9)
    fig.suptitle(
        "cluster profile (2 one-core workers, PostgreSQL catalog, S3) vs local[2]", fontsize=10
    )
    fig.tight_layout()
    fig.savefig(RESULTS / "cluster_profile.png", dpi=110)


if __name__ == "__main__":
    main()
