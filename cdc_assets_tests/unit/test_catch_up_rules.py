"""The pure rules of the catch-up after a run that raced an evolution
(pipeline.evolution.catch_up): which
columns a row decoded under an older spec may hold wrong, and the hold point that forces the race
in tests."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from cdc_assets.pipeline.shared.failpoint import HOLD_ENV, hold
from cdc_assets.schema.recover import changed_columns, dead_letter_reasons, value_columns
from cdc_assets.spec import load_specs
from cdc_assets.spec.models import ColumnSpec, TableSpec
from cdc_assets_tests.conftest import PROJECT_ROOT


def _users() -> TableSpec:
    return next(s for s in load_specs(PROJECT_ROOT / "table_specs") if s.name == "users")


def _next(spec: TableSpec, columns: list[ColumnSpec]) -> TableSpec:
    return spec.model_copy(update={"columns": columns, "spec_version": spec.spec_version + 1})


def test_nothing_changed_means_nothing_to_recover() -> None:
    users = _users()
    assert changed_columns(users, _next(users, list(users.columns))) == []


def test_added_and_retyped_columns_are_recovered_dropped_ones_not() -> None:
    users = _users()
    columns = []
    for c in users.columns:
        if c.name == "login_count":
            c = c.model_copy(update={"type": "bigint"})
        if c.name == "country":
            c = c.model_copy(update={"dropped": True})
        if c.name == "display_name":
            c = c.model_copy(update={"type": "varchar(200)"})  # longer: same Iceberg type
        columns.append(c)
    columns.append(ColumnSpec(id=9, name="phone", type="varchar(32)"))
    assert changed_columns(users, _next(users, columns)) == ["display_name", "login_count", "phone"]


def test_renamed_sink_is_recovered_under_its_new_name() -> None:
    users = _users()
    columns = [
        c.model_copy(update={"sink": c.sink.model_copy(update={"name": "last_change"})})
        if c.name == "updated_at"
        else c
        for c in users.columns
    ]
    # Same id, type and transform: the value a v1 row holds is right; nothing to recover.
    assert changed_columns(users, _next(users, columns)) == []


def test_a_column_renamed_at_the_source_is_recovered() -> None:
    # v1 looked the value up under the old name: rows decoded since hold null (issue 61)
    users = _users()
    columns = [
        c.model_copy(
            update={"name": "email_address", "sink": c.sink.model_copy(update={"name": "email"})}
        )
        if c.name == "email"
        else c
        for c in users.columns
    ]
    assert changed_columns(users, _next(users, columns)) == ["email"]


def test_dead_letters_of_renamed_and_dropped_not_null_columns_are_picked() -> None:
    users = _users()
    columns = []
    for c in users.columns:
        if c.name == "email":  # NOT NULL, renamed
            c = c.model_copy(
                update={
                    "name": "email_address",
                    "sink": c.sink.model_copy(update={"name": "email"}),
                }
            )
        if c.name == "login_count":  # NOT NULL, soft-dropped
            c = c.model_copy(update={"dropped": True, "nullable": True})
        if c.name == "is_active":  # NOT NULL, hard-dropped
            continue
        columns.append(c)
    new = _next(users, columns)
    assert dead_letter_reasons(users, new, ["email"]) == [
        "column 'email_address':",
        "column 'email'",
        "column 'login_count' is null but declared not nullable",
        "column 'is_active' is null but declared not nullable",
    ]
    # without the older version only the column's own refusals
    assert dead_letter_reasons(None, new, ["email"]) == ["column 'email_address':"]


def test_value_columns_leave_out_keys_and_dropped_columns() -> None:
    users = _users()
    names = value_columns(users)
    assert "id" not in names
    assert "created_at" in names  # sink names
    assert len(names) == len(users.columns) - 1


def test_hold_waits_for_its_release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(HOLD_ENV, f"here={tmp_path}")
    hold("elsewhere")  # another point: returns at once
    done = threading.Event()
    worker = threading.Thread(target=lambda: (hold("here"), done.set()))
    worker.start()
    deadline = time.monotonic() + 10
    while not (tmp_path / "here.held").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.3)
    assert not done.is_set()
    (tmp_path / "here.release").touch()
    worker.join(10)
    assert done.is_set()
