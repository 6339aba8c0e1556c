"""Where a table's stored values stand against its protections: counts of values not in their
protected form (typed columns of the ledger, base and history, the ledger's row images, fields
inside protected JSON documents, dead letters' payloads) and the key ids in use.
Level-triggered: read from the tables each time, so a value that escaped protection by any
path (an older release, a spec edited in place, a write by hand) shows, whatever happened
before."""

from __future__ import annotations

from typing import Any

from cdc_assets.quality.rules import ProtectionAudit
from cdc_assets.schema.layers import (
    TableLayout,
    base_layout,
    dead_letter_layout,
    history_layout,
    ledger_layout,
)
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.ddl import literal, table_identifier
from cdc_assets.sql.protect import ENCRYPTED_PREFIX, render_protection_audit
from cdc_assets.sql.reprotect import stored_values


def audit_protection(spark: Any, catalog: str, spec: TableSpec) -> ProtectionAudit:
    """The audit of ``spec``'s tables (every shard's ledger and dead letters)."""
    audit = ProtectionAudit()
    layouts: list[tuple[TableLayout, bool]] = [(base_layout(spec), False)]
    if spec.history.enabled:
        layouts.append((history_layout(spec), False))
    layouts += [(ledger_layout(view), True) for view in spec.shard_specs()]
    for layout, ledger in layouts:
        values = stored_values(spec, images=ledger)
        sql = render_protection_audit(
            table_identifier(catalog, layout),
            [(v.expr, v.protection, v.many) for v in values],
            spec.pipeline.drop_fields if ledger else (),
        )
        row = spark.sql(sql).collect()[0].asDict()
        audit.rows += int(row["rows"])
        for i, (place, *_) in enumerate(values):
            audit.add_plain(place, int(row[f"plain_{i}"]))
            audit.key_ids.update(row.get(f"keys_{i}") or ())
        audit.dropped_in_images += int(row.get("dropped_in_image") or 0)
    prefix = literal(f"{ENCRYPTED_PREFIX}:")
    for view in spec.shard_specs():
        table = table_identifier(catalog, dead_letter_layout(view))
        row = spark.sql(
            f"SELECT count_if(NOT startswith(payload_b64, {prefix})) AS plain, "
            f"collect_set(CASE WHEN startswith(payload_b64, {prefix}) "
            f"THEN split_part(payload_b64, ':', 2) END) AS keys FROM {table}"
        ).collect()[0]
        audit.add_plain("dead letter payloads", int(row["plain"]))
        audit.key_ids.update(row["keys"] or ())
    return audit
