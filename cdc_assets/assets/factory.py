"""The asset factory: one table spec becomes five assets: raw -> cdc -> bucketed -> base, and
schema (the spec version, moved by schema evolution); a sixth, cdc -> history, where the spec
keeps history.

Asset keys come from ``assets.keys`` (``cdc/users_cdc``), grouped per table. The bodies delegate
to pipeline modules.
"""

from datetime import timedelta
from pathlib import Path
from typing import Any

import dagster as dg

from cdc_assets.assets.history import build_history_asset
from cdc_assets.assets.keys import asset_key
from cdc_assets.assets.ledger import build_ledger_asset
from cdc_assets.assets.raw import build_raw_asset
from cdc_assets.assets.schema import build_schema_asset
from cdc_assets.assets.upsert import build_upsert_assets
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


def build_table_assets(
    spec: TableSpec,
    catalog: str,
    hourly: dg.PartitionsDefinition,
    specs_dir: Path,
    source_url: str | None = None,
) -> list[dg.AssetsDefinition]:
    """The five assets of one table spec (six with history); ``hourly`` is shared by every
    ledger. ``source_url``: the JDBC URL of its source, where reachable (evolution reads a
    PostgreSQL table's column numbers there)."""
    layouts = layer_layouts(spec)
    descriptions = _descriptions(spec, layouts)
    tags = {**spec.tags, "cdc/connector": spec.source.connector}
    common: dict[str, Any] = {"group_name": spec.name, "owners": list(spec.owners), "tags": tags}

    def metadata(layer: str) -> dict[str, Any]:
        if layer in ("raw", "schema"):
            return {
                "dagster/column_schema": _source_schema(spec),
                "kafka/topic": ", ".join(spec.source.topics),
                "spec_version": spec.spec_version,
            }
        layout = layouts[layer]
        return {
            "dagster/column_schema": _layout_schema(layout),
            "dagster/table_name": f"{catalog}.{layout.namespace}.{layout.name}",
            "spec_version": spec.spec_version,
        }

    def spec_args(layer: str, dep: str | None) -> dict[str, Any]:
        return {
            "key": asset_key(layer, spec.name),
            "deps": [asset_key(dep, spec.name)] if dep else [],
            "description": descriptions[layer],
            "kinds": KINDS[layer],
            "metadata": metadata(layer),
            **common,
        }

    raw = build_raw_asset(spec, spec_args("raw", None))
    cdc = build_ledger_asset(
        spec,
        specs_dir,
        {
            **spec_args("cdc", "raw"),
            "partitions_def": hourly,
            "pool": f"cdc_ingest/{spec.name}",
            "freshness_policy": freshness_policy(spec),
        },
    )
    bucketed, base = build_upsert_assets(
        spec,
        specs_dir,
        spec_args("bucketed", "cdc"),
        {**spec_args("base", "bucketed"), "freshness_policy": freshness_policy(spec)},
    )
    schema = build_schema_asset(spec, specs_dir, spec_args("schema", None), source_url)
    if not spec.history.enabled:
        return [raw, cdc, bucketed, base, schema]
    history = build_history_asset(spec, spec_args("history", "cdc"))
    return [raw, cdc, bucketed, base, history, schema]
