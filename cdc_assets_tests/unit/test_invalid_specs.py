"""Invalid table specs fail at load with one message naming file, field and what is valid."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdc_assets.errors import SpecError
from cdc_assets.spec import load_spec, load_spec_text, load_specs

VALID: dict[str, Any] = {
    "spec_version": 1,
    "name": "accounts",
    "source": {
        "connector": "mysql",
        "database": "app",
        "table": "accounts",
        "topic": "app.accounts",
    },
    "columns": [
        {"id": 1, "name": "id", "type": "bigint", "nullable": False},
        {"id": 2, "name": "balance", "type": "decimal(12,2)"},
        {"id": 3, "name": "opened_ms", "type": "bigint"},
    ],
    "primary_key": ["id"],
    "sink": {"namespace": "app"},
}


def mutated(change: Callable[[dict[str, Any]], None]) -> str:
    data = copy.deepcopy(VALID)
    change(data)
    return yaml.safe_dump(data, sort_keys=False)


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = data
        for p in parents:
            node = node[int(p)] if p.isdigit() else node[p]
        if last.isdigit():
            node[int(last)] = value
        else:
            node[last] = value

    return change


def _drop(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda data: data.pop(key)


CASES = [
    (
        "unknown connector",
        _set("source.connector", "oracle"),
        "source.connector: Input should be 'mysql', 'mariadb', 'postgresql' or 'tidb' "
        "(got 'oracle')",
    ),
    (
        "unknown top-level key",
        _set("colums", []),
        "colums: unknown field; valid fields here: base, checks, columns, consistency, "
        "description, evolution, freshness, history, name, owners, pipeline, primary_key, "
        "schedule, sink, source, spec_version, tags",
    ),
    (
        "unknown column key",
        _set("columns.1.nulable", True),
        "columns[1].nulable: unknown field; valid fields here: backfill_default, comment, "
        "default, dropped, former_names, id, name, nullable, protect, protect_paths, sensitive, "
        "sink, source_attnum, type",
    ),
    (
        "missing topic",
        lambda d: d["source"].pop("topic"),
        "source.topic: required field is missing (or give source.shards)",
    ),
    ("missing primary key", _drop("primary_key"), "primary_key: required field is missing"),
    (
        "duplicate column id",
        _set("columns.2.id", 2),
        "columns[2].id: id 2 is already used by column 'balance'",
    ),
    (
        "duplicate column name",
        _set("columns.2.name", "balance"),
        "columns[2].name: duplicate column name 'balance'",
    ),
    (
        "key not a column",
        _set("primary_key", ["account_id"]),
        "primary_key[0]: 'account_id' is not a column; columns: id, balance, opened_ms",
    ),
    (
        "float key",
        lambda d: (
            d["columns"].append({"id": 4, "name": "score", "type": "double", "nullable": False}),
            d.update(primary_key=["id", "score"]),
        ),
        "primary_key[1]: key column 'score' has floating-point type 'double'; float keys do not "
        "compare exactly, use an integer, decimal or string key",
    ),
    (
        "nullable key",
        _set("columns.0.nullable", True),
        "primary_key[0]: key column 'id' must be nullable: false",
    ),
    (
        "unsupported source type",
        _set("columns.1.type", "geometry"),
        "columns[1].type: unsupported source type 'geometry' for mysql (parsed as GEOMETRY); "
        "supported: integers, decimals, floats, booleans, character and binary types, json, "
        "uuid, enum, set, date, time, datetime and timestamp types, and arrays",
    ),
    (
        "narrowing type override",
        _set("columns.1.sink", {"type": "decimal(10,2)"}),
        "columns[1].sink.type: 'decimal(12,2)' maps to decimal(12,2) and cannot be stored as "
        "decimal(10,2); valid: decimal(12,2), a widening of it, or string",
    ),
    (
        "unknown sink type",
        _set("columns.1.sink", {"type": "money"}),
        "columns[1].sink.type: unknown sink type 'money'; valid: boolean, int, long, float, "
        "double, date, timestamp, timestamptz, string, binary, decimal(p,s), list<t>, "
        "struct<name:t,...>, map<string,t>",
    ),
    (
        "unknown transform",
        _set("columns.2.sink", {"transform": "epoch_to_time"}),
        "columns[2].sink.transform: Input should be 'epoch_seconds_to_timestamp', "
        "'epoch_millis_to_timestamp', 'epoch_micros_to_timestamp' or 'epoch_days_to_date' "
        "(got 'epoch_to_time')",
    ),
    (
        "transform on a non-integer column",
        _set("columns.1.sink", {"transform": "epoch_millis_to_timestamp"}),
        "columns[1].sink.transform: epoch_millis_to_timestamp needs an integer source column, "
        "not 'decimal(12,2)'",
    ),
    (
        "sensitive column in a non-sensitive pipeline",
        _set("columns.1.sensitive", True),
        "columns[1].sensitive: column 'balance' is sensitive but pipeline.sensitive is false; "
        "mark the pipeline sensitive or do not ingest this column",
    ),
    (
        "zero buckets",
        _set("base", {"buckets": 0}),
        "base.buckets: Input should be greater than or equal to 1 (got 0)",
    ),
    (
        "bad cron",
        _set("schedule", {"cron": "every 5 minutes"}),
        "schedule.cron: 'every 5 minutes' is not a 5-field cron expression like '*/15 * * * *'",
    ),
    (
        "column id not positive",
        _set("columns.0.id", 0),
        "columns[0].id: Input should be greater than or equal to 1 (got 0)",
    ),
    (
        "bad owner",
        _set("owners", ["data platform"]),
        "owners[0]: 'data platform' is neither an email nor 'team:<name>'",
    ),
    (
        "upper-case table name",
        _set("name", "Accounts"),
        "name: String should match pattern '^[a-z_][a-z0-9_]*$' (got 'Accounts')",
    ),
    (
        "sink name starting with underscore",
        _set("columns.2.sink", {"name": "_op"}),
        "columns[2].sink.name: sink name '_op' is a duplicate or starts with '_' (reserved)",
    ),
    (
        "bucket column outside the key",
        _set("base", {"bucket_column": "balance"}),
        "base.bucket_column: 'balance' must be one of primary_key ['id']",
    ),
    (
        "no columns",
        _set("columns", []),
        "columns: List should have at least 1 item after validation, not 0 (got [])",
    ),
]


@pytest.mark.parametrize(("change", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_invalid_spec_names_file_field_and_valid_values(
    change: Callable[[dict[str, Any]], None], expected: str
) -> None:
    with pytest.raises(SpecError) as err:
        load_spec_text(mutated(change), "specs/accounts.yaml")
    assert str(err.value) == f"specs/accounts.yaml: {expected}"


def test_valid_base_spec_loads() -> None:
    spec = load_spec_text(mutated(lambda d: None), "specs/accounts.yaml")
    assert spec.name == "accounts"


def test_duplicate_yaml_key_is_rejected() -> None:
    text = mutated(lambda d: None) + "name: again\n"
    with pytest.raises(SpecError, match=r"^specs/a.yaml: not valid YAML: .*duplicate key 'name'"):
        load_spec_text(text, "specs/a.yaml")


def test_not_a_mapping() -> None:
    with pytest.raises(SpecError) as err:
        load_spec_text("- just\n- a list\n", "specs/a.yaml")
    assert str(err.value) == "specs/a.yaml: a table spec must be a YAML mapping, got list"


def test_name_must_match_file(tmp_path: Path) -> None:
    path = tmp_path / "wallets.yaml"
    path.write_text(mutated(lambda d: None))
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert str(err.value) == f"{path}: name: 'accounts' must match the file name 'wallets.yaml'"


def test_two_specs_on_one_topic(tmp_path: Path) -> None:
    (tmp_path / "accounts.yaml").write_text(mutated(lambda d: None))
    (tmp_path / "wallets.yaml").write_text(
        mutated(lambda d: (d.update(name="wallets"), d["sink"].update(table="wallets")))
    )
    with pytest.raises(SpecError) as err:
        load_specs(tmp_path)
    assert str(err.value) == (
        f"{tmp_path}: source.topic 'app.accounts' is used by both 'accounts' and 'wallets'; "
        "each topic feeds one table"
    )


def test_several_problems_are_reported_together() -> None:
    text = mutated(lambda d: (d["source"].update(connector="db2"), d.pop("sink")))
    with pytest.raises(SpecError) as err:
        load_spec_text(text, "a.yaml")
    assert str(err.value) == (
        "a.yaml: source.connector: Input should be 'mysql', 'mariadb', 'postgresql' or 'tidb' "
        "(got 'db2'); sink: required field is missing"
    )
