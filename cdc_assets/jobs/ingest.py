"""The shared `ingest_ledgers` job: every table's cdc asset, one hourly partition per run.

Sensors and backfills select the tables of a run by asset selection, so the job count stays one
however many tables there are.
"""

import dagster as dg

from cdc_assets.jobs.asset_job import AssetJob

INGEST_JOB = "ingest_ledgers"


def hourly_partitions(start: str) -> dg.HourlyPartitionsDefinition:
    """Ledger hours in UTC; end_offset=1 makes the current, still open hour a partition too."""
    return dg.HourlyPartitionsDefinition(start_date=start, timezone="UTC", end_offset=1)


def build_ingest_job() -> AssetJob:
    return dg.define_asset_job(
        INGEST_JOB,
        selection=dg.AssetSelection.key_prefixes(["cdc"]),
        description="Kafka -> CDC ledger of the selected tables (incremental, or an hour rebuild).",
    )
