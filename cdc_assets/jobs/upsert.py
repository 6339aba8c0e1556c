"""The shared `upsert_bases` job: bucketed then base (and history, where a spec keeps one) for
the selected tables.

One job for every table; a run targets tables by asset selection (the sensor, the UI, a CLI),
so the job count stays constant however many tables there are.
"""

import dagster as dg

from cdc_assets.jobs.asset_job import AssetJob

UPSERT_JOB = "upsert_bases"


def build_upsert_job() -> AssetJob:
    return dg.define_asset_job(
        UPSERT_JOB,
        selection=dg.AssetSelection.key_prefixes(["bucketed"], ["base"], ["history"]),
        description="Ledger -> bucketed temp -> MERGE into base, for the selected tables.",
    )
