"""Rules about one column's change that need no other column (pure; used by
`schema.evolution`): whether a source type is only behind the spec's, why a type change
narrows, and which protection changes an existing column may take."""

from __future__ import annotations

from cdc_assets.schema.types import SinkType, can_promote
from cdc_assets.spec.models import ColumnSpec

_CATEGORIES = {
    "int": "integer",
    "long": "integer",
    "float": "floating point",
    "double": "floating point",
    "timestamp": "timestamp without zone",
    "timestamptz": "timestamp with zone",
}
_NUMERIC = {"int", "long", "float", "double", "decimal"}


def behind(c: ColumnSpec, p: ColumnSpec, old: SinkType, new: SinkType, connector: str) -> bool:
    """The source's type is narrower than the spec's and the spec's holds all its values."""
    if c.sink.transform != p.sink.transform or (c.type, c.sink.type) == (p.type, p.sink.type):
        return False
    if old != new:
        return can_promote(new, old)
    # The same Iceberg type: a shorter varchar, a lower precision at the same scale.
    was, now = c.source_type(connector), p.source_type(connector)
    if was.kind != now.kind or was.values != now.values or was.scale != now.scale:
        return False
    shorter = was.length is not None and now.length is not None and now.length < was.length
    fewer = (
        was.precision is not None and now.precision is not None and now.precision < was.precision
    )
    return shorter or fewer


def _category(sink: SinkType) -> str:
    return _CATEGORIES.get(sink.name, sink.name)


def narrowing_reason(old_text: str, new_text: str, old: SinkType, new: SinkType) -> str:
    if old.name == "string" and new.name in _NUMERIC:
        return (
            f"{old_text} -> {new_text} turns a string into a number ({old} -> {new}); text "
            "already written may not parse"
        )
    if old.name == new.name == "decimal":
        if old.scale != new.scale:
            return f"{old} -> {new} changes the scale; history would be re-scaled"
        return f"{old} -> {new} lowers the precision; values already written may not fit"
    if _category(old) == _category(new):
        return f"{old} -> {new} narrows the type; values already written may not fit"
    return (
        f"{old} -> {new} changes the type category ({_category(old)} -> {_category(new)}); "
        "Iceberg cannot convert the values already written"
    )


# A new column's values already sat in _row_json as an unknown field, in plaintext: it cannot
# arrive protected.
PROTECT_NEW = (
    "a new column that arrives protected: its values already sat in the ledger's row images "
    "(_row_json) in plaintext; add it unprotected first, then protect it in the next version "
    "and run `cdc-assets protect-rewrite`, or list the source field in pipeline.drop_fields "
    "before it arrives"
)
# A protection changed or lifted: a hash or a mask cannot be undone, and lifting one would
# leave the two forms mixed.
PROTECT_CHANGED = (
    "a protection (protect) changed or removed: values already stored keep the old form, and "
    "a hash or a mask cannot be turned into another; onboard the table again"
)


def protect_later(c: ColumnSpec, p: ColumnSpec, connector: str) -> tuple[str | None, bool]:
    """Whether an existing column's protection may change as ``p`` proposes: (reason it may
    not, or None; whether anything changes). Allowed: a protection set on a string column that
    had none, and paths added inside a JSON column's protection. The values stored before it
    are rewritten by `cdc-assets protect-rewrite` (`pipeline.maintenance.reprotect`); until then
    the check
    ``values_protected`` fails."""
    if p.protect == c.protect and p.protect_paths == c.protect_paths:
        return None, False
    if c.protect is not None or any(
        p.protect_paths.get(path) != protection for path, protection in c.protect_paths.items()
    ):
        return PROTECT_CHANGED, True
    if p.protect is not None and c.sink_type(connector) != SinkType("string"):
        return (
            f"protecting a {c.sink_type(connector)} column: protected values are strings, and "
            "Iceberg cannot make this column one"
        ), True
    return None, True
