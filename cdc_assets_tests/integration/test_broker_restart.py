"""A Kafka broker restart mid-ingest (issue 26): nothing lost or doubled, the next run converges.

A broker of this test's own (the session's stays up for the others), the session's catalog.
An ingest runs in a process of its own, as a run worker would:

1. it plans its offsets, is held (hold point ``ingest_before_read``) while the broker is killed
   with SIGKILL and started again on the same port and data, then reads from the new process;
2. it reads and decodes a batch, is held before its commit (``ingest_before_commit``) while the
   broker is killed, and commits with the broker down (the commit needs Iceberg only); the
   broker comes back, more records arrive, and the next ingest takes exactly those.

After each step the ledger holds every record of the topic once, as the oracle decides it.
The Kafka Connect worker killed and restarted mid-workload is phase (b) of
``test_sources_converge.py``.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cdc_assets.pipeline.ingest.ingest import ingest_incremental
from cdc_assets.pipeline.shared.failpoint import HOLD_ENV
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.settings import ENV_KAFKA_BOOTSTRAP, Settings
from cdc_assets.spec.models import TableSpec
from cdc_assets_dev.demo.events import produce, workload
from cdc_assets_dev.stack import local_process
from cdc_assets_dev.stack.local_stack import StackState, stack_up
from cdc_assets_tests.conftest import PROJECT_ROOT
from cdc_assets_tests.integration.test_evolve import later
from cdc_assets_tests.integration.test_ingest import isolated
from cdc_assets_tests.integration.test_ingest_recovery import oracle_check
from cdc_assets_tests.support.bad_records import users_spec

pytestmark = pytest.mark.integration

TIMEOUT_S = 300.0

INGEST = """
import sys
from cdc_assets.pipeline.ingest.ingest import ingest_incremental
from cdc_assets.resources import build_resources
from cdc_assets.settings import load_settings
from cdc_assets.spec.models import TableSpec

spec = TableSpec.model_validate_json(open(sys.argv[1]).read())
res = build_resources(load_settings())
spark = res["spark"].model_copy(update={"master": "local[1]"}).get_session()
result = ingest_incremental(spark, "lake", res["iceberg"].load_catalog(), res["kafka"], spec)
print(f"INGESTED {result.read}", flush=True)
"""


def held_ingest(
    it_settings: Settings, bootstrap: str, spec: TableSpec, point: str, hold: Path
) -> subprocess.Popen[str]:
    spec_file = hold / "spec.json"
    spec_file.write_text(spec.model_dump_json(by_alias=True))
    env = {
        **os.environ,
        "CDC_ASSETS_HOME": str(it_settings.home),  # the session's catalog and warehouse
        ENV_KAFKA_BOOTSTRAP: bootstrap,  # this test's broker
        HOLD_ENV: f"{point}={hold}",
    }
    return subprocess.Popen(
        [sys.executable, "-c", INGEST, str(spec_file)],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_held(child: subprocess.Popen[str], hold: Path, point: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not (hold / f"{point}.held").exists():
        if child.poll() is not None:
            raise AssertionError(child.communicate()[1][-4000:])
        assert time.monotonic() < deadline, f"the ingest never reached {point}"
        time.sleep(0.2)


def finish(child: subprocess.Popen[str]) -> int:
    out, err = child.communicate(timeout=TIMEOUT_S)
    assert child.returncode == 0, err[-4000:]
    return int(next(x for x in out.splitlines() if x.startswith("INGESTED ")).split()[1])


def kill_broker(state: StackState) -> None:
    os.kill(state.kafka_pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while local_process.pid_alive(state.kafka_pid):  # reaps it when this process started it
        assert time.monotonic() < deadline, "the broker outlived SIGKILL"
        time.sleep(0.1)


def test_a_broker_restart_mid_ingest_loses_and_doubles_nothing(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    broker: Settings,
    tmp_path: Path,
) -> None:
    state = stack_up(broker)
    kafka = KafkaResource(bootstrap_servers=state.bootstrap_servers, home=str(broker.home))
    spec = isolated(users_spec(), partitions=2, kafka=kafka)
    ensure_tables(spark, "lake", spec)
    first = workload(spec, random.Random(11), keys=20, events=80)
    produce(first, spec.source.topic, state.bootstrap_servers)

    # 1. between the offsets plan and the read
    hold = tmp_path / "read"
    hold.mkdir()
    child = held_ingest(it_settings, state.bootstrap_servers, spec, "ingest_before_read", hold)
    wait_held(child, hold, "ingest_before_read")
    kill_broker(state)
    restarted = stack_up(broker)
    assert restarted.kafka_pid != state.kafka_pid
    assert restarted.bootstrap_servers == state.bootstrap_servers  # same port, same data
    (hold / "ingest_before_read.release").touch()
    assert finish(child) == len(first)
    oracle_check(spec, kafka, iceberg)

    # 2. between the read and the commit: the broker is down while the ledger commits
    second = later(workload(spec, random.Random(12), keys=20, events=80), 1)
    produce(second, spec.source.topic, restarted.bootstrap_servers)
    hold = tmp_path / "commit"
    hold.mkdir()
    child = held_ingest(
        it_settings, restarted.bootstrap_servers, spec, "ingest_before_commit", hold
    )
    wait_held(child, hold, "ingest_before_commit")
    kill_broker(restarted)
    (hold / "ingest_before_commit.release").touch()
    assert finish(child) == len(second)
    back = stack_up(broker)
    third = later(workload(spec, random.Random(13), keys=20, events=40), 2)
    produce(third, spec.source.topic, back.bootstrap_servers)
    resumed = ingest_incremental(spark, "lake", iceberg.load_catalog(), kafka, spec)
    assert resumed.read == len(third)  # exactly the records that came after
    oracle_check(spec, kafka, iceberg)
