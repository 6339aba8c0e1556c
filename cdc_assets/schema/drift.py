"""Schema drift: how a live table (Iceberg, or the source database) differs from the spec.

Pure: callers describe the live table as ``LiveColumn``s (names and Iceberg type names), this
module compares them with the layout the spec renders and says what differs, in words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cdc_assets.schema.layers import TableLayout
from cdc_assets.spec.models import TableSpec


@dataclass(frozen=True)
class LiveColumn:
    name: str
    type: str  # Iceberg type name as in SinkType: long, decimal(12,2), timestamptz, ...
    required: bool = False


def normalise_type(text: str) -> str:
    """``decimal(12, 2)`` and ``DECIMAL(12,2)`` name the same type."""
    return text.strip().lower().replace(" ", "")


def layout_differences(
    layout: TableLayout, live: Sequence[LiveColumn], live_partitioning: str | None = None
) -> list[str]:
    """What differs between the table the spec renders and the live Iceberg table."""
    diffs: list[str] = []
    live_by_name = {c.name: c for c in live}
    expected_names = set(layout.column_names)
    for col in layout.columns:
        got = live_by_name.get(col.name)
        if got is None:
            diffs.append(f"column {col.name} ({col.type}) is missing")
            continue
        if normalise_type(got.type) != normalise_type(str(col.type)):
            diffs.append(f"column {col.name} is {got.type}, the spec says {col.type}")
        if got.required != col.required:
            want = "required" if col.required else "optional"
            have = "required" if got.required else "optional"
            diffs.append(f"column {col.name} is {have}, the spec says {want}")
    for extra in live:
        if extra.name not in expected_names:
            diffs.append(f"column {extra.name} ({extra.type}) is not in the spec")
    expected_parts = ", ".join(layout.partition_by)
    if live_partitioning is not None and normalise_type(live_partitioning) != normalise_type(
        expected_parts
    ):
        diffs.append(f"partitioned by [{live_partitioning}], the spec says [{expected_parts}]")
    return diffs


def source_differences(spec: TableSpec, source_columns: Sequence[str]) -> list[str]:
    """Columns the source has and the spec lacks, or the other way round (names only: types are
    compared by the evolution classifier when the change is applied)."""
    known = {c.name.lower() for c in spec.columns}
    known |= {f.lower() for f in spec.pipeline.drop_fields}  # never stored, never proposed
    seen = {c.lower() for c in source_columns}
    diffs = [
        f"column {c} is in the source, not in spec v{spec.spec_version}"
        for c in source_columns
        if c.lower() not in known
    ]
    diffs += [
        f"column {c.name} of spec v{spec.spec_version} is not in the source"
        for c in spec.columns
        if c.name.lower() not in seen
    ]
    return diffs
