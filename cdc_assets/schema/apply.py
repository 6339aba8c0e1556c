"""Applying a supported evolution plan to a table spec: the next spec version, with its columns
renamed, retyped, dropped or added as the plan says (pure; ``schema.evolution`` classifies).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from pydantic import ValidationError

from cdc_assets.errors import SpecError
from cdc_assets.schema.changes import (
    AddColumn,
    Change,
    ChangeSourceType,
    DropColumn,
    EvolutionPlan,
    FollowSourceRename,
    MakeOptional,
    RenameColumn,
    RetireColumn,
    SetColumnAttribute,
    SetTableSetting,
    SoftDropColumn,
    WidenType,
)
from cdc_assets.schema.types import SinkType
from cdc_assets.spec.models import ColumnSpec, SinkMapping, TableSpec


def renamed_sink(column: ColumnSpec, new_name: str) -> SinkMapping:
    """The sink mapping of a renamed column: its Iceberg column keeps its name, because jobs and
    readers select Iceberg columns by name."""
    keep = column.sink_name
    return column.sink.model_copy(update={"name": None if keep == new_name else keep})


def apply_plan(current: TableSpec, plan: EvolutionPlan) -> TableSpec:
    """The next spec version: ``plan``'s changes applied in order to ``current``.

    Column ids are preserved; new columns get the next ids after the highest one in use.
    """
    if plan.table != current.name or plan.from_version != current.spec_version:
        raise SpecError(
            f"{current.name}: the plan is for {plan.table} version {plan.from_version}, "
            f"not version {current.spec_version}"
        )
    if not plan.supported:
        reasons = "; ".join(str(r) for r in plan.rejections)
        raise SpecError(f"{current.name}: the plan has rejected changes: {reasons}")
    data = current.model_dump(mode="json", by_alias=True)
    columns = list(current.columns)
    next_id = max(c.id for c in columns) + 1
    for change in plan.changes:
        if isinstance(change, SetTableSetting):
            data[change.field] = change.new
        elif isinstance(change, FollowSourceRename):
            was = {"database": change.old_database, "table": change.old_table}
            data["source"].update(
                database=change.database,
                table=change.table,
                topic=change.topic,
                renamed_from=[
                    *data["source"].get("renamed_from", []),
                    {**was, "topic": change.old_topic},
                ],
            )
        elif isinstance(change, AddColumn):
            at = 0 if change.after is None else _index(columns, change.after) + 1
            columns.insert(at, change.column.model_copy(update={"id": next_id}))
            next_id += 1
        elif isinstance(change, DropColumn):
            columns = [c for c in columns if c.id != change.id]
        elif isinstance(change, RetireColumn):
            column = next(c for c in columns if c.id == change.id)
            columns = _update(
                columns,
                change.id,
                name=change.retired,
                dropped=True,
                nullable=True,
                default=None,
                backfill_default=False,
                former_names=[],
                sink=column.sink.model_copy(update={"name": column.sink_name}),
            )
        elif isinstance(change, RenameColumn):
            rename_references(data, change.old, change.new)
            column = next(c for c in columns if c.id == change.id)
            former = [
                n for n in dict.fromkeys([change.old, *column.former_names]) if n != change.new
            ]
            columns = _update(
                columns,
                change.id,
                name=change.new,
                sink=_renamed(columns, change),
                former_names=former,
            )
        else:
            columns = _update(columns, change.id, **_column_update(columns, change))
    data["columns"] = [c.model_dump(mode="json", by_alias=True) for c in columns]
    data["spec_version"] = current.spec_version + 1
    try:
        return TableSpec.model_validate(data)
    except ValidationError as err:
        raise SpecError(f"{current.name}: the evolved spec is invalid: {err}") from None


def retyped_names(spec: TableSpec, column: ColumnSpec, new: SinkType) -> tuple[str, str]:
    """The names of a type change Iceberg cannot make (see `RetireColumn`): the old column's
    spec name becomes ``<name>__v<version>`` (the last version with the old type: no source
    sends a field of that name), and the new column's Iceberg name is ``<sink name>__<new
    Iceberg type>`` with the type's punctuation as ``_`` (``amount__string``,
    ``price__decimal_12_4``), the sink name taken up to any ``__`` (a column retyped twice is
    ``amount__long``, not ``amount__string__long``); ``_<n>`` is appended while a name is
    taken."""
    names = {c.name for c in spec.columns}
    sinks = {c.sink_name for c in spec.columns}
    retired = _free(f"{column.name}__v{spec.spec_version}", names)
    token = re.sub(r"[^a-z0-9]+", "_", str(new).lower()).strip("_")
    base = column.sink_name.split("__")[0] or column.sink_name
    return retired, _free(f"{base}__{token}", sinks)


def _free(name: str, taken: Collection[str]) -> str:
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = f"{name}_{n}", n + 1
    return candidate


def _index(columns: list[ColumnSpec], name: str) -> int:
    for i, c in enumerate(columns):
        if c.name == name:
            return i
    raise SpecError(f"no column {name!r} to add a column after")


def _update(columns: list[ColumnSpec], column_id: int, **values: Any) -> list[ColumnSpec]:
    return [c.model_copy(update=values) if c.id == column_id else c for c in columns]


def _renamed(columns: list[ColumnSpec], change: RenameColumn) -> SinkMapping:
    column = next(c for c in columns if c.id == change.id)
    return renamed_sink(column, change.new)


def _column_update(columns: list[ColumnSpec], change: Change) -> dict[str, Any]:
    if isinstance(change, WidenType | ChangeSourceType):
        column = next(c for c in columns if c.id == change.id)
        sink = column.sink.model_copy(update={"type": change.sink_type})
        return {"type": change.type if isinstance(change, WidenType) else change.new, "sink": sink}
    if isinstance(change, MakeOptional):
        return {"nullable": True}
    if isinstance(change, SoftDropColumn):
        return {"dropped": True, "nullable": True}
    if isinstance(change, SetColumnAttribute):
        return {change.attribute: change.new}
    raise TypeError(f"not a column change: {change!r}")


def rename_references(data: dict[str, Any], old: str, new: str) -> None:
    """Rename a column where a dumped spec names it by source name: key, bucket column, checks."""
    data["primary_key"] = [new if k == old else k for k in data["primary_key"]]
    if data["base"].get("bucket_column") == old:
        data["base"]["bucket_column"] = new
    checks = data.get("checks") or {}
    if old in checks.get("max_null_fraction", {}):
        checks["max_null_fraction"][new] = checks["max_null_fraction"].pop(old)
    if "allow_all_null" in checks:
        checks["allow_all_null"] = [new if c == old else c for c in checks["allow_all_null"]]
