"""The upsert's catch-up after an evolution (``pipeline.evolution.catch_up``), at the pipeline's
level.

An upsert that merges ledger rows decoded under an older spec runs the evolution's backfill
again, unless a backfill that ran to its end before the upsert read the ledger had read those
rows (its ``backfill-done`` ledger commit). First the common case, which no longer pays a
second backfill: rows decoded with v1, the evolution to v2 and its backfill, then the upsert.
Then the case the catch-up exists for: an ingest still on v1 commits after the evolution's
backfill; the upsert that merges its rows must catch up, or the new column's values are lost.
Base must equal an independent replay of the topic under v2 after each. Then an upsert that
loaded v1 before the evolution merges rows decoded with v2: it catches up too, nulls included.
Then a MERGE on v2 of bucketed rows built with v1 (two upserts' steps interleaved). Last an
upsert on a host whose spec file lags the version the catalog stores. A test of its own: an
upsert that loaded v1 merges nothing but the rows an evolution's redrive put in the ledger.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from cdc_assets.pipeline.evolution.catch_up import after_upsert
from cdc_assets.pipeline.evolution.converge import converge
from cdc_assets.pipeline.evolution.evolve import BACKFILL_DONE_KIND
from cdc_assets.pipeline.shared.offsets import KIND_PROPERTY, REDRIVE_KIND
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.pipeline.upsert.upsert import build_bucketed, merge_base
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.layers import ledger_layout
from cdc_assets.settings import Settings
from cdc_assets.spec.models import ColumnSpec, TableSpec
from cdc_assets.spec.versions import render_spec_yaml
from cdc_assets_dev.demo.events import workload
from cdc_assets_tests.integration.test_evolve import later, wide_logins
from cdc_assets_tests.integration.test_schema_evolution_flow import (
    Table,
    with_column,
    with_type,
)
from cdc_assets_tests.integration.test_upsert import (
    assert_base_matches,
    expected_base,
    ingest,
)


def _upsert_with_catch_up(
    spark: Any,
    iceberg: IcebergCatalogResource,
    spec: TableSpec,
    specs_dir: Path,
    built_with: TableSpec | None = None,
) -> Any:
    """An upsert as the base asset runs it: bucketed (with ``built_with``, by default the
    MERGE's spec), MERGE, then the catch-up rule."""
    catalog = iceberg.load_catalog()
    build_bucketed(spark, "lake", catalog, built_with or spec)
    merged = merge_base(spark, "lake", catalog, spec)
    assert merged.applied
    return after_upsert(
        spark,
        "lake",
        catalog,
        spec,
        specs_dir,
        merged.from_state.ledger_sequence,
        merged.to_state.ledger_sequence,
        merged.built_with,
    )


def test_an_upsert_after_the_evolution_s_backfill_skips_the_catch_up_a_later_v1_ingest_not(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    tmp_path: Path,
) -> None:
    table = Table(it_settings, kafka, tmp_path)
    v1 = table.v1
    ensure_tables(spark, "lake", v1)
    phone = ColumnSpec(id=9, name="phone", type="varchar(32)")
    v2 = with_column(v1, phone, "display_name")

    # The source added `phone`; the jobs still decode with v1 (the values wait in _row_json).
    table.produce(later(workload(v2, random.Random(82), keys=20, events=60), 1))
    ingest(spark, iceberg, kafka, v1)
    catalog = iceberg.load_catalog()
    done = converge(
        lambda: spark,
        "lake",
        catalog,
        table.specs_dir,
        v1.name,
        proposed_yaml=render_spec_yaml(v2),
    )
    assert done.decision == "applied"
    v2 = table.spec()
    assert v2.spec_version == 2
    ledger = catalog.load_table(".".join((ledger_layout(v2).namespace, ledger_layout(v2).name)))
    kinds = [
        (s.summary.additional_properties if s.summary else {}).get(KIND_PROPERTY)
        for s in ledger.snapshots()
    ]
    assert BACKFILL_DONE_KIND in kinds
    # The backfill read every v1 commit: the upsert merges recovered values, no second backfill.
    assert _upsert_with_catch_up(spark, iceberg, v2, table.specs_dir) is None
    assert_base_matches(v2, iceberg, expected_base(v2, kafka))

    # An ingest that loaded v1 before the evolution commits after it (the daemon's race): its
    # rows lack the phones, and no backfill read them. The upsert that merges them catches up.
    table.produce(later(workload(v2, random.Random(83), keys=20, events=60), 2))
    ingest(spark, iceberg, kafka, v1)
    caught = _upsert_with_catch_up(spark, iceberg, v2, table.specs_dir)
    assert caught is not None
    assert "phone" in caught.columns
    assert caught.backfill.base_rows_updated > 0
    assert_base_matches(v2, iceberg, expected_base(v2, kafka))

    # An upsert that loaded v1 before the evolution (a micro-batch's upsert, or an upsert run
    # queued before it) merges rows the ledger holds right under v2: its MERGE writes v1's
    # columns only, so it catches up whatever the rows were decoded with, nulls included: a key
    # whose newest change set `phone` to null must not keep an older change's value.
    table.produce(later(workload(v2, random.Random(84), keys=20, events=60), 3))
    ingest(spark, iceberg, kafka, v2)
    caught = _upsert_with_catch_up(spark, iceberg, v1, table.specs_dir)
    assert caught is not None
    assert "merged rows of v1" in caught.reason
    assert "phone" in caught.columns
    assert caught.backfill.base_rows_updated > 0
    assert_base_matches(v2, iceberg, expected_base(v2, kafka))

    # The MERGE is on v2 but its bucketed rows were built with v1 (two upserts of the table
    # interleaved their steps: one's bucketed step replaced the other's): the rows lack `phone`.
    table.produce(later(workload(v2, random.Random(85), keys=20, events=60), 4))
    ingest(spark, iceberg, kafka, v2)
    caught = _upsert_with_catch_up(spark, iceberg, v2, table.specs_dir, built_with=v1)
    assert caught is not None
    assert "merged rows of v1" in caught.reason
    assert caught.backfill.base_rows_updated > 0
    assert_base_matches(v2, iceberg, expected_base(v2, kafka))

    # A host whose spec file lags (it still reads v1; the evolution ran elsewhere and stored v2
    # in the catalog) runs an upsert with v1: the ledger's schema is not the file's, so the
    # catch-up asks the catalog, and catches up to v2.
    path = table.specs_dir / f"{v1.name}.yaml"
    evolved_yaml = path.read_text()
    path.write_text(render_spec_yaml(v1))
    try:
        table.produce(later(workload(v2, random.Random(86), keys=20, events=60), 5))
        ingest(spark, iceberg, kafka, v2)
        caught = _upsert_with_catch_up(spark, iceberg, v1, table.specs_dir)
    finally:
        path.write_text(evolved_yaml)
    assert caught is not None
    assert caught.to_version == 2
    assert caught.backfill.base_rows_updated > 0
    assert_base_matches(v2, iceberg, expected_base(v2, kafka))


def test_an_upsert_on_v1_that_merges_only_redriven_rows_catches_up(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    tmp_path: Path,
) -> None:
    """The CI failure of stop 78 (test_daemon_race), forced: a key's newest change was refused
    by v1 (a login count beyond INT), the evolution's redrive put it in the ledger (a commit of
    its own), and an upsert that loaded v1 merged that commit alone. Its MERGE updated the key
    but left `phone` at the earlier change's value, and the redrive commit recorded no spec
    version, so the catch-up found nothing it consumed and did not run."""
    table = Table(it_settings, kafka, tmp_path)
    v1 = table.v1
    ensure_tables(spark, "lake", v1)
    phone = ColumnSpec(id=9, name="phone", type="varchar(32)")
    final = with_type(with_column(v1, phone, "display_name"), "login_count", "bigint")
    table.produce(workload(v1, random.Random(91), keys=20, events=40))
    # The source's new shape, still decoded with v1: the phones wait in the row images, and
    # every third image (a login count beyond INT) is a dead letter.
    table.produce(wide_logins(later(workload(final, random.Random(92), keys=20, events=60), 1)))
    ingest(spark, iceberg, kafka, v1)
    catalog = iceberg.load_catalog()
    build_bucketed(spark, "lake", catalog, v1)
    assert merge_base(spark, "lake", catalog, v1).applied
    done = converge(
        lambda: spark,
        "lake",
        catalog,
        table.specs_dir,
        v1.name,
        proposed_yaml=render_spec_yaml(final.model_copy(update={"spec_version": 2})),
    )
    assert done.decision == "applied"
    current = table.spec()
    ledger = catalog.load_table(".".join(_names(ledger_layout(current))))
    kinds = [
        (s.summary.additional_properties if s.summary else {}).get(KIND_PROPERTY)
        for s in ledger.snapshots()
    ]
    assert REDRIVE_KIND in kinds  # the wide values reached the ledger in a commit of their own
    caught = _upsert_with_catch_up(spark, iceberg, v1, table.specs_dir)
    assert caught is not None
    assert "merged rows of v1" in caught.reason
    assert_base_matches(current, iceberg, expected_base(current, kafka))


def _names(layout: Any) -> tuple[str, str]:
    return layout.namespace, layout.name


def test_an_evolution_backfills_a_bucketed_run_built_but_not_merged(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    tmp_path: Path,
) -> None:
    """Soak seed 147: an upsert built its bucketed rows with v1 and failed before its MERGE; the
    evolution's backfill then gave those pending rows the new column's values, carrying the
    bucketed run's summary on so the merge still recognises it. It carried Iceberg's own
    summary entries too (``added-files-size``), and Iceberg refused the commit: the evolution
    failed. The pending run must get the values, and base must equal the replay after it."""
    table = Table(it_settings, kafka, tmp_path)
    v1 = table.v1
    ensure_tables(spark, "lake", v1)
    phone = ColumnSpec(id=9, name="phone", type="varchar(32)")
    v2 = with_column(v1, phone, "display_name")
    table.produce(workload(v1, random.Random(93), keys=15, events=40))
    ingest(spark, iceberg, kafka, v1)
    catalog = iceberg.load_catalog()
    build_bucketed(spark, "lake", catalog, v1)
    assert merge_base(spark, "lake", catalog, v1).applied
    # The source added `phone`; an upsert on v1 builds its bucketed rows and fails before it
    # merges them (the rows lack the phones, which wait in the row images).
    table.produce(later(workload(v2, random.Random(94), keys=15, events=40), 1))
    ingest(spark, iceberg, kafka, v1)
    assert build_bucketed(spark, "lake", catalog, v1).rows > 0
    done = converge(
        lambda: spark,
        "lake",
        catalog,
        table.specs_dir,
        v1.name,
        proposed_yaml=render_spec_yaml(v2),
    )
    assert done.decision == "applied"
    current = table.spec()
    # The retried upsert merges the pending run, which holds the phones now.
    merged = merge_base(spark, "lake", catalog, current)
    assert merged.applied
    assert_base_matches(current, iceberg, expected_base(current, kafka))
