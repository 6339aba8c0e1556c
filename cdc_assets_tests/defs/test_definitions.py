"""The Dagster graph generated from the example specs: keys, deps, groups, kinds, jobs."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
import yaml

from cdc_assets.assets.keys import asset_key, layer_and_table, table_of
from cdc_assets.assets.tables import TABLES_OP
from cdc_assets.cli import DAGSTER_YAML, ensure_dagster_home
from cdc_assets.definitions import build_defs
from cdc_assets.errors import ConfigError
from cdc_assets.jobs.ingest import deployment_start
from cdc_assets.jobs.sync import sync_selection
from cdc_assets.settings import DEFAULT_TABLES_AT_ONCE, load_settings, source_url_variable
from cdc_assets.spec import load_specs
from cdc_assets_tests.conftest import PROJECT_ROOT
from cdc_assets_tests.support.runs import record_run

TABLES = ["order_items", "orders", "users"]


@pytest.fixture(scope="module")
def defs(tmp_path_factory: pytest.TempPathFactory) -> dg.Definitions:
    home = tmp_path_factory.mktemp("home")
    settings = load_settings(
        {"CDC_ASSETS_HOME": str(home), "CDC_ASSETS_SPECS": str(PROJECT_ROOT / "table_specs")}
    )
    return build_defs(settings=settings)


def test_four_assets_per_table_with_layered_deps(defs: dg.Definitions) -> None:
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert keys == {
        asset_key(layer, t).to_user_string()
        for t in TABLES
        for layer in ("raw", "cdc", "bucketed", "base", "schema")
    } | {"view/app/user_orders", "history/order_items_history"}
    # The asset graph labels a node with its key's last component: no two nodes read alike.
    labels = [k.path[-1] for k in graph.get_all_asset_keys()]
    assert len(labels) == len(set(labels))
    assert {layer_and_table(k) for k in graph.get_all_asset_keys()} - {None} == {
        (layer, t) for t in TABLES for layer in ("raw", "cdc", "bucketed", "base", "schema")
    } | {("history", "order_items")}
    # The example view reads two base tables: it is downstream of both.
    assert graph.get(dg.AssetKey(["view", "app", "user_orders"])).parent_keys == {
        asset_key("base", "users"),
        asset_key("base", "orders"),
    }
    for t in TABLES:
        assert graph.get(asset_key("raw", t)).parent_keys == set()
        assert graph.get(asset_key("cdc", t)).parent_keys == {asset_key("raw", t)}
        assert graph.get(asset_key("bucketed", t)).parent_keys == {asset_key("cdc", t)}
        assert graph.get(asset_key("base", t)).parent_keys == {asset_key("bucketed", t)}
    # The example that keeps history: its versions come from the ledger.
    assert graph.get(asset_key("history", "order_items")).parent_keys == {
        asset_key("cdc", "order_items")
    }


def test_groups_kinds_owners_tags_and_metadata(defs: dg.Definitions) -> None:
    graph = defs.resolve_asset_graph()
    raw = graph.get(asset_key("raw", "users"))
    base = graph.get(asset_key("base", "users"))
    assert raw.group_name == base.group_name == "users"
    assert raw.kinds == {"kafka"}
    assert base.kinds == {"spark", "iceberg"}
    assert base.owners == ["team:data-platform"]
    assert base.tags["domain"] == "identity"
    assert base.tags["cdc/connector"] == "mysql"
    assert base.metadata["dagster/table_name"] == "lake.app.users"
    columns = {c.name: c for c in base.metadata["dagster/column_schema"].columns}
    assert columns["created_at"].type == "TIMESTAMP"
    assert columns["id"].constraints.nullable is False
    raw_cols = {c.name: c for c in raw.metadata["dagster/column_schema"].columns}
    assert raw_cols["email"].constraints.other == ["sensitive"]
    assert raw.metadata["kafka/topic"] == "app.app.users"
    assert "Kafka topic `app.app.users`" in (raw.description or "")


def test_jobs_do_not_grow_with_tables(defs: dg.Definitions) -> None:
    repo = defs.get_repository_def()
    assert sorted(j for j in repo.job_names if not j.startswith("__")) == [
        "check_schema_drift",
        "check_tables",
        "continuous_tables",
        "evolve_schemas",
        "ingest_ledgers",
        "maintain_tables",
        "onboard_tables",
        "publish_schema_artifacts",
        "refresh_views",
        "sync_tables",
        "upsert_bases",
    ]
    assert sorted(s.name for s in repo.sensor_defs) == [
        "continuous_workers",
        "ledger_updated",
        "new_kafka_offsets",
        "schema_changes",
        "schema_drift_detected",
        "spec_directory",
        "views_follow_tables",
    ]
    assert sorted(s.name for s in repo.schedule_defs) == [
        "daily_drift_check",
        "daily_maintenance",
        "table_checks",
    ]


def test_table_checks_schedule_runs_every_check_on_its_cron(tmp_path: Path) -> None:
    """The checks that scan whole tables run on a schedule (CDC_ASSETS_CHECKS_CRON), over the
    check-only job."""
    for env, cron in (({}, "*/15 * * * *"), ({"CDC_ASSETS_CHECKS_CRON": "0 * * * *"}, "0 * * * *")):
        settings = load_settings(
            {
                "CDC_ASSETS_HOME": str(tmp_path),
                "CDC_ASSETS_SPECS": str(PROJECT_ROOT / "table_specs"),
                **env,
            }
        )
        defs = build_defs(settings=settings)
        schedule = defs.get_schedule_def("table_checks")
        assert schedule.cron_schedule == cron
        assert schedule.job_name == "check_tables"
        assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING
        job = defs.resolve_job_def("check_tables")
        checks = job.asset_layer.asset_graph.asset_check_keys
        # and the view's, and order_items' history's
        assert len(checks) == len(TABLES) * len(TABLE_CHECKS) + 2


def test_each_spec_schedule_cron_times_its_own_checks(tmp_path: Path) -> None:
    """Specs whose schedule.cron differ get a checks schedule each, running only their checks;
    CDC_ASSETS_CHECKS_CRON puts every table back on one."""
    specs_dir = tmp_path / "specs"
    specs_dir.mkdir()
    for spec in load_specs(PROJECT_ROOT / "table_specs"):
        text = (PROJECT_ROOT / "table_specs" / f"{spec.name}.yaml").read_text()
        if spec.name == "orders":
            assert 'cron: "*/15 * * * *"' in text
            text = text.replace('cron: "*/15 * * * *"', 'cron: "0 * * * *"')
        (specs_dir / f"{spec.name}.yaml").write_text(text)
    env = {"CDC_ASSETS_HOME": str(tmp_path / "home"), "CDC_ASSETS_SPECS": str(specs_dir)}
    defs = build_defs(settings=load_settings(env))
    hourly = defs.get_schedule_def("table_checks__0_x_x_x_x")
    assert hourly.cron_schedule == "0 * * * *"
    frequent = defs.get_schedule_def("table_checks__x_15_x_x_x_x")
    assert frequent.cron_schedule == "*/15 * * * *"
    with dg.instance_for_test() as instance:
        request = hourly.evaluate_tick(dg.build_schedule_context(instance=instance))
    (run,) = request.run_requests or []
    assert {table_of(k.asset_key) for k in run.asset_check_keys or []} == {"orders"}
    assert len(run.asset_check_keys or []) == len(TABLE_CHECKS)
    assert run.asset_selection == []
    one = build_defs(settings=load_settings({**env, "CDC_ASSETS_CHECKS_CRON": "5 * * * *"}))
    assert one.get_schedule_def("table_checks").cron_schedule == "5 * * * *"


def test_table_checks_start_no_run_while_the_previous_is_in_flight(defs: dg.Definitions) -> None:
    """At a thousand tables one run of every check can outlast the cron's period: the schedule
    then skips its ticks instead of queueing a run per tick behind it."""

    schedule = defs.get_schedule_def("table_checks")
    with dg.instance_for_test() as instance:

        def tick() -> dg.RunRequest | dg.SkipReason:
            result = schedule.evaluate_tick(dg.build_schedule_context(instance=instance))
            if result.skip_message:
                return dg.SkipReason(result.skip_message)
            (request,) = result.run_requests or []
            return request

        first = tick()
        assert isinstance(first, dg.RunRequest)
        assert first.tags["cdc/schedule"] == "table_checks"
        for status, skips in (
            (dg.DagsterRunStatus.NOT_STARTED, False),  # never queued: it will not start
            (dg.DagsterRunStatus.SUCCESS, False),
            (dg.DagsterRunStatus.FAILURE, False),
            (dg.DagsterRunStatus.STARTED, True),
            (dg.DagsterRunStatus.CANCELING, True),
        ):
            run = record_run(instance, "check_tables", status, tags=first.tags)
            result = tick()
            assert isinstance(result, dg.SkipReason) == skips, (status, result)
            if skips:
                assert run.run_id in (result.skip_message or "")
            instance.delete_run(run.run_id)
        other = record_run(instance, "check_tables", dg.DagsterRunStatus.STARTED)
        assert isinstance(tick(), dg.RunRequest), "a run the schedule did not start holds nothing"
        instance.delete_run(other.run_id)


def test_ledgers_share_hourly_partitions(defs: dg.Definitions) -> None:
    graph = defs.resolve_asset_graph()
    partitions = {graph.get(asset_key("cdc", t)).partitions_def for t in TABLES}
    assert len(partitions) == 1
    hourly = partitions.pop()
    assert isinstance(hourly, dg.HourlyPartitionsDefinition)
    # A week before this home first loaded (no CDC_ASSETS_PARTITIONS_START): not a fixed date
    # months back, whose thousands of never-run hours would read as a broken ledger.
    first = datetime.strptime(hourly.get_partition_keys()[0], "%Y-%m-%d-%H:%M").replace(tzinfo=UTC)
    assert timedelta(days=7) <= datetime.now(UTC) - first < timedelta(days=7, hours=2)
    assert graph.get(asset_key("base", "users")).partitions_def is None


def test_the_partitions_start_is_written_once_per_home(tmp_path: Path) -> None:
    then = datetime(2026, 3, 4, 5, 6, tzinfo=UTC)
    assert deployment_start(tmp_path, then) == "2026-02-25-05:00"
    assert deployment_start(tmp_path, then + timedelta(days=30)) == "2026-02-25-05:00"
    assert [p.name for p in tmp_path.iterdir()] == ["partitions-start"]
    env = {"CDC_ASSETS_HOME": str(tmp_path), "CDC_ASSETS_PARTITIONS_START": "2026-05-01-00:00"}
    hourly = (
        build_defs(settings=load_settings(env))
        .resolve_asset_graph()
        .get(asset_key("cdc", "users"))
        .partitions_def
    )
    assert hourly is not None
    assert hourly.get_partition_keys()[0] == "2026-05-01-00:00"


TABLE_CHECKS = {
    "raw/{t}_topic:kafka_lag_retention",
    "cdc/{t}_cdc:offsets_accounted",
    "cdc/{t}_cdc:dead_letter_rate",
    "cdc/{t}_cdc:ledger_null_counts",
    "cdc/{t}_cdc:schema_converged",
    "base/{t}:null_counts",
    "base/{t}:image_values",
    "base/{t}:sample_conforms",
    "base/{t}:primary_key_unique",
    "base/{t}:watermark_lag",
    "base/{t}:schema_drift",
}


def test_every_table_has_its_checks_and_only_the_key_check_blocks(defs: dg.Definitions) -> None:
    graph = defs.resolve_asset_graph()
    checks = {k.to_user_string() for k in graph.asset_check_keys}
    assert checks == {c.format(t=t) for t in TABLES for c in TABLE_CHECKS} | {
        "view/app/user_orders:view_schema",
        "history/order_items_history:history_matches_ledger",
    }
    blocking = {
        f"{s.asset_key.to_user_string()}:{s.name}"
        for c in defs.asset_checks or []
        if isinstance(c, dg.AssetChecksDefinition)
        for s in c.check_specs
        if s.blocking
    }
    assert blocking == {f"base/{t}:primary_key_unique" for t in TABLES}


def test_source_row_count_check_exists_only_where_the_source_is_reachable() -> None:
    specs = load_specs(PROJECT_ROOT / "table_specs")
    settings = replace(load_settings(), source_urls={source_url_variable("shop"): "jdbc:x"})
    graph = build_defs(specs=specs, settings=settings).resolve_asset_graph()
    for name in ("source_row_count", "source_values"):
        counted = {k.asset_key.path[-1] for k in graph.asset_check_keys if k.name == name}
        assert counted == {s.name for s in specs if s.source.database == "shop"}
    # source_values reads the whole source table: the checks job runs it, an upsert does not
    defs = build_defs(specs=specs, settings=settings)
    for job, expected in (("check_tables", True), ("upsert_bases", False), ("sync_tables", False)):
        keys = defs.resolve_job_def(job).asset_layer.asset_graph.asset_check_keys
        assert any(k.name == "source_values" for k in keys) == expected, job
        assert any(k.name == "source_row_count" for k in keys), job


def test_freshness_policies_follow_the_spec_sla(defs: dg.Definitions) -> None:
    graph = defs.resolve_asset_graph()
    for layer in ("cdc", "base"):
        policy = graph.get(asset_key(layer, "orders")).freshness_policy
        assert isinstance(policy, dg.FreshnessPolicy)
        assert policy.fail_window.to_timedelta() == timedelta(minutes=30)  # type: ignore[attr-defined]
    assert graph.get(asset_key("bucketed", "orders")).freshness_policy is None


def test_onboard_job_rejects_unknown_tables(defs: dg.Definitions) -> None:
    result = defs.resolve_job_def("onboard_tables").execute_in_process(
        run_config={"ops": {"create_spec_tables": {"config": {"tables": ["nope"]}}}},
        raise_on_error=False,
    )
    assert not result.success
    failure = result.get_step_failure_events()[0].event_specific_data.error  # type: ignore[union-attr]
    assert "unknown table spec(s) ['nope']" in failure.message


def _run(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_loading_definitions_starts_no_jvm(tmp_path: Path) -> None:
    code = (
        "import psutil\n"
        "from cdc_assets.definitions import defs\n"
        "defs.get_repository_def().load_all_definitions()\n"
        "from pyspark import SparkContext\n"
        "assert SparkContext._gateway is None, 'py4j gateway started'\n"
        "kids = [p.name() for p in psutil.Process().children(recursive=True)]\n"
        "assert not any('java' in k for k in kids), kids\n"
        "print('assets', len(defs.resolve_asset_graph().get_all_asset_keys()))\n"
    )
    env = {**os.environ, "CDC_ASSETS_HOME": str(tmp_path)}
    proc = _run(code, env)
    assert proc.returncode == 0, proc.stderr
    # 5 per table, order_items' history and the example view
    assert "assets 17" in proc.stdout
    assert not (tmp_path / "jars").exists(), "loading definitions must not fetch jars"


def test_dagster_definitions_validate(tmp_path: Path) -> None:
    env = {**os.environ, "CDC_ASSETS_HOME": str(tmp_path), "DAGSTER_HOME": str(tmp_path)}
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "dagster"),
            "definitions",
            "validate",
            "-w",
            "workspace.yaml",
        ],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Validation successful" in proc.stdout + proc.stderr


def test_example_specs_fixture_matches_tables() -> None:
    assert [s.name for s in load_specs(PROJECT_ROOT / "table_specs")] == TABLES


def test_ledger_updated_sensor_targets_the_ingested_tables() -> None:
    from cdc_assets.sensors.ledger_updated import upsert_selection

    keys = [asset_key("cdc", "users"), asset_key("raw", "orders")]
    assert upsert_selection(keys) == [
        asset_key("bucketed", "users"),
        asset_key("base", "users"),
    ]
    assert upsert_selection([]) == []
    # an evolution's backfill and redrive leave ledger rows for the next upsert
    assert upsert_selection([asset_key("schema", "orders")]) == [
        asset_key("bucketed", "orders"),
        asset_key("base", "orders"),
    ]


def _width(defs: dg.Definitions) -> int:
    """The default ``tables_at_once`` of the ``tables`` op's config."""
    op = defs.get_assets_def(asset_key("base", "users")).op
    assert op.name == TABLES_OP
    assert op.config_schema is not None
    return int(op.config_schema.as_field().default_value["tables_at_once"])


def test_runs_share_one_process_and_spark_driver(defs: dg.Definitions) -> None:
    """Dagster's own in-process executor: one process and driver per run, the run's tables at
    once inside its steps (assets/tables.py)."""
    for name in ("ingest_ledgers", "upsert_bases", "evolve_schemas", "check_schema_drift"):
        executor = defs.resolve_job_def(name).executor_def
        assert executor is dg.in_process_executor
    # The width's default is the settings' (unless set).
    assert _width(defs) == DEFAULT_TABLES_AT_ONCE


def test_dagster_s_default_executor_on_request(tmp_path: Path) -> None:
    """CDC_ASSETS_EXECUTOR=dagster leaves the executor to Dagster (a process per step); anything
    but the two names is refused."""
    env = {
        "CDC_ASSETS_HOME": str(tmp_path),
        "CDC_ASSETS_SPECS": str(PROJECT_ROOT / "table_specs"),
        "CDC_ASSETS_EXECUTOR": "dagster",
    }
    defs = build_defs(settings=load_settings(env))
    for name in ("ingest_ledgers", "sync_tables", "evolve_schemas"):
        assert defs.resolve_job_def(name).executor_def is dg.multi_or_in_process_executor
    with pytest.raises(ConfigError, match="CDC_ASSETS_EXECUTOR must be one of"):
        load_settings({**env, "CDC_ASSETS_EXECUTOR": "threads"})
    # Every table's ledger, bucketed, base and history are one op; so are their checks.
    job = defs.resolve_job_def("sync_tables")
    assert sorted(n.name for n in job.nodes) == ["table_checks", "tables"]


def test_tables_at_once_comes_from_the_environment(tmp_path: Path) -> None:
    env = {"CDC_ASSETS_HOME": str(tmp_path), "CDC_ASSETS_SPECS": str(PROJECT_ROOT / "table_specs")}
    defs = build_defs(settings=load_settings({**env, "CDC_ASSETS_TABLES_AT_ONCE": "3"}))
    assert _width(defs) == 3
    for bad in ("0", "two", "-1"):
        with pytest.raises(ConfigError, match="CDC_ASSETS_TABLES_AT_ONCE"):
            load_settings({**env, "CDC_ASSETS_TABLES_AT_ONCE": bad})


def _succeeded(
    instance: dg.DagsterInstance, job: str, keys: set[dg.AssetKey] | None
) -> dg.DagsterRun:
    """A run of ``job`` selecting ``keys`` (None: the whole job) that has just succeeded (its
    RUN_SUCCESS event)."""

    run = record_run(instance, job, dg.DagsterRunStatus.STARTED, asset_selection=keys)
    success = dg.DagsterEvent(event_type_value=dg.DagsterEventType.RUN_SUCCESS.value, job_name=job)
    instance.report_dagster_event(success, run_id=run.run_id)
    return run


def _ledger_updated_tick(
    defs: dg.Definitions, instance: dg.DagsterInstance, cursor: str | None
) -> tuple[list[dg.RunRequest], str | None]:
    sensor = defs.get_sensor_def("ledger_updated")
    context = dg.build_sensor_context(
        instance=instance, cursor=cursor, repository_def=defs.get_repository_def()
    )
    result = sensor.evaluate_tick(context)
    return list(result.run_requests or []), result.cursor


def test_ledger_updated_sensor_watches_ingests_and_evolutions(defs: dg.Definitions) -> None:
    """Every successful ingest or evolution gets an upsert of its tables, the runs that ended
    before the sensor's first tick too (a fresh daemon's first ingest); other jobs none."""
    with dg.instance_for_test() as instance:
        before = _succeeded(instance, "ingest_ledgers", {asset_key("cdc", "users")})
        _succeeded(instance, "upsert_bases", {asset_key("base", "orders")})
        requests, cursor = _ledger_updated_tick(defs, instance, None)
        assert [r.run_key for r in requests] == [before.run_id]
        assert requests[0].asset_selection == [
            asset_key("bucketed", "users"),
            asset_key("base", "users"),
        ]
        assert _ledger_updated_tick(defs, instance, cursor) == ([], cursor)  # nothing new
        evolved = _succeeded(instance, "evolve_schemas", {asset_key("schema", "orders")})
        requests, cursor = _ledger_updated_tick(defs, instance, cursor)
        assert [(r.run_key, r.tags["cdc/tables"]) for r in requests] == [(evolved.run_id, "orders")]


def test_ledger_updated_sensor_upserts_every_table_after_a_whole_job_ingest(
    defs: dg.Definitions,
) -> None:
    """A run of the whole ingest job (no asset selection: the UI's "Materialize all" on the job)
    wrote every table's ledger; every table gets its upsert."""
    with dg.instance_for_test() as instance:
        run = _succeeded(instance, "ingest_ledgers", None)
        (request,), _ = _ledger_updated_tick(defs, instance, None)
        assert request.run_key == run.run_id
        assert request.tags["cdc/tables"] == ",".join(sorted(TABLES))
        assert request.asset_selection == [
            *(asset_key(layer, t) for t in sorted(TABLES) for layer in ("bucketed", "base")),
            asset_key("history", "order_items"),
        ]


def test_ledger_updated_sensor_leaves_out_tables_whose_upsert_is_queued(
    defs: dg.Definitions,
) -> None:

    with dg.instance_for_test() as instance:
        ingest = _succeeded(instance, "ingest_ledgers", {asset_key("cdc", t) for t in TABLES})
        record_run(
            instance,
            "upsert_bases",
            # NOT_STARTED: a run created and waiting for its launch, like a queued one
            dg.DagsterRunStatus.NOT_STARTED,
            asset_selection={asset_key("bucketed", "users"), asset_key("base", "users")},
        )
        # A second ingest of orders in the same tick: the first request covers it.
        _succeeded(instance, "ingest_ledgers", {asset_key("cdc", "orders")})
        (request,), _ = _ledger_updated_tick(defs, instance, None)
        assert request.asset_selection == [
            *(
                asset_key(layer, t)
                for t in ("order_items", "orders")
                for layer in ("bucketed", "base")
            ),
            asset_key("history", "order_items"),
        ]
        assert request.tags["cdc/tables"] == "order_items,orders"
        assert request.run_key == ingest.run_id
        # the micro-batch carries no checks: the table_checks schedule runs them
        assert request.asset_check_keys == []
        # a failed upsert is started again by the daemon (run_retries in the Dagster home)
        assert request.tags["dagster/max_retries"] == "2"
        assert yaml.safe_load(DAGSTER_YAML)["run_retries"] == {"enabled": True}
        # the run queue starts it before the ingests queued with it
        assert request.tags["dagster/priority"] == "1"


def test_ledger_updated_sensor_leaves_micro_batches_to_themselves(defs: dg.Definitions) -> None:
    """A `sync_tables` run upserts its own tables: its success asks for no upsert, and a queued
    one covers its tables for the ingests that succeed meanwhile."""

    with dg.instance_for_test() as instance:
        _succeeded(instance, "sync_tables", set(sync_selection(["users"])))
        assert _ledger_updated_tick(defs, instance, None)[0] == []
        record_run(
            instance,
            "sync_tables",
            # NOT_STARTED: a run created and waiting for its launch, like a queued one
            dg.DagsterRunStatus.NOT_STARTED,
            asset_selection=sync_selection(["orders"]),
        )
        _succeeded(instance, "ingest_ledgers", {asset_key("cdc", t) for t in ("orders", "users")})
        (request,), _ = _ledger_updated_tick(defs, instance, None)
        assert request.tags["cdc/tables"] == "users"


def test_new_offsets_sensor_adds_no_run_while_an_ingest_waits(
    defs: dg.Definitions, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """One micro-batch run waiting to start covers its tables up to its start; the tables that
    grew meanwhile go into one run once it started, not into a small run per tick. An ingest
    started by hand holds back its own tables only."""
    from cdc_assets.resources import KafkaResource

    def latest_offsets(self: KafkaResource, topics: list[str]) -> dict[str, dict[int, int]]:
        return {t: {0: 3} for t in topics}

    monkeypatch.setattr(KafkaResource, "latest_offsets", latest_offsets)
    sensor = defs.get_sensor_def("new_kafka_offsets")
    kafka = KafkaResource(bootstrap_servers="127.0.0.1:9", home=str(tmp_path))
    with dg.instance_for_test() as instance:
        record_run(
            instance,
            "ingest_ledgers",
            dg.DagsterRunStatus.NOT_STARTED,
            asset_selection={asset_key("cdc", "users")},
        )
        # A run that never got queued holds nothing back.
        result = sensor(dg.build_sensor_context(instance=instance, resources={"kafka": kafka}))
        assert isinstance(result, dg.SensorResult)
        assert len(result.run_requests or []) == 1
        waiting = record_run(
            instance,
            "sync_tables",
            dg.DagsterRunStatus.QUEUED,
            asset_selection=sync_selection(["users"]),
        )
        context = dg.build_sensor_context(instance=instance, resources={"kafka": kafka})
        result = sensor(context)
        assert isinstance(result, dg.SensorResult)
        assert not result.run_requests
        assert result.cursor is None  # nothing marked as requested
        instance.handle_run_event(
            waiting.run_id,
            dg.DagsterEvent(
                event_type_value=dg.DagsterEventType.RUN_START.value, job_name="sync_tables"
            ),
        )
        result = sensor(dg.build_sensor_context(instance=instance, resources={"kafka": kafka}))
        assert isinstance(result, dg.SensorResult)
        (request,) = result.run_requests or []
        # the started run still reads users; the others go into one run
        assert request.tags["cdc/tables"] == "order_items,orders"


def test_base_rows_subtract_merge_on_read_deletes() -> None:
    from cdc_assets.assets.metadata import live_rows as base_rows

    assert base_rows({"total-records": "396", "total-position-deletes": "198"}) == 198
    assert base_rows({"total-records": "10"}) == 10
    assert base_rows({}) is None


def test_new_offsets_sensor_watches_the_topic_a_stored_version_follows(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A code location loaded before an evolution followed a renamed source table still holds
    the old spec: its sensor must start the run for the new name's topic anyway (the stored
    version's), or changes there would wait for a reload."""
    from cdc_assets.pipeline.evolution.spec_store import record_spec
    from cdc_assets.resources import KafkaResource, build_resources
    from cdc_assets.spec.source_table import SourceTable, followed
    from cdc_assets.spec.versions import write_spec

    specs_dir = tmp_path / "specs"
    specs_dir.mkdir()
    (users,) = [s for s in load_specs(PROJECT_ROOT / "table_specs") if s.name == "users"]
    write_spec(users, specs_dir / "users.yaml")
    settings = load_settings({"CDC_ASSETS_HOME": str(tmp_path), "CDC_ASSETS_SPECS": str(specs_dir)})
    defs = build_defs(settings=settings)  # before the follow: the old topic
    moved = followed(users, SourceTable("renamed", None, (users.source.database, "users_v2")))
    assert not isinstance(moved, str)
    iceberg = build_resources(settings)["iceberg"]
    Path(iceberg.uri.removeprefix("jdbc:sqlite:")).parent.mkdir(parents=True, exist_ok=True)
    record_spec(iceberg.load_catalog(), moved, specs_dir)

    def latest_offsets(self: KafkaResource, topics: list[str]) -> dict[str, dict[int, int]]:
        return {t: {0: 5 if t == moved.source.topic else 0} for t in topics}

    monkeypatch.setattr(KafkaResource, "latest_offsets", latest_offsets)
    sensor = defs.get_sensor_def("new_kafka_offsets")
    kafka = KafkaResource(bootstrap_servers="127.0.0.1:9", home=str(tmp_path))
    with dg.instance_for_test() as instance:
        result = sensor(dg.build_sensor_context(instance=instance, resources={"kafka": kafka}))
    assert isinstance(result, dg.SensorResult)
    (request,) = result.run_requests or []
    assert request.tags["cdc/tables"] == "users"


def test_the_dagster_home_uses_dagster_s_default_run_launcher(tmp_path: Path) -> None:
    """A new home gets Dagster's default launcher; a home made when the project had a launcher
    of its own loses that entry and keeps the rest of its configuration."""
    settings = load_settings({"CDC_ASSETS_HOME": str(tmp_path / "new")})
    home = ensure_dagster_home(settings)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert isinstance(instance.run_launcher, dg.DefaultRunLauncher)
    old = load_settings({"CDC_ASSETS_HOME": str(tmp_path / "old")})
    config = old.home / "dagster" / "dagster.yaml"
    config.parent.mkdir(parents=True)
    written = {
        **yaml.safe_load(DAGSTER_YAML),
        "run_launcher": {"module": "cdc_assets.run_launcher", "class": "TableRunLauncher"},
        "run_queue": {"dequeue_interval_seconds": 3},
    }
    config.write_text(yaml.safe_dump(written), encoding="utf-8")
    ensure_dagster_home(old)
    kept = yaml.safe_load(config.read_text(encoding="utf-8"))
    assert "run_launcher" not in kept
    assert kept["run_queue"] == {"dequeue_interval_seconds": 3}
    with dg.DagsterInstance.from_config(str(config.parent)) as instance:
        assert isinstance(instance.run_launcher, dg.DefaultRunLauncher)
