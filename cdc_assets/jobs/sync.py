"""The shared `sync_tables` job: ingest and upsert of the selected tables in one run
(Kafka -> ledger -> bucketed -> base), what the ``new_kafka_offsets`` sensor starts.

Through the daemon every run pays a launch before its first step: a process, Dagster, the
definitions of its tables, a Spark session. A micro-batch used to pay it twice, once for its
ingest run and once for the upsert run that ``ledger_updated`` started after it; at 1,000
tables the launch was most of each run and half of a hot table's wait
(``benchmarks/fleet_freshness.py --daemon``). One run per micro-batch pays it once. Within the
run a table's upsert steps go before other tables' ingests (op priority on bucketed and base),
so each table reaches base as soon as its own ingest is committed.

``ingest_ledgers`` and ``upsert_bases`` stay for what is not a micro-batch: hour rebuilds and
backfills of the ledger, and the upserts ``ledger_updated`` starts after an evolution or an
ingest started by hand.
"""

from collections.abc import Mapping, Sequence

import dagster as dg

from cdc_assets.assets.keys import asset_key
from cdc_assets.jobs.asset_job import AssetJob

SYNC_JOB = "sync_tables"
# The layers a micro-batch run materializes for each of its tables, in order.
SYNC_LAYERS = ("cdc", "bucketed", "base", "history")


def sync_selection(
    tables: list[str],
    history: frozenset[str] = frozenset(),
    groups: Mapping[str, str] | None = None,
) -> list[dg.AssetKey]:
    """The assets of a micro-batch run over ``tables``: each table's ledger, bucketed and base,
    its history for the tables in ``history`` (those whose spec keeps one), and the
    consistency group of each table in ``groups`` (table -> group)."""
    chosen = sorted({(groups or {})[t] for t in tables if t in (groups or {})})
    return [
        asset_key(layer, t)
        for t in tables
        for layer in SYNC_LAYERS
        if layer != "history" or t in history
    ] + [dg.AssetKey(["consistent", g]) for g in chosen]


def build_sync_job(scheduled_only: Sequence[dg.AssetCheckKey] = ()) -> AssetJob:
    """``scheduled_only``: checks the job leaves to the checks schedule."""
    selection: dg.AssetSelection = dg.AssetSelection.key_prefixes(
        *([layer] for layer in SYNC_LAYERS), ["consistent"]
    )
    if scheduled_only:
        selection = selection - dg.AssetSelection.checks(*scheduled_only)
    return dg.define_asset_job(
        SYNC_JOB,
        selection=selection,
        description="Kafka -> CDC ledger -> bucketed -> MERGE into base of the selected tables, "
        "in one run (the new_kafka_offsets sensor's micro-batch).",
    )
