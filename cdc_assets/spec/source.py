"""The source side of a table spec: the database table, its server or shards, its topics and the
Debezium settings that decide how values are encoded on the wire.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field, PrivateAttr, StringConstraints, model_validator

from cdc_assets.errors import ShardedSpecError
from cdc_assets.spec.base import Connector, SourceName, SourceOrder
from cdc_assets.spec.base import StrictModel as _Strict

TimePrecisionMode = Literal["adaptive", "adaptive_time_microseconds", "connect", "isostring"]


class DebeziumSpec(_Strict):
    """The connector settings that decide how values are encoded on the wire (Debezium defaults)."""

    time_precision_mode: TimePrecisionMode | None = None  # None: the connector's own default
    decimal_handling_mode: Literal["precise", "double", "string"] = "precise"
    binary_handling_mode: Literal["bytes", "base64", "base64-url-safe", "hex"] = "bytes"
    bigint_unsigned_handling_mode: Literal["long", "precise"] = "long"


ServerName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._-]{1,249}$")]


@dataclass(frozen=True)
class SourceIdentity:
    """A source table named the way no other server's table can be: server first. Database,
    schema and table names compare case-insensitively, as MySQL on most systems and Debezium's
    table ids do; the server name exactly."""

    server: str
    database: str
    schema: str | None
    table: str

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.server, self.database.lower(), (self.schema or "").lower(), self.table.lower())

    def __str__(self) -> str:
        middle = f"{self.database}.{self.schema}" if self.schema else self.database
        return f"{self.server}:{middle}.{self.table}"


TopicName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._-]{1,249}$")]


def shard_name_of(server: str) -> str:
    """A server name as an identifier, the default shard name (``eu-1.db`` -> ``eu_1_db``)."""
    name = re.sub(r"[^a-z0-9_]", "_", server.lower())
    return name if re.match(r"^[a-z_]", name) else f"s_{name}"


class ShardSpec(_Strict):
    """One server that holds this table, in a spec that takes the same table from several
    servers (shards of one schema, regions, tenants) into one Iceberg table."""

    server: ServerName
    topic: TopicName
    # MySQL/MariaDB: the server's schema-change topic (default: the server name).
    schema_change_topic: TopicName | None = None
    # source.order: gtid: this server's replication domain, when it differs from the spec's.
    gtid_domain: int | None = Field(default=None, ge=0, le=2**32 - 1)
    # The shard column's value for this shard's rows and the suffix of its ledger's name
    # (default: the server name as an identifier). Fixed for the shard's life.
    name: Annotated[str, StringConstraints(pattern=r"^[a-z_][a-z0-9_]*$", max_length=40)] | None = (
        None
    )

    @property
    def shard_name(self) -> str:
        return self.name or shard_name_of(self.server)


class FormerSource(_Strict):
    """A name the source table had before a rename the spec followed (`spec.source_table`), and
    the topic its changes went to then (read to its end before the new one)."""

    database: SourceName
    table: SourceName
    topic: TopicName


class SourceSpec(_Strict):
    connector: Connector
    # The source server's logical name: Debezium's `topic.prefix` of its connector. Two servers
    # may hold the same database and table (shards, regions, staging beside production): a
    # source is identified by server + database (+ schema) + table, never without the server.
    # Default: the schema-change topic when given (MySQL family: it is the topic prefix), else
    # the part of `topic` before the first dot.
    server: ServerName | None = None
    database: SourceName
    schema_: SourceName | None = Field(default=None, alias="schema")
    table: SourceName
    topic_: TopicName | None = Field(default=None, alias="topic")
    # MySQL/MariaDB: Debezium's schema-change topic (default: the topic prefix, i.e. the part of
    # `topic` before the first dot). PostgreSQL has none.
    schema_change_topic: TopicName | None = None
    # Several servers holding this table (instead of server/topic/schema_change_topic): each
    # shard has its own topic and ledger; base holds them all, told apart by `shard_column`,
    # which leads the key.
    shards: list[ShardSpec] = []
    shard_column: Annotated[
        str, StringConstraints(pattern=r"^[a-z_][a-z0-9_]*$", max_length=63)
    ] = "_shard"
    debezium: DebeziumSpec = DebeziumSpec()
    # Older names of the table, oldest first: written by the evolution that follows a source
    # table's rename, never by hand. The ledger reads each one's topic to its end, then the next.
    renamed_from: list[FormerSource] = []
    # How this table's changes are ordered (MySQL family; PostgreSQL orders by LSN). ``binlog``:
    # (file number, position, row) of one server's binlog, which a failover to another server
    # does not continue. ``gtid`` (MariaDB): the GTID sequence number of ``gtid_domain``, which
    # keeps growing across a failover within the replication domain, then position and row
    # within the transaction. Fixed when the tables are created.
    order: SourceOrder = "binlog"
    gtid_domain: int = Field(default=0, ge=0, le=2**32 - 1)
    # Set on the per-shard view of a sharded spec (TableSpec.shard_specs), never from YAML.
    _shard: ShardSpec | None = PrivateAttr(default=None)
    _shard_names: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="after")
    def _check_shards(self) -> SourceSpec:
        if not self.shards:
            if self.topic_ is None:
                raise ValueError("source.topic: required field is missing (or give source.shards)")
            if self.topic_ in {f.topic for f in self.renamed_from}:
                raise ValueError("source.renamed_from: a former topic is the current one")
            return self
        if self.renamed_from:
            raise ValueError("source.renamed_from: a sharded table's renames are not followed")
        given = [f for f in ("topic_", "server", "schema_change_topic") if getattr(self, f)]
        if given:
            names = ", ".join(f"source.{f.rstrip('_')}" for f in given)
            raise ValueError(
                f"{names}: a spec with source.shards names its servers and topics per shard"
            )
        for attr, label in (
            ("shard_name", "name"),
            ("topic", "topic"),
            ("server", "server"),
        ):
            seen: dict[str, int] = {}
            for i, shard in enumerate(self.shards):
                value = getattr(shard, attr)
                if value in seen:
                    raise ValueError(
                        f"source.shards[{i}].{label}: {value!r} is already shard "
                        f"{seen[value]}'s; each shard is one server with its own topic"
                    )
                seen[value] = i
        return self

    @property
    def sharded(self) -> bool:
        """Whether this table's rows carry a shard column (a sharded spec or one shard's view)."""
        return bool(self.shards) or self._shard is not None

    @property
    def shard(self) -> ShardSpec | None:
        """The shard of a per-shard view, None otherwise."""
        return self._shard

    @property
    def topic(self) -> str:
        """The Kafka topic of a one-source spec or of one shard's view."""
        if self.topic_ is None:
            raise ShardedSpecError(
                f"{self.database}.{self.table} has {len(self.shards)} shards, each with its own "
                "topic: use the spec's shard_specs()"
            )
        return self.topic_

    @property
    def topics(self) -> list[str]:
        """Every Kafka topic this source's changes arrive on."""
        return [s.topic for s in self.shards] if self.shards else [self.topic]

    @property
    def former_topics(self) -> list[str]:
        """The topics of the table's former names, oldest first (``renamed_from``)."""
        return [f.topic for f in self.renamed_from]

    def view_of(self, shard: ShardSpec) -> SourceSpec:
        view = self.model_copy(
            update={
                "server": shard.server,
                "topic_": shard.topic,
                "schema_change_topic": shard.schema_change_topic,
                "shards": [],
                "gtid_domain": self.gtid_domain if shard.gtid_domain is None else shard.gtid_domain,
            }
        )
        view._shard = shard
        view._shard_names = self.shard_names
        return view

    @property
    def shard_names(self) -> tuple[str, ...]:
        """The names of every shard of the table (of a view: its siblings' too)."""
        return tuple(s.shard_name for s in self.shards) or self._shard_names

    @model_validator(mode="after")
    def _check_order(self) -> SourceSpec:
        if self.order == "gtid" and self.connector != "mariadb":
            why = {
                "postgresql": "PostgreSQL changes are ordered by LSN",
                "mysql": "MySQL GTIDs (source_uuid:transaction_id) are numbered per server, so "
                "they do not order changes across a failover either",
                "tidb": "TiDB sends no GTID",
            }[self.connector]
            raise ValueError(f"source.order: 'gtid' is for MariaDB sources only ({why})")
        return self

    @property
    def server_name(self) -> str:
        """The server this table lives on (see ``server``)."""
        return self.server or self.schema_change_topic or self.topic.split(".")[0]

    @property
    def identities(self) -> list[SourceIdentity]:
        """The identity of every server's table this source takes (one unless sharded)."""
        if self.shards:
            return [self.view_of(s).identity for s in self.shards]
        return [self.identity]

    @property
    def identity(self) -> SourceIdentity:
        """Server, database, schema and table: what tells this source apart from every other."""
        return SourceIdentity(self.server_name, self.database, self.schema_, self.table)

    @property
    def schema_changes(self) -> str | None:
        """The schema-change topic to watch, or None for PostgreSQL."""
        if self.connector == "postgresql":
            return None
        return self.schema_change_topic or self.server or self.topic.split(".")[0]

    @property
    def time_precision_mode(self) -> TimePrecisionMode:
        if self.debezium.time_precision_mode is not None:
            return self.debezium.time_precision_mode
        # MySQL-family connectors default to microsecond TIME; PostgreSQL to adaptive.
        return "adaptive" if self.connector == "postgresql" else "adaptive_time_microseconds"
