"""Carry a Dagster instance's asset history over to the keys that name their layer.

Before asset names carried their layer, a table's assets were ``raw/users``, ``cdc/users``,
``bucketed/users`` and ``schema/users`` (``base/users`` is unchanged). Dagster has no rename: an
instance that ran the old keys shows them as unowned assets beside the new, empty ones. This
copies, for each old key, its newest materialization of every partition (and its newest
observation) to the new key, with the old key, run and time in the metadata, and then wipes the
old key unless asked to keep it. Runs and their logs are kept either way; the pipeline's own
state (offsets, watermarks) lives in Iceberg and does not depend on Dagster's history.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import dagster as dg

from cdc_assets.assets.keys import TABLE_LAYERS, asset_key, legacy_key

PAGE = 1000


@dataclass(frozen=True)
class KeyMove:
    old: str
    new: str
    materializations: int
    observations: int


def _newest_per_partition(records: Iterator[dg.EventLogRecord]) -> list[dg.EventLogRecord]:
    """The newest record of each partition (records arrive newest first), oldest first."""
    seen: dict[str | None, dg.EventLogRecord] = {}
    for record in records:
        seen.setdefault(record.partition_key, record)
    return sorted(seen.values(), key=lambda r: r.storage_id)


def _records(
    instance: dg.DagsterInstance, key: dg.AssetKey, kind: str
) -> Iterator[dg.EventLogRecord]:
    fetch = (
        instance.fetch_materializations
        if kind == "materialization"
        else instance.fetch_observations
    )
    cursor = None
    while True:
        page = fetch(key, limit=PAGE, cursor=cursor)
        yield from page.records
        if not page.has_more:
            return
        cursor = page.cursor


def _provenance(record: dg.EventLogRecord, old: dg.AssetKey) -> dict[str, str | float]:
    return {
        "migrated_from": old.to_user_string(),
        "migrated_run_id": record.run_id,
        "migrated_timestamp": record.timestamp,
    }


def migrate_asset_keys(
    instance: dg.DagsterInstance,
    tables: Iterable[str],
    keep_old: bool = False,
    dry_run: bool = False,
) -> list[KeyMove]:
    """Move the history of every old-style key of ``tables`` found in ``instance``."""
    moves = []
    for table in tables:
        for layer in TABLE_LAYERS:
            old, new = legacy_key(layer, table), asset_key(layer, table)
            if old == new or not instance.has_asset_key(old):
                continue
            materialized = _newest_per_partition(_records(instance, old, "materialization"))
            observed = next(_records(instance, old, "observation"), None)
            moves.append(
                KeyMove(
                    old.to_user_string(),
                    new.to_user_string(),
                    len(materialized),
                    0 if observed is None else 1,
                )
            )
            if dry_run:
                continue
            for record in materialized:
                event = record.asset_materialization
                assert event is not None
                instance.report_runless_asset_event(
                    dg.AssetMaterialization(
                        asset_key=new,
                        description=event.description,
                        metadata={**event.metadata, **_provenance(record, old)},
                        partition=event.partition,
                        tags=event.tags,
                    )
                )
            if observed is not None and observed.asset_observation is not None:
                seen = observed.asset_observation
                instance.report_runless_asset_event(
                    dg.AssetObservation(
                        asset_key=new,
                        description=seen.description,
                        metadata={**seen.metadata, **_provenance(observed, old)},
                        partition=seen.partition,
                        tags=seen.tags,
                    )
                )
            if not keep_old:
                instance.wipe_assets([old])
    return moves
