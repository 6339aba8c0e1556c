"""One table's checks that cannot run (its topic does not exist yet: onboarded before its
connector) fail alone: the scheduled check run over every table succeeds and the other tables'
checks report as usual (issue 27)."""

from __future__ import annotations

import random
import uuid
from typing import Any

import dagster as dg

from cdc_assets.checks.runner import run_checks
from cdc_assets.definitions import build_defs
from cdc_assets.jobs.checks import CHECK_JOB
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.settings import Settings
from cdc_assets_dev.demo.events import produce, workload
from cdc_assets_tests.integration.test_ingest import isolated
from cdc_assets_tests.integration.test_upsert import example_spec, ingest, upsert


def test_a_table_without_its_topic_fails_only_its_own_checks(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    resources: dict[str, Any],
) -> None:
    live = isolated(example_spec(it_settings, "users"), kafka=kafka)
    waiting = example_spec(it_settings, "orders")
    tag = uuid.uuid4().hex[:8]
    waiting = waiting.model_copy(
        update={
            "source": waiting.source.model_copy(update={"topic_": f"it.not.yet.{tag}"}),
            "sink": waiting.sink.model_copy(update={"namespace": f"it_wait_{tag}"}),
        }
    )
    for spec in (live, waiting):
        ensure_tables(spark, "lake", spec)
    produce(
        workload(live, random.Random(5), keys=10, events=40),
        live.source.topic,
        kafka.resolved_bootstrap(),
    )
    ingest(spark, iceberg, kafka, live)
    upsert(spark, iceberg, live)
    defs = build_defs(specs=[live, waiting], settings=it_settings, resource_overrides=resources)
    instance = dg.DagsterInstance.ephemeral()

    run = defs.resolve_job_def(CHECK_JOB).execute_in_process(instance=instance)
    assert run.success  # the run itself does not fail
    outcomes, _ = run_checks(defs, instance)
    by_table: dict[str, list[Any]] = {}
    for outcome in outcomes:
        by_table.setdefault(outcome.table, []).append(outcome)
    assert all(o.passed for o in by_table["users"]), [
        (o.check, o.description) for o in by_table["users"] if not o.passed
    ]
    lag = next(o for o in by_table["orders"] if o.check == "kafka_lag_retention")
    assert not lag.passed
    assert lag.severity == "ERROR"
    assert f"it.not.yet.{tag}" in lag.description or "could not run" in lag.description
