"""The repo's source DDL and Debezium connector configs agree with the example specs (pure)."""

from __future__ import annotations

import re

import pytest

from cdc_assets.errors import StackError
from cdc_assets.spec import load_specs
from cdc_assets.spec.ddl_import import plan_from_ddl
from cdc_assets.spec.models import TableSpec
from cdc_assets_dev.stack import connect, sources
from cdc_assets_tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.unit

SPECS = {s.name: s for s in load_specs(PROJECT_ROOT / "table_specs")}
VALUES = {
    "host": "127.0.0.1",
    "user": "cdc",
    "password": "secret",
    "bootstrap": "127.0.0.1:9092",
    "mariadb_port": "3306",
    "postgres_port": "5432",
}


@pytest.mark.parametrize("table", sources.EXAMPLE_TABLES, ids=lambda t: t.spec_name)
def test_example_ddl_is_the_spec(table: sources.ExampleTable) -> None:
    spec = SPECS[table.spec_name]
    _, plan = plan_from_ddl(spec, table.ddl())
    assert plan.supported, plan.describe()
    assert not plan.changes, plan.describe()
    assert table.database == spec.source.database
    server = "postgres" if spec.source.connector == "postgresql" else "mariadb"
    assert table.server == server


def test_a_changed_ddl_is_noticed() -> None:
    table = sources.EXAMPLE_TABLES[0]
    ddl = table.ddl().replace("VARCHAR(100)", "VARCHAR(200)")
    _, plan = plan_from_ddl(SPECS[table.spec_name], ddl)
    assert plan.changes


def _topics(config: dict[str, str], tables: list[str]) -> list[str]:
    """The topics of ``tables`` after the connector's RegexRouter, if it has one."""
    topics = [f"{config['topic.prefix']}.{t}" for t in tables]
    if config.get("transforms") == "route":
        regex = config["transforms.route.regex"]
        replacement = re.sub(r"\$(\d)", r"\\\1", config["transforms.route.replacement"])
        topics = [re.sub(f"^{regex}$", replacement, t) for t in topics]
    return topics


def _spec_topics(connectors: tuple[str, ...]) -> dict[str, TableSpec]:
    return {s.source.topic: s for s in SPECS.values() if s.source.connector in connectors}


def test_connectors_write_the_specs_topics() -> None:
    configs = {d["name"]: d["config"] for d in connect.connector_configs(VALUES)}
    maria, pg = configs["cdc-mariadb"], configs["cdc-postgres"]
    maria_tables = maria["table.include.list"].split(",")
    assert sorted(_topics(maria, maria_tables)) == sorted(_spec_topics(("mysql", "mariadb")))
    assert _topics(pg, pg["table.include.list"].split(",")) == list(_spec_topics(("postgresql",)))
    # The router leaves the schema-change, transaction and heartbeat topics alone.
    prefix = maria["topic.prefix"]
    for topic in (prefix, f"{prefix}.transaction", connect.heartbeat_topic(maria)):
        assert re.fullmatch(maria["transforms.route.regex"], topic) is None, topic


def test_connector_configs_carry_the_issue_settings() -> None:
    configs = {d["name"]: d["config"] for d in connect.connector_configs(VALUES)}
    for config in configs.values():
        assert config["provide.transaction.metadata"] == "true"
        assert int(config["heartbeat.interval.ms"]) > 0
        assert config["decimal.handling.mode"] == "precise"
        assert config["snapshot.mode"] == "initial"
        assert config["database.password"] == "secret"
        assert "{{" not in "".join(config.values())
    assert configs["cdc-mariadb"]["include.schema.changes"] == "true"
    assert configs["cdc-postgres"]["plugin.name"] == "pgoutput"
    assert configs["cdc-postgres"]["publication.name"] == sources.PUBLICATION
    # The connector settings that shape values agree with what the specs assume.
    for spec in SPECS.values():
        config = configs["cdc-postgres" if spec.source.connector == "postgresql" else "cdc-mariadb"]
        assert config["time.precision.mode"] == spec.source.time_precision_mode
        dbz = spec.source.debezium
        assert config["decimal.handling.mode"] == dbz.decimal_handling_mode
        assert config["binary.handling.mode"] == dbz.binary_handling_mode


def test_an_unknown_placeholder_is_an_error() -> None:
    with pytest.raises(StackError, match="unknown placeholder"):
        connect.connector_configs({k: v for k, v in VALUES.items() if k != "password"})
