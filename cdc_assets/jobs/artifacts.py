"""The `publish_schema_artifacts` job: the snapshot side of schema packages. It publishes the
package of every table at its current spec version and of every view at its current derived
schema (views with Spark's types when they exist), skipping versions already published, so a
lost or new artifact directory is rebuilt from the specs and the catalog alone."""

from pathlib import Path

import dagster as dg

from cdc_assets.pipeline.evolution.artifacts import publish_tables, publish_view
from cdc_assets.pipeline.evolution.views import live_columns, published_schema
from cdc_assets.resources.spark import SparkResource
from cdc_assets.schema.views import derive_all, table_schema
from cdc_assets.settings import artifacts_root
from cdc_assets.spec.load import load_specs
from cdc_assets.spec.views_load import load_views

ARTIFACTS_JOB = "publish_schema_artifacts"


def build_artifacts_job(specs_dir: Path, views_dir: Path) -> dg.JobDefinition:
    @dg.op(name="publish_artifacts")
    def publish_artifacts(context: dg.OpExecutionContext, spark: SparkResource) -> None:
        root = artifacts_root(spark.home)
        specs = load_specs(specs_dir)
        published = publish_tables(specs, root)
        views = load_views(views_dir)
        if views:
            session = spark.get_session()
            derived = derive_all([table_schema(s) for s in specs], views)
            for view in views:
                live = live_columns(session, spark.catalog.name, view.name) or []
                published.append(publish_view(published_schema(derived[view.name], live), root))
        created = [f"{p.distribution}=={p.version}" for p in published if p.created]
        context.log.info(f"{len(published)} packages, {len(created)} new: {created}")
        context.add_output_metadata(
            {"index": str(root / "simple"), "packages": len(published), "new": created}
        )

    @dg.job(
        name=ARTIFACTS_JOB,
        description="Publish the schema package of every table and view that lacks its current "
        "version (a snapshot of the specs and the catalog).",
    )
    def publish_schema_artifacts() -> None:
        publish_artifacts()

    return publish_schema_artifacts
