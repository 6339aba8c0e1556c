"""The table spec model: one source table, its columns and how it lands in Iceberg (the source
side, servers and shards, is ``spec.source``).

Validated strictly with pydantic (unknown keys are errors). Cross-field rules live in the model
validators below so that every renderer can trust a loaded spec.
"""

from __future__ import annotations

import re
from enum import StrEnum
from functools import cached_property
from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from cdc_assets.errors import UnsupportedTypeError
from cdc_assets.schema.types import (
    DOCUMENT_LEAF_TYPES,
    SinkType,
    SourceType,
    can_override,
    default_sink_type,
    leaves,
    parse_sink_type,
    parse_source_type,
)
from cdc_assets.spec.base import Connector as Connector
from cdc_assets.spec.base import Identifier as Identifier
from cdc_assets.spec.base import SourceName as SourceName
from cdc_assets.spec.base import SourceOrder as SourceOrder
from cdc_assets.spec.base import StrictModel as _Strict
from cdc_assets.spec.json_paths import PATH_PATTERN, path_tree, typed_reason
from cdc_assets.spec.sizing import DEFAULT_BUCKETS
from cdc_assets.spec.source import DebeziumSpec as DebeziumSpec
from cdc_assets.spec.source import FormerSource as FormerSource
from cdc_assets.spec.source import ShardSpec as ShardSpec
from cdc_assets.spec.source import SourceIdentity as SourceIdentity
from cdc_assets.spec.source import SourceSpec as SourceSpec
from cdc_assets.spec.source import TimePrecisionMode as TimePrecisionMode
from cdc_assets.spec.source import TopicName
from cdc_assets.spec.source import shard_name_of as shard_name_of

_OWNER_RE = re.compile(r"^(team:[A-Za-z0-9_.-]+|[^@\s]+@[^@\s]+\.[^@\s]+)$")
_TAG_RE = re.compile(r"^[A-Za-z0-9_.-]{1,63}$")
_CRON_FIELD_RE = re.compile(r"^[0-9A-Za-z*/,\-?]+$")


class Transform(StrEnum):
    """Value transforms a sink mapping may apply; each takes an integer source column."""

    EPOCH_SECONDS_TO_TIMESTAMP = "epoch_seconds_to_timestamp"
    EPOCH_MILLIS_TO_TIMESTAMP = "epoch_millis_to_timestamp"
    EPOCH_MICROS_TO_TIMESTAMP = "epoch_micros_to_timestamp"
    EPOCH_DAYS_TO_DATE = "epoch_days_to_date"

    @property
    def sink_type(self) -> SinkType:
        return SinkType("date") if self is Transform.EPOCH_DAYS_TO_DATE else SinkType("timestamptz")


class Protection(StrEnum):
    """How a sensitive column is protected at ingest, before anything is written
    (`cdc_assets.sql.protect`). Every protection stores a string."""

    HASH = "hash"  # keyed HMAC-SHA256, stable: equal values give equal hashes
    ENCRYPT = "encrypt"  # AES-256-GCM with a synthetic IV: reversible with the key, stable
    MASK_EMAIL = "mask_email"  # ***@domain
    MASK_LAST4 = "mask_last4"  # every character but the last four becomes *
    MASK_SHAPE = "mask_shape"  # letters become X/x, digits 9; punctuation stays

    @property
    def keyed(self) -> bool:
        return self in (Protection.HASH, Protection.ENCRYPT)


JsonPath = Annotated[str, StringConstraints(pattern=PATH_PATTERN)]
# The natural types a protection takes: text, numbers and dates have one text each, which is
# what is hashed, encrypted or masked. Masks take text only.
PROTECTABLE_TYPES = ("string", "int", "long", "decimal", "date", "boolean")


class SinkMapping(_Strict):
    """How one column lands in Iceberg when it differs from the source."""

    name: Identifier | None = None
    type: str | None = None
    transform: Transform | None = None


class ColumnSpec(_Strict):
    """One source column. ``id`` is stable for the column's life, across renames and versions."""

    id: int = Field(ge=1)
    name: SourceName
    type: str
    nullable: bool = True
    default: str | None = None
    sensitive: bool = False
    # How the values are protected at ingest (needs sensitive: true); None keeps plaintext.
    protect: Protection | None = None
    # A JSON column's fields protected inside the document: dotted path -> protection.
    protect_paths: dict[JsonPath, Protection] = {}
    # Soft-dropped: gone from the source but kept in Iceberg, null for rows written since.
    dropped: bool = False
    comment: str | None = None
    sink: SinkMapping = SinkMapping()
    # Source names the column had before renames, newest first (kept by the evolution that
    # applied each rename): events written before a rename carry the value under one of them,
    # and the ingest, a redrive and the backfill read it from there.
    former_names: list[SourceName] = Field(default_factory=list)
    # Rows the source had before the column was added read ``default`` (a constant): MySQL,
    # MariaDB and PostgreSQL 11+ give them the default without a change event. Set by the
    # evolution that adds such a column; an image without the field then decodes to it.
    backfill_default: bool = False
    # PostgreSQL's number of the column (pg_attribute.attnum), kept where the spec was read
    # from a live source: it stays with the column across renames and is never reused after a
    # drop, so pull detection proves a rename or a drop by it (``identity_audit``).
    source_attnum: int | None = Field(default=None, ge=1)

    @property
    def sink_name(self) -> str:
        return self.sink.name or self.name

    def source_type(self, connector: str) -> SourceType:
        return parse_source_type(self.type, connector)

    def sink_type(self, connector: str) -> SinkType:
        """The Iceberg type of this column: a protected column's is string; else the transform
        result, else override, else the default."""
        if self.protect is not None:
            return SinkType("string")
        if self.sink.transform is not None:
            return self.sink.transform.sink_type
        if self.sink.type is not None:
            return parse_sink_type(self.sink.type)
        return default_sink_type(self.source_type(connector))


class PipelineSpec(_Strict):
    sensitive: bool = False
    # Source fields never stored: removed from every row image at ingest, before anything is
    # written, and never proposed as columns. Not columns: the mirror has no place for them.
    drop_fields: list[SourceName] = []
    # The continuous worker that keeps this table fresh (jobs/continuous.py): tables naming the
    # same worker share one long-running run. None: the sensors' micro-batch runs.
    worker: Identifier | None = None


class SinkSpec(_Strict):
    namespace: Identifier
    table: Identifier | None = None
    dead_letter_suffix: Identifier = "_dlt"


class MaintenanceSpec(_Strict):
    """Daily upkeep of base: compaction, snapshot expiry, orphan-file removal."""

    cron: str = "0 3 * * *"
    snapshot_retention_hours: int = Field(default=168, ge=1)
    retain_last_snapshots: int = Field(default=10, ge=1)
    orphan_file_age_hours: int = Field(default=72, ge=1)
    # A continuous worker commits every few seconds, and each MERGE adds a data file and a delete
    # file to every bucket it touches: it compacts base (and tombstones) itself once base holds
    # more than this many files per bucket. 0: only the scheduled maintenance compacts.
    compact_files_per_bucket: int = Field(default=8, ge=0)


class BaseTableSpec(_Strict):
    buckets: int = Field(default=DEFAULT_BUCKETS, ge=1, le=4096)
    bucket_column: SourceName | None = None
    properties: dict[str, str] = {}
    # Ledger partitions (dt) read by an upsert reach this far behind the base watermark, so
    # records whose Kafka timestamp is a little out of order are still found.
    lookback_hours: int = Field(default=24, ge=1)
    # How long a delete is remembered so that a late, older update cannot resurrect the row.
    tombstone_retention_hours: int = Field(default=168, ge=1)
    maintenance: MaintenanceSpec = MaintenanceSpec()


class ScheduleSpec(_Strict):
    cron: str = "*/15 * * * *"


class FreshnessSpec(_Strict):
    sla_minutes: int = Field(default=60, ge=1)


class EvolutionSpec(_Strict):
    """How schema changes of the source apply to this table (cdc_assets.schema.evolution)."""

    # What a schema change detected at the source does (a reviewed spec file always applies):
    # evolve: apply what Iceberg can express (adds, widenings, proved renames, drops as below);
    # lenient: the same, but never rename or drop in Iceberg: a renamed column is added under
    #   its new name (the old one soft-dropped), a dropped one is soft-dropped even when
    #   drop_columns is hard;
    # freeze: apply nothing; new fields stay in _row_json, rows still land (values a type
    #   refuses become dead letters);
    # fail: apply nothing and stop the table: its ingest refuses a batch that carries a field
    #   the spec lacks or a value its types refuse, until the spec file is changed by hand.
    policy: Literal["evolve", "lenient", "freeze", "fail"] = "evolve"
    # soft: a column dropped in the source stays in Iceberg as `dropped` (history is kept);
    # hard: it is dropped from the spec and the Iceberg tables.
    drop_columns: Literal["soft", "hard"] = "soft"


class HistorySpec(_Strict):
    """Versions of every row kept beside base (cdc_assets.pipeline.upsert.history,
    docs/history.md)."""

    # none: base only; scd2: a history table with one row per version of a key (SCD type 2),
    # recomputed from the ledger for the keys each run touches.
    mode: Literal["none", "scd2"] = "none"

    @property
    def enabled(self) -> bool:
        return self.mode == "scd2"


class ConsistencySpec(_Strict):
    """Membership in a group of tables read at one source transaction (docs/history.md)."""

    # Tables of one group are written by one source server in shared transactions; their
    # `consistent` views read every table at the newest transaction complete in all of them.
    group: Identifier
    # Debezium's transaction metadata topic of that server (provide.transaction.metadata),
    # by default <topic.prefix>.transaction.
    transaction_topic: TopicName
    # The cut may trail the newest applied change by this many seconds of source time (error).
    max_lag_seconds: float = Field(default=900, gt=0)


class ChecksSpec(_Strict):
    """Thresholds of the table's asset checks (the watermark-lag limit is freshness.sla_minutes)."""

    # Share of consumed records that became dead letters over the last ingest commits (warn).
    max_dead_letter_rate: float = Field(default=0.01, ge=0, le=1)
    dead_letter_commits: int = Field(default=10, ge=1)
    # Unread Kafka records must stay this far from falling out of retention (error below).
    min_retention_headroom_hours: float = Field(default=24, ge=0)
    # Unread records above this many warn (None: no limit on the lag itself).
    max_kafka_lag_records: int | None = Field(default=None, ge=0)
    # Newest ledger partitions (dt/hr) whose null counts are checked.
    ledger_partitions: int = Field(default=2, ge=1)
    # Per source column, the largest share of null values tolerated in base (error above).
    max_null_fraction: dict[str, float] = {}
    # Columns that may legitimately stay null everywhere after being added.
    allow_all_null: list[str] = []
    # Minutes a field of the stream may be missing from the spec (an evolution due) before the
    # schema_converged check fails.
    schema_grace_minutes: float = Field(default=30, ge=0)
    # Source fields deliberately not mirrored: kept in _row_json, never expected in the spec.
    unmirrored_fields: list[str] = []


class TableSpec(_Strict):
    """A table spec as loaded from ``table_specs/<name>.yaml``."""

    spec_version: int = Field(ge=1)
    name: Identifier
    description: str | None = None
    owners: list[str] = []
    tags: dict[str, str] = {}
    source: SourceSpec
    columns: list[ColumnSpec] = Field(min_length=1)
    primary_key: list[SourceName] = Field(min_length=1)
    pipeline: PipelineSpec = PipelineSpec()
    sink: SinkSpec
    base: BaseTableSpec = BaseTableSpec()
    schedule: ScheduleSpec = ScheduleSpec()
    freshness: FreshnessSpec = FreshnessSpec()
    checks: ChecksSpec = ChecksSpec()
    evolution: EvolutionSpec = EvolutionSpec()
    history: HistorySpec = HistorySpec()
    consistency: ConsistencySpec | None = None

    @model_validator(mode="after")
    def _check(self) -> TableSpec:
        # Each rule raises ValueError; the loader turns it into a SpecError naming the file.
        _check_owners_and_tags(self)
        _check_cron(self.schedule.cron)
        _check_cron(self.base.maintenance.cron, "base.maintenance.cron")
        _check_columns(self)
        _check_primary_key(self)
        _check_checks(self)
        _check_shard_column(self)
        _check_consistency(self)
        _check_drop_fields(self)
        return self

    @cached_property
    def columns_by_name(self) -> dict[str, ColumnSpec]:
        return {c.name: c for c in self.columns}

    @property
    def protects(self) -> bool:
        """Whether values are protected at ingest: a column with ``protect`` or a dropped field."""
        return bool(self.pipeline.drop_fields) or any(
            c.protect or c.protect_paths for c in self.columns
        )

    @property
    def key_columns(self) -> list[ColumnSpec]:
        return [self.columns_by_name[k] for k in self.primary_key]

    @property
    def bucket_column(self) -> ColumnSpec:
        return self.columns_by_name[self.base.bucket_column or self.primary_key[0]]

    @property
    def shard_column(self) -> str | None:
        """The sink column that tells shards apart (leads the key), None for one source."""
        return self.source.shard_column if self.source.sharded else None

    @property
    def key_sink_names(self) -> list[str]:
        """Base's key: the shard column (sharded specs) and the primary key's sink names."""
        keys = [c.sink_name for c in self.key_columns]
        return [self.shard_column, *keys] if self.shard_column else keys

    @property
    def shard(self) -> ShardSpec | None:
        """The shard of a per-shard view (see ``shard_specs``), None otherwise."""
        return self.source.shard

    def same_source_view(self, view: TableSpec) -> TableSpec | None:
        """This spec's view of ``view``'s shard (``view`` itself unsharded: this spec), None
        when this spec has no such shard."""
        if view.shard is None:
            return None if self.source.shards else self
        wanted = view.shard.shard_name
        return next(
            (v for v in self.shard_specs() if v.shard and v.shard.shard_name == wanted), None
        )

    def shard_specs(self) -> list[TableSpec]:
        """One view per source of this table: the spec itself unless it has shards, else a
        view per shard whose source is that shard's server and topic. Everything that reads or
        watches a source (ingest, ledger, dead letters, offsets, schema changes) runs per view;
        base, the bucketed table and tombstones are the table's, shared by its views."""
        if not self.source.shards:
            return [self]
        return [
            self.model_copy(update={"source": self.source.view_of(shard)})
            for shard in self.source.shards
        ]


def _fail(field: str, message: str) -> ValueError:
    return ValueError(f"{field}: {message}")


def _check_owners_and_tags(spec: TableSpec) -> None:
    for i, owner in enumerate(spec.owners):
        if not _OWNER_RE.match(owner):
            raise _fail(f"owners[{i}]", f"{owner!r} is neither an email nor 'team:<name>'")
    for key, value in spec.tags.items():
        if not _TAG_RE.match(key) or not _TAG_RE.match(value):
            raise _fail(
                f"tags.{key}",
                "tag keys and values must be 1-63 characters of letters, digits, '_', '.', '-'",
            )


def _check_cron(cron: str, where: str = "schedule.cron") -> None:
    fields = cron.split()
    if len(fields) != 5 or not all(_CRON_FIELD_RE.match(f) for f in fields):
        raise _fail(where, f"{cron!r} is not a 5-field cron expression like '*/15 * * * *'")


def _check_columns(spec: TableSpec) -> None:
    seen_ids: dict[int, str] = {}
    seen_names: set[str] = set()
    seen_sink: set[str] = set()
    connector = spec.source.connector
    for i, col in enumerate(spec.columns):
        where = f"columns[{i}]"
        if col.id in seen_ids:
            raise _fail(
                f"{where}.id", f"id {col.id} is already used by column {seen_ids[col.id]!r}"
            )
        seen_ids[col.id] = col.name
        if col.name in seen_names:
            raise _fail(f"{where}.name", f"duplicate column name {col.name!r}")
        seen_names.add(col.name)
        if col.sink_name in seen_sink or col.sink_name.startswith("_"):
            raise _fail(
                f"{where}.sink.name",
                f"sink name {col.sink_name!r} is a duplicate or starts with '_' (reserved)",
            )
        seen_sink.add(col.sink_name)
        if not re.match(r"^[a-z_][a-z0-9_]*$", col.sink_name):
            raise _fail(
                f"{where}.sink.name",
                f"{col.sink_name!r} is not a valid Iceberg column name; "
                "set sink.name to lowercase letters, digits and '_'",
            )
        try:
            source = col.source_type(connector)
        except UnsupportedTypeError as err:
            raise _fail(f"{where}.type", str(err)) from None
        _check_sink_mapping(where, col, source)
        if col.backfill_default and (col.default is None or col.sink.transform is not None):
            raise _fail(
                f"{where}.backfill_default",
                f"column {col.name!r}: backfill_default needs a constant default and no sink "
                "transform",
            )
        if col.dropped and not col.nullable:
            raise _fail(
                f"{where}.nullable",
                f"column {col.name!r} is dropped, so it is null for new rows: set nullable: true",
            )
        if col.sensitive and not spec.pipeline.sensitive:
            raise _fail(
                f"{where}.sensitive",
                f"column {col.name!r} is sensitive but pipeline.sensitive is false; "
                "mark the pipeline sensitive or do not ingest this column",
            )
        if col.protect is not None:
            _check_protect(where, spec, col, source)
        if col.protect_paths:
            _check_protect_paths(where, col, source, col.sink_type(connector))


def _check_protect_paths(where: str, col: ColumnSpec, source: SourceType, sink: SinkType) -> None:
    """Fields inside a JSON column's document (`spec.json_paths`): stored as text, or read into
    a nested type that declares a string wherever a path ends; no path inside another."""
    if not col.sensitive:
        raise _fail(f"{where}.protect_paths", f"column {col.name!r}: needs sensitive: true")
    if col.protect is not None:
        raise _fail(
            f"{where}.protect_paths",
            f"column {col.name!r}: give protect (the whole value) or protect_paths, not both",
        )
    if source.kind not in ("JSON", "JSONB") or not (sink.name == "string" or sink.is_nested):
        raise _fail(
            f"{where}.protect_paths",
            f"column {col.name!r} ({col.type}): paths protect fields of a JSON column, stored "
            "as text or read into a nested sink.type",
        )
    try:
        path_tree(col.protect_paths.items())
    except ValueError as e:
        raise _fail(f"{where}.protect_paths", f"column {col.name!r}: {e}") from None
    if sink.is_nested:
        for path in sorted(col.protect_paths):
            reason = typed_reason(sink, path)
            if reason is not None:
                raise _fail(f"{where}.protect_paths", f"column {col.name!r}: {reason}")


def _check_protect(where: str, spec: TableSpec, col: ColumnSpec, source: SourceType) -> None:
    """A protected column: sensitive, not part of the key (its plaintext is the Kafka key),
    stored as the protection's string, of a type with one text per value."""
    protect = col.protect
    assert protect is not None
    if not col.sensitive:
        raise _fail(f"{where}.protect", f"column {col.name!r}: protect needs sensitive: true")
    if col.name in spec.primary_key or col.name == spec.base.bucket_column:
        raise _fail(
            f"{where}.protect",
            f"column {col.name!r} is part of the key, whose plaintext is every Kafka record's "
            "key: key the table on a column that is not sensitive",
        )
    if col.sink.transform is not None or col.sink.type is not None:
        raise _fail(
            f"{where}.protect",
            f"column {col.name!r}: a protected column is stored as a string; drop sink.type "
            "and sink.transform",
        )
    natural = default_sink_type(source)
    if natural.name not in PROTECTABLE_TYPES:
        raise _fail(
            f"{where}.protect",
            f"column {col.name!r} ({col.type}): {protect.value} takes text, numbers, dates and "
            f"booleans, not {natural}",
        )
    if not protect.keyed and natural.name != "string":
        raise _fail(
            f"{where}.protect",
            f"column {col.name!r} ({col.type}): {protect.value} masks text; use hash or encrypt",
        )


def _check_sink_mapping(where: str, col: ColumnSpec, source: SourceType) -> None:
    default = default_sink_type(source)
    if col.sink.transform is not None:
        if col.sink.type is not None:
            raise _fail(f"{where}.sink", "give either type or transform, not both")
        if not default.is_integer:
            raise _fail(
                f"{where}.sink.transform",
                f"{col.sink.transform.value} needs an integer source column, not {col.type!r}",
            )
    if col.sink.type is not None:
        try:
            override = parse_sink_type(col.sink.type)
        except ValueError as err:
            raise _fail(f"{where}.sink.type", str(err)) from None
        odd = [t for t in leaves(override) if t.name not in DOCUMENT_LEAF_TYPES]
        if override.is_nested and source.kind in ("JSON", "JSONB") and odd:
            raise _fail(
                f"{where}.sink.type",
                f"{override}: a JSON document's values can be read as "
                f"{', '.join(DOCUMENT_LEAF_TYPES)}, not {odd[0]}",
            )
        if not can_override(default, override, source):
            extra = ""
            if source.kind in ("JSON", "JSONB"):
                extra = ", or a nested type (list<..>, struct<..>, map<string,..>)"
            elif source.kind == "SET":
                extra = ", or list<string>"
            raise _fail(
                f"{where}.sink.type",
                f"{col.type!r} maps to {default} and cannot be stored as {override}; "
                f"valid: {default}, a widening of it, or string{extra}",
            )


def _check_primary_key(spec: TableSpec) -> None:
    if len(set(spec.primary_key)) != len(spec.primary_key):
        raise _fail("primary_key", "a column is listed twice")
    connector = spec.source.connector
    for i, key in enumerate(spec.primary_key):
        col = spec.columns_by_name.get(key)
        if col is None:
            known = ", ".join(c.name for c in spec.columns)
            raise _fail(f"primary_key[{i}]", f"{key!r} is not a column; columns: {known}")
        if col.nullable:
            raise _fail(f"primary_key[{i}]", f"key column {key!r} must be nullable: false")
        if col.sink_type(connector).is_nested:
            raise _fail(
                f"primary_key[{i}]",
                f"key column {key!r} has nested type {col.sink_type(connector)}; "
                "a key must be a primitive",
            )
        if col.sink_type(connector).is_floating:
            raise _fail(
                f"primary_key[{i}]",
                f"key column {key!r} has floating-point type {col.type!r}; float keys do not "
                "compare exactly, use an integer, decimal or string key",
            )
    bucket = spec.base.bucket_column
    if bucket is not None and bucket not in spec.primary_key:
        raise _fail(
            "base.bucket_column", f"{bucket!r} must be one of primary_key {spec.primary_key}"
        )


def _check_drop_fields(spec: TableSpec) -> None:
    fields = spec.pipeline.drop_fields
    if not fields:
        return
    if not spec.pipeline.sensitive:
        raise _fail(
            "pipeline.drop_fields", "dropping fields protects sensitive data: set sensitive: true"
        )
    named = {n for c in spec.columns for n in (c.name, *c.former_names)}
    clash = sorted(set(fields) & named)
    if clash:
        raise _fail(
            "pipeline.drop_fields",
            f"{clash} are columns (or former names of one); a dropped field is never stored",
        )


def _check_consistency(spec: TableSpec) -> None:
    if spec.consistency is None:
        return
    # The consistent views read the history at the cut; a sharded table has one transaction
    # stream per shard's server, which one group's cut cannot order.
    if not spec.history.enabled:
        raise ValueError(
            f"consistency.group {spec.consistency.group!r} needs the table's history: "
            "set history.mode: scd2"
        )
    if spec.source.sharded:
        raise ValueError(
            "consistency: a sharded table's shards write separate transaction streams; "
            "a consistency group reads one server's transactions"
        )
    # The group's views are cut by the micro-batch runs of all its tables at once; a worker
    # commits one table at a time and would leave the group's views behind.
    if spec.pipeline.worker is not None:
        raise ValueError(
            f"pipeline.worker {spec.pipeline.worker!r}: a table of consistency group "
            f"{spec.consistency.group!r} is kept fresh by the group's micro-batch runs, not a "
            "continuous worker"
        )


def _check_shard_column(spec: TableSpec) -> None:
    column = spec.shard_column
    if column is None:
        return
    if any(c.sink_name == column for c in spec.columns):
        raise _fail(
            "source.shard_column",
            f"{column!r} is also a column's sink name; name the shard column apart",
        )


def _check_checks(spec: TableSpec) -> None:
    names = spec.columns_by_name
    for col, fraction in spec.checks.max_null_fraction.items():
        if col not in names:
            raise _fail(f"checks.max_null_fraction.{col}", f"{col!r} is not a column")
        if not 0 <= fraction <= 1:
            raise _fail(f"checks.max_null_fraction.{col}", "must be between 0 and 1")
    for i, col in enumerate(spec.checks.allow_all_null):
        if col not in names:
            raise _fail(f"checks.allow_all_null[{i}]", f"{col!r} is not a column")
