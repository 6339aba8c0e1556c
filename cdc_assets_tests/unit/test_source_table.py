"""Dropped and renamed source tables from schema-change records (spec.source_table), with
records shaped as the MariaDB connector writes them (checked against a live connector: a
rename is an ALTER of the new name whose DDL names the old one; a DROP carries no table)."""

from __future__ import annotations

import json

import pytest

from cdc_assets.quality.rules import schema_drift_verdict
from cdc_assets.schema.evolution import FollowSourceRename, apply_plan, classify
from cdc_assets.spec.models import TableSpec
from cdc_assets.spec.schema_change import SchemaChange, parse_schema_change, shapes
from cdc_assets.spec.source_table import (
    SourceTable,
    followed,
    renamed_tables,
    source_table_state,
)

DB = "shop"


def change(kind: str, table: str, ddl: str, db: str = DB) -> SchemaChange:
    return SchemaChange(db, table, ddl, "", position={"file": "b.000001", "pos": 4}, kind=kind)


def record(kind: str, table: str, ddl: str) -> bytes:
    body = {"type": kind, "id": f'"{DB}"."{table}"'}
    if kind != "DROP":
        body["table"] = {"primaryKeyColumnNames": ["id"], "columns": [
            {"name": "id", "typeName": "BIGINT", "optional": False}]}  # fmt: skip
    return json.dumps(
        {
            "databaseName": DB,
            "ddl": ddl,
            "source": {"file": "b.1", "pos": 9},
            "tableChanges": [body],
        }
    ).encode()


@pytest.mark.parametrize(
    ("ddl", "pairs"),
    [
        ("RENAME TABLE people TO people_old", [((None, "people"), (None, "people_old"))]),
        (
            "rename table `shop`.`pe,ople` to `arch`.`x`, a TO b",
            [(("shop", "pe,ople"), ("arch", "x")), ((None, "a"), (None, "b"))],
        ),
        ("RENAME TABLE IF EXISTS a TO b WAIT 5", [((None, "a"), (None, "b"))]),
        ("ALTER TABLE people RENAME TO people2", [((None, "people"), (None, "people2"))]),
        ("ALTER TABLE `shop`.`people` RENAME AS p2", [(("shop", "people"), (None, "p2"))]),
        ("ALTER TABLE people ADD COLUMN z INT, RENAME TO x", [((None, "people"), (None, "x"))]),
        ("ALTER TABLE people RENAME COLUMN a TO b", []),
        ("ALTER TABLE people ADD COLUMN z INT", []),
        ("DROP TABLE people", []),
        ("not sql at all ((", []),
    ],
)
def test_renamed_tables(ddl: str, pairs: list[object]) -> None:
    assert renamed_tables(ddl) == pairs


def test_a_snapshot_drop_if_exists_then_create_is_present() -> None:
    state = source_table_state(
        [
            change("DROP", "people", "DROP TABLE IF EXISTS `shop`.`people`"),
            change("CREATE", "people", "CREATE TABLE `people` (id BIGINT)"),
        ],
        DB,
        "people",
    )
    assert state.present


def test_a_drop_marks_the_table_until_it_is_created_again() -> None:
    drop = change("DROP", "people", "DROP TABLE `shop`.`people`")
    state = source_table_state(
        [change("CREATE", "people", "CREATE TABLE people"), drop], DB, "people"
    )
    assert state.state == "dropped"
    assert state.change is drop
    sentence = state.describe(DB, "people")
    assert "shop.people was dropped" in sentence
    assert "b.000001:4" in sentence
    assert "nothing is deleted" in sentence
    again = source_table_state(
        [drop, change("CREATE", "People", "CREATE TABLE People")], DB, "people"
    )
    assert again.present


def test_a_rename_away_names_the_new_table_and_a_rename_back_clears_it() -> None:
    away = change("ALTER", "people_old", "RENAME TABLE people TO people_old")
    state = source_table_state([away], DB, "people")
    assert (state.state, state.renamed_to) == ("renamed", (DB, "people_old"))
    assert "renamed to shop.people_old" in state.describe(DB, "people")
    back = change("ALTER", "people", "RENAME TABLE people_old TO people")
    assert source_table_state([away, back], DB, "people").present


def test_renames_of_other_tables_or_databases_leave_it_present() -> None:
    others = [
        change("ALTER", "b", "RENAME TABLE a TO b"),
        change("ALTER", "people2", "RENAME TABLE other.people TO people2", db="other"),
        change("ALTER", "people", "ALTER TABLE people RENAME COLUMN a TO b"),
    ]
    assert source_table_state(others, DB, "people").present


def test_a_swap_leaves_a_table_under_the_name() -> None:
    ddl = "RENAME TABLE people TO tmp, people_new TO people"
    swapped = [change("ALTER", "tmp", ddl), change("ALTER", "people", ddl)]
    assert source_table_state(swapped, DB, "people").present
    assert source_table_state(swapped[:1], DB, "people").state == "renamed"


def test_drops_are_parsed_but_carry_no_shape() -> None:
    drop = parse_schema_change(record("DROP", "people", "DROP TABLE `shop`.`people`"))
    alter = parse_schema_change(record("ALTER", "people", "ALTER TABLE people ADD x INT"))
    assert [(c.kind, c.table, c.create_table) for c in drop] == [("DROP", "people", "")]
    assert alter[0].kind == "ALTER"
    assert "CREATE TABLE" in alter[0].create_table
    assert shapes([*drop, *alter]) == alter


def test_schema_drift_warns_on_a_drop_and_fails_on_a_rename() -> None:
    dropped = schema_drift_verdict({}, None, {"people": ("dropped", "source table was dropped")})
    assert (dropped.passed, dropped.severity) == (False, "WARN")
    assert dropped.metadata["source_table"] == {"people": "dropped"}
    renamed = schema_drift_verdict({}, None, {"people": ("renamed", "source table renamed")})
    assert (renamed.passed, renamed.severity) == (False, "ERROR")
    present = schema_drift_verdict({}, None, {"people": ("present", "exists")})
    assert present.passed


def test_a_schema_change_topic_is_read_once_then_only_what_was_added(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every table's check reads its server's schema-change topic: the process reads each record
    once (and the whole topic again after FULL_READ_S)."""
    from cdc_assets.pipeline.evolution import schema_topic

    topic = [change("CREATE", "people", "CREATE TABLE people"), change("DROP", "people", "DROP")]
    calls: list[dict[int, int]] = []

    def read(_kafka: object, name: str, start: dict[int, int]) -> tuple[list[object], dict]:
        calls.append(dict(start))
        at = start.get(0, 0)
        added = [schema_topic.SeenChange(name, 0, i, c) for i, c in enumerate(topic) if i >= at]
        return added, {0: len(topic)}

    class Kafka:
        def resolved_bootstrap(self) -> str:
            return "127.0.0.1:1"

    monkeypatch.setattr(schema_topic, "read_schema_changes", read)
    monkeypatch.setattr(schema_topic, "_read_topics", {})
    first = schema_topic.all_schema_changes(Kafka(), "srv")  # type: ignore[arg-type]
    topic.append(change("CREATE", "people", "CREATE TABLE people (id INT)"))
    second = schema_topic.all_schema_changes(Kafka(), "srv")  # type: ignore[arg-type]
    assert [c.offset for c in first] == [0, 1]
    assert [c.offset for c in second] == [0, 1, 2]
    assert calls == [{}, {0: 2}]
    monkeypatch.setattr(schema_topic, "FULL_READ_S", -1.0)
    assert len(schema_topic.all_schema_changes(Kafka(), "srv")) == 3  # type: ignore[arg-type]
    assert calls[-1] == {}


def spec_of(policy: str = "evolve", topic: str = f"srv.{DB}.people") -> TableSpec:
    return TableSpec.model_validate(
        {
            "spec_version": 3,
            "name": "people",
            "source": {"connector": "mariadb", "database": DB, "table": "people", "topic": topic},
            "columns": [{"id": 1, "name": "id", "type": "bigint", "nullable": False}],
            "primary_key": ["id"],
            "evolution": {"policy": policy},
            "sink": {"namespace": "lake_people"},
        }
    )


RENAMED = SourceTable("renamed", change("ALTER", "humans", "RENAME TABLE people TO humans"),
                      (DB, "humans"))  # fmt: skip


def test_a_renamed_table_is_followed_through_the_evolution_s_own_plan() -> None:
    spec = spec_of()
    proposed = followed(spec, RENAMED)
    assert isinstance(proposed, TableSpec)
    assert (proposed.source.table, proposed.source.topic) == ("humans", f"srv.{DB}.humans")
    assert proposed.source.server_name == "srv"  # the connector is the same
    assert [f.model_dump() for f in proposed.source.renamed_from] == [
        {"database": DB, "table": "people", "topic": f"srv.{DB}.people"}
    ]
    plan = classify(spec, proposed)
    assert plan.supported
    (change_,) = plan.changes
    assert isinstance(change_, FollowSourceRename)
    assert "renamed to shop.humans" in str(change_)
    assert apply_plan(spec, plan) == proposed.model_copy(update={"spec_version": 4})
    # renamed again, the chain keeps both former names, oldest first
    again = SourceTable("renamed", change("ALTER", "folk", "RENAME TABLE humans TO folk"),
                        (DB, "folk"))  # fmt: skip
    twice = followed(proposed, again)
    assert isinstance(twice, TableSpec)
    assert [f.table for f in twice.source.renamed_from] == ["people", "humans"]
    assert classify(proposed, twice).supported


@pytest.mark.parametrize(
    ("policy", "topic", "reason"),
    [
        ("freeze", f"srv.{DB}.people", "evolution.policy is freeze"),
        ("fail", f"srv.{DB}.people", "evolution.policy is fail"),
        ("evolve", "people-changes", "not Debezium's default name"),
    ],
)
def test_a_rename_is_not_followed_under_freeze_fail_or_a_routed_topic(
    policy: str, topic: str, reason: str
) -> None:
    refused = followed(spec_of(policy, topic), RENAMED)
    assert isinstance(refused, str)
    assert reason in refused


def test_pointing_a_spec_at_another_table_without_its_former_name_stays_refused() -> None:
    spec = spec_of()
    data = spec.model_dump(mode="json", by_alias=True)
    data["spec_version"] = 4
    data["source"].update(table="humans", topic=f"srv.{DB}.humans")
    plan = classify(spec, TableSpec.model_validate(data))
    assert not plan.supported
    assert "new onboarding" in plan.describe()
