"""A source is server + database (+ schema) + table: two servers may repeat a database and table
name (shards, regions, staging beside production) and every lookup must still tell them apart."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_assets.errors import SpecError
from cdc_assets.pipeline.evolution.schema_topic import matches
from cdc_assets.settings import Settings, load_settings, source_url_variable
from cdc_assets.spec import load_specs
from cdc_assets.spec.models import TableSpec
from cdc_assets.spec.schema_change import parse_schema_change
from cdc_assets.spec.versions import write_spec
from cdc_assets_dev.demo.events import DebeziumEventFactory

USERS = {
    "spec_version": 1,
    "name": "users",
    "source": {"connector": "mysql", "database": "inventory", "table": "users", "topic": "x"},
    "columns": [
        {"id": 1, "name": "id", "type": "bigint", "nullable": False},
        {"id": 2, "name": "email", "type": "varchar(255)"},
    ],
    "primary_key": ["id"],
    "sink": {"namespace": "inventory"},
}


def users_of(server: str, *, explicit: bool = False) -> TableSpec:
    """``<server>_users``: inventory.users on the server whose topic prefix is ``server``."""
    source = {**USERS["source"], "topic": f"{server}.inventory.users"}  # type: ignore[dict-item]
    if explicit:
        source["server"] = server
    sink = {"namespace": "inventory", "table": f"{server}_users"}
    return TableSpec.model_validate(
        {**USERS, "name": f"{server}_users", "source": source, "sink": sink}
    )


def test_the_server_defaults_to_the_topic_prefix_or_the_schema_change_topic() -> None:
    a, b = users_of("a"), users_of("b")
    assert (a.source.server_name, b.source.server_name) == ("a", "b")
    assert (a.source.schema_changes, b.source.schema_changes) == ("a", "b")
    assert a.source.identity != b.source.identity
    assert str(b.source.identity) == "b:inventory.users"
    routed = users_of("a").source.model_copy(update={"schema_change_topic": "mariadb"})
    assert routed.server_name == "mariadb"  # the local stack's routed topics
    named = users_of("a").source.model_copy(update={"server": "shard-7"})
    assert (named.server_name, named.schema_changes) == ("shard-7", "shard-7")


def test_a_schema_change_matches_only_the_spec_of_its_own_server() -> None:
    a, b = users_of("a"), users_of("b")
    ddl = "ALTER TABLE users ADD COLUMN phone VARCHAR(32)"
    (change,) = parse_schema_change(
        DebeziumEventFactory(b, server_name="b").schema_change(ddl).value
    )
    assert change.server == "b"
    assert matches(b, change, "b")
    assert not matches(a, change, "b")  # same database.table, other server
    assert not matches(b, change, "a")
    # A spec that names its server refuses a record naming another one on its topic.
    named_b = users_of("b", explicit=True)
    (other,) = parse_schema_change(
        DebeziumEventFactory(b, server_name="c").schema_change(ddl).value
    )
    assert matches(named_b, change, "b")
    assert not matches(named_b, other, "b")


def test_two_servers_with_one_table_name_load_side_by_side(tmp_path: Path) -> None:
    for spec in (users_of("a"), users_of("b")):
        write_spec(spec, tmp_path / f"{spec.name}.yaml")
    assert [s.name for s in load_specs(tmp_path)] == ["a_users", "b_users"]


def test_one_source_in_two_specs_is_refused_naming_both(tmp_path: Path) -> None:
    a = users_of("a")
    twin = a.model_copy(
        update={
            "name": "a_users_copy",
            "source": a.source.model_copy(update={"server": "a", "topic_": "a2.inventory.users"}),
            "sink": a.sink.model_copy(update={"table": "copy"}),
        }
    )
    write_spec(a, tmp_path / "a_users.yaml")
    write_spec(twin, tmp_path / "a_users_copy.yaml")
    with pytest.raises(SpecError, match=r"a:inventory\.users is the source of both 'a_users'"):
        load_specs(tmp_path)


def test_a_server_with_two_schema_change_topics_is_refused(tmp_path: Path) -> None:
    one = users_of("a", explicit=True)
    accounts = TableSpec.model_validate(
        {
            **USERS,
            "name": "accounts",
            "source": {
                **USERS["source"],  # type: ignore[dict-item]
                "server": "a",
                "table": "accounts",
                "topic": "a.inventory.accounts",
                "schema_change_topic": "elsewhere",
            },
        }
    )
    write_spec(one, tmp_path / "a_users.yaml")
    write_spec(accounts, tmp_path / "accounts.yaml")
    with pytest.raises(
        SpecError,
        match=r"source\.server 'a' has schema-change topic 'a' in 'a_users' but 'elsewhere'",
    ):
        load_specs(tmp_path)


def _settings(**urls: str) -> Settings:
    return load_settings({**urls, "CDC_ASSETS_HOME": "/nonexistent"})


def test_source_urls_are_looked_up_server_first() -> None:
    a, b = users_of("a"), users_of("b")
    settings = _settings(
        **{
            source_url_variable("inventory", "a"): "jdbc:mariadb://a",
            source_url_variable("inventory", "b"): "jdbc:mariadb://b",
            source_url_variable("inventory", "mysql"): "jdbc:mariadb://kind",
            source_url_variable("inventory"): "jdbc:mariadb://any",
        }
    )
    assert source_url_variable("inventory", "shard-7") == "CDC_ASSETS_SOURCE_URL_SHARD_7_INVENTORY"
    assert settings.source_url_of(a.source) == "jdbc:mariadb://a"
    assert settings.source_url_of(b.source) == "jdbc:mariadb://b"
    assert settings.source_url_of(users_of("c").source) == "jdbc:mariadb://kind"
    only_db = _settings(**{source_url_variable("inventory"): "jdbc:mariadb://any"})
    assert only_db.source_url_of(b.source) == "jdbc:mariadb://any"
