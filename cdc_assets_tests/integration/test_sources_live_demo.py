"""The README's run command on the session's real sources: `cdc-assets run` brings up (here: finds
running) MariaDB, PostgreSQL, Kafka Connect with Debezium and Kafka, runs a workload, adds a column
and widens another on both servers mid-stream, lets the pipeline converge with no manual step, and
compares every source table with its base.

It runs in a process of its own (its own Spark session, on the catalog of the sources' home) and
last among the modules on the real sources: its schema changes stay in the source tables. The
source tables hold what earlier modules wrote too, and the demo's base is built from the whole
topics, so "no difference" covers their rows as well.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from cdc_assets.resources import build_resources
from cdc_assets.schema.layers import base_layout
from cdc_assets.settings import Settings
from cdc_assets.spec import load_specs
from cdc_assets_dev.demo import shards
from cdc_assets_dev.demo.live import SCHEMA_CHANGES, demo_specs_dir
from cdc_assets_dev.stack.local_stack import StackState
from cdc_assets_tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.integration

DEMO_TIMEOUT_S = 900


@pytest.fixture(scope="module")
def demo(sources_home: Settings, sources_stack: StackState) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("CDC_ASSETS_") and k != "DAGSTER_HOME"
    }
    env["CDC_ASSETS_HOME"] = str(sources_home.home)
    env["COLUMNS"] = "200"  # rich wraps the report at the terminal's width
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cdc_assets.cli",
            "run",
            "--statements",
            "150",
            "--after-change",
            "80",
        ],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT_S,
        check=False,
    )
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr[-20_000:])
    return done


def test_the_demo_converges_with_no_difference(demo: subprocess.CompletedProcess[str]) -> None:
    assert demo.returncode == 0, demo.stdout[-5000:] + demo.stderr[-5000:]
    out = demo.stdout
    for n in range(1, 9):
        assert f"[{n}/8]" in out
    for server, database, sql in SCHEMA_CHANGES:
        assert f"{server}/{database}: {sql}" in out
    for server in shards.SHARD_SERVERS.values():
        assert f"{server}/{shards.DATABASE}: {shards.SCHEMA_CHANGE}" in out
    report = [line for line in out.splitlines() if line.startswith("│ ")]
    rows = {
        cells[0]: cells for cells in ([c.strip() for c in r.strip("│ ").split("│")] for r in report)
    }
    sharded = {f"customers ({shard})" for shard in shards.SHARD_SERVERS}
    assert set(rows) == {"users", "order_items", "orders", *sharded}, out
    for table, cells in rows.items():
        _, version, source_rows, base_rows, differences, applied = cells
        assert differences == "none", out
        assert source_rows == base_rows
        assert int(source_rows.replace(",", "")) > 0
        assert int(version) >= 2
        assert "(push, applied)" in applied, (table, applied)


def test_the_schema_changes_reached_specs_and_base(
    demo: subprocess.CompletedProcess[str], sources_home: Settings
) -> None:
    """Pushed by Debezium (MariaDB's schema-change topic, PostgreSQL's embedded schemas), applied
    by the evolution runs the sensor started: the demo's own spec copy moved, the repository's
    did not; rows written after the change carry the new values in base."""
    assert demo.returncode == 0
    specs = {s.name: s for s in load_specs(demo_specs_dir(sources_home))}
    assert specs["users"].columns_by_name["nickname"].type == "varchar(40)"
    assert specs["order_items"].columns_by_name["sku"].type == "varchar(128)"
    assert specs["orders"].columns_by_name["coupon"].type == "text"  # Connect strings lose length
    assert specs["orders"].columns_by_name["amount"].type == "decimal(16,2)"
    project = {s.name: s for s in load_specs(PROJECT_ROOT / "table_specs")}
    assert all(s.spec_version == 1 for s in project.values())
    assert "customers" not in project  # the demo adds it to its own copy

    catalog = build_resources(sources_home)["iceberg"].load_catalog()

    def base_rows(name: str) -> list[dict[str, Any]]:
        layout = base_layout(specs[name])
        rows: list[dict[str, Any]] = (
            catalog.load_table(f"{layout.namespace}.{layout.name}").scan().to_arrow().to_pylist()
        )
        return rows

    assert sum(r["nickname"] is not None for r in base_rows("users")) > 10
    assert sum(r["coupon"] is not None for r in base_rows("orders")) > 10
    # values longer than the old varchar(64): dead letters under v1, redriven by the evolution
    assert sum(len(r["sku"]) > 64 for r in base_rows("order_items")) > 5
    amounts = [r["amount"] for r in base_rows("orders")]
    assert max(abs(a) for a in amounts) >= 10**10  # beyond numeric(12,2)
    # The sharded table: one evolution for the column both shards added, the same ids on both
    # shards as two rows, and the new column's values from each shard once it had the column.
    customers = base_rows("customers")
    assert specs["customers"].columns_by_name["tier"].type == "varchar(16)"
    assert specs["customers"].spec_version == 2
    ids = {
        shard: {r["id"] for r in customers if r["_shard"] == shard}
        for shard in shards.SHARD_SERVERS
    }
    assert len(ids["shard1"] & ids["shard2"]) > 10
    for shard in shards.SHARD_SERVERS:
        assert sum(r["tier"] is not None for r in customers if r["_shard"] == shard) > 5, shard


def test_the_history_of_order_items_ends_in_its_base(
    demo: subprocess.CompletedProcess[str], sources_home: Settings
) -> None:
    """order_items keeps history (history.mode: scd2): through real MariaDB and Debezium, its
    schema change and the redrive of the lines the old type refused, the history's versions
    as of now are base's rows, and it holds the older versions besides."""
    from datetime import UTC, datetime, timedelta

    from cdc_assets.pipeline.upsert.history import read_as_of
    from cdc_assets.schema.layers import history_layout
    from cdc_assets.sql.upsert import data_names

    assert demo.returncode == 0
    spec = next(s for s in load_specs(demo_specs_dir(sources_home)) if s.name == "order_items")
    assert spec.history.enabled
    catalog = build_resources(sources_home)["iceberg"].load_catalog()
    names = data_names(spec)
    layout = base_layout(spec)
    base = catalog.load_table(f"{layout.namespace}.{layout.name}").scan().to_arrow().to_pylist()
    now = read_as_of(catalog, spec, datetime.now(UTC) + timedelta(days=1)).to_pylist()

    def key(row: dict[str, Any]) -> tuple[Any, ...]:
        return (row["order_id"], row["line_no"])

    assert sorted(now, key=key) == sorted(({c: r[c] for c in names} for r in base), key=key)
    history = history_layout(spec)
    versions = catalog.load_table(f"{history.namespace}.{history.name}").scan().to_arrow()
    assert versions.num_rows > len(base)
    assert sum(len(r["sku"]) > 64 for r in now) > 5  # the widened column's redriven values
