"""Every asset check on the real stack: passes on a healthy table, fails on data broken on purpose
(null in a NOT NULL column, duplicated key, drifted schema, stale watermark, unread records near
retention, dead letters, a source with more rows), with the values it reports.

Damage to Iceberg tables is undone with Iceberg's own set_current_snapshot, so the tests share
one healthy table.
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

from cdc_assets.assets.keys import asset_key
from cdc_assets.checks.runner import CheckOutcome, run_checks
from cdc_assets.definitions import build_defs
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.layers import base_layout, dead_letter_layout, ledger_layout
from cdc_assets.settings import Settings, source_url_variable
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.ddl import table_identifier
from cdc_assets_dev.demo.events import KafkaRecord, produce, workload
from cdc_assets_tests.integration.test_ingest import isolated
from cdc_assets_tests.integration.test_upsert import example_spec, ingest, upsert

ALL_CHECKS = {
    "raw/{t}_topic:kafka_lag_retention",
    "cdc/{t}_cdc:offsets_accounted",
    "cdc/{t}_cdc:dead_letter_rate",
    "cdc/{t}_cdc:ledger_null_counts",
    "cdc/{t}_cdc:schema_converged",
    "base/{t}:null_counts",
    "base/{t}:image_values",
    "base/{t}:sample_conforms",
    "base/{t}:primary_key_unique",
    "base/{t}:watermark_lag",
    "base/{t}:schema_drift",
}


class Checker:
    """Runs checks of one spec through the `check_tables` job, as `cdc-assets checks` does."""

    def __init__(self, spec: TableSpec, settings: Settings, resources: dict[str, Any]) -> None:
        self.spec, self.settings, self.resources = spec, settings, resources
        self.defs = build_defs(specs=[spec], settings=settings, resource_overrides=resources)
        self.instance = dg.DagsterInstance.ephemeral()

    def __call__(self, *names: str) -> dict[str, CheckOutcome]:
        outcomes, _ = run_checks(self.defs, self.instance, checks=names or None)
        return {o.check: o for o in outcomes}


@pytest.fixture(scope="module")
def healthy(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    resources: dict[str, Any],
) -> tuple[TableSpec, Checker]:
    spec = isolated(example_spec(it_settings, "users"), kafka=kafka)
    ensure_tables(spark, "lake", spec)
    records = workload(spec, random.Random(11), keys=30, events=150)
    produce(records, spec.source.topic, kafka.resolved_bootstrap())
    ingest(spark, iceberg, kafka, spec)
    upsert(spark, iceberg, spec)
    return spec, Checker(spec, it_settings, resources)


def _ident(spec: TableSpec, layer: str) -> str:
    layouts = {"base": base_layout, "cdc": ledger_layout, "dlt": dead_letter_layout}
    return table_identifier("lake", layouts[layer](spec))


@contextmanager
def _rollback_to_now(spark: Any, spec: TableSpec, layer: str) -> Iterator[None]:
    """Make the current snapshot current again on exit (Iceberg's set_current_snapshot)."""
    layout = {"base": base_layout, "cdc": ledger_layout, "dlt": dead_letter_layout}[layer](spec)
    ident = _ident(spec, layer)
    snapshots = spark.sql(
        f"SELECT snapshot_id FROM {ident}.history ORDER BY made_current_at DESC LIMIT 1"
    )
    snapshot = snapshots.collect()[0]["snapshot_id"]
    try:
        yield
    finally:
        spark.sql(
            f"CALL lake.system.set_current_snapshot('{layout.namespace}.{layout.name}', {snapshot})"
        )


def test_healthy_table_passes_every_check(healthy: tuple[TableSpec, Checker], spark: Any) -> None:
    spec, check = healthy
    results = check()
    assert {f"{o.asset}:{o.check}" for o in results.values()} == {
        c.format(t=spec.name) for c in ALL_CHECKS
    }
    failed = {n: o.description for n, o in results.items() if not o.passed}
    assert not failed
    base_rows = spark.sql(f"SELECT count(*) AS n FROM {_ident(spec, 'base')}").collect()[0]["n"]
    assert results["null_counts"].metadata["rows"] == base_rows > 0
    assert results["null_counts"].metadata["null_counts"]["email"] == 0
    assert results["primary_key_unique"].metadata["duplicated_keys"] == 0
    assert results["watermark_lag"].metadata["pending_ledger_rows"] == 0
    assert results["kafka_lag_retention"].metadata["ledger_lag_records"] == 0
    assert results["schema_drift"].metadata["iceberg_differences"] == {}
    assert results["dead_letter_rate"].metadata["dead_letters"] == 0
    assert results["ledger_null_counts"].metadata["rows"] > 0
    assert results["schema_converged"].metadata["fields_behind"] == {}


def test_null_in_not_null_column_fails(healthy: tuple[TableSpec, Checker], spark: Any) -> None:
    spec, check = healthy
    with _rollback_to_now(spark, spec, "base"):
        spark.sql(
            f"INSERT INTO {_ident(spec, 'base')} (id, is_active, login_count, _op, "
            "_kafka_partition, _kafka_offset) VALUES (999999, true, 1, 'c', 0, 0)"
        )
        result = check("null_counts")["null_counts"]
        assert not result.passed
        assert result.severity == "ERROR"
        assert result.metadata["null_counts"]["email"] == 1
        assert result.metadata["null_counts"]["created_at"] == 1
        assert "email: 1 nulls in a NOT NULL column" in result.description
    assert check("null_counts")["null_counts"].passed


def test_far_future_timestamps_conform(healthy: tuple[TableSpec, Checker], spark: Any) -> None:
    """Sources keep sentinels such as 9999-12-31 for "never"; Iceberg's microseconds hold them,
    pandas' nanoseconds do not (past 2262). The `make run` demo's tables hold such values, and
    sample_conforms failed on them with OutOfBoundsDatetime while base equalled the source."""
    spec, check = healthy
    with _rollback_to_now(spark, spec, "base"):
        spark.sql(
            f"INSERT INTO {_ident(spec, 'base')} (id, email, is_active, login_count, created_at, "
            "updated_at, _op, _kafka_partition, _kafka_offset) VALUES (999998, 'x@example.com', "
            "true, 1, TIMESTAMP '9999-12-31 23:59:59', TIMESTAMP_NTZ '2999-12-31 23:59:59.123', "
            "'c', 0, 0)"
        )
        result = check("sample_conforms")["sample_conforms"]
        assert result.passed, result.description
        assert result.metadata["rows_sampled"] > 1
        assert result.metadata["failures"] == 0


def test_duplicate_key_fails_and_blocks(healthy: tuple[TableSpec, Checker], spark: Any) -> None:
    spec, check = healthy
    base = _ident(spec, "base")
    key = spark.sql(f"SELECT min(id) AS k FROM {base}").collect()[0]["k"]
    with _rollback_to_now(spark, spec, "base"):
        spark.sql(f"INSERT INTO {base} SELECT * FROM {base} WHERE id = {key}")
        result = check("primary_key_unique")["primary_key_unique"]
        assert not result.passed
        assert result.severity == "ERROR"
        assert result.metadata["duplicated_keys"] == 1
        assert result.metadata["rows_with_duplicated_keys"] == 2
        assert result.metadata["sample"] == {str(key): 2}
    assert check("primary_key_unique")["primary_key_unique"].passed
    # Blocking: a failure stops what is downstream of base; the other checks only report.
    blocking = {
        s.name: s.blocking
        for c in check.defs.asset_checks or []
        if isinstance(c, dg.AssetChecksDefinition)
        for s in c.check_specs
        if s.asset_key == asset_key("base", spec.name)
    }
    assert blocking.pop("primary_key_unique")
    assert blocking
    assert not any(blocking.values())


def test_drifted_schema_fails(healthy: tuple[TableSpec, Checker], spark: Any) -> None:
    spec, check = healthy
    base = _ident(spec, "base")
    spark.sql(f"ALTER TABLE {base} ADD COLUMN surprise STRING")
    spark.sql(f"ALTER TABLE {base} DROP COLUMN country")
    try:
        result = check("schema_drift")["schema_drift"]
        assert not result.passed
        assert result.severity == "ERROR"
        assert result.metadata["iceberg_differences"] == {
            "base": [
                "column country (string) is missing",
                "column surprise (string) is not in the spec",
            ]
        }
    finally:
        spark.sql(f"ALTER TABLE {base} DROP COLUMN surprise")
        spark.sql(f"ALTER TABLE {base} ADD COLUMN country STRING")
    assert check("schema_drift")["schema_drift"].passed


def test_null_in_ledger_row_image_fails(healthy: tuple[TableSpec, Checker], spark: Any) -> None:
    spec, check = healthy
    ledger = _ident(spec, "cdc")
    newest = spark.sql(f"SELECT dt, hr FROM {ledger} ORDER BY dt DESC, hr DESC LIMIT 1").collect()[
        0
    ]
    with _rollback_to_now(spark, spec, "cdc"):
        spark.sql(
            f"INSERT INTO {ledger} (id, is_active, login_count, created_at, _op, "
            "_kafka_partition, _kafka_offset, _kafka_ts, _processed_at, dt, hr) VALUES "
            "(424242, true, 0, current_timestamp(), 'c', 0, 999999, current_timestamp(), "
            f"current_timestamp(), '{newest['dt']}', {newest['hr']})"
        )
        result = check("ledger_null_counts")["ledger_null_counts"]
        assert not result.passed
        assert result.severity == "ERROR"
        assert result.metadata["null_counts"]["email"] == 1
        assert result.metadata["partitions"][0] == f"{newest['dt']}-{newest['hr']:02d}"
    assert check("ledger_null_counts")["ledger_null_counts"].passed


def _bad(n: int) -> list[KafkaRecord]:
    return [KafkaRecord(key=b'{"id": %d}' % i, value=b"{not json") for i in range(n)]


def test_dead_letters_warn_and_a_lost_dead_letter_breaks_accounting(
    healthy: tuple[TableSpec, Checker],
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
) -> None:
    spec, check = healthy
    produce(_bad(4), spec.source.topic, kafka.resolved_bootstrap(), partitions_by_key=False)
    result = ingest(spark, iceberg, kafka, spec)
    assert result.dead == 4
    rate = check("dead_letter_rate", "offsets_accounted")
    warned = rate["dead_letter_rate"]
    assert not warned.passed
    assert warned.severity == "WARN"
    assert warned.metadata["dead_letters"] == 4
    assert warned.metadata["dead_letter_rate"] == pytest.approx(
        4 / warned.metadata["records_read"], abs=1e-6
    )
    assert rate["offsets_accounted"].passed
    with _rollback_to_now(spark, spec, "dlt"):
        spark.sql(
            f"DELETE FROM {_ident(spec, 'dlt')} WHERE offset = (SELECT max(offset) FROM "
            f"{_ident(spec, 'dlt')})"
        )
        broken = check("offsets_accounted")["offsets_accounted"]
        assert not broken.passed
        assert broken.severity == "ERROR"
        assert broken.metadata["dead_letter_rows_in_range"] == 3
        assert broken.metadata["failed_rules"] == [
            "dead-letter rows in range = dead count less redriven"
        ]
    # within a spec's tolerance the same rate passes
    tolerant = spec.model_copy(
        update={"checks": spec.checks.model_copy(update={"max_dead_letter_rate": 0.5})}
    )
    assert Checker(tolerant, check.settings, check.resources)("dead_letter_rate")[
        "dead_letter_rate"
    ].passed


def _produce_at(records: list[KafkaRecord], topic: str, bootstrap: str, ts_ms: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for r in records:
        producer.produce(topic, value=r.value, key=r.key, timestamp=ts_ms)
    assert producer.flush(30) == 0


def test_stale_watermark_fails_until_the_upsert_runs(
    healthy: tuple[TableSpec, Checker],
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
) -> None:
    spec, check = healthy
    three_hours_ago = int(time.time() * 1000) - 3 * 3600 * 1000
    late = [r for r in workload(spec, random.Random(12), keys=5, events=8) if r.value]
    _produce_at(late, spec.source.topic, kafka.resolved_bootstrap(), three_hours_ago)
    ingested = ingest(spark, iceberg, kafka, spec)
    assert ingested.ledger > 0
    result = check("watermark_lag")["watermark_lag"]
    assert not result.passed
    assert result.severity == "ERROR"
    assert result.metadata["pending_ledger_rows"] == ingested.ledger
    assert result.metadata["oldest_pending_wait_s"] == pytest.approx(3 * 3600, abs=300)
    assert "SLA 60 min" in result.description
    upsert(spark, iceberg, spec)
    after = check("watermark_lag")["watermark_lag"]
    assert after.passed
    assert after.metadata["pending_ledger_rows"] == 0


def test_unread_records_near_retention_fail(
    healthy: tuple[TableSpec, Checker], kafka: KafkaResource
) -> None:
    spec, check = healthy
    # a topic of its own: its retention is shortened, and nothing ingests it
    other = isolated(spec, kafka=kafka)
    produce(
        workload(other, random.Random(13), keys=5, events=6),
        other.source.topic,
        kafka.resolved_bootstrap(),
    )
    checker = Checker(other, check.settings, check.resources)
    relaxed = checker("kafka_lag_retention")["kafka_lag_retention"]
    assert relaxed.passed
    assert relaxed.metadata["ledger_lag_records"] == 6
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        other.source.topic,
        incremental_configs=[
            ConfigEntry(
                "retention.ms", str(2 * 3600 * 1000), incremental_operation=AlterConfigOpType.SET
            )
        ],
    )
    admin = kafka.admin()  # the client must outlive its future
    admin.incremental_alter_configs([resource])[resource].result(30)
    result = checker("kafka_lag_retention")["kafka_lag_retention"]
    assert not result.passed
    assert result.severity == "ERROR"
    assert result.metadata["ledger_lag_records"] == 6
    assert result.metadata["retention_ms"] == 2 * 3600 * 1000
    assert 1.9 < result.metadata["retention_headroom_h"] <= 2.0


def test_source_row_count_and_source_columns(
    healthy: tuple[TableSpec, Checker], spark: Any, tmp_path: Path
) -> None:
    spec, check = healthy
    base_rows = spark.sql(f"SELECT count(*) AS n FROM {_ident(spec, 'base')}").collect()[0]["n"]
    db = tmp_path / "source.db"
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT, display_name TEXT, "
            "country TEXT, is_active INTEGER, login_count INTEGER, created_ms INTEGER, "
            "updated_at TEXT)"
        )
        conn.executemany("INSERT INTO users (id) VALUES (?)", [(i,) for i in range(base_rows)])
    settings = replace(
        check.settings,
        source_urls={source_url_variable(spec.source.database): f"jdbc:sqlite:{db}"},
    )
    with_source = Checker(spec, settings, check.resources)
    same = with_source("source_row_count", "schema_drift")
    assert same["source_row_count"].passed
    assert same["source_row_count"].metadata["source_rows"] == base_rows
    assert same["schema_drift"].passed
    assert same["schema_drift"].metadata["source_compared"]
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO users (id) VALUES (-1)")
        conn.execute("ALTER TABLE users ADD COLUMN nickname TEXT")
    moved = with_source("source_row_count", "schema_drift")
    count = moved["source_row_count"]
    assert not count.passed
    assert count.severity == "WARN"
    assert count.metadata["difference"] == -1
    drift = moved["schema_drift"]
    assert not drift.passed
    assert drift.severity == "WARN"
    assert drift.metadata["source_differences"] == [
        "column nickname is in the source, not in spec v1"
    ]
