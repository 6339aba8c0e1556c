"""The schema asset of a table: its spec version, moved by schema evolution.

Materializing ``schema/<table>_schema`` applies one proposed change (a proposed spec, or the
source's CREATE TABLE with the DDL audit trail) in three phases and reports the plan as a
readable diff.
The pool ``cdc_evolve/<table>`` (limit 1) serializes evolutions of one table in the order they
were queued; other tables are not blocked.
"""

import json
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import dagster as dg
from pydantic import Field

from cdc_assets.assets.keys import node_name
from cdc_assets.assets.metadata import markdown_summary
from cdc_assets.pipeline.bootstrap.source_schema import source_identity
from cdc_assets.pipeline.evolution.artifacts import publish_table
from cdc_assets.pipeline.evolution.converge import EvolutionRejectedError, converge
from cdc_assets.pipeline.ingest.ingest import ingest_incremental
from cdc_assets.resources.iceberg import IcebergCatalogResource
from cdc_assets.resources.kafka import KafkaResource
from cdc_assets.resources.spark import SparkResource
from cdc_assets.settings import artifacts_root
from cdc_assets.spec.load import load_spec
from cdc_assets.spec.models import TableSpec


class EvolveConfig(dg.Config):
    proposed_spec: str = Field(default="", description="YAML of the proposed spec version")
    source_ddl: str = Field(default="", description="the source table's CREATE TABLE")
    audit_ddl: list[str] = Field(
        default_factory=list, description="DDL that ran on the source since the current version"
    )
    trigger: Literal["manual", "push", "pull"] = "manual"
    detected_at: str = Field(default="", description="ISO time the change was seen")
    kafka_offsets: dict[str, int] = Field(
        default_factory=dict, description="ledger offsets per partition when it was seen"
    )
    seen_on: str = Field(
        default="", description="the server whose change it is (a sharded table's shard)"
    )
    source_attnums: dict[str, int] = Field(
        default_factory=dict,
        description="PostgreSQL: the source's column numbers (name -> attnum), kept in the "
        "evolved spec so that later renames and drops are proved by them",
    )
    source_position: str = Field(
        default="",
        description="the change's source position as JSON (the schema-change record's source "
        "block: binlog file and pos, gtid); bounds the re-decoding of a column whose encoding "
        "changed",
    )


# Built once for every table's schema op: inferring it from the class per op was a third of
# the schema assets' share of a 1,000-spec code location's load.
EVOLVE_CONFIG_SCHEMA = EvolveConfig.to_config_schema().as_field()


def evolve_run_config(table: str, **config: Any) -> dict[str, Any]:
    """Run config of an evolution of ``table`` (for sensors and the CLI)."""
    return {"ops": {node_name("schema", table): {"config": config}}}


def build_schema_asset(
    spec: TableSpec, specs_dir: Path, asset_args: dict[str, Any], source_url: str | None = None
) -> dg.AssetsDefinition:
    """``source_url``: the JDBC URL of the table's source, where it is reachable; a PostgreSQL
    source's column numbers are then read when a change's shape lacks a column (renamed or
    dropped?)."""

    @dg.asset(  # type: ignore[untyped-decorator]
        **asset_args, pool=f"cdc_evolve/{spec.name}", config_schema=EVOLVE_CONFIG_SCHEMA
    )
    def schema(
        context: dg.AssetExecutionContext,
        spark: SparkResource,
        iceberg: IcebergCatalogResource,
        kafka: KafkaResource,
    ) -> dg.MaterializeResult:  # type: ignore[type-arg]
        config = EvolveConfig(**context.op_execution_context.op_config)

        def drain(current: TableSpec) -> None:
            ingest_incremental(
                spark.get_session(), spark.catalog.name, iceberg.load_catalog(), kafka, current
            )

        try:
            result = converge(
                spark.get_session,
                spark.catalog.name,
                iceberg.load_catalog(),
                specs_dir,
                spec.name,
                proposed_yaml=config.proposed_spec or None,
                source_ddl=config.source_ddl or None,
                audit_ddl=config.audit_ddl,
                trigger=config.trigger,
                detected_at=datetime.fromisoformat(config.detected_at)
                if config.detected_at
                else None,
                # None: the ledger's own offsets when the change is applied (an empty dict
                # would record no offsets at all in the audit trail).
                kafka_offsets={int(p): o for p, o in config.kafka_offsets.items()} or None,
                change_position=json.loads(config.source_position)
                if config.source_position
                else None,
                source_attnums=config.source_attnums or None,
                read_identity=(
                    (lambda: source_identity(spark.get_session(), source_url, spec))
                    if source_url and not config.source_attnums
                    else None
                ),
                drain=drain,
            )
        except EvolutionRejectedError as err:
            where = f"the change seen on server {config.seen_on}: " if config.seen_on else ""
            raise dg.Failure(
                description=f"{where}{err}",
                metadata={
                    "diff": dg.MetadataValue.md(f"```\n{err.plan.describe()}\n```"),
                    "reasons": [str(r) for r in err.plan.rejections],
                },
            ) from None
        plan_text = result.plan.describe()
        context.log.info(plan_text)
        if result.refused:
            # Applied in part: visible in the run and its metadata, and on the schema_converged
            # check until the source or the spec moves.
            context.log.warning(
                f"{spec.name}: refused, not applied: " + "; ".join(str(r) for r in result.refused)
            )
        meta: dict[str, Any] = {
            "decision": result.decision,
            "trigger": config.trigger,
            "spec_version": result.to_version,
            "from_version": result.from_version,
            "diff": dg.MetadataValue.md(f"```\n{plan_text}\n```"),
            "iceberg_schema_ids": result.schema_ids,
            "seconds": result.seconds,
            "spec_file": result.spec_path.name,
            "refused": [str(r) for r in result.refused],
        }
        # The table's schema package at its (new) version: consumers pin it like a library.
        published = publish_table(load_spec(result.spec_path), artifacts_root(spark.home))
        meta["artifact"] = f"{published.distribution}=={published.version}"
        if result.backfill is not None:
            meta["backfill_ledger_rows"] = result.backfill.ledger_rows_updated
            meta["backfill_base_rows"] = result.backfill.base_rows_updated
            meta["redriven_dead_letters"] = result.backfill.redriven
            # Row images whose value the new type refuses (a retyped column's old text that
            # is no number, say): left null in the new column, counted and listed, not hidden.
            meta["backfill_rejected_rows"] = result.backfill.ledger_rows_rejected
            if result.backfill.rejected_examples:
                meta["backfill_rejected_examples"] = result.backfill.rejected_examples
        meta["summary"] = markdown_summary(
            f"schema of {spec.name}: v{result.from_version} -> v{result.to_version}",
            {
                "decision": result.decision,
                "trigger": config.trigger,
                "changes": len(result.plan.changes),
                "backfilled base rows": meta.get("backfill_base_rows", 0),
            },
        )
        return dg.MaterializeResult(metadata=meta)

    return schema  # type: ignore[no-any-return]
