"""The small ``cdc_meta`` tables (stored spec versions, the schema-change audit trail): made on
first use, one row appended per evolution or decision, and kept cheap to read as rows pile up.

pyiceberg writes a data file and a snapshot per append. Merged manifests
(``schema.history.META_TABLE_PROPERTIES``) keep a scan to one manifest list and a few manifests,
but a scan still opens every data file it cannot prune, and every table load parses every
snapshot: at 1,000 stored versions, reading them all took 2.0 s and an append 0.4 s
(benchmarks/spec_store_reads.py). So the append that brings the table to ``COMPACT_FILES`` data
files also rewrites its rows into one file and drops the snapshots before that rewrite. Nothing
reads these tables at an older snapshot, and the rewrite keeps every row.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any

from cdc_assets.pipeline.shared.iceberg_types import iceberg_type
from cdc_assets.schema.history import HistoryEntry, schema_history_layout
from cdc_assets.schema.layers import TableLayout

log = logging.getLogger(__name__)

# Data files at which an append rewrites the table into one: a reader opens at most this many,
# and the rewrite (every row read and written once) is paid once per this many appends.
COMPACT_FILES = 32
# Attempts of an append that another writer's commit refused (it retries on the new snapshot).
COMMIT_RETRIES = 5
# The snapshot property that marks a rewrite of the rows (no row added or removed).
COMPACTION_PROPERTY = "cdc.compaction"


def identifier(layout: TableLayout) -> str:
    return f"{layout.namespace}.{layout.name}"


def create_meta_table(iceberg_catalog: Any, layout: TableLayout) -> Any:
    """A small ``cdc_meta`` table of ``layout`` (created on first use)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    schema = Schema(
        *(
            NestedField(i, c.name, iceberg_type(c.type), required=c.required, doc=c.doc)
            for i, c in enumerate(layout.columns, start=1)
        )
    )
    iceberg_catalog.create_namespace_if_not_exists(layout.namespace)
    properties = dict(layout.properties)
    if layout.comment:
        properties["comment"] = layout.comment
    table = iceberg_catalog.create_table_if_not_exists(
        identifier(layout), schema=schema, properties=properties
    )
    # A table created by an older release lacks properties added since (merged manifests): set
    # them once; the next append then merges what the older appends left.
    # (The format version is the metadata's own field, not a property.)
    current = table.metadata.properties
    missing = {
        k: v for k, v in layout.properties.items() if k != "format-version" and current.get(k) != v
    }
    if missing:
        with table.transaction() as tx:
            tx.set_properties(missing)
        table = iceberg_catalog.load_table(identifier(layout))
    return table


def is_conflict(exc: BaseException) -> bool:
    """Whether ``exc`` is an Iceberg commit conflict (another writer committed first)."""
    from pyiceberg.exceptions import CommitFailedException

    return isinstance(exc, CommitFailedException)


def append_row(iceberg_catalog: Any, layout: TableLayout, row: dict[str, Any]) -> None:
    """Append ``row`` to the ``cdc_meta`` table of ``layout`` (made on first use), retrying on
    another writer's commit; then compact the table if it has reached ``COMPACT_FILES`` files."""
    import pyarrow as pa

    for attempt in range(1, COMMIT_RETRIES + 1):
        try:
            table = create_meta_table(iceberg_catalog, layout)
            table.append(pa.Table.from_pylist([row], schema=table.schema().as_arrow()))
            break
        except Exception as exc:
            if attempt == COMMIT_RETRIES or not is_conflict(exc):
                raise
            time.sleep(0.2 * attempt)
    compact(table)


def data_files(table: Any) -> int:
    """Data files of the table's current snapshot, by its summary (0 without one)."""
    snapshot = table.current_snapshot()
    summary = snapshot.summary if snapshot is not None else None
    return int((summary or {}).get("total-data-files", "0"))


def compact(table: Any, at_files: int = COMPACT_FILES) -> bool:
    """Rewrite ``table``'s rows into one data file and expire the snapshots before the rewrite,
    when it has ``at_files`` data files or more; whether it did.

    The rewrite replaces only what it read: a row another writer appended meanwhile is never
    dropped (pyiceberg validates that no file was added since), the rewrite gives way, and a
    later append compacts."""
    if data_files(table) < at_files:
        return False
    from pyiceberg.exceptions import ValidationException

    rows = table.scan().to_arrow()
    try:
        table.overwrite(rows, snapshot_properties={COMPACTION_PROPERTY: str(rows.num_rows)})
    except Exception as exc:
        # pyiceberg retries a refused commit on the new snapshot, and refuses an overwrite that
        # would remove files added since it read (ValidationException).
        if not (is_conflict(exc) or isinstance(exc, ValidationException)):
            raise
        log.debug("compaction of %s gave way to another commit", table.name())
        return False
    # Expiring only removes snapshots from the metadata; their files stay where they are, so a
    # reader still planning on an older snapshot reads it whole. By time, not by id: pyiceberg
    # copies the whole metadata for each id it is given (70 s for 1,000 snapshots).
    head = table.current_snapshot()
    if len(table.metadata.snapshots) > 1:
        until = datetime.fromtimestamp((head.timestamp_ms + 1) / 1000, UTC)
        try:
            table.maintenance.expire_snapshots().older_than(until).commit()
        except Exception as exc:
            if not is_conflict(exc):
                raise  # a conflict: the next compaction expires them
    return True


# --- the schema-change audit trail (cdc_meta.schema_history) -----------------------------------


def _history_table(iceberg_catalog: Any, *, create: bool) -> Any | None:
    from pyiceberg.exceptions import NoSuchTableError

    layout = schema_history_layout()
    if not create:
        try:
            return iceberg_catalog.load_table(identifier(layout))
        except NoSuchTableError:
            return None
    return create_meta_table(iceberg_catalog, layout)


def record_history(iceberg_catalog: Any, entry: HistoryEntry) -> None:
    """Append one decision to ``cdc_meta.schema_history`` (created on first use)."""
    append_row(iceberg_catalog, schema_history_layout(), entry.to_row())


def read_history(iceberg_catalog: Any, table: str | None = None) -> list[HistoryEntry]:
    """Every recorded decision (of one table spec, with ``table``), oldest first."""
    from pyiceberg.expressions import EqualTo

    history = _history_table(iceberg_catalog, create=False)
    if history is None:
        return []
    scan = (
        history.scan()
        if table is None
        else history.scan(row_filter=EqualTo(term="table", value=table))
    )
    entries = [HistoryEntry.from_row(r) for r in scan.to_arrow().to_pylist()]
    return sorted(entries, key=lambda e: (e.applied_at, e.table, e.to_version))
