"""An ingest that decoded with the old spec commits after an evolution finished (issue 27).

The race the daemon can run into, forced deterministically: an ingest run is started in a
process of its own (as the daemon's run launcher starts one), with the spec it loaded (v1); it
reads and decodes a batch that holds the source's new shape (a column added, a column
widened past INT, or both in one ALTER) and is held just before its commit (hold point
``ingest_before_commit``). Meanwhile the ``schema_changes`` sensor starts the evolution, which
applies both changes and backfills; it finds nothing of the held batch. Released, the ingest
commits rows with the new column null and the wide values as dead letters, then catches up
(``pipeline.evolution.catch_up``); the upsert follows. Base must equal an independent replay of the
topic
under the final spec, with no dead letter left and no ledger coordinate twice.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from cdc_assets.checks.runner import run_checks
from cdc_assets.pipeline.evolution.evolve import backfill_from_ledger
from cdc_assets.pipeline.shared.failpoint import HOLD_ENV
from cdc_assets.pipeline.shared.meta_tables import read_history
from cdc_assets.pipeline.shared.offsets import committed_offsets
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.pipeline.upsert.upsert import spark_identifier
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.layers import (
    all_layouts,
    base_layout,
    dead_letter_layout,
    ledger_layout,
)
from cdc_assets.settings import Settings
from cdc_assets.spec.models import ColumnSpec
from cdc_assets_dev.demo.events import workload
from cdc_assets_tests.conftest import PROJECT_ROOT
from cdc_assets_tests.integration.test_evolve import later, wide_logins
from cdc_assets_tests.integration.test_ingest import read_table
from cdc_assets_tests.integration.test_schema_evolution_flow import (
    Table,
    _cursors,
    _tick,
    schema_record,
    with_column,
    with_type,
)
from cdc_assets_tests.integration.test_upsert import assert_base_matches, expected_base, ingest

pytestmark = pytest.mark.integration

HELD_TIMEOUT_S = 300.0

# The run worker: the project's definitions over the table's spec directory, the ingest job
# executed as Dagster executes it; the run's materialization metadata printed as JSON.
CHILD = """
import json
from datetime import UTC, datetime
import dagster as dg
from cdc_assets.definitions import build_defs
from cdc_assets.resources import build_resources
from cdc_assets.sensors.new_offsets import current_hour_key
from cdc_assets.settings import load_settings

settings = load_settings()
resources = build_resources(settings)
resources["spark"] = resources["spark"].model_copy(update={"master": "local[1]"})
defs = build_defs(settings=settings, resource_overrides=resources)
result = defs.resolve_job_def("ingest_ledgers").execute_in_process(
    instance=dg.DagsterInstance.ephemeral(),
    partition_key=current_hour_key(datetime.now(UTC)),
)
assert result.success
# The run's own materialization comes last (one per further hour written may precede it).
mat = [
    e.event_specific_data.materialization
    for e in result.get_asset_materialization_events()
    if e.asset_key == dg.AssetKey(["cdc", "users_cdc"])
][-1]
wanted = ("spec_version", "dead_letters", "catch_up_")
values = {k: v.value for k, v in mat.metadata.items() if k.startswith(wanted)}
print("METADATA " + json.dumps(values, default=str))
"""


def start_held_ingest(table: Table, hold_dir: Path) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "CDC_ASSETS_HOME": str(table.settings.home),
        "CDC_ASSETS_SPECS": str(table.specs_dir),
        HOLD_ENV: f"ingest_before_commit={hold_dir}",
    }
    return subprocess.Popen(
        [sys.executable, "-c", CHILD],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_held(child: subprocess.Popen[str], hold_dir: Path) -> None:
    deadline = time.monotonic() + HELD_TIMEOUT_S
    while not (hold_dir / "ingest_before_commit.held").exists():
        if child.poll() is not None:
            out, err = child.communicate()
            raise AssertionError(f"the ingest ended before its hold point:\n{out}\n{err[-4000:]}")
        assert time.monotonic() < deadline, "the ingest never reached its hold point"
        time.sleep(0.2)


# "add" alone and "widen" alone are each half of "both" (the row-image catch-up, the redrive of
# the wide values); the unit tests of the catch-up rules take them one at a time. One race run
# costs about a minute of the suite, so the integration test races the case that covers both.
@pytest.mark.parametrize("change", ["both"])
def test_an_ingest_committing_after_the_evolution_loses_no_value(
    change: str,
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    resources: dict[str, Any],
    tmp_path: Path,
) -> None:
    _cursors.clear()
    table = Table(it_settings, kafka, tmp_path)
    v1 = table.v1
    ensure_tables(spark, "lake", v1)
    table.produce(workload(v1, random.Random(71), keys=30, events=90))
    ingest(spark, iceberg, kafka, v1)
    instance = dg.DagsterInstance.ephemeral()

    # The source adds `phone`, widens login_count to BIGINT, or both in one ALTER; the rows
    # after it carry phones and, every third, a login count beyond INT.
    adds, widens = change in ("add", "both"), change in ("widen", "both")
    final = v1
    ddl = []
    if adds:
        final = with_column(
            final, ColumnSpec(id=9, name="phone", type="varchar(32)"), "display_name"
        )
        ddl.append("ADD COLUMN phone varchar(32) AFTER display_name")
    if widens:
        final = with_type(final, "login_count", "bigint")
        ddl.append("MODIFY login_count BIGINT NOT NULL DEFAULT 0")
    table.produce([schema_record(final, "ALTER TABLE users " + ", ".join(ddl))], table.schema_topic)
    after = later(workload(final, random.Random(72), keys=30, events=90), 1)
    table.produce(wide_logins(after) if widens else after)

    hold_dir = tmp_path / "hold"
    hold_dir.mkdir()
    child = start_held_ingest(table, hold_dir)
    try:
        wait_held(child, hold_dir)
        # The daemon's sensor tick and the evolution it starts, while the ingest is held.
        defs = table.defs(resources)
        (request,) = _tick(defs, "schema_changes", instance, resources).run_requests
        run = defs.resolve_job_def("evolve_schemas").execute_in_process(
            instance=instance,
            run_config=request.run_config,
            asset_selection=list(request.asset_selection or []),
        )
        assert run.success
        assert table.spec().spec_version == 2
        assert_history_is_the_live_tables(iceberg, table.spec())
        (hold_dir / "ingest_before_commit.release").touch()
        out, err = child.communicate(timeout=HELD_TIMEOUT_S)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, err[-4000:]
    line = next(x for x in out.splitlines() if x.startswith("METADATA "))
    metadata = json.loads(line.removeprefix("METADATA "))
    assert metadata["spec_version"] == 1  # it did decode with the old spec
    assert (metadata["dead_letters"] > 0) == widens  # the wide values, refused by v1
    assert metadata["catch_up_versions"] == "1 -> 2"
    assert metadata["catch_up_redriven"] == metadata["dead_letters"]
    assert (metadata["catch_up_ledger_rows"] > 0) == adds  # the phones, from the row images

    # The upsert the ledger_updated sensor starts after the ingest, as Dagster runs it.
    current = table.spec()
    upsert = (
        table.defs(resources).resolve_job_def("upsert_bases").execute_in_process(instance=instance)
    )
    assert upsert.success
    assert_base_matches(current, iceberg, expected_base(current, kafka))
    dead = read_table(iceberg, *_names(dead_letter_layout(current)))
    assert dead == [], dead[:3]
    ledger = read_table(iceberg, *_names(ledger_layout(current)))
    coordinates = [(r["_kafka_partition"], r["_kafka_offset"]) for r in ledger]
    assert len(coordinates) == len(set(coordinates)), "a Kafka record is in the ledger twice"
    # The checks see the redrive for what it is, not as lost or waiting dead letters.
    outcomes, _ = run_checks(
        table.defs(resources), instance, checks=["offsets_accounted", "dead_letter_rate"]
    )
    by_name = {o.check: o for o in outcomes}
    accounted = by_name["offsets_accounted"]
    assert accounted.passed, (accounted.description, accounted.metadata)
    assert accounted.metadata["redriven_since"] == metadata["dead_letters"]
    rate = by_name["dead_letter_rate"]
    assert rate.passed, rate.description
    assert rate.metadata["redriven"] == metadata["dead_letters"]
    if not adds:
        return

    # image_values compares the typed values with the row images: clean now; a value lost from
    # the ledger and base (as without the catch-up) fails it, with examples; backfill fixes it.
    def image_values() -> Any:
        (outcome,) = run_checks(table.defs(resources), instance, checks=["image_values"])[0]
        return outcome

    clean = image_values()
    assert clean.passed, clean.description
    assert clean.metadata["ledger_rows_compared"] > 0
    # lost from ledger rows of even offsets, and from base rows of odd ones
    for layout, parity in ((ledger_layout(current), 0), (base_layout(current), 1)):
        spark.sql(
            f"UPDATE {spark_identifier('lake', layout)} SET phone = NULL "
            f"WHERE phone IS NOT NULL AND _kafka_offset % 2 = {parity}"
        )
    lost = image_values()
    assert not lost.passed
    assert lost.metadata["ledger_mismatches"]["phone"] > 0
    assert lost.metadata["base_mismatches"] > 0
    assert any("phone: image " in e for e in lost.metadata["examples"])
    assert "--column phone" in lost.description
    backfill_from_ledger(spark, "lake", iceberg.load_catalog(), current, ["phone"])
    assert image_values().passed
    assert_base_matches(current, iceberg, expected_base(current, kafka))


def assert_history_is_the_live_tables(iceberg: IcebergCatalogResource, spec: Any) -> None:
    """The audit trail's newest entry names the live tables' own schema ids, snapshot ids and
    ledger offsets (nothing else has committed since the evolution)."""
    catalog = iceberg.load_catalog()
    entry = read_history(catalog, spec.name)[-1]
    assert (entry.decision, entry.to_version) == ("applied", spec.spec_version)
    live_schemas, live_snapshots = {}, {}
    for layer, layout in all_layouts(spec).items():
        live = catalog.load_table(f"{layout.namespace}.{layout.name}")
        live_schemas[layer] = live.schema().schema_id
        if live.current_snapshot() is not None:
            live_snapshots[layer] = live.current_snapshot().snapshot_id
    assert entry.iceberg_schema_ids == live_schemas
    assert entry.snapshot_ids, "the backfill recorded no snapshot"
    assert entry.snapshot_ids == {k: live_snapshots[k] for k in entry.snapshot_ids}
    ledger = catalog.load_table(".".join(_names(ledger_layout(spec))))
    recorded = {int(p): o for p, o in (entry.kafka_offsets or {}).items()}
    assert recorded == committed_offsets(ledger) != {}


def _names(layout: Any) -> tuple[str, str]:
    return layout.namespace, layout.name
