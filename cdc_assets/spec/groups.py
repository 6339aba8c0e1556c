"""Consistency groups as the specs declare them (pure): which tables share one source
transaction stream (``consistency`` in a spec; docs/history.md)."""

from __future__ import annotations

from cdc_assets.errors import SpecError
from cdc_assets.spec.models import TableSpec


def consistency_groups(specs: list[TableSpec]) -> dict[str, list[TableSpec]]:
    """The groups the specs declare, each with its tables sorted by name. SpecError when the
    tables of one group name different transaction topics (a group is one server's stream)."""
    groups: dict[str, list[TableSpec]] = {}
    for spec in specs:
        if spec.consistency is not None:
            groups.setdefault(spec.consistency.group, []).append(spec)
    for name, members in groups.items():
        topics = {s.consistency.transaction_topic for s in members if s.consistency}
        if len(topics) > 1:
            raise SpecError(
                f"consistency group {name!r}: its tables name different transaction topics "
                f"({', '.join(sorted(topics))}); a group reads one server's transactions"
            )
        members.sort(key=lambda s: s.name)
    return groups
