"""The shared `upsert_bases` job: bucketed then base (and history, where a spec keeps one) for
the selected tables.

One job for every table; a run targets tables by asset selection (the sensor, the UI, a CLI),
so the job count stays constant however many tables there are.
"""

from collections.abc import Iterable, Sequence

import dagster as dg

from cdc_assets.assets.keys import asset_key
from cdc_assets.jobs.asset_job import AssetJob
from cdc_assets.spec.models import TableSpec

UPSERT_JOB = "upsert_bases"


def upsert_assets(specs: Iterable[TableSpec]) -> list[dg.AssetKey]:
    """The assets an upsert of ``specs`` materializes: bucketed, base, history where kept, and
    the consistency groups they belong to."""
    specs = list(specs)
    groups = sorted({s.consistency.group for s in specs if s.consistency is not None})
    return [
        asset_key(layer, s.name)
        for s in specs
        for layer in ("bucketed", "base", "history")
        if layer != "history" or s.history.enabled
    ] + [dg.AssetKey(["consistent", g]) for g in groups]


def build_upsert_job(scheduled_only: Sequence[dg.AssetCheckKey] = ()) -> AssetJob:
    """``scheduled_only``: checks the job leaves to the checks schedule (they read a whole
    source table: `checks.table_checks.SCHEDULED_ONLY`)."""
    selection: dg.AssetSelection = dg.AssetSelection.key_prefixes(
        ["bucketed"], ["base"], ["history"], ["consistent"]
    )
    if scheduled_only:
        selection = selection - dg.AssetSelection.checks(*scheduled_only)
    return dg.define_asset_job(
        UPSERT_JOB,
        selection=selection,
        description="Ledger -> bucketed temp -> MERGE into base, for the selected tables.",
    )
