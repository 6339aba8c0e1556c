"""Asset check: every Kafka record the latest ingest read is a ledger row, a dead letter or a
skip with a reason, and the Iceberg tables agree with those counts (a dead letter redriven into
the ledger since still counts once). It runs in the table's check op (``table_checks``); the
sensors' ingest runs select it alone."""

import json
from typing import Any

import dagster as dg

from cdc_assets.pipeline.shared.offsets import (
    COUNTS_PROPERTY,
    START_OFFSETS_PROPERTY,
    committed_snapshot,
    decode_offsets,
)
from cdc_assets.schema.layers import dead_letter_layout, ledger_layout
from cdc_assets.spec.models import TableSpec

ACCOUNTING_CHECK = "offsets_accounted"


ACCOUNTING_DESCRIPTION = (
    "Latest ingest: records read = ledger rows + dead letters + skipped, and the ledger and "
    "dead-letter tables hold each kept record of its range once (redriven dead letters count "
    "in the ledger)."
)


def offsets_accounted(catalog: Any, spec: TableSpec) -> dg.AssetCheckResult:
    """The check's result for ``spec``: its ledger's newest ingest, or each shard's ledger's
    (a sharded table has a ledger per shard, each accounted against its own topic)."""
    results = {
        view.shard.shard_name if view.shard else "": account(catalog, view)
        for view in spec.shard_specs()
    }
    if list(results) == [""]:
        return results[""]
    failed = [name for name, r in results.items() if not r.passed]
    return dg.AssetCheckResult(
        passed=not failed,
        description="; ".join(f"{n}: {r.description or ''}" for n, r in results.items()),
        metadata={
            "failed_shards": failed,
            "shards": dg.MetadataValue.json(
                {n: {k: v.value for k, v in r.metadata.items()} for n, r in results.items()}
            ),
        },
    )


def account(catalog: Any, spec: TableSpec) -> dg.AssetCheckResult:
    """The newest ingest commit of one ledger, accounted record by record."""
    from pyiceberg import expressions as ex

    # pyiceberg's predicates are pydantic models whose mypy plugin view does not match
    # their runtime constructors; build them untyped.
    eq: Any = ex.EqualTo
    ge: Any = ex.GreaterThanOrEqual
    lt: Any = ex.LessThan

    ledger = catalog.load_table(".".join((spec.sink.namespace, ledger_layout(spec).name)))
    snapshot = committed_snapshot(ledger)
    if snapshot is None:
        return dg.AssetCheckResult(passed=True, metadata={"note": "nothing ingested yet"})
    props = snapshot.summary.additional_properties
    counts = json.loads(props.get(COUNTS_PROPERTY, "{}"))
    start = decode_offsets(props.get(START_OFFSETS_PROPERTY, "{}"))
    end = decode_offsets(props["cdc.offsets"])
    added = int(props.get("added-records", "0"))
    dlt = catalog.load_table(".".join((spec.sink.namespace, dead_letter_layout(spec).name)))
    ranges = [
        ex.And(eq("partition", p), ge("offset", start.get(p, 0)), lt("offset", o))
        for p, o in end.items()
    ]
    dead_rows = 0
    if ranges:
        row_filter = ranges[0] if len(ranges) == 1 else ex.Or(*ranges)
        dead_rows = dlt.scan(row_filter=row_filter, selected_fields=("offset",)).to_arrow().num_rows
    # A redrive moves dead letters of the range into the ledger: what matters is that each
    # record kept is in exactly one of the two tables, not where the ingest first put it.
    ledger_rows = 0
    if ranges:
        ledger_ranges = [
            ex.And(
                eq("_kafka_partition", p),
                ge("_kafka_offset", start.get(p, 0)),
                lt("_kafka_offset", o),
            )
            for p, o in end.items()
        ]
        ledger_filter = ledger_ranges[0] if len(ledger_ranges) == 1 else ex.Or(*ledger_ranges)
        ledger_rows = (
            ledger.scan(row_filter=ledger_filter, selected_fields=("_kafka_offset",))
            .to_arrow()
            .num_rows
        )
    offsets_in_range = sum(o - start.get(p, 0) for p, o in end.items())
    read = counts.get("read", 0)
    kept = counts.get("ledger", 0) + counts.get("dead", 0)
    redriven = ledger_rows - counts.get("ledger", 0)
    dead = counts.get("dead", 0)
    checks = {
        "read = ledger + dead + skip": read == kept + counts.get("skip", 0),
        "ledger snapshot rows = ledger count": added == counts.get("ledger", 0),
        "ledger rows in range >= ledger count": redriven >= 0,
        "no record both in the ledger and the dead letters": ledger_rows + dead_rows <= kept,
        # A redrive takes dead letters out: into the ledger, or dropped as skips now.
        "dead-letter rows in range = dead count less redriven": dead_rows == dead
        if redriven == 0
        else dead_rows <= dead - redriven,
        "records read <= offsets in range": read <= offsets_in_range,
    }
    failed = [k for k, ok in checks.items() if not ok]
    return dg.AssetCheckResult(
        passed=not failed,
        description=(
            f"{read} records read: {counts.get('ledger', 0)} to the ledger, "
            f"{counts.get('dead', 0)} dead letters ({max(redriven, 0)} redriven since), "
            f"{counts.get('skip', 0)} skipped"
            + (f"; failed: {'; '.join(failed)}" if failed else "")
        ),
        metadata={
            **{k: v for k, v in counts.items()},
            "ledger_snapshot_rows": added,
            "dead_letter_rows_in_range": dead_rows,
            "ledger_rows_in_range": ledger_rows,
            "redriven_since": max(redriven, 0),
            "offsets_in_range": offsets_in_range,
            "offset_gaps": offsets_in_range - read,
            "failed_rules": failed,
            "snapshot_id": str(snapshot.snapshot_id),
        },
    )
