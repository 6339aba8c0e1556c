"""Spec versions survive a multi-host deployment (issue 21, part 5): an evolution run on one
machine stores its version in the catalog, and a code location that loads another checkout of
the spec directory (another working directory, its file still at the old version) runs with the
new version, without a redeploy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg

from cdc_assets.assets.keys import asset_key
from cdc_assets.definitions import build_defs
from cdc_assets.pipeline.evolution.converge import converge
from cdc_assets.pipeline.evolution.spec_store import current_spec, stored_specs
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.sensors.spec_directory import newer_versions
from cdc_assets.settings import ENV_HOME, ENV_SPECS, Settings
from cdc_assets.spec.load import load_spec
from cdc_assets.spec.models import ColumnSpec, TableSpec
from cdc_assets.spec.versions import render_spec_yaml
from cdc_assets_tests.integration.test_ingest import isolated
from cdc_assets_tests.integration.test_upsert import example_spec

# A run in a process and working directory of its own: what version do its definitions get?
VERSION_IN_A_RUN = """
import json
from cdc_assets.assets.keys import asset_key
from cdc_assets.definitions import build_defs
graph = build_defs().resolve_asset_graph()
node = graph.get(asset_key("schema", "users"))
print(json.dumps({"version": node.metadata["spec_version"]}))
"""


def with_column(spec: TableSpec, name: str) -> TableSpec:
    column = ColumnSpec(id=max(c.id for c in spec.columns) + 1, name=name, type="varchar(40)")
    return spec.model_copy(
        update={"columns": [*spec.columns, column], "spec_version": spec.spec_version + 1}
    )


def test_a_version_evolved_elsewhere_reaches_every_process(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    resources: dict[str, Any],
    tmp_path: Path,
) -> None:
    spec = isolated(example_spec(it_settings, "users"), kafka=kafka)
    ensure_tables(spark, "lake", spec)
    location, run_host = tmp_path / "code-location", tmp_path / "run-worker"
    for directory in (location, run_host):
        directory.mkdir()
        (directory / "users.yaml").write_text(render_spec_yaml(spec), encoding="utf-8")
    catalog = iceberg.load_catalog()

    # The evolution runs on the worker, in its own checkout.
    v2 = with_column(spec, "nickname")
    result = converge(
        lambda: spark, "lake", catalog, run_host, "users", proposed_yaml=render_spec_yaml(v2)
    )
    assert (result.decision, result.to_version) == ("applied", 2)
    assert load_spec(run_host / "users.yaml").spec_version == 2
    assert load_spec(location / "users.yaml").spec_version == 1  # the other checkout's file

    # Every reader of the code location's checkout gets v2 from the catalog.
    assert current_spec(catalog, location, "users") == load_spec(run_host / "users.yaml")
    defs = build_defs(
        settings=replace(it_settings, specs_dir=location), resource_overrides=resources
    )
    schema = defs.resolve_asset_graph().get(asset_key("schema", "users"))
    assert schema.metadata["spec_version"] == 2
    assert "nickname" in [c.name for c in schema.metadata["dagster/column_schema"].columns]
    # ... its sensor sees that definitions loaded before the evolution are behind ...
    assert newer_versions([spec], stored_specs(catalog)) == ["users v1 -> v2"]
    sensor = defs.get_sensor_def("spec_directory")
    with dg.instance_for_test() as instance:
        skip = sensor.evaluate_tick(dg.build_sensor_context(instance=instance))
    assert "stored users" not in (skip.skip_message or "")  # these definitions are current
    # ... a run in another process and working directory too ...
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", VERSION_IN_A_RUN],
        cwd=elsewhere,
        env={**os.environ, ENV_HOME: str(it_settings.home), ENV_SPECS: str(location)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"version": 2}
    # ... and the same change proposed from there is already applied, not applied twice.
    again = converge(
        lambda: spark, "lake", catalog, location, "users", proposed_yaml=render_spec_yaml(v2)
    )
    assert again.decision == "no-op"

    # A person's edit of the reviewed file to a newer version wins over the stored one.
    v3 = with_column(load_spec(run_host / "users.yaml"), "locale")
    (location / "users.yaml").write_text(render_spec_yaml(v3), encoding="utf-8")
    assert current_spec(catalog, location, "users").spec_version == 3

    # Another deployment's table of the same spec name on the same catalog is not this one's.
    other = isolated(example_spec(it_settings, "users"), kafka=kafka)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "users.yaml").write_text(render_spec_yaml(other), encoding="utf-8")
    assert current_spec(catalog, tmp_path / "other", "users").spec_version == 1


def test_a_meta_table_of_an_older_release_merges_its_manifests_from_the_next_append(
    iceberg: IcebergCatalogResource,
) -> None:
    """The stored versions are read after every ingest: a table left with a manifest per
    append (an older release made no merging) gets the property and is merged when the next
    version is stored, and no stored row is lost."""
    import pyarrow as pa

    from cdc_assets.pipeline.shared.meta_tables import create_meta_table
    from cdc_assets.schema.history import spec_versions_layout

    catalog = iceberg.load_catalog()
    layout = replace(spec_versions_layout(), name="spec_versions_older_release")
    older = create_meta_table(catalog, replace(layout, properties={"format-version": "2"}))
    assert "commit.manifest-merge.enabled" not in older.metadata.properties
    row = {
        "table": "t",
        "base_table": "app.t",
        "spec_version": 1,
        "spec_yaml": "name: t",
        "recorded_at": datetime.now(UTC),
    }
    # Past Iceberg's default of 100 manifests before a merge appends.
    for version in range(1, 106):
        older.append(
            pa.Table.from_pylist([{**row, "spec_version": version}], older.schema().as_arrow())
        )
    assert len(older.current_snapshot().manifests(older.io)) == 105
    table = create_meta_table(catalog, layout)
    assert table.metadata.properties["commit.manifest-merge.enabled"] == "true"
    table.append(pa.Table.from_pylist([{**row, "spec_version": 106}], table.schema().as_arrow()))
    table = catalog.load_table(f"{layout.namespace}.{layout.name}")
    assert len(table.current_snapshot().manifests(table.io)) < 5
    versions = sorted(r["spec_version"] for r in table.scan().to_arrow().to_pylist())
    assert versions == list(range(1, 107))


def _version_row(version: int) -> dict[str, Any]:
    return {
        "table": "t",
        "base_table": "app.t",
        "spec_version": version,
        "spec_yaml": "name: t",
        "recorded_at": datetime.now(UTC),
    }


def test_a_meta_table_is_rewritten_into_one_file_when_its_appends_reach_compact_files(
    iceberg: IcebergCatalogResource,
) -> None:
    """Each stored version is a data file and a snapshot of its own; the append that brings the
    table to COMPACT_FILES files rewrites its rows into one and expires the snapshots before
    that rewrite. Every row stays."""
    from cdc_assets.pipeline.shared.meta_tables import COMPACT_FILES, append_row, data_files
    from cdc_assets.schema.history import spec_versions_layout

    catalog = iceberg.load_catalog()
    layout = replace(spec_versions_layout(), name="spec_versions_compacted")
    name = f"{layout.namespace}.{layout.name}"
    for version in range(1, COMPACT_FILES + 6):
        append_row(catalog, layout, _version_row(version))
        files = data_files(catalog.load_table(name))
        assert files == (version if version < COMPACT_FILES else version - COMPACT_FILES + 1)
    table = catalog.load_table(name)
    assert len(table.metadata.snapshots) == 6  # the rewrite and the five appends after it
    versions = sorted(r["spec_version"] for r in table.scan().to_arrow().to_pylist())
    assert versions == list(range(1, COMPACT_FILES + 6))


def test_a_compaction_gives_way_to_a_row_appended_since_it_read(
    iceberg: IcebergCatalogResource,
) -> None:
    """Two processes store versions at once: a rewrite planned on the snapshot before the other
    process's append is refused (it would drop that row), and the next compaction keeps it."""
    from cdc_assets.pipeline.shared.meta_tables import compact, create_meta_table, data_files
    from cdc_assets.schema.history import spec_versions_layout

    catalog = iceberg.load_catalog()
    layout = replace(spec_versions_layout(), name="spec_versions_compaction_race")
    name = f"{layout.namespace}.{layout.name}"
    table = create_meta_table(catalog, layout)
    for version in (1, 2, 3):
        table.append(pa_rows(table, _version_row(version)))
    stale = catalog.load_table(name)
    other = catalog.load_table(name)
    other.append(pa_rows(other, _version_row(4)))
    assert compact(stale, at_files=1) is False
    fresh = catalog.load_table(name)
    assert data_files(fresh) == 4
    assert compact(fresh, at_files=1) is True
    table = catalog.load_table(name)
    assert data_files(table) == 1
    assert len(table.metadata.snapshots) == 1
    assert sorted(r["spec_version"] for r in table.scan().to_arrow().to_pylist()) == [1, 2, 3, 4]


def pa_rows(table: Any, row: dict[str, Any]) -> Any:
    import pyarrow as pa

    return pa.Table.from_pylist([row], schema=table.schema().as_arrow())


def test_a_read_again_of_the_stored_versions_sees_every_new_version(
    it_settings: Settings, iceberg: IcebergCatalogResource, tmp_path: Path
) -> None:
    """The spec sensors read every stored version each tick; an unchanged table is answered from
    the last full read, and a version stored since (a new metadata file) is read at once."""
    from cdc_assets.pipeline.evolution.spec_store import base_table, record_spec

    catalog = iceberg.load_catalog()
    users = example_spec(it_settings, "users")
    probe = users.model_copy(update={"name": "stored_versions_probe", "spec_version": 2})
    record_spec(catalog, probe, tmp_path)
    first = stored_specs(catalog)
    key = ("stored_versions_probe", base_table(probe))
    assert first[key].spec_version == 2
    again = stored_specs(catalog)
    assert again == first
    assert again[key] is first[key]  # answered from the last read, not parsed again
    assert stored_specs(catalog, {"stored_versions_probe"}) == {key: first[key]}
    record_spec(catalog, probe.model_copy(update={"spec_version": 3}), tmp_path)
    assert stored_specs(catalog)[key].spec_version == 3
    assert stored_specs(catalog, {"stored_versions_probe"})[key].spec_version == 3
    assert stored_specs(catalog, cache=False)[key].spec_version == 3
