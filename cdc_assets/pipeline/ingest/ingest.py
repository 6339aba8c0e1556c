"""Kafka -> CDC ledger: read a topic with Spark's Kafka source, classify and decode every record,
write dead letters, then append ledger rows and the consumed offsets in one Iceberg commit.

Order matters for exactly-once: dead letters are merged first (idempotent on topic, partition,
offset), the ledger commit that carries the end offsets comes last. A crash anywhere before that
commit leaves the offsets where they were, so the rerun reads the same records again; a crash
after it resumes from the new offsets.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from cdc_assets.errors import CdcAssetsError, SchemaChangeStopError, SpecError, StackError
from cdc_assets.pipeline.ingest.envelope_reader import envelope_reader
from cdc_assets.pipeline.ingest.gtid_floor import fill_gtid_floor
from cdc_assets.pipeline.ingest.ledger_commit import (
    LedgerMovedError,
    append_if_unchanged,
    remove_stale_branches,
    start_snapshot,
)
from cdc_assets.pipeline.shared.batch_cache import cached_batch, session_conf
from cdc_assets.pipeline.shared.failpoint import armed, fail_once, failpoint, hold
from cdc_assets.pipeline.shared.offsets import (
    COUNTS_PROPERTY,
    KIND_PROPERTY,
    OFFSETS_PROPERTY,
    SHIFT_PROPERTY,
    SPEC_VERSION_PROPERTY,
    START_OFFSETS_PROPERTY,
    TOPIC_PROPERTY,
    UNKNOWN_FIELDS_PROPERTY,
    LedgerMark,
    TopicRead,
    committed_offsets,
    encode_offsets,
    ledger_mark,
    next_read,
)
from cdc_assets.pipeline.shared.protection import key_for
from cdc_assets.pipeline.shared.small_work import offsets_span, small_work_conf
from cdc_assets.pipeline.shared.tables import ensure_txn_columns
from cdc_assets.resources.kafka_client import KafkaClient, PartitionOffsets
from cdc_assets.resources.schema_registry import TopicSchemas, value_subject
from cdc_assets.schema.layers import dead_letter_layout, ledger_layout, order_mismatch
from cdc_assets.schema.policy import fail_stop_reason
from cdc_assets.schema.wire import plan_fields
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.batch_decode import render_classified
from cdc_assets.sql.ddl import literal, quote, temp_view_name
from cdc_assets.sql.decode import (
    DEAD,
    LEDGER,
    SKIP,
    is_unavailable,
    json_has_field,
    ledger_value,
    parse_document,
    raw,
    sequence_columns,
    unavailable_list,
)
from cdc_assets.sql.protect import (
    ProtectionKey,
    document_sql,
    image_sql,
    protect_sql,
    sealed_payload_sql,
)


class OffsetsExpiredError(CdcAssetsError):
    """Kafka no longer holds offsets the ledger has not consumed yet (retention passed)."""


class SourceOrderError(CdcAssetsError):
    """The spec's ``source.order`` differs from the one its ledger was created with."""


@dataclass
class IngestResult:
    """What one ingest run did; every record read is counted once as ledger, dead or skip."""

    table: str
    mode: str
    start_offsets: dict[int, int]
    end_offsets: dict[int, int]
    read: int = 0
    ledger: int = 0
    dead: int = 0
    skipped: int = 0
    skip_reasons: dict[str, int] = field(default_factory=dict)
    dead_reasons: dict[str, int] = field(default_factory=dict)
    unknown_fields: list[str] = field(default_factory=list)
    hours: list[str] = field(default_factory=list)
    snapshot_id: int | None = None
    seconds: float = 0.0
    topic: str | None = None  # the Kafka topic read (a former name's, while it is drained)

    def then(self, later: IngestResult) -> IngestResult:
        """This run followed by ``later`` (a former topic drained, then the current one)."""
        merged = IngestResult(
            self.table,
            self.mode,
            {**later.start_offsets, **self.start_offsets},
            {**self.end_offsets, **later.end_offsets},
            self.read + later.read,
            self.ledger + later.ledger,
            self.dead + later.dead,
            self.skipped + later.skipped,
            unknown_fields=sorted({*self.unknown_fields, *later.unknown_fields}),
            hours=sorted({*self.hours, *later.hours}),
            snapshot_id=later.snapshot_id or self.snapshot_id,
            seconds=self.seconds + later.seconds,
            topic=later.topic,
        )
        for mine, theirs, out in (
            (self.skip_reasons, later.skip_reasons, merged.skip_reasons),
            (self.dead_reasons, later.dead_reasons, merged.dead_reasons),
        ):
            for reason, n in [*mine.items(), *theirs.items()]:
                out[reason] = out.get(reason, 0) + n
        return merged

    @property
    def balanced(self) -> bool:
        return self.read == self.ledger + self.dead + self.skipped


def ledger_identifier(catalog: str, spec: TableSpec) -> str:
    layout = ledger_layout(spec)
    return ".".join(quote(p) for p in (catalog, layout.namespace, layout.name))


def dead_letter_identifier(catalog: str, spec: TableSpec) -> str:
    layout = dead_letter_layout(spec)
    return ".".join(quote(p) for p in (catalog, layout.namespace, layout.name))


FETCH_MAX_WAIT_MS = 10


def read_kafka(
    spark: Any,
    kafka: KafkaClient,
    topic: str,
    start: dict[int, int],
    end: dict[int, int],
) -> Any:
    """Spark's own Kafka batch source over exact offset ranges (end exclusive)."""
    # The librdkafka check first: a wrong credential or certificate fails naming its setting
    # instead of the Java client waiting out its timeouts on the executors.
    kafka.client_conf()
    reader = spark.read.format("kafka").options(**kafka.reader_options())
    reader = (
        reader.option("subscribe", topic)
        .option("startingOffsets", json.dumps({topic: {str(p): o for p, o in start.items()}}))
        .option("endingOffsets", json.dumps({topic: {str(p): o for p, o in end.items()}}))
        .option("failOnDataLoss", "true")
        # Debezium names the other key of a primary-key change in a header
        # (sql.batch_decode.OLD_KEY_HEADER).
        .option("includeHeaders", "true")
        # The read ends at the log's end offset, where the consumer's last fetch would otherwise
        # sit in the broker for the default 500 ms waiting for data that is not coming: a
        # 50-event batch took 1.4 s to read instead of 0.3 s. Full fetches return at once either
        # way, so bulk reads are unaffected.
        .option("kafka.fetch.max.wait.ms", str(FETCH_MAX_WAIT_MS))
    )
    return reader.load()


def classify_records(records: Any, spec: TableSpec, schemas: TopicSchemas | None = None) -> Any:
    """Every Kafka record with ``_status``/``_stage``/``_reason`` and its decoded ledger columns.

    ``records`` has Kafka source columns (key, value, partition, offset, timestamp, and headers
    when read from Kafka). A value in a schema registry's wire format is decoded with the
    writer schemas of ``schemas`` (none given: every such value is a dead letter saying no
    registry is configured). Persist the result before filtering it: it is read several times,
    and a filter pushed down through the decode stages would make the optimizer inline every
    stage into every condition.

    The decode is one SQL statement (`sql.batch_decode`) over ``records`` as a temp view named
    after the table; the view stays, replaced by the next batch of the table in this session,
    because a Connect client's DataFrame resolves it only when it runs.
    """
    spark = records.sparkSession
    reader = envelope_reader(spark)
    schemas = schemas or TopicSchemas(None, value_subject(spec.source.topic))
    view = temp_view_name("records", spec.sink.namespace, spec.name)
    records.createOrReplaceTempView(view)
    query = render_classified(
        view,
        spec,
        plan_fields(spec),
        schemas.schemas,
        schemas.url,
        schemas.subject,
        headers="headers" in records.columns,
        reader=reader,
    )
    return spark.sql(query)


def prepare(classified: Any, spec: TableSpec) -> Any:
    """Only what the writes and counts need: ledger columns, status, and the raw record for dead
    letters alone. This is what gets cached, so keep it narrow.

    A spec that protects values (`sql.protect`) has them protected here, in the same query: the
    typed columns, ``_row_json``, ``_before_json`` and the dead letters' payloads."""
    key = key_for(spec)
    protected = _protected_values(spec, key)
    if protected:
        # A projection of their own, read by the typed column and the row image alike: in one
        # projection the image's lambda would compute each HMAC and encryption a second time.
        classified = classified.selectExpr(
            "*", *(f"{expr} AS {quote(name)}" for name, expr in protected.items())
        )
    documents = _typed_documents(spec)
    if documents:
        classified = classified.selectExpr(
            "*", *(f"{expr} AS {quote(name)}" for name, expr in documents.items())
        )
    ledger = [f"{expr} AS {quote(name)}" for name, expr in _ledger_exprs(spec).items()]
    payload = "base64(value_bin)" if key is None else sealed_payload_sql("value_bin", key)
    return classified.selectExpr(
        *ledger,
        "_status",
        "_stage",
        "_reason",
        "_unknown",
        "CASE WHEN _status = 'dead' THEN base64(key_bin) END AS _key_b64",
        f"CASE WHEN _status = 'dead' THEN {payload} END AS _payload_b64",
    )


def _protected_name(sink_name: str) -> str:
    return f"_protected_{sink_name}"


def _protected_values(spec: TableSpec, key: ProtectionKey | None) -> dict[str, str]:
    """The protected value of each protected column (`sql.protect`), by `_protected_name`. A
    document read into a nested type is protected as the image's text here, and read into its
    type by `_typed_documents`."""
    out = {}
    for plan in plan_fields(spec):
        value = ledger_value(plan, json_has_field("image"))
        if plan.protect is not None:
            out[_protected_name(plan.sink_name)] = protect_sql(plan.protect, value, key)
        elif plan.protect_paths and plan.parses_document:
            text = document_sql(raw(plan), plan.protect_paths, key)
            out[_protected_name(plan.sink_name)] = f"CASE WHEN {value} IS NOT NULL THEN {text} END"
        elif plan.protect_paths:
            out[_protected_name(plan.sink_name)] = document_sql(value, plan.protect_paths, key)
    return out


def _typed_name(sink_name: str) -> str:
    return f"_protected_typed_{sink_name}"


def _typed_documents(spec: TableSpec) -> dict[str, str]:
    """The typed value of each protected document read into a nested type, by `_typed_name`:
    its protected text (`_protected_values`) read into the type, so the typed column holds
    only protected values and the image the same document."""
    return {
        _typed_name(p.sink_name): parse_document(quote(_protected_name(p.sink_name)), p.sink)
        for p in plan_fields(spec)
        if p.protect_paths and p.parses_document
    }


def _ledger_exprs(spec: TableSpec) -> dict[str, str]:
    """The ledger's columns over the classified records (and `_protected_values`)."""
    plans = {p.sink_name: p for p in plan_fields(spec)}
    # `image`: the row image's JSON text (an image older than a column with a default lacks it)
    exprs = {name: ledger_value(plan, json_has_field("image")) for name, plan in plans.items()}
    image, before = "image", "before"
    if spec.protects:
        # The image keeps the protected value (a placeholder for a value the source did not
        # send stays one); the before image, read for its key alone, loses the field.
        stored: dict[str, str] = {}
        for name, plan in plans.items():
            if plan.protect is None and not plan.protect_paths:
                continue
            exprs[name] = quote(_protected_name(name))
            kept = f"CASE WHEN {is_unavailable(plan)} THEN {raw(plan)} ELSE {exprs[name]} END"
            if plan.protect_paths and plan.parses_document:
                exprs[name] = quote(_typed_name(name))
            stored.update({field: kept for field in (plan.name, *plan.aliases)})
        dropped = set(spec.pipeline.drop_fields)
        image = image_sql("image", stored, dropped)
        before = image_sql("before", {}, dropped | set(stored))
    exprs.update(
        {
            "_op": "op",
            "_source_ts": "timestamp_millis(coalesce(source.ts_ms, ts_ms))",
            **sequence_columns(spec),
            "_kafka_partition": "_kafka_partition",
            "_kafka_offset": "_kafka_offset",
            "_kafka_ts": "_kafka_ts",
            "_row_json": image,
            # A create that moved a row from another key (primary-key change) has no before
            # image; the old key stands in for it, so the upsert can find the row's values.
            "_before_json": (
                "CASE WHEN op = 'c' AND before IS NULL AND _old_key IS NOT NULL "
                f"THEN _old_key ELSE {before} END"
            ),
            "_unavailable": unavailable_list(list(plans.values())),
            "_txn_id": "txn_id",
            "_txn_order": "txn_order",
            "dt": "date_format(_kafka_ts, 'yyyy-MM-dd')",
            "hr": "hour(_kafka_ts)",
        }
    )
    if spec.shard_column and spec.shard is not None:
        # Each shard has a ledger of its own: the shard column is the same in every row.
        exprs[spec.shard_column] = literal(spec.shard.shard_name)
    return {c.name: exprs[c.name] for c in ledger_layout(spec).columns if c.name in exprs}


# Set after the cache, in `ledger_rows`: current_timestamp() becomes a literal that differs on
# every run, and inside the decode stage it would change that stage's generated code, so each
# run would compile the largest code of the ingest again and the JIT would start over on it
# (about 10 of 36 CPU seconds of a warm 1M-event run went to the C2 compiler).
PROCESSED_AT = "_processed_at"


def ledger_rows(prepared: Any, spec: TableSpec) -> Any:
    """The ledger columns of the records whose status is ``ledger``, in layout order."""
    # Expressions as text, as in `prepare`: no Column objects built one by one over py4j.
    columns = [
        f"current_timestamp() AS {quote(c.name)}" if c.name == PROCESSED_AT else quote(c.name)
        for c in ledger_layout(spec).columns
    ]
    return prepared.filter(f"_status = {literal(LEDGER)}").selectExpr(*columns)


def dead_letter_rows(prepared: Any, spec: TableSpec) -> Any:
    from pyspark.sql import functions as F

    return prepared.filter(F.col("_status") == DEAD).select(
        F.lit(spec.source.topic).alias("topic"),
        F.col("_kafka_partition").alias("partition"),
        F.col("_kafka_offset").alias("offset"),
        F.col("_key_b64").alias("key_b64"),
        F.col("_kafka_ts").alias("kafka_ts"),
        F.col("_payload_b64").alias("payload_b64"),
        F.col("_stage").alias("stage"),
        F.col("_reason").alias("reason"),
        F.current_timestamp().alias("failed_at"),
    )


def merge_dead_letters(spark: Any, catalog: str, spec: TableSpec, rows: Any) -> None:
    """Insert dead letters not already present (same topic, partition, offset): idempotent."""
    view = f"cdc_dead_letters_{spec.name}"
    rows.createOrReplaceTempView(view)
    spark.sql(
        f"MERGE INTO {dead_letter_identifier(catalog, spec)} t USING {view} s "
        "ON t.topic = s.topic AND t.`partition` = s.`partition` AND t.`offset` = s.`offset` "
        "WHEN NOT MATCHED THEN INSERT *"
    )
    spark.catalog.dropTempView(view)


def _hour_key(dt: str, hr: int) -> str:
    return f"{dt}-{hr:02d}:00"


def _summarise(classified: Any, result: IngestResult) -> None:
    from pyspark.sql import functions as F

    # The ledger's own dt/hr columns name the hour: no extra date formatting per record. One
    # Spark job for the counts and the unknown fields (a second job for the fields cost about a
    # sixth of a small batch's ingest): the distinct arrays of unknown field names per group,
    # which are few (one per shape the source sent).
    groups = (
        classified.groupBy("_status", "_reason", "dt", "hr")
        .agg(
            F.count(F.lit(1)).alias("count"),
            # Dead letters count too: a NOT NULL column renamed at the source turns every row
            # into one, and its new name is then only in them.
            F.collect_set(F.when(F.col("_status") != SKIP, F.col("_unknown"))).alias("unknown"),
        )
        .collect()
    )
    statuses: Counter[str] = Counter()
    hours: set[str] = set()
    unknown: set[str] = set()
    for row in groups:
        statuses[row["_status"]] += row["count"]
        unknown.update(f for fields in row["unknown"] for f in fields or ())
        if row["_status"] == SKIP:
            result.skip_reasons[row["_reason"]] = (
                result.skip_reasons.get(row["_reason"], 0) + row["count"]
            )
        elif row["_status"] == DEAD:
            result.dead_reasons[row["_reason"]] = (
                result.dead_reasons.get(row["_reason"], 0) + row["count"]
            )
        elif row["dt"] is not None:
            hours.add(_hour_key(row["dt"], row["hr"]))
    result.read = sum(statuses.values())
    result.ledger, result.dead, result.skipped = statuses[LEDGER], statuses[DEAD], statuses[SKIP]
    result.hours = sorted(hours)
    result.unknown_fields = sorted(unknown)[:UNKNOWN_FIELDS_SHOWN]


def _with_unknown_fields(writer: Any, result: IngestResult) -> Any:
    """The ledger commit records the fields its row images had that the spec lacks: the
    schema_converged check reads them from the snapshot summaries without scanning rows."""
    if not result.unknown_fields:
        return writer
    fields = json.dumps(result.unknown_fields, separators=(",", ":"))
    return writer.option(f"snapshot-property.{UNKNOWN_FIELDS_PROPERTY}", fields)


def _counts_json(result: IngestResult) -> str:
    return json.dumps(
        {"read": result.read, "ledger": result.ledger, "dead": result.dead, "skip": result.skipped},
        separators=(",", ":"),
    )


# At most this many unknown field names are reported per batch.
UNKNOWN_FIELDS_SHOWN = 200
# Starts over after a refused ledger commit (another commit came first) at most this often.
MOVED_RETRIES = 5


def plan_offsets(
    partitions: list[PartitionOffsets], committed: dict[int, int], topic: str
) -> tuple[dict[int, int], dict[int, int]]:
    """Start (committed, else earliest) and end (latest) offsets per partition."""
    start, end = {}, {}
    for p in partitions:
        begin = committed.get(p.partition, p.earliest)
        if begin < p.earliest:
            raise OffsetsExpiredError(
                f"{topic}[{p.partition}]: offsets {begin}..{p.earliest - 1} expired from Kafka "
                "before the ledger consumed them; those changes are lost to this pipeline. "
                "Re-bootstrap the table from a source snapshot."
            )
        start[p.partition], end[p.partition] = begin, p.latest
    return start, end


def ingest_incremental(
    spark: Any,
    catalog: str,
    iceberg_catalog: Any,
    kafka: KafkaClient,
    spec: TableSpec,
    *,
    files: int = 0,
) -> IngestResult:
    """Consume everything new on the spec's topic into its ledger and dead-letter tables.

    Exactly once without a lock (``pipeline.ingest.ledger_commit``): the ledger commit is published
    only if nothing reached the ledger since this run read its offsets; otherwise the run starts
    over from the offsets committed then. ``files``: at most this many ledger files per hour
    partition per commit (0: one per Kafka partition read), for a writer that commits often."""
    # Kafka's credentials and certificates first (resources/preflight): a refused one fails
    # here naming its setting, before the ledger gets even its empty first snapshot.
    kafka.client_conf()
    result = _ingest_retried(spark, catalog, iceberg_catalog, kafka, spec, files)
    # A former name's topic drained (a followed rename): the next one is read in the same run.
    for _ in spec.source.former_topics:
        if result.topic == spec.source.topic:
            break
        result = result.then(_ingest_retried(spark, catalog, iceberg_catalog, kafka, spec, files))
    return result


def _ingest_retried(
    spark: Any,
    catalog: str,
    iceberg_catalog: Any,
    kafka: KafkaClient,
    spec: TableSpec,
    files: int,
) -> IngestResult:
    for attempt in range(1, MOVED_RETRIES + 1):
        try:
            return _ingest_once(spark, catalog, iceberg_catalog, kafka, spec, files)
        except LedgerMovedError:
            if attempt == MOVED_RETRIES:
                raise
            time.sleep(0.2 * attempt)
    raise AssertionError("unreachable")


def _unread(kafka: KafkaClient, topic: str, mark: LedgerMark) -> bool:
    """Whether Kafka holds records of ``topic`` (a former name's) past the ledger's mark."""
    try:
        partitions = kafka.topic_offsets(topic)
    except StackError as err:
        raise StackError(
            f"{err}; it is the topic of the source table's former name, which the ledger has "
            "not read to its end: its remaining changes cannot be known"
        ) from None
    done = mark.kafka_offsets()
    return any(p.latest > max(done.get(p.partition, 0), p.earliest) for p in partitions)


def _partitions(kafka: KafkaClient, read: TopicRead) -> list[PartitionOffsets]:
    """The topic's partitions; none yet for the topic of a followed rename that Debezium has
    not created (no change since the rename): nothing to read."""
    try:
        return kafka.topic_offsets(read.topic)
    except StackError:
        if read.committed is None:
            return []
        raise


def shifted(records: Any, shift: Mapping[int, int]) -> Any:
    """Kafka records numbered as the ledger numbers them (``offsets.SHIFT_PROPERTY``)."""
    if not any(shift.values()):
        return records
    from pyspark.sql import functions as F

    by = F.lit(0).cast("long")
    for partition, amount in sorted(shift.items()):
        by = F.when(F.col("partition") == partition, F.lit(amount).cast("long")).otherwise(by)
    return records.withColumn("offset", F.col("offset") + by)


def _ingest_once(
    spark: Any,
    catalog: str,
    iceberg_catalog: Any,
    kafka: KafkaClient,
    spec: TableSpec,
    files: int = 0,
) -> IngestResult:
    started = time.monotonic()
    layout = ledger_layout(spec)
    identifier = f"{layout.namespace}.{layout.name}"
    table = ensure_txn_columns(iceberg_catalog.load_table(identifier), layout)
    mismatch = order_mismatch(dict(table.properties), spec)
    if mismatch is not None:
        raise SourceOrderError(mismatch)
    expected = start_snapshot(table)  # the offsets below are this snapshot's
    remove_stale_branches(table)
    mark = ledger_mark(table)
    read = next_read(
        spec.source.topic,
        spec.source.former_topics,
        mark,
        lambda topic: _unread(kafka, topic, mark),
        spec.name,
    )
    if read.topic != spec.source.topic:
        # A former name's topic, read to its end: its records (and dead letters) are its own.
        spec = spec.model_copy(
            update={"source": spec.source.model_copy(update={"topic_": read.topic})}
        )
    partitions = _partitions(kafka, read)
    committed = read.committed
    if committed is None:  # a topic the ledger moved to: all of it, none expired
        committed = {p.partition: 0 for p in partitions}
    start_at, end_at = plan_offsets(partitions, committed, read.topic)
    # The ledger's numbering (Kafka offset + the topic's shift after a followed rename).
    start, end = read.ledger(start_at), read.ledger(end_at)
    result = IngestResult(spec.name, "incremental", start, end, topic=read.topic)
    if all(start[p] >= end[p] for p in end):
        result.seconds = time.monotonic() - started
        return result

    hold("ingest_before_read")  # tests: the broker restarts between planning and reading
    records = shifted(read_kafka(spark, kafka, read.topic, start_at, end_at), read.shift)
    schemas = kafka.topic_schemas(read.topic)  # before the read: every id it may meet
    batch = prepare(classify_records(records, spec, schemas), spec)
    size = offsets_span(start, end)
    with (
        session_conf(spark, small_work_conf(size, interpreted=True)),
        cached_batch(spark, batch, size) as classified,
    ):
        _summarise(classified, result)
        unmirrored = set(spec.checks.unmirrored_fields)
        stop = fail_stop_reason(
            spec.evolution.policy,
            [f for f in result.unknown_fields if f not in unmirrored],
            result.dead_reasons,
        )
        if stop is not None:
            raise SchemaChangeStopError(f"{spec.name}: {stop}")
        hold("ingest_before_commit")  # tests: an evolution runs between decode and commit
        fail_once("ingest_before_commit")  # tests: a transient failure, the run retried
        if result.dead:
            merge_dead_letters(spark, catalog, spec, dead_letter_rows(classified, spec))
        failpoint("after_dead_letters")
        rows = fill_gtid_floor(
            spark, spec, ledger_rows(classified, spec), ledger_identifier(catalog, spec)
        )
        if files > 0:
            # Each task writes a file per hour it holds: fewer tasks, fewer (larger) files. The
            # batch is decoded and cached by now, so only the write itself runs on fewer tasks.
            rows = rows.coalesce(files)
        if armed("during_ledger_write"):
            rows = _kill_during_write(rows)

        def write(target: str) -> None:
            (
                _with_unknown_fields(rows.writeTo(target), result)
                .option(f"snapshot-property.{OFFSETS_PROPERTY}", encode_offsets(end))
                .option(f"snapshot-property.{START_OFFSETS_PROPERTY}", encode_offsets(start))
                .option(f"snapshot-property.{COUNTS_PROPERTY}", _counts_json(result))
                .option(f"snapshot-property.{KIND_PROPERTY}", "incremental")
                .option(f"snapshot-property.{SPEC_VERSION_PROPERTY}", str(spec.spec_version))
                .option(f"snapshot-property.{TOPIC_PROPERTY}", read.topic)
                .option(f"snapshot-property.{SHIFT_PROPERTY}", encode_offsets(read.shift))
                # Each task writes its own files: a batch mostly falls into one or two hours,
                # and hash distribution by dt/hr would funnel it through one task.
                .option("distribution-mode", "none")
                .append()
            )

        result.snapshot_id = append_if_unchanged(
            iceberg_catalog, identifier, ledger_identifier(catalog, spec), expected, write
        )
        failpoint("after_ledger_commit")
    result.seconds = time.monotonic() - started
    return result


def _kill_during_write(rows: Any) -> Any:
    """Failpoint: kill the driver from inside the write job, after some data files exist."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    driver = os.getpid()

    def maybe_die(offset: int) -> int:
        if offset >= 0:
            import signal

            os.kill(driver, signal.SIGKILL)
        return offset

    die = F.udf(maybe_die, LongType())
    return rows.withColumn("_kafka_offset", die(F.col("_kafka_offset")))


def hour_bounds(partition_key: str) -> tuple[datetime, datetime]:
    """UTC start and end of a Dagster hourly partition key like 2026-01-02-03:00."""
    start = datetime.strptime(partition_key, "%Y-%m-%d-%H:%M").replace(tzinfo=UTC)
    return start, start + timedelta(hours=1)


def _ranges_in_hour(
    spark: Any, catalog: str, spec: TableSpec, h0: datetime
) -> dict[int, tuple[int, int]]:
    """Per Kafka partition, the lowest and highest offset the ledger and dead letters hold for
    the hour: rebuilding from Kafka must at least cover what the hour already contains."""
    dt, hr = h0.strftime("%Y-%m-%d"), h0.hour
    h1 = h0 + timedelta(hours=1)
    ledger = spark.sql(
        f"SELECT _kafka_partition AS p, min(_kafka_offset) AS lo, max(_kafka_offset) AS hi "
        f"FROM {ledger_identifier(catalog, spec)} WHERE dt = '{dt}' AND hr = {hr} GROUP BY 1"
    ).collect()
    dead = spark.sql(
        f"SELECT `partition` AS p, min(`offset`) AS lo, max(`offset`) AS hi "
        f"FROM {dead_letter_identifier(catalog, spec)} "
        f"WHERE kafka_ts >= TIMESTAMP'{h0:%Y-%m-%d %H:%M:%S}+00:00' "
        f"AND kafka_ts < TIMESTAMP'{h1:%Y-%m-%d %H:%M:%S}+00:00' GROUP BY 1"
    ).collect()
    out: dict[int, tuple[int, int]] = {}
    for row in [*ledger, *dead]:
        lo, hi = out.get(row["p"], (row["lo"], row["hi"]))
        out[row["p"]] = (min(lo, row["lo"]), max(hi, row["hi"]))
    return out


def rebuild_hour(
    spark: Any,
    catalog: str,
    iceberg_catalog: Any,
    kafka: KafkaClient,
    spec: TableSpec,
    partition_key: str,
) -> IngestResult:
    """Re-ingest one ledger hour from Kafka and replace it atomically (idempotent backfill).

    Only records the incremental ingest has already consumed are read, so a rebuild never races
    ahead of the committed offsets. If Kafka no longer holds every record of the hour, nothing is
    replaced: the ledger is then the only copy.
    """
    from pyspark.sql import functions as F

    started = time.monotonic()
    if spec.source.renamed_from:
        raise SpecError(
            f"{spec.name}: an hour of a table whose source table was renamed is not rebuilt "
            "from Kafka (its ledger numbers two topics' records in one sequence); the ledger "
            "is the copy to keep"
        )
    h0, h1 = hour_bounds(partition_key)
    layout = ledger_layout(spec)
    committed = committed_offsets(
        iceberg_catalog.load_table(f"{layout.namespace}.{layout.name}"), spec.source.topic
    )
    topic = spec.source.topic
    partitions = {p.partition: p for p in kafka.topic_offsets(topic)}
    held = _ranges_in_hour(spark, catalog, spec, h0)
    first = kafka.offsets_for_time(topic, list(partitions), int(h0.timestamp() * 1000))
    last = kafka.offsets_for_time(topic, list(partitions), int(h1.timestamp() * 1000))
    start, end = {}, {}
    for p, info in partitions.items():
        lo, hi = held.get(p, (first[p], last[p] - 1))
        start[p] = min(lo, first[p])
        end[p] = min(max(hi + 1, last[p]), committed.get(p, info.earliest))
        if p in held and held[p][0] < info.earliest:
            raise OffsetsExpiredError(
                f"{topic}[{p}]: hour {partition_key} holds offsets from {held[p][0]} but Kafka "
                f"starts at {info.earliest}; refusing to rebuild it from Kafka"
            )
        start[p] = max(start[p], info.earliest)
        end[p] = max(end[p], start[p])
    result = IngestResult(spec.name, "rebuild", start, end, hours=[partition_key])
    records = read_kafka(spark, kafka, topic, start, end)
    in_hour = (F.col("_kafka_ts") >= F.lit(h0)) & (F.col("_kafka_ts") < F.lit(h1))
    schemas = kafka.topic_schemas(topic)
    in_hour_batch = prepare(classify_records(records, spec, schemas), spec).filter(in_hour)
    with cached_batch(spark, in_hour_batch, sum(end[p] - start[p] for p in end)) as classified:
        _summarise(classified, result)
        result.hours = [partition_key]
        if result.dead:
            merge_dead_letters(spark, catalog, spec, dead_letter_rows(classified, spec))
        condition = F.expr(f"dt = '{h0:%Y-%m-%d}' AND hr = {h0.hour}")
        ledger = ledger_identifier(catalog, spec)
        rows = fill_gtid_floor(spark, spec, ledger_rows(classified, spec), ledger)
        (
            _with_unknown_fields(rows.writeTo(ledger), result)
            .option(f"snapshot-property.{KIND_PROPERTY}", "rebuild")
            .option(f"snapshot-property.{SPEC_VERSION_PROPERTY}", str(spec.spec_version))
            .option(f"snapshot-property.{COUNTS_PROPERTY}", _counts_json(result))
            .option("snapshot-property.cdc.hour", partition_key)
            .option("distribution-mode", "none")
            .overwrite(condition)
        )
    snapshot = iceberg_catalog.load_table(f"{layout.namespace}.{layout.name}").current_snapshot()
    result.snapshot_id = snapshot.snapshot_id if snapshot else None
    result.seconds = time.monotonic() - started
    return result
