"""The schema_changes sensor reads a PostgreSQL topic's newest events only when the topic grew
since it last read them: a fleet's quiet tables cost one batched offsets request per tick, not
a Kafka consumer each. Kafka's offsets and the events' schema are stand-ins here; the
integration tests run the sensor on real Debezium."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

import cdc_assets.sensors.schema_changes as sensor_module
from cdc_assets.definitions import build_defs
from cdc_assets.resources import KafkaResource
from cdc_assets.settings import load_settings
from cdc_assets_tests.conftest import PROJECT_ROOT


def test_a_quiet_postgres_topic_is_not_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    shutil.copy(PROJECT_ROOT / "table_specs" / "orders.yaml", specs / "orders.yaml")
    settings = load_settings(
        {"CDC_ASSETS_HOME": str(tmp_path / "home"), "CDC_ASSETS_SPECS": str(specs)}
    )
    ends: dict[int, int] = {0: 5}
    reads: list[str] = []

    def latest_offsets(self: KafkaResource, topics: list[str]) -> dict[str, dict[int, int]]:
        return {t: dict(ends) for t in topics}

    def newest_row_schema(kafka: Any, spec: Any, tail: int = 20) -> None:
        reads.append(spec.source.topic)
        return None  # events without an embedded schema: nothing to evolve

    monkeypatch.setattr(KafkaResource, "latest_offsets", latest_offsets)
    monkeypatch.setattr(sensor_module, "newest_row_schema", newest_row_schema)
    monkeypatch.setattr(sensor_module, "row_schema_versions", lambda kafka, spec: None)
    sensor = build_defs(settings=settings).get_sensor_def("schema_changes")
    instance = dg.DagsterInstance.ephemeral()
    kafka = KafkaResource(bootstrap_servers="127.0.0.1:9", home=str(tmp_path))

    def tick(cursor: str | None) -> str:
        result = sensor(
            dg.build_sensor_context(instance=instance, resources={"kafka": kafka}, cursor=cursor)
        )
        assert isinstance(result, dg.SensorResult)
        assert not result.run_requests
        assert result.cursor is not None
        return result.cursor

    cursor = tick(None)
    assert len(reads) == 1  # the first tick reads every topic
    cursor = tick(cursor)
    assert len(reads) == 1  # nothing new on the topic: not read again
    ends[0] = 9
    cursor = tick(cursor)
    assert len(reads) == 2  # the topic grew: its newest events are read
    tick(cursor)
    assert len(reads) == 2
    tick(None)
    assert len(reads) == 3  # a lost cursor reads every topic again
