"""Consumer views in the Iceberg catalog: create or replace a view from its definition, read the
live view's columns, and the schema consumers get (derived attributes, Spark's resolved types).

The derivation (`cdc_assets.schema.views`) proves nullability, enum values, docs and casing; the
types come from Spark's analysis of the created view, which is what every reader will get.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cdc_assets.schema.views import (
    RelationSchema,
    ViewDefinition,
    ViewError,
    derive_all,
    table_schema,
    type_text,
)
from cdc_assets.spec.load import load_specs
from cdc_assets.spec.views_load import load_views
from cdc_assets.sql.ddl import quote


@dataclass(frozen=True)
class LiveColumn:
    name: str
    type: str  # as type_text renders it


def view_identifier(catalog: str, name: str) -> str:
    namespace, view = name.split(".", 1)
    return ".".join(quote(p) for p in (catalog, namespace, view))


def current_view(
    specs_dir: Path, views_dir: Path, name: str
) -> tuple[ViewDefinition, RelationSchema]:
    """The view's definition as the directory holds it now and its schema derived from the
    current specs (evolutions write new spec versions without a code reload)."""
    specs = load_specs(specs_dir)
    views = load_views(views_dir)
    view = next((v for v in views if v.name == name), None)
    if view is None:
        raise ViewError(f"{views_dir}: view {name} no longer exists")
    derived = derive_all([table_schema(s) for s in specs], views)
    return view, derived[name]


def create_view(spark: Any, catalog: str, view: ViewDefinition) -> None:
    """CREATE OR REPLACE VIEW in the Iceberg catalog. Spark analyses the query first: a view that
    no longer resolves fails here and the published view stays as it was."""
    namespace = view.name.split(".", 1)[0]
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {quote(catalog)}.{quote(namespace)}")
    spark.sql(f"CREATE OR REPLACE VIEW {view_identifier(catalog, view.name)} AS {view.sql}")


def live_columns(spark: Any, catalog: str, name: str) -> list[LiveColumn] | None:
    """The published view's columns, or None when it does not exist."""
    identifier = view_identifier(catalog, name)
    namespace, view = name.split(".", 1)
    exists = spark.sql(f"SHOW VIEWS IN {quote(catalog)}.{quote(namespace)} LIKE '{view}'").count()
    if not exists:
        return None
    fields = spark.table(identifier).schema.fields
    return [LiveColumn(f.name.lower(), type_text(f.dataType.simpleString())) for f in fields]


def published_schema(derived: RelationSchema, live: list[LiveColumn]) -> RelationSchema:
    """The derived schema with Spark's resolved types (sqlglot's inference can differ, e.g. the
    width of an integer COALESCE)."""
    types = {c.name: c.type for c in live}
    return replace(
        derived,
        columns=tuple(replace(c, type=types.get(c.name, c.type)) for c in derived.columns),
    )


def stale_columns(derived: RelationSchema, live: list[LiveColumn]) -> list[str]:
    """How the published view differs from what its definition gives today (column names and
    order): a `SELECT *` view keeps the columns it was created with until it is created again."""
    want = [c.name for c in derived.columns]
    have = [c.name for c in live]
    if want == have:
        return []
    out = [f"missing {c}" for c in want if c not in have]
    out += [f"extra {c}" for c in have if c not in want]
    return out or [f"column order {have} instead of {want}"]
