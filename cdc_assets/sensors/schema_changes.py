"""Push detection: one sensor starts an evolution of each table whose source changed shape.

MySQL/MariaDB: it reads Debezium's schema-change topics. PostgreSQL has none: on every tick the
sensor reads the schema embedded in the newest row events of each topic that grew since it last
read it (or whose change it requested and the spec does not have yet), which shows new columns
(the ingest also reports them as ``unknown_fields``) and widenings it states exactly. A topic
that did not grow holds no event with a new shape, and reading one costs a Kafka consumer of its
own: at 1,000 tables, a third of them PostgreSQL, reading every topic on every tick took 28 s
and held up the other sensors' ticks. The spec is re-read from the spec directory whenever a
topic is read, so a change that an evolution already applied (or the initial CREATE TABLE of a
snapshot) starts nothing.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import dagster as dg

from cdc_assets.assets.keys import asset_key
from cdc_assets.assets.schema import evolve_run_config
from cdc_assets.errors import CdcAssetsError
from cdc_assets.jobs.asset_job import AssetJob
from cdc_assets.pipeline.evolution.converge import spec_path
from cdc_assets.pipeline.evolution.schema_topic import (
    SeenChange,
    matches,
    newest_row_schema,
    read_schema_changes,
    row_schema_change_position,
    row_schema_versions,
)
from cdc_assets.pipeline.evolution.spec_store import Stored, current_of, stored_specs
from cdc_assets.resources.kafka import KafkaResource
from cdc_assets.resources.schema_registry import value_subject
from cdc_assets.schema.reconcile import Attempt, decide
from cdc_assets.schema.shape import shape_verdict
from cdc_assets.spec.connect_schema import (
    create_table_from_fields,
    differs,
    names_differ,
    next_version,
)
from cdc_assets.spec.load import load_spec
from cdc_assets.spec.models import TableSpec
from cdc_assets.spec.source_table import SourceTable, followed, renamed_tables
from cdc_assets.spec.versions import render_spec_yaml

# The cursor's entry for the row-schema reads (a '/' never occurs in a Kafka topic's name, so no
# schema-change topic's entry can take its place).
ROW_SCHEMA_READ_AT = "row-schema/read-at"
# The cursor's entry for the desired shapes of the schema-change records, per table.
DESIRED = "schema-changes/desired"
# The run tag naming the desired shape an evolution run was requested for.
DESIRED_TAG = "cdc/desired"
# DDL statements kept per table as the audit trail of a shape not applied yet.
MAX_AUDIT = 200


def attempts_of(instance: dg.DagsterInstance, table: str, key: str) -> list[Attempt]:
    """The evolution runs requested for ``table``'s desired shape ``key``, as attempts."""
    records = instance.get_run_records(
        filters=dg.RunsFilter(tags={"cdc/table": table, DESIRED_TAG: key}), limit=50
    )
    out = []
    for record in records:
        status = record.dagster_run.status
        finished = status in _FINISHED
        out.append(
            Attempt(
                finished=finished,
                succeeded=status == dg.DagsterRunStatus.SUCCESS,
                ended_at=record.end_time if finished else None,
            )
        )
    return out


_FINISHED = {
    dg.DagsterRunStatus.SUCCESS,
    dg.DagsterRunStatus.FAILURE,
    dg.DagsterRunStatus.CANCELED,
}


def build_schema_change_sensor(
    specs: list[TableSpec],
    specs_dir: Path,
    job: AssetJob,
    load_catalog: Callable[[], Any] | None = None,
) -> dg.SensorDefinition:
    """``load_catalog``: the pyiceberg catalog holding stored spec versions (None: files only)."""
    # Per source: each shard of a sharded table is watched on its own server's topic, and the
    # first shard to show a change evolves the table (the others then find it applied).
    by_topic: dict[str, list[TableSpec]] = {}
    for s in specs:
        for view in s.shard_specs():
            if (t := view.source.schema_changes) is not None:
                by_topic.setdefault(t, []).append(view)
    topics = sorted(by_topic)
    postgres = [v for s in specs if s.source.connector == "postgresql" for v in s.shard_specs()]
    row_topics = sorted({v.source.topic for v in postgres})

    def request(
        context: dg.SensorEvaluationContext,
        table: str,
        create: str,
        audit: list[str],
        key: str,
        at: str,
        seen_on: str = "",
        position: str = "",
        proposed: str = "",
    ) -> dg.RunRequest | None:
        """The run for the desired shape ``key``, or None while one is in flight or backing
        off after a failure (`schema.reconcile`). ``seen_on``: the shard's server, for a
        sharded table (named if evolution refuses)."""
        decision = decide(key, attempts_of(context.instance, table, key), time.time())
        if not decision.request or decision.run_key is None:
            context.log.info(f"{table}: evolution not requested now: {decision.why}")
            return None
        if decision.run_key != key:
            context.log.warning(f"{table}: evolution requested again, {decision.why}")
        extra: dict[str, Any] = {"seen_on": seen_on} if seen_on else {}
        if position:
            extra["source_position"] = position
        if proposed:  # a followed rename of the source table: a spec, not a shape
            extra["proposed_spec"] = proposed
        else:
            extra.update(source_ddl=create, audit_ddl=audit)
        return dg.RunRequest(
            run_key=decision.run_key,
            asset_selection=[asset_key("schema", table)],
            run_config=evolve_run_config(table, trigger="push", detected_at=at, **extra),
            tags={"cdc/table": table, "cdc/trigger": "schema_changes", DESIRED_TAG: key}
            | ({"cdc/server": seen_on} if seen_on else {}),
        )

    def current_specs(context: dg.SensorEvaluationContext) -> Callable[[str], TableSpec]:
        """The spec each table runs with now: its file, or the version an evolution stored
        (read once per tick; a catalog that does not answer leaves the files)."""
        stored: Stored = {}
        if load_catalog is not None:
            try:
                catalog = load_catalog()
                stored = stored_specs(catalog) if catalog is not None else {}
            except Exception as exc:
                context.log.warning(f"stored spec versions not read: {exc}; using the files")

        def current(table: str) -> TableSpec:
            return current_of(load_spec(spec_path(specs_dir, table)), stored)

        return current

    def postgres_requests(
        context: dg.SensorEvaluationContext,
        kafka: KafkaResource,
        current_spec: Callable[[str], TableSpec],
        read_at: dict[str, int],
    ) -> list[dg.RunRequest]:
        """``read_at``: per table and topic, the topic's end (offsets summed) when the sensor
        last read its newest events; updated for the topics read now."""
        out: list[dg.RunRequest] = []
        ends = kafka.latest_offsets(row_topics) if row_topics else {}
        for spec in postgres:
            if any(r.tags["cdc/table"] == spec.name for r in out):
                continue  # another shard of the table evolves it this tick
            key, end = (
                f"{spec.name}@{spec.source.topic}",
                sum(ends.get(spec.source.topic, {}).values()),
            )
            if read_at.get(key) == end:
                continue  # no event since the last read: no new shape
            read_at[key] = end
            event = context.instance.get_latest_materialization_event(asset_key("cdc", spec.name))
            mat = event.asset_materialization if event is not None else None
            unknown = mat.metadata.get("unknown_fields") if mat is not None else None
            current = current_spec(spec.name).same_source_view(spec) or spec
            # Every tick, not only after the ingest reported unknown fields: a widening (say
            # numeric(12,2) -> numeric(16,2)) adds no field, only the embedded schema shows it.
            # Avro through a registry: the subject's versions, applied one at a time in order.
            versions = row_schema_versions(kafka, current)
            label, schema_id = "row-schema", None
            if versions is not None:
                picked = next_version(current, versions)
                if picked is None:
                    continue
                schema_id = picked[0]
                label = f"registry-schema-{schema_id}"
                fields: list[Mapping[str, Any]] | None = picked[1]
            else:
                fields = newest_row_schema(kafka, current)
            if fields is None:
                if unknown is not None and unknown.value:
                    context.log.warning(
                        f"{spec.name}: events carry fields {unknown.value} the spec lacks and no "
                        "embedded schema; apply the change with `cdc-assets evolve --ddl`"
                    )
                continue
            if not differs(current, fields):
                continue
            create = create_table_from_fields(current, fields)
            if schema_id is not None:
                # the evolution's history keeps the source DDL: the writer schema it came from
                # sits beside the Iceberg schema ids it produced
                subject = value_subject(current.source.topic)
                create = f"-- schema registry subject {subject}, schema id {schema_id}\n{create}"
            if not names_differ(current, fields):
                verdict = shape_verdict(current, create, types_only=True)
                if not verdict.changed:
                    if verdict.plan is None or not verdict.plan.supported:
                        context.log.warning(
                            f"{spec.name}: the newest events' schema differs from the spec in a "
                            f"way evolution does not apply ({verdict.describe()}); the drift "
                            "check reports it"
                        )
                    continue
            digest = hashlib.sha256(create.encode()).hexdigest()[:16]
            # Read again next tick, grown or not, until the spec has the events' shape: a
            # registry's versions are applied one per run, and a run may fail (it is retried).
            read_at.pop(key, None)
            position = None
            if schema_id is None:
                # Where the shape changed, when the newest events show it: a column whose
                # encoding changed (a numeric's scale) is then read anew after it only.
                try:
                    position = row_schema_change_position(kafka, current, fields)
                except Exception as err:  # the position only narrows a backfill: go on without
                    context.log.warning(f"{spec.name}: no source position for the change: {err}")
            run = request(
                context,
                spec.name,
                create,
                [],
                f"{spec.name}:{label}:{digest}",
                datetime.fromtimestamp(event.timestamp, UTC).isoformat()
                if event is not None
                else datetime.now(UTC).isoformat(),
                position=json.dumps(position) if position else "",
            )
            if run is not None:
                out.append(run)
        return out

    @dg.sensor(
        name="schema_changes",
        job=job,
        minimum_interval_seconds=30,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Reads Debezium schema-change topics and starts the evolution of each table "
        "whose source changed shape (push detection).",
    )
    def schema_changes(
        context: dg.SensorEvaluationContext, kafka: KafkaResource
    ) -> dg.SensorResult | dg.SkipReason:
        if not topics and not postgres:
            return dg.SkipReason("no table to watch")
        cursor: dict[str, Any] = json.loads(context.cursor or "{}")
        current_spec = current_specs(context)
        read_at = cursor.setdefault(ROW_SCHEMA_READ_AT, {})
        requests = postgres_requests(context, kafka, current_spec, read_at)
        requested = {str(r.tags["cdc/table"]) for r in requests}
        # Per table, the newest shape its schema-change records showed and the DDLs that led
        # there: compared with the spec on every tick until the spec has it.
        desired: dict[str, dict[str, Any]] = cursor.setdefault(DESIRED, {})
        for topic in topics:
            start = {int(p): o for p, o in cursor.get(topic, {}).items()}
            seen, next_offsets = read_schema_changes(kafka, topic, start)
            # Per table only the newest record counts (each carries the whole table after its
            # DDL), with the DDLs before it as the audit trail: records replayed from an older
            # position (a lost cursor, a new process) can never move the spec backwards.
            by_table: dict[str, list[SeenChange]] = {}
            follows: dict[str, tuple[SeenChange, tuple[str, str]]] = {}
            # Matched among this topic's specs only: another server's table of the same
            # database and name is another spec's, never this one's.
            for item in sorted(seen, key=lambda i: (i.partition, i.offset)):
                for table, to in _renames(item, by_topic[topic], current_spec, context):
                    follows[table] = (item, to)
                if item.change.kind == "DROP":
                    # No shape to evolve to: the schema_drift check reports the drop, and a
                    # table created again under the name arrives as a CREATE.
                    continue
                for spec in by_topic[topic]:
                    if matches(spec, item.change, topic):
                        by_table.setdefault(spec.name, []).append(item)
            if set(by_table) & requested:
                # A shard of a table this tick already evolves: its change waits for the next
                # tick (cursor kept), which finds it applied or evolves the rest. One evolution
                # per table at a time.
                continue
            for table, items in sorted(by_table.items()):
                newest = items[-1]
                earlier = desired.get(table, {})
                sharded = any(v.name == table and v.shard for v in by_topic[topic])
                desired[table] = {
                    "create": newest.change.create_table,
                    # DDLs not applied yet stay the audit trail (a rename proved by an older
                    # record still is one); an applied spec has them already.
                    "audit": [*earlier.get("audit", []), *(i.change.ddl for i in items)][
                        -MAX_AUDIT:
                    ],
                    "key": newest.run_key,
                    "at": (
                        datetime.fromtimestamp(newest.change.ts_ms / 1000, UTC).isoformat()
                        if newest.change.ts_ms
                        else datetime.now(UTC).isoformat()
                    ),
                    "seen_on": _server_of(by_topic[topic], table) if sharded else "",
                    # where the change happened: a column whose encoding changed is decoded
                    # anew only in the images after it
                    "position": json.dumps(dict(newest.change.position), sort_keys=True),
                }
            for table, (item, to) in sorted(follows.items()):
                shaped = by_table.get(table)
                if shaped and (shaped[-1].partition, shaped[-1].offset) > (
                    item.partition,
                    item.offset,
                ):
                    continue  # a table created again under the old name since: that one
                # The table under a new name: the spec follows it (the evolution reads the old
                # topic to its end first). Kept until the spec has the new name.
                desired[table] = {
                    "follow": list(to),
                    "key": f"{table}:renamed:{item.run_key}",
                    "at": datetime.now(UTC).isoformat(),
                }
            cursor[topic] = {str(p): o for p, o in sorted(next_offsets.items())}
        for table in sorted(desired):
            if table in requested:
                continue  # a shard's row schema evolves it this tick; compared again next tick
            want = desired[table]
            if "follow" in want:
                run = _follow_request(context, request, current_spec, table, want)
                if run is None:
                    del desired[table]  # followed already, or refused (the drift check says)
                elif run is not False:
                    requests.append(run)
                    requested.add(table)
                continue
            try:
                current = current_spec(table)
            except CdcAssetsError as err:
                context.log.warning(f"{table}: {err}; the evolution run will report it")
            else:
                verdict = shape_verdict(current, want["create"], want["audit"])
                if not verdict.changed:
                    del desired[table]  # the spec has the shape: reconciled
                    continue
                if not verdict.applicable and attempts_of(context.instance, table, want["key"]):
                    # Every difference left is refused, and a run has recorded why: asking
                    # again changes nothing until the spec or the source does. The
                    # schema_converged check keeps showing it.
                    context.log.info(
                        f"{table}: the stream's shape differs from the spec only in ways "
                        f"evolution refuses: {verdict.describe()}"
                    )
                    continue
                if verdict.error is not None:
                    where = f" (shard on server {want['seen_on']})" if want["seen_on"] else ""
                    context.log.warning(f"{table}{where}: {verdict.describe()}; the run reports it")
            run = request(
                context,
                table,
                want["create"],
                want["audit"],
                want["key"],
                want["at"],
                want["seen_on"],
                want.get("position", ""),
            )
            if run is not None:
                requests.append(run)
                requested.add(table)
        return dg.SensorResult(run_requests=requests, cursor=json.dumps(cursor, sort_keys=True))

    return schema_changes


def _server_of(views: list[TableSpec], table: str) -> str:
    return next((v.source.server_name for v in views if v.name == table), "?")


def _renames(
    item: SeenChange,
    views: list[TableSpec],
    current_spec: Callable[[str], TableSpec],
    context: dg.SensorEvaluationContext,
) -> list[tuple[str, tuple[str, str]]]:
    """The tables (of one source, not sharded) whose source table ``item`` renames, each with
    its new (database, table)."""
    if item.change.kind != "ALTER":
        return []
    out = []
    for old, new in renamed_tables(item.change.ddl):
        for view in views:
            if view.source.sharded:
                continue
            try:
                source = current_spec(view.name).source
            except CdcAssetsError:
                continue
            db = old[0] or item.change.database
            if (db.lower(), old[1].lower()) == (source.database.lower(), source.table.lower()):
                out.append((view.name, (new[0] or item.change.database, new[1])))
                context.log.info(
                    f"{view.name}: source table {db}.{old[1]} renamed to "
                    f"{new[0] or item.change.database}.{new[1]} ({item.change.ddl.strip()!r})"
                )
    return out


def _follow_request(
    context: dg.SensorEvaluationContext,
    request: Callable[..., dg.RunRequest | None],
    current_spec: Callable[[str], TableSpec],
    table: str,
    want: Mapping[str, Any],
) -> dg.RunRequest | Literal[False] | None:
    """The evolution that follows a renamed source table; None when there is nothing to ask
    (followed already, or refused: the drift check reports why), False while one is in flight
    or backing off."""
    try:
        current = current_spec(table)
    except CdcAssetsError as err:
        context.log.warning(f"{table}: {err}")
        return None
    database, name = want["follow"]
    if (current.source.database, current.source.table) == (database, name):
        return None
    proposal = followed(current, SourceTable("renamed", None, (database, name)))
    if isinstance(proposal, str):
        context.log.warning(f"{table}: the source table's rename is not followed: {proposal}")
        return None
    run = request(
        context, table, "", [], want["key"], want["at"], proposed=render_spec_yaml(proposal)
    )
    return False if run is None else run
