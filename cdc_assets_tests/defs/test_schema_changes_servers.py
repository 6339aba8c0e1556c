"""The schema_changes sensor with two servers that both hold ``inventory.users`` (the bug of
issue 20): a change on either server starts the evolution of that server's spec only. Kafka is
replaced by the records themselves here; the integration test runs it on real Debezium."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pytest

import cdc_assets.sensors.schema_changes as sensor_module
from cdc_assets.assets.keys import asset_key
from cdc_assets.definitions import build_defs
from cdc_assets.pipeline.evolution.schema_topic import SeenChange
from cdc_assets.resources import KafkaResource
from cdc_assets.settings import load_settings
from cdc_assets.spec.models import ColumnSpec
from cdc_assets.spec.schema_change import parse_schema_change
from cdc_assets.spec.versions import write_spec
from cdc_assets_dev.demo.events import DebeziumEventFactory
from cdc_assets_tests.unit.test_source_identity import users_of

DDL = "ALTER TABLE users ADD COLUMN phone VARCHAR(32)"


def _alter_on(server: str) -> SeenChange:
    spec = users_of(server)
    phone = ColumnSpec(id=3, name="phone", type="varchar(32)")
    altered = spec.model_copy(update={"columns": [*spec.columns, phone]})
    record = DebeziumEventFactory(altered, server_name=server).schema_change(DDL)
    (change,) = parse_schema_change(record.value)
    return SeenChange(server, 0, 7, change)


@pytest.mark.parametrize("altered", ["a", "b"])
def test_a_change_on_one_server_evolves_that_server_spec_only(
    altered: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for spec in (users_of("a"), users_of("b")):
        write_spec(spec, tmp_path / f"{spec.name}.yaml")
    settings = load_settings(
        {"CDC_ASSETS_HOME": str(tmp_path / "home"), "CDC_ASSETS_SPECS": str(tmp_path)}
    )

    def read(kafka: Any, topic: str, start: dict[int, int]) -> tuple[list[SeenChange], Any]:
        seen = [_alter_on(altered)] if topic == altered else []
        return seen, {0: 8 if seen else 0}

    monkeypatch.setattr(sensor_module, "read_schema_changes", read)
    defs = build_defs(settings=settings)
    sensor = defs.get_sensor_def("schema_changes")
    context = dg.build_sensor_context(
        instance=dg.DagsterInstance.ephemeral(),
        resources={"kafka": KafkaResource(bootstrap_servers="127.0.0.1:9", home=str(tmp_path))},
    )
    result = sensor(context)
    assert isinstance(result, dg.SensorResult)
    (request,) = result.run_requests or []
    assert request.tags["cdc/table"] == f"{altered}_users"
    assert request.asset_selection == [asset_key("schema", f"{altered}_users")]
