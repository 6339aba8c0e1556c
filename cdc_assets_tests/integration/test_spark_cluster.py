"""The cluster profile of the local stack (issues 21, 56): a Spark standalone master and two
workers from the installed pyspark, the stack's Spark Connect server as their driver, an Iceberg
REST catalog server over Iceberg's JDBC catalog on the stack's PostgreSQL, and the warehouse in an
S3 object store. Dagster's jobs run in a process of their own, as the daemon would start them;
base is compared with the plain-Python replay after every fault: a worker killed mid-ingest and
mid-MERGE, the object store, the REST server and its PostgreSQL stopped mid-run, wrong
credentials (object store, REST token), the Connect server restarted between runs.

One cluster for the module, on a home of its own (its own broker, PostgreSQL and object store),
torn down afterwards; the session's stack keeps its embedded catalog.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cdc_assets.local_servers import state as stack_state
from cdc_assets.resources import IcebergCatalogResource, KafkaResource, build_resources
from cdc_assets.schema.layers import base_layout, ledger_layout
from cdc_assets.settings import ENV_HOME, Settings
from cdc_assets.spec import load_specs
from cdc_assets.spec.models import TableSpec
from cdc_assets_dev.demo.events import produce, workload
from cdc_assets_dev.stack import (
    catalog_server,
    local_process,
    object_store,
    rest_catalog,
    sources,
    spark_cluster,
    spark_connect,
)
from cdc_assets_dev.stack.local_stack import (
    cluster_catalog_properties,
    stack_down,
    stack_status,
    stack_up,
)
from cdc_assets_tests.conftest import PROJECT_ROOT
from cdc_assets_tests.integration.conftest import make_home
from cdc_assets_tests.integration.test_ingest import consume_all, isolated, read_table
from cdc_assets_tests.integration.test_upsert import (
    assert_base_matches,
    example_spec,
    expected_base,
)
from cdc_assets_tests.support.oracle import expected_outcome

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def cluster_home() -> Iterator[Settings]:
    # PostgreSQL runs as the `postgres` system user under root: a home others may traverse.
    base = Path(tempfile.mkdtemp(prefix="cdc-cluster-"))
    base.chmod(0o711)
    settings = make_home(base / "home")
    try:
        stack_up(settings, cluster=True)
        yield settings
    finally:
        try:
            stack_down(settings, purge=True)
        finally:
            shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(cluster_home: Settings) -> spark_cluster.Cluster:
    found = spark_cluster.running(cluster_home)
    assert found is not None
    return found


@pytest.fixture(scope="module")
def lake(cluster_home: Settings) -> tuple[KafkaResource, IcebergCatalogResource]:
    resources = build_resources(cluster_home)
    return resources["kafka"], resources["iceberg"]


# A Dagster run's process: definitions built from the home in the environment, whose resources
# find the Connect server, the catalog server and the object store in the stack's state.
RUN = """
import json, sys
from datetime import UTC, datetime
import dagster as dg
from cdc_assets.definitions import build_defs
from cdc_assets.pipeline.shared.session_kind import is_connect
from cdc_assets.resources import build_resources
from cdc_assets.settings import load_settings
from cdc_assets.spec import load_specs
from cdc_assets.spec.models import TableSpec

spec = TableSpec.model_validate_json(open(sys.argv[1]).read())
settings = load_settings()
resources = build_resources(settings)
defs = build_defs(specs=[spec], settings=settings, resource_overrides=resources)
hour = datetime.now(UTC).strftime("%Y-%m-%d-%H:00")
out = {"remote": resources["spark"].remote, "catalog": resources["iceberg"].uri}
resources["spark"].get_session()  # its executor probe runs here, before the first phase
with dg.instance_for_test() as instance:
    for phase in sys.argv[2].split(","):
        if len(sys.argv) > 3:  # where the test watches which phase runs
            open(sys.argv[3], "w").write(phase)
        job = {"onboard": "onboard_tables", "ingest": "ingest_ledgers", "upsert": "upsert_bases"}
        kwargs = {"partition_key": hour} if phase == "ingest" else {}
        result = defs.resolve_job_def(job[phase]).execute_in_process(
            instance=instance, raise_on_error=False, **kwargs
        )
        out[phase] = result.success
        if not result.success:
            failures = [e for e in result.all_events if e.is_failure]
            error = failures[0].event_specific_data.error if failures else None
            chain = []
            while error is not None:
                chain.append(error.message.strip()[:1000])
                error = error.cause
            out["error"] = " <- ".join(chain[1:] or chain) or "?"
            break
session = resources["spark"].get_session()
out["connect"] = is_connect(session)
session.stop()
print(json.dumps(out))
"""


def run_phases(
    settings: Settings, spec: TableSpec, phases: str, tmp_path: Path, progress: Path | None = None
) -> dict[str, Any]:
    """Run ``phases`` (onboard, ingest, upsert) in a process of their own; their outcomes.
    The process writes the phase it starts into ``progress``, when given."""
    spec_file = tmp_path / f"spec-{spec.name}.json"
    spec_file.write_text(spec.model_dump_json(by_alias=True), encoding="utf-8")
    watch = [str(progress)] if progress is not None else []
    proc = subprocess.run(
        [sys.executable, "-c", RUN, str(spec_file), phases, *watch],
        cwd=PROJECT_ROOT,
        env={**os.environ, ENV_HOME: str(settings.home)},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def _app_url(settings: Settings) -> str:
    ui = stack_state.section(settings, "spark_connect")["ui"]
    (app,) = _get(f"http://127.0.0.1:{ui}/api/v1/applications")
    return f"http://127.0.0.1:{ui}/api/v1/applications/{app['id']}"


def _busy_executor(settings: Settings) -> str | None:
    for executor in _get(_app_url(settings) + "/executors"):
        if executor["id"] != "driver" and executor["activeTasks"] > 0:
            return str(executor["id"])
    return None


def during_run(
    settings: Settings,
    spec: TableSpec,
    phases: str,
    tmp_path: Path,
    fault: Callable[[str], None],
) -> dict[str, Any]:
    """Run ``phases`` and call ``fault(executor id)`` once an executor runs a task of the run's
    ingest or upsert (not of onboarding: its DDL runs jobs too, and so does the session's
    executor probe)."""
    outcome: dict[str, Any] = {}
    progress = tmp_path / "phase"
    progress.write_text("", encoding="utf-8")
    runner = threading.Thread(
        target=lambda: outcome.update(run_phases(settings, spec, phases, tmp_path, progress)),
        daemon=True,
    )
    runner.start()
    busy = None
    deadline = time.monotonic() + 300
    while busy is None and runner.is_alive() and time.monotonic() < deadline:
        if progress.read_text(encoding="utf-8") in ("ingest", "upsert"):
            busy = _busy_executor(settings)
        time.sleep(0.1)
    assert busy is not None, "no executor ran a task of the run: no moment for the fault"
    fault(busy)
    runner.join(900)
    assert not runner.is_alive()
    return outcome


def assert_ledger_exact(spec: TableSpec, iceberg: IcebergCatalogResource, kafka: Any) -> None:
    """Every record the oracle puts in the ledger is there once: nothing lost, nothing twice."""
    want = sorted(
        (p, o)
        for p, o, ts, k, v in consume_all(kafka, spec.source.topic)
        if expected_outcome(spec, p, o, ts, k, v).status == "ledger"
    )
    layout = ledger_layout(spec)
    got = sorted(
        (r["_kafka_partition"], r["_kafka_offset"])
        for r in read_table(iceberg, layout.namespace, layout.name)
    )
    assert got == want


def _fresh(settings: Settings, kafka: KafkaResource) -> TableSpec:
    return isolated(example_spec(settings, "orders"), partitions=2, kafka=kafka)


def _produce(spec: TableSpec, kafka: KafkaResource, seed: int, keys: int, events: int) -> None:
    produce(
        workload(spec, random.Random(seed), keys=keys, events=events),
        spec.source.topic,
        kafka.resolved_bootstrap(),
    )


def test_the_profile_runs_a_cluster_a_rest_catalog_and_an_object_store(
    cluster_home: Settings,
    cluster: spark_cluster.Cluster,
    lake: tuple[KafkaResource, IcebergCatalogResource],
) -> None:
    master = spark_cluster.master_state(cluster.master_ui)
    workers = [w for w in master["workers"] if w["state"] == "ALIVE"]
    assert len(workers) == 2
    assert all(w["cores"] == spark_cluster.WORKER_CORES for w in workers)
    assert all(w["host"] == "127.0.0.1" for w in workers)
    # the Connect server is the cluster's one application
    assert [a["name"] for a in master["activeapps"]] == ["cdc-assets Spark Connect"]
    entry = stack_state.section(cluster_home, "spark_connect")
    assert entry["master"] == cluster.master_url
    _, iceberg = lake
    server = catalog_server.running(cluster_home)
    store = object_store.running(cluster_home)
    rest = rest_catalog.running(cluster_home)
    assert server is not None
    assert store is not None
    assert rest is not None
    assert rest.token
    assert (iceberg.type, iceberg.uri) == ("rest", rest.url)
    assert iceberg.warehouse == "s3://warehouse/"
    # the database credentials stay with the server; the engines hold the token
    properties = iceberg.config().properties
    assert "jdbc.password" not in properties
    assert properties["token"] == rest.token
    # No credential on a command line any user of the machine can read: the Connect driver's
    # configuration (catalog token, object store secret) is in an owner-only properties file.
    driver = local_process.cmdline(int(entry["pid"]))
    assert "--properties-file" in driver
    for secret in (rest.token, store.secret_key):
        assert not [arg for arg in driver if secret in arg]
    server_cmdline = " ".join(
        local_process.cmdline(int(stack_state.section(cluster_home, "rest_catalog")["pid"]))
    )
    assert server.password not in server_cmdline
    rendered = stack_status(cluster_home).render()
    assert f"Spark master {cluster.master_url}, 2 workers" in rendered
    assert f"Iceberg REST catalog at {rest.url} (runs use it)" in rendered
    assert f"shared JDBC catalog {server.jdbc_url} (the REST catalog's backend)" in rendered
    assert f"S3 object store at {store.endpoint}, bucket warehouse" in rendered
    # `stack up` again keeps what runs
    stack_up(cluster_home, cluster=True)
    assert spark_connect.running_port(cluster_home) == entry["port"]


def _outage(stop: Callable[[], None], start: Callable[[], Any], seconds: float) -> Any:
    def fault(_executor: str) -> None:
        stop()
        time.sleep(seconds)
        start()

    return fault


def test_servers_stopped_mid_run_leave_nothing_half_committed(
    cluster_home: Settings,
    cluster: spark_cluster.Cluster,
    lake: tuple[KafkaResource, IcebergCatalogResource],
    tmp_path: Path,
) -> None:
    """The object store stops for 6 s within a run's ingest, then (more changes produced) the
    REST catalog server within the next run, then the PostgreSQL behind it. A run may fail or
    ride an outage out on retries; either way nothing is half committed, and the next run
    converges: base equals the replay and the ledger holds each record once."""
    kafka, iceberg = lake
    spec = _fresh(cluster_home, kafka)

    def start_rest() -> Any:
        server = catalog_server.recorded(cluster_home)
        store = object_store.recorded(cluster_home)
        assert server is not None
        assert store is not None
        backend = cluster_catalog_properties(cluster_home, server, store)
        return rest_catalog.start(cluster_home, backend)

    outages = {
        "object store": (
            lambda: object_store.stop(cluster_home),
            lambda: object_store.start(cluster_home),
        ),
        "REST catalog": (
            lambda: rest_catalog.stop(cluster_home, outage=True),
            start_rest,
        ),
        "catalog database": (
            lambda: sources.stop_postgres(cluster_home),
            lambda: sources.start_postgres(cluster_home),
        ),
    }
    phases = "onboard,ingest,upsert"
    for seed, (server, (stop, start)) in zip((31, 32, 33), outages.items(), strict=True):
        # New changes for each run: it has an ingest (and a first job after the probe) to hit.
        _produce(spec, kafka, seed, keys=400, events=1500)
        began = time.monotonic()
        outcome = during_run(cluster_home, spec, phases, tmp_path, _outage(stop, start, 6))
        # shown with -s: which way the run went, and how long it took
        print(f"{server} outage mid-run ({time.monotonic() - began:.0f} s): {outcome}")
        # A run that failed says why; one that succeeded is already right.
        assert outcome.get("upsert") is True or outcome.get("error"), outcome
        if outcome.get("upsert") is True:
            assert_base_matches(spec, iceberg, expected_base(spec, kafka))
        phases = "ingest,upsert"
    again = run_phases(cluster_home, spec, "ingest,upsert", tmp_path)
    assert again["upsert"] is True, again
    assert_base_matches(spec, iceberg, expected_base(spec, kafka))
    assert_ledger_exact(spec, iceberg, kafka)


def _executor_workers(cluster: spark_cluster.Cluster, settings: Settings) -> dict[str, int]:
    """Executor id -> pid of the worker that runs it (from each worker's JSON status)."""
    pids = [w["pid"] for w in stack_state.section(settings, spark_cluster.SECTION)["workers"]]
    out = {}
    for ui, pid in zip(cluster.worker_uis, pids, strict=True):
        for executor in _get(f"http://127.0.0.1:{ui}/json/").get("executors", []):
            out[str(executor["id"])] = pid
    return out


def test_a_worker_killed_mid_ingest_and_mid_merge_loses_nothing(
    cluster_home: Settings,
    cluster: spark_cluster.Cluster,
    lake: tuple[KafkaResource, IcebergCatalogResource],
    tmp_path: Path,
) -> None:
    """SIGKILL the worker (and the executor it started) that runs a task of the ingest, then,
    once `stack up --cluster` has started it again, the one that runs a task of the upsert's
    MERGE. Spark reschedules on the other worker each time; both runs succeed, the ledger holds
    each record once and base equals the replay."""
    kafka, iceberg = lake
    spec = _fresh(cluster_home, kafka)
    _produce(spec, kafka, 8, keys=400, events=6000)

    for phases, phase in (("onboard,ingest", "ingest"), ("upsert", "upsert")):
        victims: list[str] = []

        def kill(executor: str, victims: list[str] = victims) -> None:
            victims.append(executor)
            os.killpg(_executor_workers(cluster, cluster_home)[executor], signal.SIGKILL)

        # Onboarding (DDL only) runs no executor task: the first kill lands in the ingest.
        outcome = during_run(cluster_home, spec, phases, tmp_path, kill)
        assert outcome[phase] is True, outcome
        executors = _get(_app_url(cluster_home) + "/allexecutors")
        assert victims[0] in [e["id"] for e in executors if not e["isActive"]]
        stack_up(cluster_home, cluster=True)  # the dead worker comes back
        assert spark_cluster.running(cluster_home) is not None
        if phase == "ingest":
            assert_ledger_exact(spec, iceberg, kafka)
    assert_base_matches(spec, iceberg, expected_base(spec, kafka))
    assert_ledger_exact(spec, iceberg, kafka)


# --- bad input: each a ConfigError naming the setting, before anything is written --------------


def _config(iceberg: IcebergCatalogResource, **changes: Any) -> Any:
    from dataclasses import replace

    return replace(iceberg.config(), **changes)


def test_bad_object_store_and_catalog_settings_are_named_before_a_write(
    cluster_home: Settings, lake: tuple[KafkaResource, IcebergCatalogResource]
) -> None:
    from cdc_assets.errors import ConfigError
    from cdc_assets.resources.preflight import check_catalog

    _, iceberg = lake
    good = iceberg.config()
    check_catalog(good)
    wrong_secret = {**good.properties, "s3.secret-access-key": "not-the-secret"}
    with pytest.raises(
        ConfigError, match=r"refused the credentials.*CDC_ASSETS_CATALOG_PROPERTIES"
    ):
        check_catalog(_config(iceberg, properties=wrong_secret))
    with pytest.raises(ConfigError, match=r"bucket 'no-such-bucket' does not exist.*WAREHOUSE"):
        check_catalog(_config(iceberg, warehouse="s3://no-such-bucket/lake"))
    wrong_token = {**good.properties, "token": "not-the-token"}
    with pytest.raises(ConfigError, match=r"answered with an error.*CDC_ASSETS_CATALOG_PROPERTIES"):
        check_catalog(_config(iceberg, properties=wrong_token))
    store = object_store.running(cluster_home)
    server = catalog_server.running(cluster_home)
    assert store is not None
    assert server is not None
    # CDC_ASSETS_CLUSTER_CATALOG=jdbc: the engines open the JDBC catalog behind the server
    jdbc = {**server.properties(), **object_store.catalog_properties(store)}
    check_catalog(_config(iceberg, type="jdbc", uri=server.jdbc_url, properties=jdbc))
    wrong_password = {**jdbc, "jdbc.password": "wrong"}
    with pytest.raises(ConfigError, match=r"answered with an error.*CDC_ASSETS_CATALOG_URI"):
        check_catalog(_config(iceberg, type="jdbc", uri=server.jdbc_url, properties=wrong_password))
    # a URI that answers, but not as a catalog: the object store's S3 API
    with pytest.raises(ConfigError, match="answered with an error"):
        check_catalog(_config(iceberg, type="rest", uri=store.endpoint))
    gone = {**good.properties, "s3.endpoint": "http://127.0.0.1:9"}
    with pytest.raises(ConfigError, match=r"cannot be reached.*s3\.endpoint"):
        check_catalog(_config(iceberg, properties=gone))


def test_a_run_with_wrong_credentials_fails_before_it_writes(
    cluster_home: Settings,
    cluster: spark_cluster.Cluster,
    lake: tuple[KafkaResource, IcebergCatalogResource],
    tmp_path: Path,
) -> None:
    kafka, iceberg = lake
    spec = _fresh(cluster_home, kafka)
    assert run_phases(cluster_home, spec, "onboard", tmp_path)["onboard"] is True
    _produce(spec, kafka, 41, keys=30, events=200)
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(spec.model_dump_json(by_alias=True), encoding="utf-8")
    wrong = {
        "s3.secret-access-key": "refused the credentials",  # the object store's
        "token": "answered with an error",  # the REST catalog's
    }
    for key, expected in wrong.items():
        env = {
            **os.environ,
            ENV_HOME: str(cluster_home.home),
            "CDC_ASSETS_CATALOG_PROPERTIES": json.dumps({key: "wrong-credential"}),
        }
        proc = subprocess.run(
            [sys.executable, "-c", RUN, str(spec_file), "ingest"],
            cwd=PROJECT_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        assert out["ingest"] is False, (key, out)
        assert expected in out["error"], (key, out)
        assert "wrong-credential" not in proc.stdout + proc.stderr
    layout = ledger_layout(spec)
    assert read_table(iceberg, layout.namespace, layout.name) == []
    assert run_phases(cluster_home, spec, "ingest,upsert", tmp_path)["upsert"] is True
    assert_base_matches(spec, iceberg, expected_base(spec, kafka))


PROBE = """
import sys
from pyspark.sql import SparkSession
from cdc_assets.errors import ConfigError
from cdc_assets.resources.preflight import check_executors
session = (
    SparkSession.builder.master(sys.argv[1]).appName("cdc-assets too big")
    .config("spark.executor.memory", "8g").config("spark.driver.host", "127.0.0.1")
    .config("spark.driver.bindAddress", "127.0.0.1").config("spark.ui.enabled", "false")
    .getOrCreate()
)
try:
    check_executors(session, sys.argv[1], timeout=20)
    print("RAN")
except ConfigError as exc:
    print("ERROR", exc)
session.stop()
"""


def test_a_cluster_that_gives_no_executor_is_an_error_not_a_hang(
    cluster: spark_cluster.Cluster,
) -> None:
    """Executors of 8 GiB on workers of 1.5 GiB (and the Connect driver holding every core):
    the probe job is cancelled after its timeout with an error naming the settings."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, cluster.master_url],
        cwd=PROJECT_ROOT,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-3000:]
    assert last.startswith("ERROR"), last
    assert "ran no task in 20 s" in last
    assert "spark.executor.memory" in last


MAINTAIN = """
import json, sys
import dagster as dg
from cdc_assets.definitions import build_defs
from cdc_assets.settings import load_settings
from cdc_assets.spec import load_specs

settings = load_settings()
defs = build_defs(settings=settings)
out = {}
with dg.instance_for_test() as instance:
    for spec in load_specs(settings.specs_dir):
        result = defs.resolve_job_def("maintain_tables").execute_in_process(
            instance=instance,
            run_config={"ops": {"maintain_table": {"config": {"table": spec.name}}}},
            raise_on_error=False,
        )
        out[spec.name] = result.success
        if not result.success:
            failures = [e for e in result.all_events if e.is_failure]
            error = failures[0].event_specific_data.error if failures else None
            while error is not None:
                print(spec.name, error.message.strip()[:1500], file=sys.stderr)
                error = error.cause
print(json.dumps(out))
"""


def test_the_demo_every_check_maintenance_and_redrive_run_unchanged(
    cluster_home: Settings, tmp_path: Path
) -> None:
    """What CI runs on the embedded stack (the generated-events demo, then every asset check) on
    the cluster profile: the work runs on both workers, the tables land in the catalog server
    and the object store; then the Connect server is restarted, and the maintenance job of every
    table and a redrive run through the new one."""
    specs = tmp_path / "specs"
    shutil.copytree(PROJECT_ROOT / "table_specs", specs)
    env = {
        **os.environ,
        ENV_HOME: str(cluster_home.home),
        "CDC_ASSETS_SPECS": str(specs),
        "DAGSTER_HOME": str(tmp_path / "dagster"),
    }
    (tmp_path / "dagster").mkdir()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cdc_assets.cli", *args],
            cwd=PROJECT_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=1200,
            check=False,
        )

    outcomes = tmp_path / "checks.json"
    done = cli("checks", "--demo", "--events", "300", "--json", str(outcomes))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    checks = json.loads(outcomes.read_text(encoding="utf-8"))
    assert len(checks) >= 20
    assert not [c for c in checks if not c["passed"] and c["severity"] == "ERROR"]
    # the demo ran on the profile's catalog and warehouse (step 2 prints them)
    rest = rest_catalog.running(cluster_home)
    assert rest is not None
    assert f"catalog {rest.url}" in done.stdout
    assert "s3://warehouse/" in done.stdout

    # Its Spark work ran on the workers' executors, none in the driver (the Connect server).
    executors = _get(_app_url(cluster_home) + "/allexecutors")
    worked = [e for e in executors if e["id"] != "driver" and e["totalTasks"] > 0]
    assert len(worked) >= 2, [(e["id"], e["hostPort"], e["totalTasks"]) for e in executors]
    assert all(e["hostPort"].startswith("127.0.0.1:") for e in worked)
    driver = next(e for e in executors if e["id"] == "driver")
    assert driver["totalTasks"] == 0

    # The tables are rows of the REST server's JDBC catalog and their files objects of the store.
    users = next(spec for spec in load_specs(specs) if spec.name == "users")
    layout = base_layout(users)
    iceberg = build_resources(cluster_home)["iceberg"]
    table = iceberg.load_catalog().load_table(f"{layout.namespace}.{layout.name}")
    assert table.location() == f"s3://warehouse/{layout.namespace}/{layout.name}"
    listed = sources.postgres_execute(
        cluster_home,
        "SELECT table_namespace || '.' || table_name FROM iceberg_tables;",
        catalog_server.DATABASE,
    ).split()
    assert f"{layout.namespace}.{layout.name}" in listed
    store = object_store.running(cluster_home)
    assert store is not None
    from pyarrow import fs

    files = object_store.filesystem(store).get_file_info(
        fs.FileSelector(f"warehouse/{layout.namespace}/{layout.name}", recursive=True)
    )
    assert any(f.path.endswith(".parquet") for f in files)
    assert any(f.path.endswith(".metadata.json") for f in files)
    assert not (cluster_home.local_warehouse / layout.namespace).exists()

    # The Connect server restarted between runs: maintenance and the redrive below run through
    # the new one, on the tables the old one wrote.
    before = stack_state.section(cluster_home, "spark_connect")["pid"]
    spark_connect.stop_server(cluster_home)
    stack_up(cluster_home, cluster=True)
    assert stack_state.section(cluster_home, "spark_connect")["pid"] != before

    maintained = subprocess.run(
        [sys.executable, "-c", MAINTAIN],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert maintained.returncode == 0, maintained.stderr[-4000:]
    outcome = json.loads(maintained.stdout.strip().splitlines()[-1])
    assert all(outcome.values()), maintained.stderr[-6000:]

    # The demo's bad records are still bad: the redrive replays them and they stay dead letters
    # (exit 1 says so), none lost and none in the ledger.
    redrive = cli("redrive", "users")
    assert "replayed" in redrive.stdout, redrive.stdout[-3000:] + redrive.stderr[-3000:]
    assert "0 to the ledger" in redrive.stdout
    assert redrive.returncode == 1


BOOT = """
import json, sys
from cdc_assets.pipeline.bootstrap.bootstrap import bootstrap_base, read_files, read_jdbc
from cdc_assets.resources import build_resources
from cdc_assets.schema.position import Position
from cdc_assets.settings import load_settings
from cdc_assets.spec import load_specs
from cdc_assets.spec.models import TableSpec

spec = TableSpec.model_validate_json(open(sys.argv[1]).read())
kind, location = sys.argv[2], sys.argv[3]
major, minor, row = (int(x) for x in sys.argv[4].split(":"))
resources = build_resources(load_settings())
spark = resources["spark"].get_session()
if kind == "jdbc":
    dump = read_jdbc(spark, location, "users", {"driver": "org.sqlite.JDBC"})
else:
    dump = read_files(spark, location, kind)
result = bootstrap_base(
    spark, resources["spark"].catalog.name, resources["iceberg"].load_catalog(), spec, dump,
    Position(major, minor, row), source=kind, progress=False,
)
print(json.dumps({"rows": result.rows}))
spark.stop()
"""


# A JDBC read from the executors; file dumps are read by the executors the same way, and
# test_bootstrap.py covers every format (JDBC too) on a local driver.
@pytest.mark.parametrize("kind", ["jdbc"])
def test_bootstrap_from_a_dump_on_the_profile(
    kind: str,
    cluster_home: Settings,
    lake: tuple[KafkaResource, IcebergCatalogResource],
    tmp_path: Path,
) -> None:
    """A dump read by the executors (a path every executor can read: on one machine, a local
    one), stitched to the change stream as on a local driver (test_bootstrap's scenario)."""
    from cdc_assets_tests.integration.test_bootstrap import (
        expected_after_bootstrap,
        scenario,
        write_dump,
    )
    from cdc_assets_tests.support.bad_records import users_spec

    kafka, iceberg = lake
    spec = isolated(users_spec(), kafka=kafka)
    before, after, dump = scenario(spec)
    produce([*before, *after], spec.source.topic, kafka.resolved_bootstrap())
    assert run_phases(cluster_home, spec, "onboard,ingest", tmp_path)["ingest"] is True
    expected, position = expected_after_bootstrap(spec, kafka, sorted(dump))
    reader, location = write_dump(kind, dump, tmp_path)
    spec_file = tmp_path / "boot-spec.json"
    spec_file.write_text(spec.model_dump_json(by_alias=True), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", BOOT, str(spec_file), reader, location, position.text()],
        cwd=PROJECT_ROOT,
        env={**os.environ, ENV_HOME: str(cluster_home.home)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["rows"] == len(dump)
    assert run_phases(cluster_home, spec, "upsert", tmp_path)["upsert"] is True
    assert_base_matches(spec, iceberg, expected)
