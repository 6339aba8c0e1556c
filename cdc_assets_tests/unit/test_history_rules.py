"""History (SCD2): the plain-Python replay's rules, the SQL it is compared with, the layout."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlglot

from cdc_assets.jobs.sync import sync_selection
from cdc_assets.quality.history_replay import replay_history
from cdc_assets.schema.layers import all_layouts, history_layout
from cdc_assets.spec import load_specs
from cdc_assets.spec.models import HistorySpec, TableSpec
from cdc_assets.sql.history import (
    render_as_of,
    render_changes,
    render_history_merge,
    render_prior,
    render_versions,
)
from cdc_assets_tests.conftest import PROJECT_ROOT

SPECS = {s.name: s for s in load_specs(PROJECT_ROOT / "table_specs")}
T0 = datetime(2026, 1, 1, tzinfo=UTC)
COLUMNS = ["id", "name"]
KEYS = [("id", "id")]


def change(op: str, pos: int, offset: int, *, id: int | None = 1, **values: Any) -> dict[str, Any]:
    return {
        "id": id,
        "name": values.get("name"),
        "_op": op,
        "_source_ts": T0 + timedelta(seconds=pos),
        "_seq_major": 1,
        "_seq_minor": pos,
        "_seq_row": 0,
        "_kafka_partition": 0,
        "_kafka_offset": offset,
        "_unavailable": values.get("unavailable"),
        "_before_json": values.get("before"),
    }


def replay(rows: list[dict[str, Any]], **kwargs: Any) -> dict[Any, list[dict[str, Any]]]:
    return replay_history(rows, data_columns=COLUMNS, key_fields=KEYS, **kwargs)


def summary(versions: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (v["_op"], v["_seq_minor"], v["name"], v["_closed_by"], v["_is_current"]) for v in versions
    ]


def test_versions_are_closed_by_the_next_change_whatever_the_arrival_order() -> None:
    rows = [
        change("c", 1, 0, name="a"),
        change("u", 2, 1, name="b"),
        change("u", 2, 5, name="b"),  # the same change delivered again
        change("d", 4, 2, name="b"),
        change("c", 6, 3, name="d"),
        change("u", 3, 4, name="c"),  # late: it belongs before the delete
    ]
    expected = [
        ("c", 1, "a", "u", False),
        ("u", 2, "b", "u", False),
        ("u", 3, "c", "d", False),
        ("d", 4, "b", "c", False),
        ("c", 6, "d", None, True),
    ]
    assert summary(replay(rows)[(1,)]) == expected
    assert summary(replay(list(reversed(rows)))[(1,)]) == expected
    versions = replay(rows)[(1,)]
    assert versions[0]["_valid_to"] == versions[1]["_valid_from"] == T0 + timedelta(seconds=2)
    assert [v["_is_deleted"] for v in versions] == [False, False, False, True, False]
    # the first delivery of the duplicated change is kept
    assert versions[1]["_kafka_offset"] == 1


def test_a_truncate_closes_every_key_that_existed_before_it() -> None:
    rows = [
        change("c", 1, 0, name="a"),
        change("c", 2, 1, id=2, name="x"),
        {**change("t", 3, 2, id=None), "id": None},
        change("c", 5, 3, id=3, name="after"),
    ]
    history = replay(rows)
    assert summary(history[(1,)]) == [("c", 1, "a", "t", False), ("t", 3, None, None, True)]
    assert history[(2,)][-1]["_is_deleted"]
    # a key first seen after the truncate has no truncate version
    assert summary(history[(3,)]) == [("c", 5, "after", None, True)]


def test_an_update_moving_its_key_deletes_the_old_one() -> None:
    rows = [
        change("c", 1, 0, name="a"),
        change("u", 2, 1, id=5, name="a", before='{"id":1,"name":"a"}'),
    ]
    history = replay(rows)
    assert summary(history[(1,)]) == [("c", 1, "a", "d", False), ("d", 2, None, None, True)]
    assert summary(history[(5,)]) == [("u", 2, "a", None, True)]
    assert (1,) not in {k for k, v in replay(rows, old_keys=False).items() if len(v) > 1}


def test_placeholders_carry_within_a_life_of_the_key() -> None:
    rows = [
        change("c", 1, 0, name="a"),
        change("u", 2, 1, name=None, unavailable="name"),
        change("d", 3, 2, name=None),
        change("c", 4, 3, name=None, unavailable="name"),  # a new life: nothing to carry
    ]
    versions = replay(rows, carry_unavailable=True)[(1,)]
    assert [v["name"] for v in versions] == ["a", "a", None, None]
    # the placeholder stays listed: a later recomputation carries again
    assert versions[1]["_unavailable"] == "name"
    assert [v["name"] for v in replay(rows)[(1,)]] == ["a", None, None, None]


def test_changes_without_a_position_are_each_a_version() -> None:
    rows = [
        {**change("c", 1, 0, name="a"), "_seq_major": None, "_seq_minor": None, "_seq_row": None},
        {**change("u", 1, 1, name="b"), "_seq_major": None, "_seq_minor": None, "_seq_row": None},
    ]
    assert [v["name"] for v in replay(rows)[(1,)]] == ["a", "b"]


def with_history(spec: TableSpec) -> TableSpec:
    return spec.model_copy(update={"history": HistorySpec(mode="scd2")})


@pytest.mark.parametrize("name", sorted(SPECS))
def test_history_sql_parses_for_every_example(name: str) -> None:
    spec = with_history(SPECS[name])
    for view in spec.shard_specs():
        statements = [
            render_changes(view, "ledger"),
            render_prior(view, "history", "touched"),
            render_versions(view, ["changes", "prior"], "truncates", carry_unavailable=True),
            render_history_merge(view, "lake.app.h", "versions"),
            render_as_of(view, "lake.app.h", at="TIMESTAMP '2026-01-01 00:00:00'"),
            render_as_of(view, "lake.app.h", position=(1, 2, 3)),
        ]
        for sql in statements:
            sqlglot.parse_one(sql, read="spark")


def test_history_layout_only_when_the_spec_asks() -> None:
    users = SPECS["users"]
    assert "history" not in all_layouts(users)
    layout = all_layouts(with_history(users))["history"]
    assert layout == history_layout(with_history(users))
    assert layout.name == "users_history"
    names = layout.column_names
    assert names[: len(users.columns)] == [c.sink_name for c in users.columns]
    assert {"_valid_from", "_valid_to", "_closed_by", "_is_current", "_is_deleted"} <= set(names)
    assert layout.partition_by == all_layouts(users)["base"].partition_by


def test_as_of_needs_one_point() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        render_as_of(SPECS["users"], "h")


def test_micro_batches_select_history_only_where_kept() -> None:
    keys = [k.to_user_string() for k in sync_selection(["a", "b"], frozenset({"b"}))]
    assert "history/b_history" in keys
    assert "history/a_history" not in keys


def test_the_check_warns_on_a_history_never_built_and_fails_on_differences() -> None:
    from cdc_assets.quality.rules import HistoryComparison, history_verdict

    assert history_verdict(HistoryComparison(10, 30, 0)).passed
    unbuilt = history_verdict(HistoryComparison(0, 0, 0, built=False))
    assert (unbuilt.passed, unbuilt.severity) == (False, "WARN")
    wrong = history_verdict(HistoryComparison(10, 30, 2, ("key (1,): ...",), open_keys=1))
    assert (wrong.passed, wrong.severity) == (False, "ERROR")
    assert "2 of 10" in wrong.summary
