"""The asset of a consistency group (``consistent/<group>``) and its check.

It depends on the history assets of the group's tables and runs after them in ``upsert_bases``
and ``sync_tables`` runs, in a pool of its own so that two runs of one group never publish at
once. Each run reads the new transaction records, moves the cut as far as every table allows
and points the ``<table>_consistent`` views at it (`cdc_assets.pipeline.upsert.consistency`).
"""

from typing import Any

import dagster as dg

from cdc_assets.assets.keys import asset_key
from cdc_assets.assets.metadata import markdown_summary
from cdc_assets.checks.table_checks import check_result
from cdc_assets.pipeline.upsert.consistency import (
    CutResult,
    current_lag,
    cut_history,
    transaction_topic,
    update_cut,
    view_name,
)
from cdc_assets.quality import rules
from cdc_assets.resources.iceberg import IcebergCatalogResource
from cdc_assets.resources.kafka import KafkaResource
from cdc_assets.resources.spark import SparkResource
from cdc_assets.spec.models import TableSpec

CUT_CHECK = "cut_moves_forward_within_lag"


def group_key(group: str) -> dg.AssetKey:
    return dg.AssetKey(["consistent", group])


def cut_metadata(result: CutResult) -> dict[str, Any]:
    return {
        "cut_offset": -1 if result.cut_offset is None else result.cut_offset,
        "cut_txn_id": result.txn_id or "",
        "cut_source_ts": result.cut_source_ts.isoformat() if result.cut_source_ts else "",
        "moved": result.moved,
        "pending_transactions": result.pending,
        "blocked_at_offset": -1 if result.blocked_at is None else result.blocked_at,
        "lag_seconds": round(result.lag_ms / 1000, 3),
        "transactions_read": result.transactions_read,
        "reason": result.reason,
        "seconds": round(result.seconds, 2),
    }


def build_consistency_assets(
    group: str, specs: list[TableSpec]
) -> tuple[dg.AssetsDefinition, dg.AssetChecksDefinition]:
    names = ", ".join(s.name for s in specs)
    views = ", ".join(f"{s.sink.namespace}.{view_name(s)}" for s in specs)

    @dg.asset(
        key=group_key(group),
        deps=[asset_key("history", s.name) for s in specs],
        group_name=f"consistency_{group}",
        description=f"The newest source transaction applied in full in every table of "
        f"consistency group {group} ({names}), read from {transaction_topic(specs)}; the views "
        f"{views} read each table at it (docs/history.md).",
        kinds={"iceberg", "spark"},
        pool=f"cdc_consistent/{group}",
        op_tags={"dagster/priority": "0"},
    )
    def consistent(
        context: dg.AssetExecutionContext,
        spark: SparkResource,
        iceberg: IcebergCatalogResource,
        kafka: KafkaResource,
    ) -> dg.MaterializeResult:  # type: ignore[type-arg]
        result = update_cut(
            spark.get_session(), spark.catalog.name, iceberg.load_catalog(), kafka, group, specs
        )
        meta = cut_metadata(result)
        context.log.info(
            f"consistency group {group}: cut at {meta['cut_txn_id'] or 'none'} "
            f"({'moved' if result.moved else result.reason}), "
            f"{result.pending} transactions pending"
        )
        meta["summary"] = markdown_summary(
            f"consistency group {group}",
            {
                "cut transaction": meta["cut_txn_id"] or "-",
                "its source time": meta["cut_source_ts"] or "-",
                "moved": result.moved,
                "pending": result.pending,
                "lag (s)": meta["lag_seconds"],
                "why not further": result.reason or "-",
            },
        )
        return dg.MaterializeResult(metadata=meta)

    limit = min(s.consistency.max_lag_seconds for s in specs if s.consistency)

    @dg.asset_check(
        asset=group_key(group),
        name=CUT_CHECK,
        description="The published cuts never move backwards, and the newest trails the newest "
        f"known transaction by at most {limit:.0f} s of source time.",
    )
    def cut_check(spark: SparkResource) -> dg.AssetCheckResult:
        session = spark.get_session()
        cuts = cut_history(session, spark.catalog.name, group, specs)
        lag_ms, pending = current_lag(session, spark.catalog.name, group, specs)
        verdict = rules.cut_verdict([int(r["cut_offset"]) for r in cuts], lag_ms, limit, pending)
        return check_result(verdict)

    return consistent, cut_check
