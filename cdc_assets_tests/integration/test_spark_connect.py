"""Runs on the stack's Spark Connect server (`stack up --spark-connect`): the resources pick it up,
Dagster's ingest and upsert jobs run through it, base equals the plain-Python replay, and the
server's driver stays up between runs (what makes short runs cheap).

The server runs on the session's stack for this module only: other modules build their resources
from the same home and would otherwise use it too.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import dagster as dg
import pytest

from cdc_assets.definitions import build_defs
from cdc_assets.demo.events import produce, workload
from cdc_assets.pipeline.session_kind import is_connect
from cdc_assets.resources import build_resources, spark_connect
from cdc_assets.resources.local_stack import StackState, stack_status, stack_up
from cdc_assets.settings import Settings
from cdc_assets_tests.integration.test_ingest import isolated
from cdc_assets_tests.integration.test_upsert import (
    assert_base_matches,
    example_spec,
    expected_base,
)


@pytest.fixture(scope="module")
def connect_port(it_settings: Settings, stack: StackState) -> Iterator[int]:
    stack_up(it_settings, spark_connect=True)
    port = spark_connect.running_port(it_settings)
    assert port is not None
    try:
        yield port
    finally:
        spark_connect.stop_server(it_settings)


def test_stack_up_starts_a_server_that_the_resources_use(
    it_settings: Settings, connect_port: int
) -> None:
    spark = build_resources(it_settings)["spark"]
    assert spark.remote == f"sc://127.0.0.1:{connect_port}"
    assert f"Spark Connect server at sc://127.0.0.1:{connect_port}" in (
        stack_status(it_settings).render()
    )
    # stack up again keeps the running server
    stack_up(it_settings, spark_connect=True)
    assert spark_connect.running_port(it_settings) == connect_port
    # an explicit master means a driver of its own
    from dataclasses import replace

    assert build_resources(replace(it_settings, spark_master="local[1]"))["spark"].remote is None


def test_ingest_and_upsert_jobs_run_through_the_server(
    it_settings: Settings, connect_port: int, kafka: Any, iceberg: Any
) -> None:
    spec = isolated(example_spec(it_settings, "users"), kafka=kafka)
    resources = build_resources(it_settings)
    defs = build_defs(specs=[spec], settings=it_settings, resource_overrides=resources)
    onboard = defs.resolve_job_def("onboard_tables").execute_in_process()
    assert onboard.success
    rng = random.Random(11)
    server_pid_before = _server_pid(it_settings)
    for round_ in range(2):
        produce(
            workload(spec, rng, keys=40, events=300), spec.source.topic, kafka.resolved_bootstrap()
        )
        with dg.instance_for_test() as instance:
            ingest = defs.resolve_job_def("ingest_ledgers").execute_in_process(
                instance=instance, partition_key=_hour()
            )
            assert ingest.success
            upsert = defs.resolve_job_def("upsert_bases").execute_in_process(instance=instance)
            assert upsert.success
            merged = upsert.asset_materializations_for_node("base__users")[0]
            # The storage-partitioned check works without the driver's plan objects. The first
            # MERGE meets an empty base: nothing to line up with, as with a local driver.
            assert merged.metadata["storage_partitioned_join"].value is (round_ > 0)
        assert_base_matches(spec, iceberg, expected_base(spec, kafka))
    # one driver served both rounds
    assert _server_pid(it_settings) == server_pid_before
    session = resources["spark"].get_session()
    try:
        assert is_connect(session)
    finally:
        # released before the module stops the server (a client left open retries at exit)
        session.stop()


def _server_pid(settings: Settings) -> int:
    import json

    entry = json.loads(spark_connect.server_files(settings).state.read_text(encoding="utf-8"))
    return int(entry["pid"])


def _hour() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).strftime("%Y-%m-%d-%H:00")
