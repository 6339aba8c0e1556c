"""A sharded spec in the Dagster graph: one set of assets for the table, and the schema_changes
sensor watching every shard's schema-change topic (a change on either shard evolves the table,
once per tick). Kafka is replaced by the records themselves; the integration test runs it on
real Debezium."""

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
from cdc_assets.spec.models import ColumnSpec, TableSpec
from cdc_assets.spec.schema_change import parse_schema_change
from cdc_assets.spec.versions import write_spec
from cdc_assets_dev.demo.events import DebeziumEventFactory
from cdc_assets_tests.unit.test_shards import sharded

DDL = "ALTER TABLE users ADD COLUMN phone VARCHAR(32)"


def _alter_on(view: TableSpec) -> SeenChange:
    phone = ColumnSpec(id=3, name="phone", type="varchar(32)")
    altered = view.model_copy(update={"columns": [*view.columns, phone]})
    server = view.source.server_name
    record = DebeziumEventFactory(altered, server_name=server).schema_change(DDL)
    (change,) = parse_schema_change(record.value)
    return SeenChange(server, 0, 7, change)


@pytest.mark.parametrize("altered", [["eu-1"], ["us-1"], ["eu-1", "us-1"]])
def test_a_change_on_any_shard_evolves_the_table_once(
    altered: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = sharded()
    write_spec(spec, tmp_path / "users.yaml")
    settings = load_settings(
        {"CDC_ASSETS_HOME": str(tmp_path / "home"), "CDC_ASSETS_SPECS": str(tmp_path)}
    )
    views = {v.source.server_name: v for v in spec.shard_specs()}
    watched: list[str] = []

    def read(kafka: Any, topic: str, start: dict[int, int]) -> tuple[list[SeenChange], Any]:
        watched.append(topic)
        seen = [_alter_on(views[topic])] if topic in altered else []
        return seen, {0: 8 if seen else 0}

    monkeypatch.setattr(sensor_module, "read_schema_changes", read)
    defs = build_defs(settings=settings)
    keys = {k for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {asset_key(layer, "users") for layer in ("raw", "cdc", "bucketed", "base")} <= keys
    sensor = defs.get_sensor_def("schema_changes")
    context = dg.build_sensor_context(
        instance=dg.DagsterInstance.ephemeral(),
        resources={"kafka": KafkaResource(bootstrap_servers="127.0.0.1:9", home=str(tmp_path))},
    )
    result = sensor(context)
    assert isinstance(result, dg.SensorResult)
    assert sorted(watched) == ["eu-1", "us-1"]
    (request,) = result.run_requests or []
    assert request.tags["cdc/table"] == "users"
    assert request.asset_selection == [asset_key("schema", "users")]


def test_an_unsafe_change_on_a_shard_is_refused_naming_its_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = sharded()
    write_spec(spec, tmp_path / "users.yaml")
    settings = load_settings(
        {"CDC_ASSETS_HOME": str(tmp_path / "home"), "CDC_ASSETS_SPECS": str(tmp_path)}
    )
    # The embedded catalog's SQLite file; a refused change never starts Spark.
    settings.local_catalog_file.parent.mkdir(parents=True)
    us = next(v for v in spec.shard_specs() if v.source.server_name == "us-1")
    # id bigint -> varchar on shard us-1: a change of the key's type category, refused.
    narrowed = us.model_copy(
        update={
            "columns": [
                c.model_copy(update={"type": "varchar(20)"}) if c.name == "id" else c
                for c in us.columns
            ]
        }
    )
    ddl = "ALTER TABLE users MODIFY id VARCHAR(20) NOT NULL"
    record = DebeziumEventFactory(narrowed, server_name="us-1").schema_change(ddl)
    (change,) = parse_schema_change(record.value)

    def read(kafka: Any, topic: str, start: dict[int, int]) -> tuple[list[SeenChange], Any]:
        seen = [SeenChange("us-1", 0, 3, change)] if topic == "us-1" else []
        return seen, {0: 4 if seen else 0}

    monkeypatch.setattr(sensor_module, "read_schema_changes", read)
    defs = build_defs(settings=settings)
    instance = dg.DagsterInstance.ephemeral()
    context = dg.build_sensor_context(
        instance=instance,
        resources={"kafka": KafkaResource(bootstrap_servers="127.0.0.1:9", home=str(tmp_path))},
    )
    result = defs.get_sensor_def("schema_changes")(context)
    assert isinstance(result, dg.SensorResult)
    (request,) = result.run_requests or []
    assert request.tags["cdc/server"] == "us-1"
    run = defs.resolve_job_def("evolve_schemas").execute_in_process(
        instance=instance,
        run_config=request.run_config,
        asset_selection=list(request.asset_selection or []),
        raise_on_error=False,
    )
    assert not run.success
    failure = next(e for e in run.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE)
    assert "the change seen on server us-1:" in str(failure.event_specific_data)
