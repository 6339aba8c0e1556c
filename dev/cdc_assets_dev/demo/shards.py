"""The live demo's sharded table: ``crm.customers`` on two further local MariaDB servers, each
with its own Debezium connector (topic prefix = shard name), mirrored into one Iceberg table
whose key starts with the shard column.

The two shards hold overlapping keys (the same id on both is two rows of base). A column is
added on the first shard mid-stream while the second keeps writing in the old shape, then on the
second: the table evolves once and the second shard's rows keep decoding in between. Each
shard's source table is compared with its rows of base.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cdc_assets.settings import Settings
from cdc_assets.spec.models import ColumnSpec, TableSpec
from cdc_assets_dev.demo.workload import WorkloadGenerator, script
from cdc_assets_dev.stack import connect, sources

# shard name (also its server's Debezium topic prefix) -> local MariaDB server
SHARD_SERVERS = {"shard1": "mariadb-shard1", "shard2": "mariadb-shard2"}
DATABASE = "crm"
TABLE = "customers"
# Each connector reads its server's binlog as a replica with an id of its own.
_CONNECTOR_SERVER_IDS = {"shard1": 5411, "shard2": 5412}
_CREATE = (
    f"CREATE DATABASE IF NOT EXISTS {DATABASE}; "
    f"CREATE TABLE IF NOT EXISTS {DATABASE}.{TABLE} ("
    "id BIGINT NOT NULL PRIMARY KEY, name VARCHAR(80) NOT NULL, country CHAR(2) NULL, "
    "credit DECIMAL(12,2) NULL, signed_up DATETIME(3) NULL);"
)
# Made on each shard in turn mid-stream (idempotent: a rerun changes nothing more).
SCHEMA_CHANGE = f"ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS tier VARCHAR(16) NULL;"
# The source shape after SCHEMA_CHANGE, for the workload: (column, type).
NEW_COLUMN = ("tier", "varchar(16)")


def connector_name(shard: str) -> str:
    return f"cdc-{shard}"


def shard_spec() -> TableSpec:
    """The spec the demo onboards: one table, two shards, the shard column ``_shard``."""
    return TableSpec.model_validate(
        {
            "spec_version": 1,
            "name": TABLE,
            "description": "Customers of the CRM, sharded over two MariaDB servers.",
            "owners": ["team:data-platform"],
            "source": {
                "connector": "mariadb",
                "database": DATABASE,
                "table": TABLE,
                "shards": [
                    {"server": shard, "topic": f"{shard}.{DATABASE}.{TABLE}", "name": shard}
                    for shard in SHARD_SERVERS
                ],
            },
            "columns": [
                {"id": 1, "name": "id", "type": "bigint", "nullable": False},
                {"id": 2, "name": "name", "type": "varchar(80)", "nullable": False},
                {"id": 3, "name": "country", "type": "char(2)"},
                {"id": 4, "name": "credit", "type": "decimal(12,2)"},
                {"id": 5, "name": "signed_up", "type": "datetime(3)"},
            ],
            "primary_key": ["id"],
            "sink": {"namespace": DATABASE},
            "base": {"buckets": 4},
        }
    )


def ensure_spec(specs_dir: Path) -> None:
    """Add the sharded spec to the demo's spec directory once (later runs keep its evolution)."""
    from cdc_assets.spec.versions import write_spec

    if not (specs_dir / f"{TABLE}.yaml").exists():
        write_spec(shard_spec(), specs_dir / f"{TABLE}.yaml")


def start_shards(settings: Settings, bootstrap: str) -> list[str]:
    """Start both shard servers, create the table on each, register each shard's connector
    (idempotent); a line per shard for the demo's output."""
    lines = []
    for shard, server in SHARD_SERVERS.items():
        port = sources.start_mariadb(settings, server)
        sources.mariadb_execute(settings, _CREATE, name=server)
        config = connect.capture_config(
            settings,
            bootstrap,
            "mariadb",
            prefix=shard,
            tables=[f"{DATABASE}.{TABLE}"],
            mariadb_name=server,
            server_id=_CONNECTOR_SERVER_IDS[shard],
            schema_changes=True,
        )
        connect.register_capture(settings, bootstrap, connector_name(shard), config)
        lines.append(f"{server} (port {port}) database {DATABASE}, connector {shard}")
    return lines


def execute(settings: Settings, shard: str, sql: str) -> str:
    return sources.mariadb_execute(settings, sql, DATABASE, name=SHARD_SERVERS[shard])


def apply_schema_change(settings: Settings, shard: str) -> str:
    execute(settings, shard, SCHEMA_CHANGE)
    return f"{SHARD_SERVERS[shard]}/{DATABASE}: {SCHEMA_CHANGE}"


def url(settings: Settings, shard: str) -> str:
    return sources.mariadb_jdbc_url(settings, DATABASE, SHARD_SERVERS[shard])


def next_key_base(settings: Settings, stride: int) -> int:
    """The first multiple of ``stride`` above every id on either shard."""
    highest = 0
    for shard in SHARD_SERVERS:
        out = execute(settings, shard, f"SELECT COALESCE(MAX(id), 0) FROM {TABLE};")
        highest = max([highest, *(int(n) for n in re.findall(r"-?\d+", out))])
    return (highest // stride + 1) * stride


def with_new_column(view: TableSpec) -> TableSpec:
    """``view`` as its source table looks after SCHEMA_CHANGE (unchanged if the spec has it)."""
    name, type_text = NEW_COLUMN
    if any(c.name == name for c in view.columns):
        return view
    column = ColumnSpec(id=max(c.id for c in view.columns) + 1, name=name, type=type_text)
    return view.model_copy(update={"columns": [*view.columns, column]})


def run_workload(
    settings: Settings,
    spec: TableSpec,
    shards: dict[str, Callable[[TableSpec], TableSpec]],
    *,
    statements: int,
    seed: int,
    key_base: int,
) -> dict[str, int]:
    """``statements`` row changes on each shard of ``shards`` (shard -> its source shape), from
    the same key base: the shards write the same ids. Statements run per shard."""
    views = {v.shard.shard_name: v for v in spec.shard_specs() if v.shard is not None}
    done = {}
    rng = random.Random(seed)
    for shard, shape in shards.items():
        generator = WorkloadGenerator(
            [shape(views[shard])], seed=rng.randrange(2**31), key_base=key_base
        )
        batch = generator.statements(statements)
        execute(settings, shard, script(batch))
        done[SHARD_SERVERS[shard]] = len(batch)
    return done


def compare(spark: Any, catalog: str, spec: TableSpec, settings: Settings) -> dict[str, Any]:
    """Each shard's source table against its rows of base: shard -> MirrorDiff."""
    from cdc_assets.pipeline.bootstrap.source_compare import compare_source

    return {
        v.shard.shard_name: compare_source(spark, catalog, v, url(settings, v.shard.shard_name))
        for v in spec.shard_specs()
        if v.shard is not None
    }
