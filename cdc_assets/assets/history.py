"""The history asset of a table whose spec keeps one (``history.mode: scd2``).

It reads the ledger, not base, so it depends on the cdc asset; the ``tables`` op runs it after
the table's base (a micro-batch's base is what its freshness is measured by). A history commit
that loses a race with another writer of the table is retried (``pipeline.upsert.history``).
"""

from typing import Any

from cdc_assets.assets.metadata import commit_metadata, markdown_summary
from cdc_assets.pipeline.upsert.history import HistoryResult, update_history
from cdc_assets.pipeline.upsert.upsert import load_table
from cdc_assets.schema.layers import history_layout
from cdc_assets.spec.models import TableSpec


def history_metadata(results: list[HistoryResult]) -> dict[str, Any]:
    modes = {r.mode for r in results}
    mode = "full" if "full" in modes else "incremental" if "incremental" in modes else "up-to-date"
    touched = [r.touched_keys for r in results if r.touched_keys is not None]
    return {
        "mode": mode,
        "reason": "; ".join(r.reason for r in results if r.reason),
        "touched_keys": sum(touched) if touched else -1,
        "ledger_snapshot": ", ".join(str(r.ledger_snapshot or "") for r in results),
        "commit_attempts": sum(r.attempts for r in results),
        "seconds": round(sum(r.seconds for r in results), 2),
    }


def history_table(
    spec: TableSpec, session: Any, catalog_name: str, catalog: Any, log: Any
) -> dict[str, Any]:
    """Bring ``spec``'s history up to its ledger: the history asset's body and its metadata,
    shared with the continuous worker."""
    # A sharded table's history takes each shard's ledger in turn (keys lead with the shard).
    results = [update_history(session, catalog_name, catalog, view) for view in spec.shard_specs()]
    meta = history_metadata(results)
    log.info(f"{spec.name}: history {meta['mode']} ({meta['reason']})")
    table = load_table(catalog, history_layout(spec))
    meta.update(commit_metadata(table))
    meta["summary"] = markdown_summary(
        f"history of {spec.name}",
        {
            "mode": meta["mode"],
            "why": meta["reason"] or "-",
            "keys recomputed": "all" if meta["touched_keys"] < 0 else meta["touched_keys"],
            "versions in the table": meta.get("dagster/row_count", "-"),
            "seconds": meta["seconds"],
        },
    )
    return meta
