"""The `onboard_tables` job: create the Iceberg tables of the selected specs (all by default)
and publish each table's schema package (`pipeline.evolution.artifacts`; a no-op when published).

One shared job for every table keeps loading fast at thousands of tables. The packages build
in processes of their own (``publish_tables``) while Spark creates the tables: a package build
costs about three times a table's DDL.
"""

from concurrent.futures import ThreadPoolExecutor

import dagster as dg
from pydantic import Field

from cdc_assets.pipeline.evolution.artifacts import publish_tables
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.resources.spark import SparkResource
from cdc_assets.settings import artifacts_root
from cdc_assets.spec.models import TableSpec


class OnboardConfig(dg.Config):
    tables: list[str] = Field(
        default_factory=list, description="spec names to onboard; empty means every spec"
    )


def build_onboard_job(specs: list[TableSpec]) -> dg.JobDefinition:
    """A job whose single op creates every Iceberg table (all layers) of specs."""
    by_name = {s.name: s for s in specs}

    @dg.op(name="create_spec_tables", tags={"kind": "iceberg"})
    def create_spec_tables(
        context: dg.OpExecutionContext, config: OnboardConfig, spark: SparkResource
    ) -> dg.Output[list[str]]:
        unknown = sorted(set(config.tables) - set(by_name))
        if unknown:
            raise dg.Failure(f"unknown table spec(s) {unknown}; known: {sorted(by_name)}")
        selected = [by_name[n] for n in (config.tables or sorted(by_name))]
        session = spark.get_session()
        created: list[str] = []
        existing: list[str] = []
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="packages") as background:
            packages = background.submit(publish_tables, selected, artifacts_root(spark.home))
            namespaces: set[str] = set()
            for spec in selected:
                for outcome in ensure_tables(session, spark.catalog.name, spec, namespaces):
                    (created if outcome.created else existing).append(outcome.identifier)
                context.log.info(f"{spec.name}: tables ready")
            published = packages.result()
        new = [f"{p.distribution}=={p.version}" for p in published if p.created]
        context.log.info(
            f"schema packages: {len(published)} ready, {len(new)} new"
            + (f" ({', '.join(new[:20])}{', ...' if len(new) > 20 else ''})" if new else "")
        )
        return dg.Output(
            created,
            metadata={
                "tables_created": created,
                "tables_existing": existing,
                "specs": [s.name for s in selected],
            },
        )

    @dg.job(name="onboard_tables", description="Create the Iceberg tables of table specs.")
    def onboard_job() -> None:
        create_spec_tables()

    return onboard_job
