"""Which columns a row decoded under an older spec version may lack: the columns a catch-up
backfill recovers from the ledger's row images (``pipeline.catch_up``). Pure: specs in, names out.
"""

from __future__ import annotations

from cdc_assets.spec.models import TableSpec


def changed_columns(old: TableSpec, new: TableSpec) -> list[str]:
    """Sink names of ``new``'s live columns that a row decoded under ``old`` may hold wrong:
    added since (an id ``old`` does not know: null in the row), or whose source type, sink type
    or transform changed (a widened value ``old`` refused into the dead letters, a longer
    varchar). Soft-dropped columns are left alone: they stay null for new rows anyway."""
    before = {c.id: c for c in old.columns}
    connector = new.source.connector
    out = []
    for col in new.columns:
        if col.dropped:
            continue
        prior = before.get(col.id)
        if (
            prior is None
            or prior.type != col.type
            or prior.sink_type(old.source.connector) != col.sink_type(connector)
            or prior.sink.transform != col.sink.transform
        ):
            out.append(col.sink_name)
    return out


def value_columns(spec: TableSpec) -> list[str]:
    """Every live non-key column: what to recover when the older version itself is unknown."""
    keys = set(spec.primary_key)
    return [c.sink_name for c in spec.columns if not c.dropped and c.name not in keys]
