"""Where things live and how they are reached, from environment variables with local defaults.

Reading settings never starts a process or opens a connection, so definitions can load anywhere.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cdc_assets.errors import ConfigError
from cdc_assets.kafka_security import KafkaSecurity, RegistryAuth, kafka_security, registry_auth

if TYPE_CHECKING:
    from cdc_assets.spec.models import SourceSpec

ENV_HOME = "CDC_ASSETS_HOME"
ENV_SPECS = "CDC_ASSETS_SPECS"
ENV_VIEWS = "CDC_ASSETS_VIEWS"
ENV_ARTIFACTS = "CDC_ASSETS_ARTIFACTS"


def artifacts_root(home: str | Path) -> Path:
    """Where schema packages are published (a PEP 503 index under ``simple/``):
    ``CDC_ASSETS_ARTIFACTS``, else ``<home>/artifacts``."""
    configured = os.environ.get(ENV_ARTIFACTS)
    return Path(configured).expanduser().resolve() if configured else Path(home) / "artifacts"


ENV_SPARK_MASTER = "CDC_ASSETS_SPARK_MASTER"
# sc://host:port of a Spark Connect server: runs then share its long-lived driver.
ENV_SPARK_REMOTE = "CDC_ASSETS_SPARK_REMOTE"
DEFAULT_SPARK_MASTER = "local[*]"
ENV_CATALOG_NAME = "CDC_ASSETS_CATALOG_NAME"
ENV_CATALOG_TYPE = "CDC_ASSETS_CATALOG_TYPE"
ENV_CATALOG_URI = "CDC_ASSETS_CATALOG_URI"
ENV_WAREHOUSE = "CDC_ASSETS_WAREHOUSE"
# A JSON object of extra catalog properties for both engines (object store endpoint and
# credentials, io-impl, jdbc.user/jdbc.password, a REST catalog's token, ...).
ENV_CATALOG_PROPERTIES = "CDC_ASSETS_CATALOG_PROPERTIES"
ENV_KAFKA_BOOTSTRAP = "CDC_ASSETS_KAFKA_BOOTSTRAP"
ENV_KAFKA_PORT = "CDC_ASSETS_KAFKA_PORT"
# A Confluent-compatible schema registry for Avro records (unset: the local stack's, if any).
ENV_SCHEMA_REGISTRY_URL = "CDC_ASSETS_SCHEMA_REGISTRY_URL"
ENV_PARTITIONS_START = "CDC_ASSETS_PARTITIONS_START"
# Cron of the `table_checks` schedule for every table, over each spec's `schedule.cron`: the
# checks that scan whole tables run on this cadence, not after every micro-batch of the sensors.
ENV_CHECKS_CRON = "CDC_ASSETS_CHECKS_CRON"
# host:port of the Dagster webserver, through which the spec_directory sensor reloads the code
# location when a spec is added or removed (`make dev` sets it).
ENV_WEBSERVER = "CDC_ASSETS_WEBSERVER"
# 1: `stack up` (and so `cdc-assets run`) also starts the local Spark standalone cluster, whose
# driver is the stack's Spark Connect server (stack/spark_cluster.py).
ENV_CLUSTER = "CDC_ASSETS_CLUSTER"
# The cluster profile's catalog: `rest` (default: Iceberg's REST server over the JDBC catalog on
# the stack's PostgreSQL) or `jdbc` (that JDBC catalog, opened by the engines directly).
ENV_CLUSTER_CATALOG = "CDC_ASSETS_CLUSTER_CATALOG"
CLUSTER_CATALOGS = ("rest", "jdbc")
# How many tables of a run execute at once in its process, each on a Spark session of its own
# (assets/tables.py); a run's config may set it too (ops.tables.config.tables_at_once).
ENV_TABLES_AT_ONCE = "CDC_ASSETS_TABLES_AT_ONCE"
# 1: the sensors' micro-batch runs carry the dagster-k8s/config tag that names their tables to the
# run's pod (run_tables.py), so that on Kubernetes a run worker builds only its tables' definitions.
ENV_K8S_RUN_TABLES = "CDC_ASSETS_K8S_RUN_TABLES"
# The jobs' executor: `in_process` (default: a run's steps in its one process, sharing its Spark
# driver) or `dagster` (Dagster's own default, `multi_or_in_process_executor`: a process and a
# driver per step unless a run's config picks in_process).
ENV_EXECUTOR = "CDC_ASSETS_EXECUTOR"
EXECUTORS = ("in_process", "dagster")
# How often a continuous worker beats (jobs/continuous.py): one that misses six beats is
# replaced, so this is also about a sixth of how long a killed worker's tables wait.
ENV_WORKER_HEARTBEAT_S = "CDC_ASSETS_WORKER_HEARTBEAT_S"
DEFAULT_WORKER_HEARTBEAT_S = 10.0
# How many of a continuous worker's tables are in a cycle at once (jobs/continuous.py). One: on
# a 2-core machine with the real sources, three tables one after another reached base with a
# p95 of 18.6 s, three at once 21.2 s at 1.32x the CPU per event (benchmarks/source_freshness.py):
# the machine's cores, not the worker's turns, bound it there.
ENV_WORKER_TABLES_AT_ONCE = "CDC_ASSETS_WORKER_TABLES_AT_ONCE"
DEFAULT_WORKER_TABLES_AT_ONCE = 1
# Three: on a 2-core machine, busy cycles of 30 small tables with the widths taking turns on one
# warm driver took 0.88x the time per table with three at once as with two, and four no less
# than three (benchmarks/fleet_widths.py, docs/benchmarks.md): a small table's steps mostly wait
# on round trips. A driver caches one large batch at a time whatever the width
# (pipeline/shared/batch_cache.py).
DEFAULT_TABLES_AT_ONCE = 3
# CDC_ASSETS_SOURCE_URL_<SERVER>_<DATABASE>, CDC_ASSETS_SOURCE_URL_<CONNECTOR>_<DATABASE> or
# CDC_ASSETS_SOURCE_URL_<DATABASE>, looked up in that order: a JDBC URL of a source database, for
# the checks that compare with the source (row counts, schema drift) and the drift check. SERVER is
# the spec's source server (Debezium's topic.prefix): the only form that tells apart two servers
# holding a database of the same name. Unset means the source is not reachable from here.
ENV_SOURCE_URL_PREFIX = "CDC_ASSETS_SOURCE_URL_"
ENV_METRICS_TOKEN = "CDC_ASSETS_METRICS_TOKEN"
# The secret sensitive columns are hashed and encrypted with (at least 16 bytes; any text), and
# the id stored with each value it protected (letters and digits; default 1). Needed by every
# table that protects a column or drops a field: their dead letters are encrypted with it.
ENV_PROTECTION_KEY = "CDC_ASSETS_PROTECTION_KEY"
ENV_PROTECTION_KEY_ID = "CDC_ASSETS_PROTECTION_KEY_ID"
# A retired key, still held to read what it encrypted or sealed: ..._OLD_KEY_<ID>=<secret>.
ENV_PROTECTION_OLD_KEY_PREFIX = "CDC_ASSETS_PROTECTION_OLD_KEY_"


def source_url_variable(database: str, qualifier: str | None = None) -> str:
    """The environment variable holding the JDBC URL of a source database; with ``qualifier``
    (a server name, or a connector kind), the variable that names it too (``..._SHARD_A_SHOP``,
    ``..._POSTGRESQL_SHOP``), for a database name that exists on two servers."""
    name = database if qualifier is None else f"{qualifier}_{database}"
    return ENV_SOURCE_URL_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def source_url_variables(
    database: str, connector: str | None = None, server: str | None = None
) -> list[str]:
    """The variables tried for a source database, most specific first."""
    names = [source_url_variable(database, q) for q in (server, connector) if q is not None]
    return [*names, source_url_variable(database)]


@dataclass(frozen=True)
class Settings:
    """Resolved settings. Unset optional values mean "use the local stack"."""

    home: Path
    specs_dir: Path
    spark_master: str
    catalog_name: str
    catalog_type: str
    catalog_uri: str | None
    warehouse: str | None
    kafka_bootstrap: str | None
    kafka_port: int
    schema_registry_url: str | None = None
    partitions_start: str | None = None  # None: jobs.ingest.deployment_start
    source_urls: dict[str, str] = field(default_factory=dict)  # variable name -> JDBC URL
    spark_remote: str | None = None
    checks_cron: str | None = None  # None: each spec's schedule.cron
    webserver: str | None = None
    views: Path | None = None  # None: the spec directory's views/
    cluster: bool = False  # the local stack's cluster profile
    cluster_catalog: str = "rest"  # its catalog: "rest" or "jdbc" (ENV_CLUSTER_CATALOG)
    catalog_properties: dict[str, str] = field(default_factory=dict)
    tables_at_once: int = DEFAULT_TABLES_AT_ONCE  # tables of a run at once (assets/tables.py)
    k8s_run_tables: bool = False  # the dagster-k8s/config tag on the sensors' runs
    executor: str = "in_process"  # the jobs' executor (ENV_EXECUTOR)
    worker_heartbeat_s: float = DEFAULT_WORKER_HEARTBEAT_S  # continuous workers' heartbeat
    worker_tables_at_once: int = DEFAULT_WORKER_TABLES_AT_ONCE  # a worker's tables in a cycle
    metrics_token: str | None = None  # bearer token `fleet --serve` requires (None: none)
    # How Kafka clients authenticate and encrypt (CDC_ASSETS_KAFKA_SECURITY_PROTOCOL, ...).
    kafka_security: KafkaSecurity = field(default_factory=KafkaSecurity)
    # The schema registry's basic auth and CA (CDC_ASSETS_SCHEMA_REGISTRY_USERNAME, ...).
    registry_auth: RegistryAuth = field(default_factory=RegistryAuth)

    @property
    def views_dir(self) -> Path:
        """SQL view definitions over the base tables: ``<namespace>/<view>.sql``."""
        return self.views or self.specs_dir / "views"

    def source_url(
        self, database: str, connector: str | None = None, server: str | None = None
    ) -> str | None:
        """The JDBC URL of a source database: the server-qualified variable first, then the
        connector-qualified one, then the database's alone."""
        for name in source_url_variables(database, connector, server):
            if url := self.source_urls.get(name):
                return url
        return None

    def source_url_of(self, source: SourceSpec) -> str | None:
        """The JDBC URL of a spec's source database (see ``source_url``). None for a sharded
        spec: its shards are compared with their sources by ``shard_source_urls``."""
        if source.shards:
            return None
        return self.source_url(source.database, source.connector, source.server_name)

    def shard_source_urls(self, source: SourceSpec) -> dict[str, str]:
        """Shard name -> JDBC URL of each shard of a sharded spec whose source URL is set
        (server-qualified: ``CDC_ASSETS_SOURCE_URL_<SERVER>_<DATABASE>``)."""
        out = {}
        for shard in source.shards:
            url = self.source_url(source.database, source.connector, shard.server)
            if url is not None:
                out[shard.shard_name] = url
        return out

    def server_source_urls(self, source: SourceSpec) -> dict[str, str]:
        """Server -> JDBC URL of every source of a spec whose URL is set: its one server, or
        each shard's (what pull detection reads)."""
        if not source.shards:
            url = self.source_url_of(source)
            return {source.server_name: url} if url is not None else {}
        return {
            shard.server: url
            for shard in source.shards
            if (url := self.source_url(source.database, source.connector, shard.server))
        }

    @property
    def jars_dir(self) -> Path:
        return self.home / "jars"

    @property
    def stack_dir(self) -> Path:
        return self.home / "stack"

    @property
    def local_catalog_file(self) -> Path:
        return self.stack_dir / "catalog.db"

    @property
    def local_warehouse(self) -> Path:
        return self.stack_dir / "warehouse"


# `<SETTING>_FILE`: the setting's value is that file's content (Docker and Kubernetes secrets).
SECRET_FILE_SUFFIX = "_FILE"


def with_secret_files(env: dict[str, str]) -> dict[str, str]:
    """``env`` with each ``CDC_ASSETS_<X>_FILE`` read into ``CDC_ASSETS_<X>`` (one trailing line
    break dropped), so passwords in source URLs, catalog credentials and the like can come from
    mounted secret files instead of the environment. Setting both, or naming a file that cannot
    be read, is an error that names the setting (never the value)."""
    out = dict(env)
    for key, path in env.items():
        if not key.startswith("CDC_ASSETS_") or not key.endswith(SECRET_FILE_SUFFIX) or not path:
            continue
        name = key[: -len(SECRET_FILE_SUFFIX)]
        if env.get(name):
            raise ConfigError(f"both {name} and {key} are set: set one of them")
        try:
            text = Path(path).expanduser().read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{key}: cannot read {path}: {exc.strerror or exc}") from None
        out[name] = text[:-1] if text.endswith("\n") else text
        del out[key]  # consumed: never itself a setting (a source URL named ..._FILE, say)
    return out


def load_settings(env: dict[str, str] | None = None) -> Settings:
    """Read settings from ``env`` (default: the process environment); any setting may instead
    name a file holding its value (`with_secret_files`)."""
    env = with_secret_files(dict(os.environ) if env is None else env)
    home = Path(env.get(ENV_HOME, ".cdc-assets")).expanduser().resolve()
    specs = Path(env.get(ENV_SPECS, "table_specs")).expanduser().resolve()
    return Settings(
        home=home,
        specs_dir=specs,
        spark_master=env.get(ENV_SPARK_MASTER, DEFAULT_SPARK_MASTER),
        catalog_name=env.get(ENV_CATALOG_NAME, "lake"),
        catalog_type=env.get(ENV_CATALOG_TYPE, "jdbc"),
        catalog_uri=env.get(ENV_CATALOG_URI) or None,
        warehouse=env.get(ENV_WAREHOUSE) or None,
        kafka_bootstrap=env.get(ENV_KAFKA_BOOTSTRAP) or None,
        kafka_port=int(env.get(ENV_KAFKA_PORT, "0")),
        schema_registry_url=env.get(ENV_SCHEMA_REGISTRY_URL) or None,
        partitions_start=env.get(ENV_PARTITIONS_START) or None,
        source_urls={k: v for k, v in env.items() if k.startswith(ENV_SOURCE_URL_PREFIX) and v},
        spark_remote=env.get(ENV_SPARK_REMOTE) or None,
        checks_cron=env.get(ENV_CHECKS_CRON) or None,
        webserver=env.get(ENV_WEBSERVER) or None,
        views=Path(env[ENV_VIEWS]).expanduser().resolve() if env.get(ENV_VIEWS) else None,
        cluster=env.get(ENV_CLUSTER, "").strip().lower() in ("1", "true", "yes"),
        cluster_catalog=_cluster_catalog(env.get(ENV_CLUSTER_CATALOG, "")),
        catalog_properties=_catalog_properties(env.get(ENV_CATALOG_PROPERTIES, "")),
        tables_at_once=_tables_at_once(env, ENV_TABLES_AT_ONCE, DEFAULT_TABLES_AT_ONCE),
        k8s_run_tables=env.get(ENV_K8S_RUN_TABLES, "").strip().lower() in ("1", "true", "yes"),
        executor=_executor(env.get(ENV_EXECUTOR, "")),
        worker_heartbeat_s=_worker_heartbeat(env),
        worker_tables_at_once=_tables_at_once(
            env, ENV_WORKER_TABLES_AT_ONCE, DEFAULT_WORKER_TABLES_AT_ONCE
        ),
        metrics_token=env.get(ENV_METRICS_TOKEN) or None,
        kafka_security=kafka_security(env),
        registry_auth=registry_auth(env),
    )


def _executor(raw: str) -> str:
    value = raw.strip().lower() or "in_process"
    if value not in EXECUTORS:
        raise ConfigError(f"{ENV_EXECUTOR} must be one of {', '.join(EXECUTORS)}, not {raw!r}")
    return value


def _tables_at_once(env: dict[str, str], name: str, default: int) -> int:
    """``CDC_ASSETS_TABLES_AT_ONCE`` or ``CDC_ASSETS_WORKER_TABLES_AT_ONCE``: a whole number of
    1 or more (empty: the default)."""
    raw = env.get(name, "")
    try:
        value = int(raw.strip() or default)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"{name} must be a whole number of 1 or more, not {raw!r}")
    return value


def _worker_heartbeat(env: dict[str, str]) -> float:
    """``CDC_ASSETS_WORKER_HEARTBEAT_S``: seconds over 0 (empty: the default)."""
    name = ENV_WORKER_HEARTBEAT_S
    raw = env.get(name, "").strip()
    if not raw:
        return DEFAULT_WORKER_HEARTBEAT_S
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise ConfigError(f"{name} must be a number of seconds over 0, not {raw!r}")
    return value


def _cluster_catalog(raw: str) -> str:
    """``CDC_ASSETS_CLUSTER_CATALOG``: one of CLUSTER_CATALOGS (empty: ``rest``)."""
    value = raw.strip().lower() or CLUSTER_CATALOGS[0]
    if value not in CLUSTER_CATALOGS:
        raise ConfigError(
            f"{ENV_CLUSTER_CATALOG} must be one of {', '.join(CLUSTER_CATALOGS)}, not {raw!r}"
        )
    return value


def _catalog_properties(raw: str) -> dict[str, str]:
    """``CDC_ASSETS_CATALOG_PROPERTIES``: a JSON object of string values (empty: none)."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{ENV_CATALOG_PROPERTIES} is not JSON ({exc.msg}): {raw[:80]!r}"
        ) from None
    if not isinstance(value, dict):
        raise ConfigError(f"{ENV_CATALOG_PROPERTIES} must be a JSON object of properties")
    return {str(k): str(v) for k, v in value.items()}
