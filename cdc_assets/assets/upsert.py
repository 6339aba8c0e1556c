"""The bucketed and base assets of a table: the two layers of an upsert (their bodies, run by the
``tables`` op of ``assets/tables.py`` and by the continuous worker).

Two upserts of one table may run at once (a run and a worker, a run started by hand): base
refuses a bucketed table built from another base state instead of applying it out of order, and
the MERGE builds the changes again from the state it finds.
"""

from pathlib import Path
from typing import Any

import dagster as dg

from cdc_assets.assets.metadata import commit_metadata, live_rows, markdown_summary
from cdc_assets.pipeline.evolution import catch_up
from cdc_assets.pipeline.shared.offsets import encode_offsets
from cdc_assets.pipeline.shared.watermark import UpsertState
from cdc_assets.pipeline.upsert.upsert import (
    BucketedResult,
    MergeResult,
    build_bucketed,
    load_table,
    merge_base_again,
)
from cdc_assets.schema.layers import base_layout
from cdc_assets.spec.models import TableSpec

# Snapshot summary fields of a MERGE commit reported as run metadata, under our names.
SUMMARY_FIELDS = {
    "added-records": "rows_written",
    "added-data-files": "data_files_added",
    "added-files-size": "bytes_added",
    "added-position-deletes": "position_deletes_added",
    "added-delete-files": "delete_files_added",
    "total-records": "total_data_rows",
    "spark.merge-into.num-target-rows-inserted": "rows_inserted",
    "spark.merge-into.num-target-rows-updated": "rows_updated",
    "spark.merge-into.num-target-rows-deleted": "rows_deleted",
}


def _state(state: UpsertState) -> dict[str, Any]:
    return {
        "offsets": encode_offsets(state.watermark),
        "kafka_ts": state.watermark_ts.isoformat() if state.watermark_ts else "",
        "floor": state.floor.text() if state.floor else "",
    }


def bucketed_metadata(result: BucketedResult) -> dict[str, Any]:
    return {
        "up_to_date": result.up_to_date,
        "changed_keys": result.rows,
        "deletes": result.deletes,
        "truncate_at": result.truncate.text() if result.truncate else "",
        "redriven_files": result.redriven_files,
        "watermark_before": _state(result.from_state),
        "watermark_after": _state(result.to_state),
        "ledger_snapshot": str(result.to_state.ledger_snapshot or ""),
        "seconds": round(result.seconds, 2),
    }


def merge_metadata(result: MergeResult) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "applied": result.applied,
        "up_to_date": result.up_to_date,
        "storage_partitioned_join": (
            "n/a" if result.storage_partitioned is None else result.storage_partitioned
        ),
        "snapshot_id": str(result.snapshot_id or ""),
        "commit_attempts": result.attempts,
        # Times the changes were built again because another upsert had moved base.
        "changes_rebuilt": result.rebuilt,
        # How many key ranges pruned the files the MERGEs read (0: they read all of base).
        "key_ranges": result.key_ranges or 0,
        "watermark_before": _state(result.from_state),
        "watermark_after": _state(result.to_state),
        "seconds": round(result.seconds, 2),
    }
    for source, name in SUMMARY_FIELDS.items():
        if source in result.summary:
            meta[name] = int(result.summary[source])
    rows = live_rows(result.summary)
    if rows is not None:
        meta["base_rows"] = rows
    return meta


def _merge_summary(spec: TableSpec, meta: dict[str, Any]) -> dg.MetadataValue:
    before, after = meta["watermark_before"], meta["watermark_after"]
    return markdown_summary(
        f"MERGE into base of {spec.name}",
        {
            "applied": meta["applied"],
            "rows inserted / updated / deleted": " / ".join(
                str(meta.get(k, 0)) for k in ("rows_inserted", "rows_updated", "rows_deleted")
            ),
            "rows in base": meta.get("base_rows", "-"),
            "storage-partitioned join": meta["storage_partitioned_join"],
            "watermark (Kafka time)": f"{before['kafka_ts'] or '-'} -> {after['kafka_ts'] or '-'}",
            "files / bytes added": f"{meta.get('data_files_added', 0)} / "
            f"{meta.get('bytes_added', 0)}",
            "snapshot": meta["snapshot_id"] or "-",
            "seconds": meta["seconds"],
        },
    )


def bucketed_table(
    spec: TableSpec, session: Any, catalog_name: str, catalog: Any, log: Any
) -> dict[str, Any]:
    """Build ``spec``'s bucketed table(s) from the ledger: the bucketed asset's body and its
    metadata, shared with the continuous worker (``jobs/continuous.py``)."""
    # A sharded table has a bucketed table per shard, built from that shard's ledger.
    results = [build_bucketed(session, catalog_name, catalog, view) for view in spec.shard_specs()]
    if all(r.up_to_date for r in results):
        log.info(f"{spec.name}: base has applied everything in the ledger")
    rows, deletes = sum(r.rows for r in results), sum(r.deletes for r in results)
    seconds = round(sum(r.seconds for r in results), 2)
    if len(results) == 1:
        meta = bucketed_metadata(results[0])
    else:
        meta = {
            "up_to_date": all(r.up_to_date for r in results),
            "changed_keys": rows,
            "deletes": deletes,
            "shards": dg.MetadataValue.json(
                {
                    _shard(v): bucketed_metadata(r)
                    for v, r in zip(spec.shard_specs(), results, strict=True)
                }
            ),
            "truncate_at": ", ".join(
                f"{_shard(v)}: {r.truncate.text()}"
                for v, r in zip(spec.shard_specs(), results, strict=True)
                if r.truncate
            ),
            "seconds": seconds,
        }
    meta["dagster/row_count"] = rows
    meta["summary"] = markdown_summary(
        f"changes of {spec.name} for the next MERGE",
        {
            "changed keys": rows,
            "deletes": deletes,
            "truncate at": meta["truncate_at"] or "-",
            "seconds": seconds,
        },
    )
    return meta


def base_table(
    spec: TableSpec, specs_dir: Path, session: Any, catalog_name: str, catalog: Any, log: Any
) -> dict[str, Any]:
    """MERGE ``spec``'s bucketed table(s) into base: the base asset's body and its metadata,
    shared with the continuous worker."""
    metas = {}
    # One MERGE per shard, in turn: each applies its shard's bucketed table and state.
    for view in spec.shard_specs():
        metas[_shard(view)] = _merge_view(log, session, catalog_name, catalog, view, specs_dir)
    if len(metas) == 1:
        meta = next(iter(metas.values()))
    else:
        last = list(metas.values())[-1]
        meta = {
            "applied": any(m["applied"] for m in metas.values()),
            "up_to_date": all(m["up_to_date"] for m in metas.values()),
            "storage_partitioned_join": last["storage_partitioned_join"],
            "snapshot_id": last["snapshot_id"],
            "commit_attempts": sum(m["commit_attempts"] for m in metas.values()),
            "watermark_before": {"kafka_ts": "", "offsets": "", "floor": ""},
            "watermark_after": {"kafka_ts": "", "offsets": "", "floor": ""},
            "seconds": round(sum(m["seconds"] for m in metas.values()), 2),
            "shards": dg.MetadataValue.json(metas),
        }
        for name in ("rows_inserted", "rows_updated", "rows_deleted"):
            meta[name] = sum(m.get(name, 0) for m in metas.values())
        if "base_rows" in last:
            meta["base_rows"] = last["base_rows"]
    table = load_table(catalog, base_layout(spec))
    meta.update({k: v for k, v in commit_metadata(table).items() if k.startswith("dagster/")})
    meta["summary"] = _merge_summary(spec, meta)
    return meta


def _shard(view: TableSpec) -> str:
    return view.shard.shard_name if view.shard is not None else view.name


def _merge_view(
    log: Any,
    session: Any,
    catalog_name: str,
    catalog: Any,
    spec: TableSpec,
    specs_dir: Path,
) -> dict[str, Any]:
    """MERGE one bucketed table (the table's, or one shard's) into base: its metadata."""
    result = merge_base_again(session, catalog_name, catalog, spec)
    if result.rebuilt:
        log.info(
            f"{spec.name}: built the changes again {result.rebuilt} time(s): another upsert "
            "had moved base"
        )
    if result.applied and result.storage_partitioned is False:
        log.warning(
            f"{spec.name}: the MERGE shuffled base (no storage-partitioned join); "
            "expected only while base is empty"
        )
    meta = merge_metadata(result)
    if result.applied:
        # Rows decoded under an older spec than the file's now (an evolution ran meanwhile):
        # carry their recovered values to base (pipeline.evolution.catch_up says why that is safe).
        caught = catch_up.after_upsert(
            session,
            catalog_name,
            catalog,
            spec,
            specs_dir,
            result.from_state.ledger_sequence,
            result.to_state.ledger_sequence,
            result.built_with,
        )
        if caught is not None:
            say = log.warning if caught.changed else log.info
            say(f"{spec.name}: {caught.reason}; caught up {caught.metadata()}")
            meta.update(caught.metadata())
    return meta
