"""Sharded specs: one table from several servers. The rules of the spec, the per-shard views and
the tables each renders, the per-shard upsert state, and the SQL that must stay within a shard."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from cdc_assets.errors import ShardedSpecError, SpecError
from cdc_assets.pipeline.shared.watermark import UpsertState, state_key
from cdc_assets.quality.rules import Verdict, per_shard_verdict
from cdc_assets.schema.layers import all_layouts, base_layout, ledger_layout, tombstones_layout
from cdc_assets.schema.position import Position
from cdc_assets.spec import load_specs
from cdc_assets.spec.load import load_spec_text
from cdc_assets.spec.models import TableSpec
from cdc_assets.spec.versions import write_spec
from cdc_assets.sql.upsert import render_base_merge
from cdc_assets_tests.unit.test_source_identity import USERS

SOURCE: dict[str, Any] = dict(USERS["source"])  # type: ignore[call-overload]
SHARDS = [
    {"server": "eu-1", "topic": "eu-1.inventory.users"},
    {"server": "us-1", "topic": "us-1.inventory.users", "name": "us"},
]


def sharded(**source: Any) -> TableSpec:
    base = {k: v for k, v in SOURCE.items() if k != "topic"}
    return TableSpec.model_validate({**USERS, "source": {**base, "shards": SHARDS, **source}})


def test_a_view_per_shard_with_its_own_topic_server_and_ledger() -> None:
    spec = sharded()
    eu, us = spec.shard_specs()
    assert [v.shard.shard_name for v in (eu, us) if v.shard] == ["eu_1", "us"]
    assert (eu.source.topic, eu.source.server_name, eu.source.schema_changes) == (
        "eu-1.inventory.users",
        "eu-1",
        "eu-1",
    )
    assert str(us.source.identity) == "us-1:inventory.users"
    assert [ledger_layout(v).name for v in (eu, us)] == ["users_eu_1_cdc", "users_us_cdc"]
    assert spec.source.topics == ["eu-1.inventory.users", "us-1.inventory.users"]
    assert eu.source.shard_names == ("eu_1", "us")
    # The parent names no single topic or ledger: asking it for one is an error, not a guess.
    with pytest.raises(ShardedSpecError):
        _ = spec.source.topic
    with pytest.raises(ShardedSpecError):
        ledger_layout(spec)


def test_base_and_tombstones_are_shared_and_keyed_by_shard_first() -> None:
    spec = sharded()
    base = base_layout(spec)
    assert base.columns[0].name == "_shard"
    assert base.columns[0].required
    assert base.identifier_fields == ("_shard", "id")
    assert tombstones_layout(spec).identifier_fields == ("_shard", "id")
    assert spec.key_sink_names == ["_shard", "id"]
    layers = all_layouts(spec)
    assert sorted(layers) == [
        "base",
        "bucketed:eu_1",
        "bucketed:us",
        "cdc:eu_1",
        "cdc:us",
        "dead_letter:eu_1",
        "dead_letter:us",
        "tombstones",
    ]
    assert layers["cdc:us"].columns[0].name == "_shard"
    region = sharded(shard_column="region")
    assert base_layout(region).identifier_fields == ("region", "id")
    # One source: no shard column, as before.
    plain = TableSpec.model_validate(USERS)
    assert plain.shard_column is None
    assert base_layout(plain).identifier_fields == ("id",)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"topic": "x"}, "source.topic: a spec with source.shards names its servers and topics"),
        (
            {"shards": [SHARDS[0], {**SHARDS[1], "topic": SHARDS[0]["topic"]}]},
            "source.shards[1].topic: 'eu-1.inventory.users' is already shard 0's",
        ),
        (
            {"shards": [SHARDS[0], {**SHARDS[1], "server": "eu-1"}]},
            "source.shards[1].server: 'eu-1' is already shard 0's",
        ),
        (
            {"shards": [SHARDS[0], {**SHARDS[1], "name": "eu_1"}]},
            "source.shards[1].name: 'eu_1' is already shard 0's",
        ),
        ({"shard_column": "email"}, "source.shard_column: 'email' is also a column's sink name"),
    ],
)
def test_bad_shard_lists_are_refused_naming_the_field(source: dict[str, Any], message: str) -> None:
    base = {k: v for k, v in SOURCE.items() if k != "topic"}
    data = {**USERS, "source": {**base, "shards": SHARDS, **source}}
    with pytest.raises(SpecError) as err:
        load_spec_text(yaml.safe_dump(data), "s")
    assert message in str(err.value)


def test_a_shard_topic_used_by_another_spec_is_refused(tmp_path: Path) -> None:
    write_spec(sharded(), tmp_path / "users.yaml")
    other = TableSpec.model_validate(
        {
            **USERS,
            "name": "eu_users",
            "source": {**SOURCE, "topic": "eu-1.inventory.users"},
            "sink": {"namespace": "inventory", "table": "eu_users"},
        }
    )
    write_spec(other, tmp_path / "eu_users.yaml")
    with pytest.raises(SpecError, match=r"'eu-1\.inventory\.users' is used by both"):
        load_specs(tmp_path)


def test_a_sharded_spec_round_trips_through_its_file(tmp_path: Path) -> None:
    write_spec(sharded(), tmp_path / "users.yaml")
    (loaded,) = load_specs(tmp_path)
    assert loaded == sharded()
    assert "topic:" not in (tmp_path / "users.yaml").read_text().split("shards:")[0]


def test_each_shard_keeps_its_own_upsert_state_in_base() -> None:
    state = UpsertState(watermark={0: 7}, ledger_sequence=3, floor=Position(1, 2, 0), shard="us")
    props = state.properties()
    assert state_key("cdc.watermark", "us") in props
    assert "cdc.watermark" not in props
    assert UpsertState.from_properties(props, "us") == state
    assert UpsertState.from_properties(props, "eu_1").watermark == {}


def test_a_truncate_on_one_shard_deletes_that_shard_only() -> None:
    us = sharded().shard_specs()[1]
    sql = render_base_merge(us, "base", "bucketed", truncate_floor=Position(5, 0, 0))
    assert "t.`_shard` = s.`_shard` AND t.`id` = s.`id`" in sql
    assert "WHEN NOT MATCHED BY SOURCE AND t.`_shard` = 'us' AND" in sql


def test_a_check_over_shards_fails_when_one_shard_fails_and_names_it() -> None:
    ok = Verdict(True, "ERROR", "fine")
    bad = Verdict(False, "WARN", "lag 9 records")
    verdict = per_shard_verdict({"eu_1": ok, "us": bad})
    assert (verdict.passed, verdict.severity) == (False, "WARN")
    assert verdict.summary == "shard us: lag 9 records"
    assert verdict.metadata["failed_shards"] == ["us"]
    assert per_shard_verdict({"only": bad}) is bad


def test_consumers_see_the_shard_column_in_the_table_schema() -> None:
    from cdc_assets.schema.views import table_schema

    relation = table_schema(sharded(), pipeline_columns=False)
    assert [(c.name, c.nullable) for c in relation.columns] == [
        ("_shard", False),
        ("id", False),
        ("email", True),
    ]


def test_a_shard_may_name_its_own_gtid_domain() -> None:
    spec = sharded(
        connector="mariadb",
        order="gtid",
        gtid_domain=3,
        shards=[SHARDS[0], {**SHARDS[1], "gtid_domain": 7}],
    )
    assert [v.source.gtid_domain for v in spec.shard_specs()] == [3, 7]


def test_the_live_demo_s_sharded_spec_and_its_workload_shapes(tmp_path: Path) -> None:
    """The spec `cdc-assets run` adds: a view per shard server, the shard column leading the
    key; the shape after the demo's ALTER adds the column once; the spec file is written once
    (a rerun keeps its evolution)."""
    from cdc_assets_dev.demo import shards
    from cdc_assets_dev.demo.workload import WorkloadGenerator

    spec = shards.shard_spec()
    views = spec.shard_specs()
    assert [v.source.topic for v in views] == [
        f"{s}.{shards.DATABASE}.{shards.TABLE}" for s in shards.SHARD_SERVERS
    ]
    assert spec.key_sink_names[0] == spec.shard_column
    changed = shards.with_new_column(views[0])
    assert [c.name for c in changed.columns][-1] == shards.NEW_COLUMN[0]
    assert shards.with_new_column(changed) == changed
    assert changed.source.shard == views[0].source.shard
    # both shards' generators start at the same key: the same ids on both servers
    first = [
        WorkloadGenerator([v], seed=i, key_base=100).statements(5)[4].sql
        for i, v in enumerate(views)
    ]
    assert all("`crm`.`customers`" in sql for sql in first)
    shards.ensure_spec(tmp_path)
    evolved = shards.shard_spec().model_copy(update={"spec_version": 2})
    write_spec(evolved, tmp_path / f"{shards.TABLE}.yaml")
    shards.ensure_spec(tmp_path)
    assert load_specs(tmp_path)[0].spec_version == 2
