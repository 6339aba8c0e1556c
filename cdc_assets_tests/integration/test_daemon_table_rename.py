"""A source table renamed mid-stream, through a real `dagster-daemon` (issue 54 item 6, the
generated-events tier): the stream's records on the old name's topic, then Debezium's
``RENAME TABLE users TO users_v2`` record, then records on the new name's topic, delivered in
slices while the daemon runs. Nothing drives the order: the schema-change sensor's evolution
follows the rename while micro-batch runs read, the new-offsets sensor watches the topic the
stored version reads (no code-location reload here), and base must end equal to the replay of
both topics in order, with no run failed and no dead letter. The last slice arrives after the
follow has settled, so only the watch of the stored version's topic can ingest it.
"""

from __future__ import annotations

import random
import time
import uuid
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from confluent_kafka.admin import NewTopic

from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.layers import base_layout, dead_letter_layout
from cdc_assets.settings import Settings
from cdc_assets.spec.models import TableSpec
from cdc_assets.spec.source_table import SourceTable, followed
from cdc_assets.spec.versions import write_spec
from cdc_assets_dev.demo.events import workload
from cdc_assets_dev.demo.events.factory import DebeziumEventFactory
from cdc_assets_tests.integration.test_evolve import base_differences, later
from cdc_assets_tests.integration.test_ingest import FOREVER, consume_all, read_table
from cdc_assets_tests.integration.test_schema_evolution_flow import Table
from cdc_assets_tests.support.base_oracle import replay_base
from cdc_assets_tests.support.daemon import dagster_home, running_daemon
from cdc_assets_tests.support.oracle import expected_outcome

pytestmark = pytest.mark.integration

CONVERGE_TIMEOUT_S = 300.0


def oracle(old: TableSpec, new: TableSpec, kafka: KafkaResource) -> dict[Any, dict[str, Any]]:
    """Base replayed from both topics in turn, the new one numbered on after the old one's end
    as the ledger numbers it."""
    rows, end = [], 0
    for spec, shift in ((old, None), (new, True)):
        for p, o, ts, k, v in consume_all(kafka, spec.source.topic):
            offset = o + end if shift else o
            outcome = expected_outcome(new, p, offset, ts, k, v)
            if outcome.status == "ledger":
                assert outcome.row is not None
                rows.append(outcome.row)
            if not shift:
                end = max(end, o + 1)
    return replay_base(new, rows)


def test_a_table_renamed_mid_stream_converges_through_the_daemon(
    it_settings: Settings,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    tmp_path: Path,
) -> None:
    table = Table(it_settings, kafka, tmp_path)
    tag = uuid.uuid4().hex[:6]
    database = table.v1.source.database
    # Debezium's topic names, so that the evolution knows the new table's topic
    topics = [f"it{tag}.{database}.users", f"it{tag}.{database}.users_v2"]
    admin = kafka.admin()
    for done in admin.create_topics(
        [NewTopic(t, num_partitions=1, replication_factor=1, config=FOREVER) for t in topics]
    ).values():
        done.result(30)
    source = table.v1.source.model_copy(update={"topic_": topics[0]})
    v1 = table.v1.model_copy(update={"source": source})
    write_spec(v1, table.specs_dir / "users.yaml")
    v2 = followed(v1, SourceTable("renamed", None, (database, "users_v2")))
    assert isinstance(v2, TableSpec)
    assert v2.source.topic == topics[1]

    rng = random.Random(54)
    before = workload(v1, rng, keys=25, events=120)
    after = later(workload(v2, random.Random(55), keys=25, events=120), 1)
    rename = DebeziumEventFactory(v2).schema_change("RENAME TABLE users TO users_v2")
    home = dagster_home(tmp_path)
    log = tmp_path / "daemon.log"
    instance = dg.DagsterInstance.from_config(str(home))
    env = {"CDC_ASSETS_HOME": str(it_settings.home), "CDC_ASSETS_SPECS": str(table.specs_dir)}
    with running_daemon(home, env, log) as daemon:
        table.produce(before, topics[0])
        time.sleep(rng.uniform(2, 12))
        table.produce([rename], table.schema_topic)
        third = len(after) // 3
        table.produce(after[:third], topics[1])
        time.sleep(rng.uniform(2, 12))
        table.produce(after[third : 2 * third], topics[1])
        # The last slice only once the spec follows and every run so far has finished: then
        # only the new-offsets sensor's watch of the stored version's topic can start its run
        # (the code location still holds the spec before the rename).
        deadline = time.monotonic() + CONVERGE_TIMEOUT_S
        while time.monotonic() < deadline:
            assert daemon.poll() is None, log.read_text()[-4000:]
            runs = list(instance.get_runs())
            if table.spec().source.table == "users_v2" and all(r.is_finished for r in runs):
                break
            time.sleep(2)
        time.sleep(6)  # a sensor tick past the last run
        table.produce(after[2 * third :], topics[1])
        deadline = time.monotonic() + CONVERGE_TIMEOUT_S
        left: list[str] = ["not checked yet"]
        while time.monotonic() < deadline:
            assert daemon.poll() is None, log.read_text()[-4000:]
            runs = list(instance.get_runs())
            if runs and all(r.is_finished for r in runs):
                left = _left(table, iceberg, kafka, v1)
                if not left:
                    break
            time.sleep(3)
        states = [(r.job_name, r.status.value, r.tags.get("cdc/trigger")) for r in runs]
        assert not left, f"base still differs: {left[:10]}\nruns: {states}"
    failed = [r for r in runs if r.status != dg.DagsterRunStatus.SUCCESS]
    assert not failed, states
    assert any(r.tags.get("cdc/trigger") == "schema_changes" for r in runs), states


def _left(
    table: Table, iceberg: IcebergCatalogResource, kafka: KafkaResource, v1: TableSpec
) -> list[str]:
    current = table.spec()
    if current.source.table != "users_v2":
        return [f"spec still reads {current.source.table} (version {current.spec_version})"]
    layout = base_layout(current)
    try:
        rows = read_table(iceberg, layout.namespace, layout.name)
        dead = dead_letter_layout(current)
        letters = read_table(iceberg, dead.namespace, dead.name)
    except Exception as exc:  # not created yet
        return [f"not readable yet: {exc}"]
    diffs = base_differences(current, rows, oracle(v1, current, kafka))
    return diffs + [f"dead letter: {r['reason']}" for r in letters]
