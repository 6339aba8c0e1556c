"""After a drift check (pull detection): the `schema_drift_detected` sensor reads the check's
observations and starts an evolution run for each drifted table whose source shape is known, or
the table's maintenance when the check asked for it and the table is clean."""

from typing import Any

import dagster as dg

from cdc_assets.assets.keys import asset_key, table_or_name
from cdc_assets.assets.schema import evolve_run_config
from cdc_assets.jobs.asset_job import AssetJob
from cdc_assets.jobs.evolve import EVOLVE_JOB
from cdc_assets.jobs.maintenance import maintenance_run_config


def build_drift_sensor(
    drift_job: dg.JobDefinition, evolve_job: AssetJob, maintenance_job: Any
) -> dg.RunStatusSensorDefinition:
    @dg.run_status_sensor(
        name="schema_drift_detected",
        run_status=dg.DagsterRunStatus.SUCCESS,
        monitored_jobs=[drift_job],
        request_jobs=[evolve_job, maintenance_job],
        minimum_interval_seconds=30,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="After a drift check: evolution for each drifted table, maintenance for the "
        "others when the check asked for it.",
    )
    def schema_drift_detected(context: dg.RunStatusSensorContext) -> list[dg.RunRequest]:
        run = context.dagster_run
        records = context.instance.all_logs(
            run.run_id, of_type=dg.DagsterEventType.ASSET_OBSERVATION
        )
        requests = []
        for record in records:
            event = record.get_dagster_event()
            observation = event.asset_observation_data.asset_observation
            table = table_or_name(observation.asset_key)
            meta = {k: v.value for k, v in observation.metadata.items()}
            server = str(meta.get("seen_on") or "")
            if meta.get("drift") and (meta.get("proposed_spec") or meta.get("source_ddl")):
                if meta.get("proposed_spec"):
                    # The source table was renamed: the evolution points the spec at its new
                    # name.
                    config: dict[str, Any] = {"proposed_spec": meta["proposed_spec"]}
                else:
                    config = {"source_ddl": meta["source_ddl"], "audit_ddl": meta["audit_ddl"]}
                    if server:  # a sharded table's: named if evolution refuses the change
                        config["seen_on"] = server
                    if meta.get("source_attnums"):  # PostgreSQL's, kept in the evolved spec
                        config["source_attnums"] = meta["source_attnums"]
                requests.append(
                    dg.RunRequest(
                        run_key=f"pull:{run.run_id}:{table}",
                        job_name=EVOLVE_JOB,
                        asset_selection=[asset_key("schema", table)],
                        run_config=evolve_run_config(table, trigger="pull", **config),
                        tags={"cdc/table": table, "cdc/trigger": "schema_drift_detected"}
                        | ({"cdc/server": server} if server and "seen_on" in config else {}),
                    )
                )
            elif meta.get("drift"):
                # Iceberg differs from the spec and the source's shape is unknown: nothing to
                # evolve towards. The schema_drift asset check reports it as an error.
                context.log.warning(
                    f"{table}: Iceberg differs from the spec: {meta.get('iceberg_differences')}"
                )
            elif meta.get("maintain_when_clean"):
                requests.append(
                    dg.RunRequest(
                        run_key=f"clean:{run.run_id}:{table}",
                        job_name=maintenance_job.name,
                        run_config=maintenance_run_config(table),
                        tags={"cdc/table": table, "cdc/trigger": "schema_drift_detected"},
                    )
                )
        return requests

    return schema_drift_detected
