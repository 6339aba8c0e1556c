"""The asset factory: each table spec becomes five assets: raw -> cdc -> bucketed -> base, and
schema (the spec version, moved by schema evolution); a sixth, cdc -> history, where the spec
keeps history.

Asset keys come from ``assets.keys`` (``cdc/users_cdc``), grouped per table. The assets are
AssetSpecs of a few ops shared by every table (``topics``, ``tables``), so that a run's tables
share a step and the definitions of a thousand tables build in little time; schema stays an op
per table (its pool serializes one table's evolutions). The bodies delegate to pipeline modules.
"""

from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import dagster as dg

from cdc_assets.assets.keys import asset_key
from cdc_assets.assets.raw import build_topics_asset
from cdc_assets.assets.schema import build_schema_asset
from cdc_assets.assets.tables import TABLE_STEP_LAYERS, build_tables_asset
from cdc_assets.schema.layers import TableLayout, all_layouts
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.ddl import spark_type

KINDS = {
    "schema": {"iceberg"},
    "raw": {"kafka"},
    "cdc": {"spark", "iceberg"},
    "bucketed": {"spark", "iceberg"},
    "base": {"spark", "iceberg"},
    "history": {"spark", "iceberg"},
}


def _layout_schema(layout: TableLayout) -> dg.TableSchema:
    return dg.TableSchema(
        columns=[
            dg.TableColumn(
                name=c.name,
                type=spark_type(c.type),
                description=c.doc,
                constraints=dg.TableColumnConstraints(nullable=not c.required),
            )
            for c in layout.columns
        ]
    )


def _source_schema(spec: TableSpec) -> dg.TableSchema:
    keys = set(spec.primary_key)
    return dg.TableSchema(
        columns=[
            dg.TableColumn(
                name=c.name,
                type=c.type,
                description=c.comment,
                constraints=dg.TableColumnConstraints(
                    nullable=c.nullable,
                    other=[
                        x
                        for x, on in (("primary key", c.name in keys), ("sensitive", c.sensitive))
                        if on
                    ],
                ),
            )
            for c in spec.columns
        ]
    )


def layer_layouts(spec: TableSpec) -> dict[str, TableLayout]:
    """The table behind each asset layer; of a sharded table's per-shard layers (ledger,
    bucketed) the first shard's, whose columns every shard's table shares."""
    out: dict[str, TableLayout] = {}
    for key, layout in all_layouts(spec).items():
        out.setdefault(key.split(":")[0], layout)
    return out


def _descriptions(spec: TableSpec, layouts: dict[str, TableLayout]) -> dict[str, str]:
    src = f"{spec.source.connector} {spec.source.database}.{spec.source.table}"
    about = f" {spec.description}" if spec.description else ""
    return {
        "raw": f"Debezium change events of {src} in Kafka "
        + ("topics " if spec.source.shards else "topic ")
        + ", ".join(f"`{t}`" for t in spec.source.topics)
        + f".{about}",
        "cdc": (
            f"Append-only CDC ledger `{layouts['cdc'].name}`"
            + (f" (one per shard: {len(spec.source.shards)})" if spec.source.shards else "")
            + f": one row per change event of {src}, partitioned by processing dt/hr, with the "
            "source row image kept for backfills."
        ),
        "bucketed": (
            f"Per-run temp table `{layouts['bucketed'].name}`: the newest change per key since "
            "the base watermark, bucketed exactly like base for a storage-partitioned MERGE."
        ),
        "schema": (
            f"Schema of {src} as spec `{spec.name}` version {spec.spec_version}: materializing "
            "it applies a schema change (Iceberg schemas, spec file, backfill from the ledger)."
        ),
        "base": (
            f"Iceberg mirror `{layouts['base'].name}` of {src}, "
            f"bucketed by key, merge-on-read.{about}"
        ),
        "history": (
            f"Every version of every row of {src} (SCD type 2) in `{layouts['history'].name}`"
            if "history" in layouts
            else ""
        )
        + ", recomputed from the ledger for the keys each run touches (docs/history.md).",
    }


def freshness_policy(spec: TableSpec) -> dg.FreshnessPolicy:
    """Fail when the asset has not been materialized within the spec's SLA; warn at half of it."""
    sla = timedelta(minutes=spec.freshness.sla_minutes)
    return dg.FreshnessPolicy.time_window(fail_window=sla, warn_window=sla / 2)


def build_fleet_assets(
    specs: Sequence[TableSpec],
    catalog: str,
    hourly: dg.PartitionsDefinition,
    specs_dir: Path,
    source_url_of: Callable[[TableSpec], str | None],
    tables_at_once: int,
) -> list[dg.AssetsDefinition]:
    """The assets of every spec: the ``topics`` op (every raw asset), the ``tables`` op (every
    ledger, bucketed, base and history asset) and each table's schema asset. ``hourly`` is
    shared by every ledger; ``source_url_of``: the JDBC URL of a spec's source, where reachable
    (evolution reads a PostgreSQL table's column numbers there); ``tables_at_once``: how many
    tables a run of the ``tables`` op takes at once when its config sets no width."""
    if not specs:
        return []
    by_table = {spec.name: _table_specs(spec, catalog, hourly) for spec in specs}
    return [
        build_topics_asset(specs, [by_table[s.name]["raw"] for s in specs]),
        build_tables_asset(
            specs,
            [
                layers[layer]
                for layers in by_table.values()
                for layer in TABLE_STEP_LAYERS
                if layer in layers
            ],
            specs_dir,
            tables_at_once,
        ),
        *(
            build_schema_asset(spec, specs_dir, _schema_args(spec, catalog), source_url_of(spec))
            for spec in specs
        ),
    ]


def _common(spec: TableSpec) -> dict[str, Any]:
    tags = {**spec.tags, "cdc/connector": spec.source.connector}
    return {"group_name": spec.name, "owners": list(spec.owners), "tags": tags}


def _metadata(
    spec: TableSpec, catalog: str, layer: str, layout: TableLayout | None
) -> dict[str, Any]:
    if layout is None:  # raw and schema: the source's columns
        return {
            "dagster/column_schema": _source_schema(spec),
            "kafka/topic": ", ".join(spec.source.topics),
            "spec_version": spec.spec_version,
        }
    return {
        "dagster/column_schema": _layout_schema(layout),
        "dagster/table_name": f"{catalog}.{layout.namespace}.{layout.name}",
        "spec_version": spec.spec_version,
    }


def _table_specs(
    spec: TableSpec, catalog: str, hourly: dg.PartitionsDefinition
) -> dict[str, dg.AssetSpec]:
    """The AssetSpec of each of ``spec``'s layers but schema (raw, cdc, bucketed, base, and
    history where the spec keeps one)."""
    layouts = layer_layouts(spec)
    descriptions = _descriptions(spec, layouts)
    upstream = {"raw": None, "cdc": "raw", "bucketed": "cdc", "base": "bucketed", "history": "cdc"}
    out = {}
    for layer, dep in upstream.items():
        if layer == "history" and not spec.history.enabled:
            continue
        extra: dict[str, Any] = {}
        if layer == "cdc":
            extra = {"partitions_def": hourly, "freshness_policy": freshness_policy(spec)}
        elif layer == "base":
            extra = {"freshness_policy": freshness_policy(spec)}
        out[layer] = dg.AssetSpec(
            key=asset_key(layer, spec.name),
            deps=[asset_key(dep, spec.name)] if dep else [],
            description=descriptions[layer],
            kinds=KINDS[layer],
            metadata=_metadata(
                spec, catalog, layer, layouts.get(layer) if layer != "raw" else None
            ),
            **_common(spec),
            **extra,
        )
    return out


def _schema_args(spec: TableSpec, catalog: str) -> dict[str, Any]:
    """The schema asset's ``@asset`` arguments (an op of its own: see ``assets/schema.py``)."""
    layouts = layer_layouts(spec)
    return {
        "key": asset_key("schema", spec.name),
        "deps": [],
        "description": _descriptions(spec, layouts)["schema"],
        "kinds": KINDS["schema"],
        "metadata": _metadata(spec, catalog, "schema", None),
        **_common(spec),
    }
