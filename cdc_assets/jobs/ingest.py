"""The shared `ingest_ledgers` job: every table's cdc asset, one hourly partition per run.

Sensors and backfills select the tables of a run by asset selection, so the job count stays one
however many tables there are.
"""

import os
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg

from cdc_assets.jobs.asset_job import AssetJob

INGEST_JOB = "ingest_ledgers"
# Kafka's default retention: an hour older than this can no longer be rebuilt from the topic.
LOOKBACK = timedelta(days=7)
START_FILE = "partitions-start"
HOUR_FORMAT = "%Y-%m-%d-%H:00"


def deployment_start(home: Path, now: datetime | None = None) -> str:
    """The first ledger hour when ``CDC_ASSETS_PARTITIONS_START`` is not set: a week (Kafka's
    default retention, what a first ingest can still read) before this home first loaded the
    definitions. Kept in ``<home>/partitions-start`` so that it does not move afterwards."""
    marker = home / START_FILE
    start = ((now or datetime.now(UTC)) - LOOKBACK).strftime(HOUR_FORMAT)
    home.mkdir(parents=True, exist_ok=True)
    # Written whole and then linked into place: a process that loses the race reads the
    # winner's complete value, never an empty file.
    with tempfile.NamedTemporaryFile("w", dir=home, prefix=".start-", delete=False) as out:
        out.write(start + "\n")
    try:
        os.link(out.name, marker)
    except FileExistsError:
        start = marker.read_text(encoding="utf-8").strip()
    finally:
        os.unlink(out.name)
    return start


def hourly_partitions(start: str) -> dg.HourlyPartitionsDefinition:
    """Ledger hours in UTC; end_offset=1 makes the current, still open hour a partition too."""
    return dg.HourlyPartitionsDefinition(start_date=start, timezone="UTC", end_offset=1)


def build_ingest_job() -> AssetJob:
    return dg.define_asset_job(
        INGEST_JOB,
        selection=dg.AssetSelection.key_prefixes(["cdc"]),
        description="Kafka -> CDC ledger of the selected tables (incremental, or an hour rebuild).",
    )
