"""A code location for the run launcher's tests: a ledger asset per table, as the definitions
module builds them (only the tables of ``CDC_ASSETS_RUN_TABLES`` when it is set), and a view
over all of them. Each asset's materialization records what its run worker built."""

from __future__ import annotations

import os
import time

import dagster as dg

from cdc_assets.assets.keys import asset_key
from cdc_assets.run_tables import RUN_TABLES_ENV, tables_from_env

TABLES = ("alpha", "beta", "gamma", "sleepy")
BUILT = [t for t in TABLES if t in (tables_from_env() or TABLES)]


def _ledger(table: str) -> dg.AssetsDefinition:
    @dg.asset(key=asset_key("cdc", table))
    def ledger() -> dg.MaterializeResult:
        if table == "sleepy":  # a run to terminate
            time.sleep(120)
        return dg.MaterializeResult(
            metadata={"built": ",".join(BUILT), "env": os.environ.get(RUN_TABLES_ENV, "<unset>")}
        )

    return ledger


@dg.asset(key=dg.AssetKey(["view", "everything"]))
def everything() -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata={"built": ",".join(BUILT)})


defs = dg.Definitions(
    assets=[*(_ledger(t) for t in BUILT), *([everything] if list(TABLES) == BUILT else [])],
    jobs=[dg.define_asset_job("ingest_ledgers", selection=dg.AssetSelection.all())],
)
