"""`cdc-assets specs import-schema-record`: a spec from Debezium's schema-change topic (issue
27), read from the real broker: the table's newest record becomes version 1 of its spec, which
watches that topic, and the record of a later shape makes a spec of that shape."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic

from cdc_assets.cli import main
from cdc_assets.resources import KafkaResource
from cdc_assets.settings import Settings
from cdc_assets.spec.load import load_spec
from cdc_assets.spec.models import ColumnSpec
from cdc_assets_dev.demo.events import DebeziumEventFactory, produce
from cdc_assets_tests.integration.test_upsert import example_spec


def test_a_spec_from_the_newest_schema_change_record(
    it_settings: Settings, kafka: KafkaResource, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    users = example_spec(it_settings, "users")
    topic = f"it.schema.{uuid.uuid4().hex[:8]}"
    admin = kafka.admin()  # kept alive until the future resolves
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    later = users.model_copy(
        update={"columns": [*users.columns, ColumnSpec(id=9, name="phone", type="varchar(32)")]}
    )
    bootstrap = kafka.resolved_bootstrap()
    produce([DebeziumEventFactory(users).schema_change("CREATE TABLE users ...")], topic, bootstrap)
    produce(
        [DebeziumEventFactory(later).schema_change("ALTER TABLE users ADD phone ...")],
        topic,
        bootstrap,
    )
    monkeypatch.setenv("CDC_ASSETS_HOME", str(it_settings.home))
    out = tmp_path / "specs" / "users.yaml"
    out.parent.mkdir()
    args = ["specs", "import-schema-record", "--schema-topic", topic, "--database", "app"]
    args += ["--table", "users", "--topic", users.source.topic, "--namespace", "app"]
    assert main([*args, "--sensitive", "email", "--out", str(out)]) == 0
    spec = load_spec(out)
    assert spec.spec_version == 1
    assert spec.source.schema_change_topic == topic
    assert (spec.source.database, spec.source.table) == ("app", "users")
    assert [c.name for c in spec.columns] == [c.name for c in later.columns]
    assert spec.columns_by_name["phone"].type == "varchar(32)"
    assert spec.primary_key == users.primary_key
    assert spec.columns_by_name["email"].sensitive
    missing = ["specs", "import-schema-record", "--schema-topic", topic, "--database", "app"]
    assert main([*missing, "--table", "nope"]) == 2  # a clear error, no spec written
