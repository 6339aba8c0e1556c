"""Which tables the runs of a job already cover, read from the runs' asset selections.

The selection is what a run will materialize whoever started it (a sensor, the UI, a backfill),
so the sensors see runs started by hand as well as their own.
"""

import dagster as dg

from cdc_assets.assets.keys import table_of

# A run in one of these states has not finished reading its input yet.
IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]

# Queued: it will read its input when it starts, so it covers anything that arrived before.
WAITING = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED]


def tables_in_runs(
    instance: dg.DagsterInstance, job_name: str, layer: str, statuses: list[dg.DagsterRunStatus]
) -> set[str]:
    """Tables whose ``layer/<table>`` asset a run of ``job_name`` in ``statuses`` selects."""
    records = instance.get_run_records(
        filters=dg.RunsFilter(job_name=job_name, statuses=statuses), limit=100
    )
    return {
        table
        for record in records
        for key in record.dagster_run.asset_selection or ()
        if (table := table_of(key, (layer,))) is not None
    }


def table_tags(tables: list[str]) -> dict[str, str]:
    """Tags naming the tables of a run: ``cdc/tables`` always, ``cdc/table`` for a single one
    (the UI filters runs by exact tag value)."""
    tags = {"cdc/tables": ",".join(tables)}
    if len(tables) == 1:
        tags["cdc/table"] = tables[0]
    return tags


# How often the daemon starts a failed micro-batch run again (``run_retries`` in dagster.yaml).
# The new_kafka_offsets cursor has moved past a failed ingest's offsets, so without a retry its
# tables would wait for their topics to grow again.
MICRO_BATCH_RETRIES = {"dagster/max_retries": "2"}
