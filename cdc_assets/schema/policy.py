"""What a table's ``evolution.policy`` asks of its ingest (pure): under ``fail`` a batch that
carries a source schema change stops the table instead of landing."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from cdc_assets.schema.recover import refused_column


def fail_stop_reason(
    policy: str, unknown_fields: Collection[str], dead_reasons: Mapping[str, int]
) -> str | None:
    """Why the batch must not be committed under ``policy``, or None. A field the spec lacks
    is a column added or renamed at the source; a value a column's type or nullability refused
    is a column widened, retyped or made nullable there."""
    if policy != "fail":
        return None
    refused: dict[str, int] = {}
    for reason, count in dead_reasons.items():
        column = refused_column(reason)
        if column is not None:
            refused[column] = refused.get(column, 0) + count
    parts = []
    if unknown_fields:
        parts.append(f"field(s) {', '.join(sorted(unknown_fields))} the spec lacks")
    if refused:
        parts.append(
            "values the spec's types refuse in column(s) "
            + ", ".join(f"{c} ({n})" for c, n in sorted(refused.items()))
        )
    if not parts:
        return None
    return (
        "evolution.policy is fail and the stream changed shape: "
        + "; ".join(parts)
        + ". Nothing of this batch was committed; change the spec file (or its policy) and "
        "run the ingest again"
    )
