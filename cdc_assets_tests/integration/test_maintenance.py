"""Maintenance on the real stack: compaction, tombstone purge, expiry that keeps the pipeline's
state, orphan removal, and maintenance racing upserts. Base is compared with the plain-Python
replay of everything in Kafka (support/base_oracle.py)."""

from __future__ import annotations

import os
import random
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow.compute as pc

from cdc_assets.jobs.maintenance import (
    MAINTENANCE_OP,
    build_maintenance_job,
    maintenance_run_config,
)
from cdc_assets.pipeline.maintenance.maintenance import (
    MaintenanceConflictError,
    MaintenanceResult,
    maintain_table,
)
from cdc_assets.pipeline.shared.offsets import committed_offsets
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.pipeline.shared.watermark import UPSERT_KIND, WATERMARK, base_state, state_snapshot
from cdc_assets.pipeline.upsert.upsert import build_bucketed, merge_base
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.layers import TableLayout, all_layouts
from cdc_assets.settings import Settings
from cdc_assets.spec.models import TableSpec
from cdc_assets_dev.demo.events import produce, workload
from cdc_assets_tests.integration.test_ingest import isolated, read_table
from cdc_assets_tests.integration.test_upsert import (
    assert_base_matches,
    example_spec,
    expected_base,
    ingest,
    upsert,
)


def with_retention(spec: TableSpec, **maintenance: int) -> TableSpec:
    tombstone_hours = maintenance.pop("tombstone_retention_hours", None)
    base = spec.base.model_copy(
        update={"maintenance": spec.base.maintenance.model_copy(update=maintenance)}
    )
    if tombstone_hours is not None:
        base = base.model_copy(update={"tombstone_retention_hours": tombstone_hours})
    return spec.model_copy(update={"base": base})


def load(iceberg: IcebergCatalogResource, layout: TableLayout) -> Any:
    return iceberg.load_catalog().load_table(f"{layout.namespace}.{layout.name}")


def file_counts(iceberg: IcebergCatalogResource, layout: TableLayout) -> tuple[int, int]:
    """Live data files and position-delete files of the table's current snapshot."""
    files = load(iceberg, layout).inspect.files()
    data = pc.sum(pc.equal(files["content"], 0)).as_py() or 0
    deletes = pc.sum(pc.equal(files["content"], 1)).as_py() or 0
    return int(data), int(deletes)


def plant_file(
    iceberg: IcebergCatalogResource, layout: TableLayout, name: str, age: timedelta
) -> Path:
    """A file under the table's data directory that no snapshot references, ``age`` old."""
    location = urlparse(load(iceberg, layout).location()).path
    path = Path(location) / "data" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not referenced by any snapshot")
    stamp = (datetime.now(UTC) - age).timestamp()
    os.utime(path, (stamp, stamp))
    return path


def test_maintenance_compacts_purges_expires_and_keeps_the_pipeline_state(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
) -> None:
    spec = isolated(example_spec(it_settings, "users"), partitions=2, kafka=kafka)
    spec = with_retention(
        spec, snapshot_retention_hours=1, retain_last_snapshots=1, tombstone_retention_hours=1
    )
    layouts = all_layouts(spec)
    ensure_tables(spark, "lake", spec)
    records = workload(spec, random.Random(11), keys=40, events=400)
    bootstrap = kafka.resolved_bootstrap()
    for start in range(0, 300, 100):
        produce(records[start : start + 100], spec.source.topic, bootstrap)
        ingest(spark, iceberg, kafka, spec)
        upsert(spark, iceberg, spec)
    expected = expected_base(spec, kafka)
    assert_base_matches(spec, iceberg, expected)

    data_before, deletes_before = file_counts(iceberg, layouts["base"])
    assert deletes_before > 0, "merge-on-read upserts left position deletes"
    state_before = base_state(load(iceberg, layouts["base"]))
    offsets_before = committed_offsets(load(iceberg, layouts["cdc"]), spec.source.topic)
    tombstones_before = len(read_table(iceberg, **_where(layouts["tombstones"])))
    assert tombstones_before > 0
    old_orphan = plant_file(iceberg, layouts["base"], "orphan-old.parquet", timedelta(hours=100))
    young_orphan = plant_file(iceberg, layouts["base"], "orphan-young.parquet", timedelta(0))

    # Two hours on: every snapshot is past its one-hour retention, every tombstone too.
    messages: list[str] = []
    result = maintain_table(
        spark,
        "lake",
        iceberg.load_catalog(),
        spec,
        now=datetime.now(UTC) + timedelta(hours=2),
        log=messages.append,
    )

    assert not result.failed
    data_after, deletes_after = file_counts(iceberg, layouts["base"])
    assert data_after < data_before, (data_before, data_after)
    assert deletes_after < deletes_before, (deletes_before, deletes_after)
    assert result.total("rewritten_data_files_count") > 0
    assert result.total("tombstones_purged") == tombstones_before
    assert read_table(iceberg, **_where(layouts["tombstones"])) == []
    assert_base_matches(spec, iceberg, expected)

    # Expiry went as far as retention allows and kept what the pipeline resumes from.
    assert result.total("snapshots_expired") > 0
    base = load(iceberg, layouts["base"])
    assert base_state(base) == state_before
    state = state_snapshot(base)
    assert state is not None
    assert base.current_snapshot().snapshot_id != state.snapshot_id, "compaction committed"
    ledger = load(iceberg, layouts["cdc"])
    assert committed_offsets(ledger, spec.source.topic) == offsets_before
    assert len(ledger.snapshots()) == 1, "base has read the whole ledger: only the offsets remain"
    assert not old_orphan.exists()
    assert young_orphan.exists(), "a file younger than a day may belong to a running commit"
    young_orphan.unlink()
    assert any("expire_snapshots on base" in m for m in messages)

    # The pipeline carries on from the kept state.
    produce(records[300:], spec.source.topic, bootstrap)
    ingest(spark, iceberg, kafka, spec)
    bucketed, merged = upsert(spark, iceberg, spec)
    assert bucketed.from_state == state_before
    assert merged.applied
    assert merged.storage_partitioned is True, "compaction keeps base bucketed like the changes"
    assert_base_matches(spec, iceberg, expected_base(spec, kafka))


def _where(layout: TableLayout) -> dict[str, str]:
    return {"namespace": layout.namespace, "name": layout.name}


@dataclass
class RaceLog:
    merges: list[int] = field(default_factory=list)  # commit attempts of each base MERGE
    maintenance: list[tuple[float, float, MaintenanceResult]] = field(default_factory=list)
    conflicts: list[MaintenanceConflictError] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    upserts_done_at: float = 0.0


def test_maintenance_racing_upserts(
    it_settings: Settings,
    resources: dict[str, Any],
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
) -> None:
    spec = isolated(example_spec(it_settings, "orders"), partitions=1, kafka=kafka)
    ensure_tables(spark, "lake", spec)
    records = workload(spec, random.Random(5), keys=50, events=360)
    size = len(records) // 6 + 1
    chunks = [records[i : i + size] for i in range(0, len(records), size)]
    bootstrap = kafka.resolved_bootstrap()
    produce(chunks[0], spec.source.topic, bootstrap)
    ingest(spark, iceberg, kafka, spec)
    upsert(spark, iceberg, spec)
    race = RaceLog()
    upserts_done = threading.Event()
    maintenance_started = threading.Event()

    def upserts() -> None:
        try:
            maintenance_started.wait(60)
            for chunk in chunks[1:]:
                produce(chunk, spec.source.topic, bootstrap)
                ingest(spark, iceberg, kafka, spec)
                build_bucketed(spark, "lake", iceberg.load_catalog(), spec)
                merged = merge_base(spark, "lake", iceberg.load_catalog(), spec)
                race.merges.append(merged.attempts)
        except BaseException as exc:
            race.errors.append(exc)
        finally:
            race.upserts_done_at = time.monotonic()
            upserts_done.set()

    def maintenance() -> None:
        try:
            while not upserts_done.is_set():
                started = time.monotonic()
                maintenance_started.set()
                try:
                    result = maintain_table(spark, "lake", iceberg.load_catalog(), spec)
                except MaintenanceConflictError as err:
                    race.conflicts.append(err)
                    result = err.result
                race.maintenance.append((started, time.monotonic(), result))
        except BaseException as exc:
            race.errors.append(exc)
        finally:
            maintenance_started.set()

    threads = [threading.Thread(target=upserts), threading.Thread(target=maintenance)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not any(t.is_alive() for t in threads)
    assert not race.errors, race.errors
    assert len(race.merges) == len(chunks) - 1
    assert race.maintenance
    assert race.maintenance[0][0] < race.upserts_done_at, "maintenance ran during the upserts"
    compacted = sum(r.total("rewritten_data_files_count") for _, _, r in race.maintenance)
    assert compacted > 0, "compaction committed while upserts ran"
    assert_base_matches(spec, iceberg, expected_base(spec, kafka))

    # Only upsert commits carry base's state: maintenance commits never picked up the
    # snapshot properties the upsert thread had set in the shared session's conf.
    base = load(iceberg, all_layouts(spec)["base"])
    tombstones = load(iceberg, all_layouts(spec)["tombstones"])
    for snapshot in base.snapshots() + tombstones.snapshots():
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        if WATERMARK in props:
            assert props.get(UPSERT_KIND) == "upsert", (snapshot.snapshot_id, props)
    bucketed, merged = upsert(spark, iceberg, spec)
    assert bucketed.up_to_date
    assert merged.up_to_date

    # Quiet again: the Dagster job runs the same maintenance and reports it as metadata.
    state = base_state(base)
    run = build_maintenance_job([spec]).execute_in_process(
        run_config=maintenance_run_config(spec.name), resources=resources
    )
    assert run.success
    output = run.output_for_node(MAINTENANCE_OP)
    assert output["commit_retries"] == 0
    materialized = [e for e in run.all_node_events if e.event_type_value == "STEP_OUTPUT"]
    metadata = materialized[0].event_specific_data.metadata  # type: ignore[union-attr]
    assert "expire_snapshots" in metadata["steps"].value
    assert base_state(load(iceberg, all_layouts(spec)["base"])) == state
    assert_base_matches(spec, iceberg, expected_base(spec, kafka))
    print(
        f"race: {len(race.maintenance)} maintenance runs, {compacted} data files compacted, "
        f"{sum(r.totals()['commit_retries'] for _, _, r in race.maintenance)} maintenance commit "
        f"retries, {len(race.conflicts)} runs with a step that kept conflicting; base MERGE "
        f"commit attempts {race.merges}"
    )


# Maintenance in a process of its own (as its Dagster run would be), printing what it rewrote.
MAINTENANCE_CHILD = """
import json, sys
from cdc_assets.pipeline.maintenance.maintenance import maintain_table
from cdc_assets.resources import build_resources
from cdc_assets.settings import load_settings
from cdc_assets.spec.models import TableSpec

spec = TableSpec.model_validate_json(open(sys.argv[1]).read())
res = build_resources(load_settings())
spark = res["spark"].model_copy(update={"master": "local[1]"}).get_session()
result = maintain_table(spark, "lake", res["iceberg"].load_catalog(), spec)
print("TOTALS " + json.dumps(result.totals()), flush=True)
"""


def test_a_compaction_between_the_merge_plan_and_its_commit_forces_a_retry(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    tmp_path: Path,
    monkeypatch: Any,
) -> None:
    """The race of the test above, forced: the base MERGE is planned, then held inside its first
    task (hold point ``merge_base_scan``) while maintenance in another process compacts base and
    commits; released, the MERGE's commit conflicts (its deletes point at rewritten files), it is
    retried on the new snapshot, and base equals the replay."""
    import json
    import subprocess
    import sys

    from cdc_assets.pipeline.shared.failpoint import HOLD_ENV
    from cdc_assets_tests.conftest import PROJECT_ROOT

    spec = isolated(example_spec(it_settings, "orders"), partitions=1, kafka=kafka)
    ensure_tables(spark, "lake", spec)
    records = workload(spec, random.Random(6), keys=40, events=400)
    size = len(records) // 4 + 1
    chunks = [records[i : i + size] for i in range(0, len(records), size)]
    bootstrap = kafka.resolved_bootstrap()
    for chunk in chunks[:-1]:  # several upserts: base buckets hold files to compact
        produce(chunk, spec.source.topic, bootstrap)
        ingest(spark, iceberg, kafka, spec)
        upsert(spark, iceberg, spec)
    produce(chunks[-1], spec.source.topic, bootstrap)
    ingest(spark, iceberg, kafka, spec)
    build_bucketed(spark, "lake", iceberg.load_catalog(), spec)

    hold = tmp_path / "hold"
    hold.mkdir()
    monkeypatch.setenv(HOLD_ENV, f"merge_base_scan={hold}")
    outcome: dict[str, Any] = {}

    def merge() -> None:
        try:
            outcome["merged"] = merge_base(spark, "lake", iceberg.load_catalog(), spec)
        except BaseException as exc:
            outcome["error"] = exc

    merging = threading.Thread(target=merge)
    merging.start()
    deadline = time.monotonic() + 300
    while not (hold / "merge_base_scan.held").exists():
        assert merging.is_alive(), outcome
        assert time.monotonic() < deadline, "the MERGE never reached its hold point"
        time.sleep(0.2)
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(spec.model_dump_json(by_alias=True))
    env = {**os.environ, "CDC_ASSETS_HOME": str(it_settings.home)}
    env.pop(HOLD_ENV)
    child = subprocess.run(
        [sys.executable, "-c", MAINTENANCE_CHILD, str(spec_file)],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert child.returncode == 0, child.stderr[-4000:]
    totals = json.loads(next(x for x in child.stdout.splitlines() if x.startswith("TOTALS "))[7:])
    assert totals["data_files_rewritten"] > 0, totals  # base's files changed under the MERGE
    (hold / "merge_base_scan.release").touch()
    merging.join(300)
    assert not merging.is_alive()
    assert "error" not in outcome, outcome
    merged = outcome["merged"]
    assert merged.applied
    assert merged.attempts >= 2, "the MERGE's commit should have conflicted and been retried"
    assert_base_matches(spec, iceberg, expected_base(spec, kafka))
