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
from cdc_assets.spec.models import Protection, TableSpec
from cdc_assets.sql.ddl import literal, quote, table_identifier
from cdc_assets.sql.protect import ENCRYPTED_PREFIX, render_protection_audit

Audited = list[tuple[str, str, Protection]]  # (place shown, STRING expression, protection)


def _values(spec: TableSpec, *, images: bool) -> Audited:
    """What to audit in a table with the spec's typed columns (and, for a ledger, its row
    images: each field under every name it had)."""
    out: Audited = []
    for c in spec.columns:
        places = [(c.sink_name, quote(c.sink_name))]
        if images:
            places += [
                (f"_row_json.{n}", f"get_json_object(_row_json, {literal('$.' + n)})")
                for n in (c.name, *c.former_names)
            ]
        for place, expr in places:
            if c.protect is not None:
                out.append((place, expr, c.protect))
            for path, protection in sorted(c.protect_paths.items()):
                value = f"get_json_object({expr}, {literal('$.' + path)})"
                out.append((f"{place}.{path}", value, protection))
    return out


def audit_protection(spark: Any, catalog: str, spec: TableSpec) -> ProtectionAudit:
    """The audit of ``spec``'s tables (every shard's ledger and dead letters)."""
    audit = ProtectionAudit()
    layouts: list[tuple[TableLayout, bool]] = [(base_layout(spec), False)]
    if spec.history.enabled:
        layouts.append((history_layout(spec), False))
    layouts += [(ledger_layout(view), True) for view in spec.shard_specs()]
    for layout, ledger in layouts:
        values = _values(spec, images=ledger)
        sql = render_protection_audit(
            table_identifier(catalog, layout),
            [(expr, protection) for _, expr, protection in values],
            spec.pipeline.drop_fields if ledger else (),
        )
        row = spark.sql(sql).collect()[0].asDict()
        audit.rows += int(row["rows"])
        for i, (place, _, _) in enumerate(values):
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
