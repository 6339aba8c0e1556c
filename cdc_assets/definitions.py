"""Dagster entry point: load the table specs and assemble their definitions. Nothing else."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import dagster as dg

from cdc_assets.assets.consistency import build_consistency_assets
from cdc_assets.assets.factory import build_fleet_assets
from cdc_assets.assets.keys import table_or_name
from cdc_assets.assets.views import build_refresh_job, build_view_definitions, build_views_sensor
from cdc_assets.checks.table_checks import (
    build_checks_op,
    build_table_checks,
    scheduled_only_checks,
)
from cdc_assets.jobs.artifacts import build_artifacts_job
from cdc_assets.jobs.checks import build_check_job, build_check_schedules
from cdc_assets.jobs.continuous import build_continuous_job, build_workers_sensor
from cdc_assets.jobs.evolve import (
    build_drift_job,
    build_drift_schedule,
    build_evolve_job,
)
from cdc_assets.jobs.ingest import build_ingest_job, deployment_start, hourly_partitions
from cdc_assets.jobs.maintenance import build_maintenance_job, build_maintenance_schedule
from cdc_assets.jobs.onboard import build_onboard_job
from cdc_assets.jobs.sync import build_sync_job
from cdc_assets.jobs.upsert import build_upsert_job
from cdc_assets.local_servers.endpoints import with_local_sources
from cdc_assets.pipeline.evolution.spec_store import load_with_stored_versions
from cdc_assets.resources import build_resources
from cdc_assets.run_tables import tables_from_env
from cdc_assets.sensors.drift_detected import build_drift_sensor
from cdc_assets.sensors.ledger_updated import build_ledger_updated_sensor
from cdc_assets.sensors.new_offsets import build_new_offsets_sensor
from cdc_assets.sensors.schema_changes import build_schema_change_sensor
from cdc_assets.sensors.spec_directory import build_spec_directory_sensor
from cdc_assets.settings import Settings, load_settings
from cdc_assets.spec import TableSpec, load_specs
from cdc_assets.spec.groups import consistency_groups
from cdc_assets.spec.views_load import load_views


def build_defs(
    specs: list[TableSpec] | None = None,
    settings: Settings | None = None,
    resource_overrides: Mapping[str, Any] | None = None,
    only_tables: Collection[str] | None = None,
    local_sources: bool = True,
) -> dg.Definitions:
    """Definitions for ``specs`` (default: the spec directory of ``settings``, with its views;
    with ``only_tables``, only those specs of the directory and no views: a run worker's)."""
    # Source URLs default to the local sources of `stack up --sources`, when they run; not for
    # ``local_sources=False`` (the generated-events demo: its tables' rows come from no database).
    settings = settings or load_settings()
    if local_sources:
        settings = with_local_sources(settings)
    from_directory = specs is None
    resources = {**build_resources(settings), **(resource_overrides or {})}
    if specs is None:
        # An evolution that ran on another machine stored versions this checkout's files lack.
        # Every spec is loaded, so that load-time errors across specs (two specs on one topic)
        # stay the same in a run worker that builds a few of them.
        loaded = load_specs(settings.specs_dir)
        if only_tables is not None:
            # A consistency group's asset reads every table of the group: a run of one of
            # them builds the others' specs too, or its cut would ignore theirs.
            wanted = set(only_tables)
            for members in consistency_groups(loaded).values():
                if wanted & {m.name for m in members}:
                    wanted |= {m.name for m in members}
            loaded = [s for s in loaded if s.name in wanted]
        specs = load_with_stored_versions(loaded, resources["iceberg"].existing_catalog)
    hourly = hourly_partitions(settings.partitions_start or deployment_start(settings.home))
    assets = build_fleet_assets(
        specs,
        settings.catalog_name,
        hourly,
        settings.specs_dir,
        lambda spec: settings.source_url_of(spec.source),
        settings.tables_at_once,
    )
    ingest_job = build_ingest_job()
    registered = [
        check
        for spec in specs
        for check in build_table_checks(
            spec, settings.source_url_of(spec.source), settings.shard_source_urls(spec.source)
        )
    ]
    asset_checks = [build_checks_op(registered, settings.tables_at_once)] if registered else []
    scheduled_only = scheduled_only_checks(check_spec.key for check_spec, _ in registered)
    upsert_job = build_upsert_job(scheduled_only)
    sync_job = build_sync_job(scheduled_only)
    maintenance_job = build_maintenance_job(specs)
    evolve_job = build_evolve_job()
    continuous_job = build_continuous_job(settings.specs_dir)
    # The drift job reads every reachable source's information_schema: each shard's.
    source_urls = {s.name: settings.server_source_urls(s.source) for s in specs}
    drift_job = build_drift_job(specs, settings.specs_dir, source_urls)
    check_keys: dict[str, list[dg.AssetCheckKey]] = {}
    for check_spec, _ in registered:
        check_keys.setdefault(table_or_name(check_spec.asset_key), []).append(check_spec.key)
    check_job = build_check_job()
    # Views belong to the spec directory: a caller that hands over its own list of specs (a
    # subset, generated ones) gets no views, which may read tables outside that list.
    views = load_views(settings.views_dir) if from_directory and only_tables is None else []
    view_assets, view_checks = build_view_definitions(
        specs, views, settings.catalog_name, settings.specs_dir, settings.views_dir
    )
    refresh_job = build_refresh_job()
    group_assets, group_checks = [], []
    for group, members in consistency_groups(specs).items():
        asset, check = build_consistency_assets(group, members)
        group_assets.append(asset)
        group_checks.append(check)
    return dg.Definitions(
        assets=[*assets, *group_assets, *view_assets],
        # Every step needs the Spark session: in one process per run the driver starts once and
        # the steps share it, where Dagster's default would start a process and a driver per step
        # (CDC_ASSETS_EXECUTOR=dagster picks it: no Dagster executor at all here).
        # A run's tables go at once inside its steps (assets/tables.py), not as steps at once.
        executor=dg.in_process_executor if settings.executor == "in_process" else None,
        asset_checks=[*asset_checks, *group_checks, *view_checks],
        jobs=[
            build_onboard_job(specs),
            ingest_job,
            upsert_job,
            sync_job,
            maintenance_job,
            check_job,
            evolve_job,
            drift_job,
            refresh_job,
            build_artifacts_job(settings.specs_dir, settings.views_dir),
            continuous_job,
        ],
        schedules=[
            build_maintenance_schedule(specs, maintenance_job),
            build_drift_schedule(drift_job),
            *build_check_schedules(
                check_job,
                {s.name: s.schedule.cron for s in specs},
                check_keys,
                settings.checks_cron,
            ),
        ],
        sensors=[
            build_new_offsets_sensor(
                specs, sync_job, resources["iceberg"].existing_catalog, settings.k8s_run_tables
            ),
            build_ledger_updated_sensor(
                ingest_job, upsert_job, evolve_job, sync_job, settings.k8s_run_tables
            ),
            build_schema_change_sensor(
                specs, settings.specs_dir, evolve_job, resources["iceberg"].existing_catalog
            ),
            build_spec_directory_sensor(
                specs, settings.specs_dir, settings.webserver, resources["iceberg"].existing_catalog
            ),
            build_drift_sensor(drift_job, evolve_job, maintenance_job),
            build_views_sensor(specs, views, evolve_job, refresh_job),
            build_workers_sensor(
                specs, continuous_job, settings.worker_heartbeat_s, settings.worker_tables_at_once
            ),
        ],
        resources=resources,
    )


# A Kubernetes run pod whose run carries the sensors' dagster-k8s/config tag builds its run's
# tables only; elsewhere (no CDC_ASSETS_RUN_TABLES) every table's.
defs = build_defs(only_tables=tables_from_env())
