"""Consumer views as assets: ``view/<namespace>/<view>`` downstream of the base tables and views
it reads, its `view_schema` check, the `refresh_views` job and the `views_follow_tables` sensor
that re-creates the views of a table after its schema evolved (transitively, in dependency
order, as one run).

Materializing a view derives its schema from the current specs, creates or replaces the Iceberg
view and reports the schema consumers get. A view that a change broke (it uses a dropped or
renamed column) fails the run with the reason and stays published as it was; its check says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg

from cdc_assets.assets.keys import asset_key, table_of
from cdc_assets.pipeline.evolution.artifacts import publish_view
from cdc_assets.pipeline.evolution.views import (
    create_view,
    current_view,
    live_columns,
    published_schema,
    stale_columns,
)
from cdc_assets.resources.spark import SparkResource
from cdc_assets.schema.views import (
    RelationSchema,
    ViewDefinition,
    ViewError,
    dependency_order,
    relation_name,
    view_reads,
)
from cdc_assets.settings import artifacts_root
from cdc_assets.spec.models import TableSpec

VIEW_GROUP = "views"
VIEW_CHECK = "view_schema"
REFRESH_JOB = "refresh_views"


def view_key(name: str) -> dg.AssetKey:
    namespace, view = name.split(".", 1)
    return dg.AssetKey(["view", namespace, view])


def column_schema(schema: RelationSchema) -> dg.TableSchema:
    """Dagster's column schema of a table or view (shown on the asset page)."""
    columns = []
    for c in schema.columns:
        notes = [c.doc] if c.doc else []
        if c.enum:
            notes.append("one of " + ", ".join(c.enum))
        if c.display and c.display != c.name:
            notes.append(f"source name {c.display}")
        columns.append(
            dg.TableColumn(
                c.name,
                c.type,
                description="; ".join(notes) or None,
                constraints=dg.TableColumnConstraints(nullable=c.nullable),
            )
        )
    return dg.TableSchema(columns=columns)


def build_view_definitions(
    specs: list[TableSpec],
    views: list[ViewDefinition],
    catalog: str,
    specs_dir: Path,
    views_dir: Path,
) -> tuple[list[dg.AssetsDefinition], list[dg.AssetChecksDefinition]]:
    """An asset and a check per view. What each view reads is resolved here (an unknown table or
    view, or a cycle, fails the definitions with the file named); columns at run time."""
    bases = {relation_name(s): s.name for s in specs}
    ordered = dependency_order(list(bases), views)
    assets, checks = [], []
    for view in ordered:
        deps = [
            asset_key("base", bases[r]) if r in bases else view_key(r) for r in view_reads(view)
        ]
        assets.append(_view_asset(view, deps, catalog, specs_dir, views_dir))
        checks.append(_view_check(view, catalog, specs_dir, views_dir))
    return assets, checks


def _view_asset(
    view: ViewDefinition, deps: list[dg.AssetKey], catalog: str, specs_dir: Path, views_dir: Path
) -> dg.AssetsDefinition:
    @dg.asset(
        key=view_key(view.name),
        deps=deps,
        group_name=VIEW_GROUP,
        kinds={"iceberg", "spark"},
        description=f"Iceberg view {view.name} ({Path(view.origin).name}); its schema is derived "
        "from the tables it reads and follows their evolution.",
    )
    def _materialize(spark: SparkResource) -> dg.MaterializeResult:  # type: ignore[type-arg]
        definition, derived = current_view(specs_dir, views_dir, view.name)
        session = spark.get_session()
        create_view(session, catalog, definition)
        live = live_columns(session, catalog, view.name) or []
        schema = published_schema(derived, live)
        published = publish_view(schema, artifacts_root(spark.home))
        return dg.MaterializeResult(
            metadata={
                "dagster/column_schema": column_schema(schema),
                "artifact": f"{published.distribution}=={published.version}",
                "reads": list(schema.reads),
                "columns": len(schema.columns),
                "sql": dg.MetadataValue.md(f"```sql\n{definition.sql}\n```"),
            }
        )

    return _materialize


def _view_check(
    view: ViewDefinition, catalog: str, specs_dir: Path, views_dir: Path
) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=view_key(view.name),
        name=VIEW_CHECK,
        description="The view still derives from the current schemas of what it reads, and the "
        "published view has the columns its definition gives today.",
    )
    def _check(spark: SparkResource) -> dg.AssetCheckResult:
        try:
            _, derived = current_view(specs_dir, views_dir, view.name)
        except ViewError as err:
            return dg.AssetCheckResult(passed=False, metadata={"reason": str(err)})
        try:
            live = live_columns(spark.get_session(), catalog, view.name)
        except Exception as err:  # the published view no longer resolves (Spark refuses it)
            first = str(err).strip().splitlines()[0][:500]
            return dg.AssetCheckResult(
                passed=False,
                metadata={"reason": f"the published view cannot be read any more: {first}"},
            )
        if live is None:
            # Not broken, only not created yet (a new view before its first refresh).
            return dg.AssetCheckResult(
                passed=False,
                severity=dg.AssetCheckSeverity.WARN,
                metadata={"reason": "not published yet: run refresh_views"},
            )
        stale = stale_columns(derived, live)
        return dg.AssetCheckResult(
            passed=not stale,
            metadata={
                "reason": "; ".join(stale) if stale else "current",
                "columns": len(live),
            },
        )

    return _check


def build_refresh_job() -> Any:
    return dg.define_asset_job(
        REFRESH_JOB,
        selection=dg.AssetSelection.groups(VIEW_GROUP),
        description="Create or replace the consumer views (Iceberg views), in dependency order.",
    )


def downstream_views(
    tables: set[str], specs: list[TableSpec], views: list[ViewDefinition]
) -> list[str]:
    """The views that read any of ``tables`` (spec names), directly or through other views."""
    relation = {relation_name(s): s.name for s in specs}
    reached = {r for r, spec in relation.items() if spec in tables}
    found: list[str] = []
    changed = True
    while changed:
        changed = False
        for view in views:
            if view.name not in reached and reached & set(view_reads(view)):
                reached.add(view.name)
                found.append(view.name)
                changed = True
    return sorted(found)


def build_views_sensor(
    specs: list[TableSpec], views: list[ViewDefinition], evolve_job: Any, refresh_job: Any
) -> dg.RunStatusSensorDefinition:
    @dg.run_status_sensor(
        name="views_follow_tables",
        run_status=dg.DagsterRunStatus.SUCCESS,
        monitored_jobs=[evolve_job],
        request_job=refresh_job,
        minimum_interval_seconds=30,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="After a schema evolution: re-create the views that read the evolved table, "
        "directly or through other views, so their schemas follow it.",
    )
    def views_follow_tables(context: dg.RunStatusSensorContext) -> dg.RunRequest | dg.SkipReason:
        run = context.dagster_run
        tables = {t for k in run.asset_selection or () if (t := table_of(k, ("schema",)))}
        names = downstream_views(tables, specs, views)
        if not names:
            return dg.SkipReason(f"no view reads {sorted(tables) or 'the evolved table'}")
        return dg.RunRequest(
            run_key=f"views:{run.run_id}",
            asset_selection=[view_key(n) for n in names],
            tags={"cdc/trigger": "views_follow_tables", "cdc/tables": ",".join(sorted(tables))},
        )

    return views_follow_tables
