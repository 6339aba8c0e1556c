"""Where a table's stored values stand against its protections: counts of values not in their
protected form (typed columns of the ledger, base and history, the ledger's row images, dead
letters' payloads) and the key ids in use. Level-triggered: read from the tables each time, so
a value that escaped protection by any path (an older release, a spec edited in place, a
bootstrap without the key) shows, whatever happened before."""

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
from cdc_assets.spec.models import Protection, TableSpec
from cdc_assets.sql.ddl import table_identifier
from cdc_assets.sql.protect import ENCRYPTED_PREFIX, render_protection_audit


def audit_protection(spark: Any, catalog: str, spec: TableSpec) -> ProtectionAudit:
    """The audit of ``spec``'s tables (every shard's ledger and dead letters)."""
    columns = {c.sink_name: c.protect for c in spec.columns if c.protect is not None}
    fields: dict[str, Protection] = {
        n: c.protect for c in spec.columns if c.protect for n in (c.name, *c.former_names)
    }
    audit = ProtectionAudit()
    layouts: list[tuple[TableLayout, bool]] = [(base_layout(spec), False)]
    if spec.history.enabled:
        layouts.append((history_layout(spec), False))
    layouts += [(ledger_layout(view), True) for view in spec.shard_specs()]
    for layout, ledger in layouts:
        table = table_identifier(catalog, layout)
        sql = render_protection_audit(
            table,
            columns,
            fields if ledger else None,
            spec.pipeline.drop_fields if ledger else (),
        )
        row = spark.sql(sql).collect()[0].asDict()
        audit.rows += int(row["rows"])
        for name in columns:
            audit.add_plain(name, int(row[f"plain__{name}"]))
            if f"keys__{name}" in row:
                audit.key_ids.update(row[f"keys__{name}"] or ())
        if ledger:
            for name in fields:
                audit.add_plain(f"_row_json.{name}", int(row[f"plain_image__{name}"]))
            audit.dropped_in_images += int(row.get("dropped_in_image") or 0)
    for view in spec.shard_specs():
        table = table_identifier(catalog, dead_letter_layout(view))
        prefix = f"{ENCRYPTED_PREFIX}:"
        row = spark.sql(
            f"SELECT count_if(NOT startswith(payload_b64, '{prefix}')) AS plain, "
            f"collect_set(CASE WHEN startswith(payload_b64, '{prefix}') "
            f"THEN split_part(payload_b64, ':', 2) END) AS keys FROM {table}"
        ).collect()[0]
        audit.add_plain("dead letter payloads", int(row["plain"]))
        audit.key_ids.update(row["keys"] or ())
    return audit
