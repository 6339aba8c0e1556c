"""Materialization metadata shared by the Iceberg assets: the live table schema as Dagster column
metadata, the row count, what a commit added, and a short markdown summary for the UI."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dagster as dg

from cdc_assets.pipeline.shared.iceberg_types import sink_text

# Snapshot summary fields (Iceberg's names) reported under our names.
COMMIT_FIELDS = {
    "added-records": "rows_written",
    "added-data-files": "data_files_added",
    "added-files-size": "bytes_added",
    "added-delete-files": "delete_files_added",
    "added-position-deletes": "position_deletes_added",
}


def live_column_schema(table: Any) -> dg.TableSchema:
    """The Iceberg table's current schema (pyiceberg) as Dagster column metadata."""
    return dg.TableSchema(
        columns=[
            dg.TableColumn(
                name=f.name,
                type=sink_text(f.field_type),
                description=f.doc,
                constraints=dg.TableColumnConstraints(nullable=not f.required),
            )
            for f in table.schema().fields
        ]
    )


def live_rows(summary: Mapping[str, str]) -> int | None:
    """Live rows of a table from a snapshot summary: data rows minus merge-on-read deletes."""
    if "total-records" not in summary:
        return None
    deleted = sum(
        int(summary.get(k, "0")) for k in ("total-position-deletes", "total-equality-deletes")
    )
    return int(summary["total-records"]) - deleted


def commit_metadata(table: Any, snapshot_id: int | None = None) -> dict[str, Any]:
    """What the snapshot (default: the current one) added, the table's row count and schema."""
    snapshot = (
        table.snapshot_by_id(snapshot_id) if snapshot_id is not None else table.current_snapshot()
    )
    meta: dict[str, Any] = {"dagster/column_schema": live_column_schema(table)}
    if snapshot is None or snapshot.summary is None:
        return meta
    summary = {**snapshot.summary.additional_properties}
    for source, name in COMMIT_FIELDS.items():
        if source in summary:
            meta[name] = int(summary[source])
    # The row count of the table now, not of that snapshot, which may be an older one.
    current = table.current_snapshot()
    rows = live_rows(current.summary.additional_properties) if current and current.summary else None
    if rows is not None:
        meta["dagster/row_count"] = rows
    return meta


def markdown_summary(title: str, facts: Mapping[str, object]) -> dg.MetadataValue:
    """A two-column markdown table, the first thing the UI shows of a materialization."""
    lines = [f"**{title}**", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in facts.items()]
    return dg.MetadataValue.md("\n".join(lines))
