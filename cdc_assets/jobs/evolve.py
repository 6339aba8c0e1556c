"""Schema evolution jobs: `evolve_schemas` (apply a change to one table) and `check_schema_drift`
(pull detection) and the daily schedule of the drift check; `sensors/drift_detected.py` acts on
its findings.

Pull compares, per table, the source's shape (the newest record of Debezium's schema-change topic
for MySQL/MariaDB, the schema embedded in the newest row events for PostgreSQL) with the spec,
and the live Iceberg schemas with the spec. A table that drifted gets an evolution run (trigger
`pull`); push and pull seeing the same change apply it once, because an evolution whose proposal
equals the current spec is a recorded no-op. A clean table gets its routine maintenance when the
run asked for it (`maintain_when_clean`).
"""

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import Field

from cdc_assets.assets.keys import asset_key
from cdc_assets.errors import SpecError
from cdc_assets.jobs.asset_job import AssetJob
from cdc_assets.pipeline.bootstrap.source_schema import source_create_table, source_identity
from cdc_assets.pipeline.evolution.schema_topic import (
    newest_row_schema,
    newest_schema_change,
    source_tables,
)
from cdc_assets.pipeline.evolution.spec_store import current_spec
from cdc_assets.pipeline.health.health import iceberg_differences
from cdc_assets.pipeline.shared.tables import mark_source_tables
from cdc_assets.resources.iceberg import IcebergCatalogResource
from cdc_assets.resources.kafka import KafkaResource
from cdc_assets.resources.spark import SparkResource
from cdc_assets.schema.evolution import classify
from cdc_assets.schema.shape import leading_server, shape_verdict
from cdc_assets.spec.connect_schema import create_table_from_fields
from cdc_assets.spec.information_schema import identity_audit
from cdc_assets.spec.models import TableSpec
from cdc_assets.spec.source_table import followed
from cdc_assets.spec.versions import render_spec_yaml

EVOLVE_JOB = "evolve_schemas"
DRIFT_JOB = "check_schema_drift"
DRIFT_SCHEDULE = "daily_drift_check"


def build_evolve_job() -> AssetJob:
    return dg.define_asset_job(
        EVOLVE_JOB,
        selection=dg.AssetSelection.key_prefixes(["schema"]),
        description="Apply one schema change to the selected table: Iceberg schemas, spec "
        "version, backfill from the ledger.",
    )


class DriftConfig(dg.Config):
    tables: list[str] = Field(default_factory=list, description="spec names; empty = all")
    maintain_when_clean: bool = Field(
        default=False, description="start maintain_tables for each table without drift"
    )


def drift_of(
    spec: TableSpec,
    specs_dir: Path,
    kafka: KafkaResource,
    catalog: Any,
    spark: Callable[[], Any] | None = None,
    source_urls: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """What the drift check reports for one table (observation metadata). The source's shape
    comes from its information_schema when it is reachable, else from the newest events.

    ``source_urls``: where to read an information_schema, by server (one entry for a table of
    one source; one per shard with a URL for a sharded one). Of several shards, the one
    ``leading_server`` picks is reported (and named in ``seen_on``)."""
    current = current_spec(catalog, specs_dir, spec.name)
    found: dict[str, Any] = {"spec_version": current.spec_version, "source": "none"}
    drift = False
    seen = newest_schema_change(kafka, current)
    live = None
    if spark is not None and source_urls:
        shapes = {
            server: ddl
            for server, url in source_urls.items()
            if (ddl := source_create_table(spark(), url, current)) is not None
        }
        found["servers_compared"] = sorted(shapes)
        leading = leading_server(current, shapes)
        if leading is not None:
            server, live = leading, shapes[leading]
    if live is not None:
        found.update(
            source=f"information_schema of {current.source.database} on {server}",
            source_ddl=live,
            # the schema-change topic's newest DDL, where there is one, proves renames
            audit_ddl=[seen.change.ddl] if seen is not None else [],
        )
        identity = (
            source_identity(spark(), source_urls[server], current)
            if spark is not None and source_urls and not current.source.shards
            else None
        )
        if identity is not None:
            # PostgreSQL: the column numbers prove renames and drops (a shard's numbers are
            # its own table's, so a sharded spec keeps none)
            found["audit_ddl"] = [*found["audit_ddl"], *identity_audit(current, identity)]
            found["source_attnums"] = dict(identity.live)
        if current.source.shards:
            found["seen_on"] = server
    elif seen is not None:
        found.update(
            source=f"schema-change topic {seen.topic} offset {seen.partition}:{seen.offset}",
            source_ddl=seen.change.create_table,
            audit_ddl=[seen.change.ddl],
        )
    elif current.source.connector == "postgresql":
        fields = newest_row_schema(kafka, current)
        if fields is not None:
            found.update(
                source="schema embedded in the newest events of "
                + ", ".join(current.source.topics),
                source_ddl=create_table_from_fields(current, fields),
                audit_ddl=[],
            )
    if found.get("source_ddl"):
        verdict = shape_verdict(current, found["source_ddl"], found["audit_ddl"])
        found["plan"] = verdict.describe()
        drift = verdict.changed
    # A dropped source table is no shape to evolve to: reported, not drift. A renamed one is
    # followed (the spec reads the new name's topic after the old one's), where the policy and
    # the topic's name allow; otherwise reported with the reason.
    tables = source_tables(kafka, current)
    if tables:
        found["source_table"] = {name: state.state for name, state in sorted(tables.items())}
        # the mirror is kept, and says so to readers outside Dagster (a table property)
        mark_source_tables(catalog, current, tables)
        renamed = tables.get(current.name)
        if renamed is not None and renamed.state == "renamed":
            follow = followed(current, renamed)
            if isinstance(follow, str):
                found["source_table_not_followed"] = follow
            else:
                found["proposed_spec"] = render_spec_yaml(follow)
                found["plan"] = classify(current, follow).describe()
                drift = True
    diffs = {k: v for k, v in iceberg_differences(catalog, current).items() if v}
    found["iceberg_differences"] = diffs
    found["drift"] = drift or bool(diffs)
    return found


def build_drift_job(
    specs: list[TableSpec],
    specs_dir: Path,
    source_urls: Mapping[str, Mapping[str, str]] | None = None,
) -> dg.JobDefinition:
    """``source_urls``: spec name -> server -> JDBC URL of its reachable sources (every shard
    with a URL, for a sharded table)."""
    names = {s.name for s in specs}

    @dg.op(name="check_drift", out=dg.Out(dg.Nothing))
    def check_drift(
        context: dg.OpExecutionContext,
        config: DriftConfig,
        kafka: KafkaResource,
        iceberg: IcebergCatalogResource,
        spark: SparkResource,
    ) -> None:
        unknown = sorted(set(config.tables) - names)
        if unknown:
            raise SpecError(f"unknown table spec(s) {unknown}; known: {sorted(names)}")
        catalog = iceberg.load_catalog()
        for spec in specs:
            if config.tables and spec.name not in config.tables:
                continue
            urls = (source_urls or {}).get(spec.name)
            found = drift_of(spec, specs_dir, kafka, catalog, spark.get_session, urls)
            context.log_event(
                dg.AssetObservation(
                    asset_key=asset_key("schema", spec.name),
                    metadata={**found, "maintain_when_clean": config.maintain_when_clean},
                )
            )

    @dg.job(
        name=DRIFT_JOB,
        description="Compare source schema, spec and live Iceberg schemas of the selected tables; "
        "the schema_drift_detected sensor starts evolution where they differ.",
    )
    def check_schema_drift() -> None:
        check_drift()

    return check_schema_drift


def build_drift_schedule(job: dg.JobDefinition) -> dg.ScheduleDefinition:
    return dg.ScheduleDefinition(
        name=DRIFT_SCHEDULE,
        cron_schedule="0 2 * * *",
        execution_timezone="UTC",
        job=job,
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description="Daily pull detection of schema drift for every table (02:00 UTC).",
    )
