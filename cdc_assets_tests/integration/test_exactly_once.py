"""Exactly once without Dagster's pools (issue 26): two ingests and upserts of one table started
outside one Dagster instance never write a Kafka record into the ledger twice.

1. Forced: an ingest in a process of its own reads and decodes a batch and is held before its
   commit (hold point ``ingest_before_commit``); a second ingest of the same table runs to the end
   meanwhile. Released, the first one's commit is refused (the ledger moved past the snapshot it
   read its offsets from), it starts over from the winner's offsets and finds nothing new.
2. Free-running: in several rounds, new events arrive and two processes each ingest and upsert the
   table at the same moment.

After each, the ledger equals the oracle's replay of the topic (each record once) and base equals
the replay of the ledger.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cdc_assets.pipeline.ingest.ingest import ingest_incremental
from cdc_assets.pipeline.ingest.ledger_commit import BRANCH_PREFIX
from cdc_assets.pipeline.shared.failpoint import HOLD_ENV
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.layers import ledger_layout
from cdc_assets.settings import Settings
from cdc_assets.spec.models import TableSpec
from cdc_assets_dev.demo.events import produce, workload
from cdc_assets_tests.conftest import PROJECT_ROOT
from cdc_assets_tests.integration.test_evolve import later
from cdc_assets_tests.integration.test_ingest import (
    assert_ledger_matches,
    consume_all,
    isolated,
    read_table,
)
from cdc_assets_tests.integration.test_upsert import (
    assert_base_matches,
    example_spec,
    expected_base,
    upsert,
)
from cdc_assets_tests.support.oracle import expected_outcome

pytestmark = pytest.mark.integration

# One race of two writers (each starts a Spark driver of its own) on tables the held-ingest test
# already wrote: a second round took 70 s of the suite and found nothing the first did not.
ROUNDS = 1
TIMEOUT_S = 300.0

# One writer: ingest, then upsert (rebuilt when the other writer's merge came first), printing
# what its ingest read.
WRITER = """
import sys
from cdc_assets.pipeline.ingest.ingest import ingest_incremental
from cdc_assets.pipeline.upsert.upsert import StaleChangesError, build_bucketed, merge_base
from cdc_assets.resources import build_resources
from cdc_assets.settings import load_settings
from cdc_assets.spec.models import TableSpec

spec = TableSpec.model_validate_json(open(sys.argv[1]).read())
res = build_resources(load_settings())
spark = res["spark"].model_copy(update={"master": "local[1]"}).get_session()
catalog = res["iceberg"]
result = ingest_incremental(spark, "lake", catalog.load_catalog(), res["kafka"], spec)
print(f"INGESTED {result.read}", flush=True)
if sys.argv[2] == "upsert":
    for attempt in range(5):
        try:
            build_bucketed(spark, "lake", catalog.load_catalog(), spec)
            merge_base(spark, "lake", catalog.load_catalog(), spec)
            break
        except StaleChangesError:
            continue
    else:
        raise SystemExit("upsert: stale five times")
print("finished", flush=True)
"""


def start_writer(
    settings: Settings, spec: TableSpec, tmp: Path, *, upsert: bool, hold: Path | None = None
) -> subprocess.Popen[str]:
    spec_file = tmp / f"{spec.name}.json"
    spec_file.write_text(spec.model_dump_json(by_alias=True))
    env = {**os.environ, "CDC_ASSETS_HOME": str(settings.home)}
    env.pop(HOLD_ENV, None)
    if hold is not None:
        env[HOLD_ENV] = f"ingest_before_commit={hold}"
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(spec_file), "upsert" if upsert else "ingest"],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(child: subprocess.Popen[str]) -> int:
    """Wait for a writer; the number of records its (last) ingest attempt read."""
    out, err = child.communicate(timeout=TIMEOUT_S)
    assert child.returncode == 0, err[-4000:]
    assert "finished" in out, out + err[-2000:]
    return int(next(x for x in out.splitlines() if x.startswith("INGESTED ")).split()[1])


def assert_ledger_is_the_topic_once(
    spec: TableSpec, kafka: KafkaResource, iceberg: IcebergCatalogResource
) -> None:
    outcomes = {
        (p, o): expected_outcome(spec, p, o, ts, k, v)
        for p, o, ts, k, v in consume_all(kafka, spec.source.topic)
    }
    layout = ledger_layout(spec)
    ledger = read_table(iceberg, layout.namespace, layout.name)
    coordinates = [(r["_kafka_partition"], r["_kafka_offset"]) for r in ledger]
    assert len(coordinates) == len(set(coordinates)), "a Kafka record is in the ledger twice"
    assert_ledger_matches(spec, outcomes, ledger)
    table = iceberg.load_catalog().load_table(f"{layout.namespace}.{layout.name}")
    assert not [b for b in table.metadata.refs if b.startswith(BRANCH_PREFIX)], "branch left"


@pytest.fixture
def spec(it_settings: Settings, kafka: KafkaResource, spark: Any) -> TableSpec:
    table = isolated(example_spec(it_settings, "users"), partitions=2, kafka=kafka)
    ensure_tables(spark, "lake", table)
    return table


def test_a_held_ingest_loses_its_race_and_writes_nothing_twice(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    spec: TableSpec,
    tmp_path: Path,
) -> None:
    bootstrap = kafka.resolved_bootstrap()
    records = workload(spec, random.Random(81), keys=25, events=120)
    produce(records, spec.source.topic, bootstrap)
    hold = tmp_path / "hold"
    hold.mkdir()
    held = start_writer(it_settings, spec, tmp_path, upsert=False, hold=hold)
    deadline = time.monotonic() + TIMEOUT_S
    while not (hold / "ingest_before_commit.held").exists():
        assert held.poll() is None, held.communicate()[1][-4000:]
        assert time.monotonic() < deadline, "the held ingest never reached its hold point"
        time.sleep(0.2)
    # The rival: another ingest of the same table, outside any shared Dagster instance.
    rival = ingest_incremental(spark, "lake", iceberg.load_catalog(), kafka, spec)
    assert rival.read == len(records)
    (hold / "ingest_before_commit.release").touch()
    assert finish(held) == 0  # refused, started over from the rival's offsets: nothing new
    assert_ledger_is_the_topic_once(spec, kafka, iceberg)


def test_two_writers_at_once_converge_to_the_replay(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    spec: TableSpec,
    tmp_path: Path,
) -> None:
    bootstrap = kafka.resolved_bootstrap()
    for n in range(ROUNDS):
        records = later(workload(spec, random.Random(90 + n), keys=25, events=150), n)
        produce(records, spec.source.topic, bootstrap)
        writers = [start_writer(it_settings, spec, tmp_path, upsert=True) for _ in range(2)]
        for writer in writers:
            finish(writer)
        assert_ledger_is_the_topic_once(spec, kafka, iceberg)
    upsert(spark, iceberg, spec)  # whatever the last merge left pending
    assert_base_matches(spec, iceberg, expected_base(spec, kafka))
