"""A column whose values the source sends in another encoding after a change (datetime(3) ->
datetime(6): epoch millis -> micros) is re-decoded only in row images after the change's
source position: an older image read in the new encoding is another value (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_assets.schema.recover import (
    REENCODED_PROPERTY_PREFIX,
    reencoded_columns,
    reencoded_positions,
)
from cdc_assets.spec import load_spec
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.backfill import after_position, render_ledger_values

pytestmark = pytest.mark.unit

USERS = load_spec(Path(__file__).resolve().parents[2] / "table_specs" / "users.yaml")


def with_type(spec: TableSpec, column: str, type_: str, **source: object) -> TableSpec:
    data = spec.model_dump(mode="json", by_alias=True)
    for c in data["columns"]:
        if c["name"] == column:
            c["type"] = type_
    data["source"].update(source)
    return TableSpec.model_validate(data)


def test_a_precision_change_of_a_datetime_is_a_new_encoding() -> None:
    micros = with_type(USERS, "updated_at", "datetime(6)")
    assert reencoded_columns(USERS, micros) == ["updated_at"]
    longer = with_type(USERS, "display_name", "varchar(200)")
    assert reencoded_columns(USERS, longer) == []  # the same JSON string either way


def test_after_position_orders_by_binlog_gtid_or_lsn() -> None:
    assert after_position(USERS, {"file": "mysql-bin.000012", "pos": 4567}) == (
        "(l._seq_major > 12 OR (l._seq_major = 12 AND l._seq_minor > 4567))"
    )
    gtid = with_type(USERS, "updated_at", "datetime(3)", order="gtid", connector="mariadb")
    assert after_position(gtid, {"gtid": "0-1-88", "pos": 9}) == (
        "(l._seq_major > 88 OR (l._seq_major = 88 AND l._seq_minor > 9))"
    )
    assert after_position(USERS, {"ts_ms": 5}) is None  # nothing that places it


def test_older_images_keep_what_they_hold() -> None:
    sql = render_ledger_values(
        USERS,
        "lake.app.users_cdc",
        1,
        ["updated_at", "country"],
        reencoded=["updated_at"],
        after="(l._seq_major > 12)",
    )
    assert "(l._seq_major > 12) AS __after_change" in sql
    assert "CASE WHEN __after_change THEN" in sql
    assert sql.count("CASE WHEN __after_change THEN") == 1  # country decodes as before
    without = render_ledger_values(USERS, "lake.app.users_cdc", 1, ["updated_at"])
    assert "false AS __after_change" in without
    assert "CASE WHEN __after_change" not in without


def test_a_column_may_have_a_change_position_of_its_own() -> None:
    """The check reads each column's position from the ledger's properties."""
    props = {
        f"{REENCODED_PROPERTY_PREFIX}updated_at": '{"file": "mysql-bin.000012", "pos": 4}',
        f"{REENCODED_PROPERTY_PREFIX}broken": "not json",
        "write.format.default": "parquet",
    }
    positions = reencoded_positions(props)
    assert positions == {"updated_at": {"file": "mysql-bin.000012", "pos": 4}}
    own = {c: after_position(USERS, p) or "" for c, p in positions.items()}
    sql = render_ledger_values(
        USERS, "lake.app.users_cdc", 1, ["updated_at", "country"], reencoded=list(own),
        after_by_column=own,
    )  # fmt: skip
    assert f"{own['updated_at']} AS __after0" in sql or f"{own['updated_at']} AS __after1" in sql
    assert "CASE WHEN __after" in sql
    assert "CASE WHEN __after_change THEN" not in sql
    assert "false AS __after_change" in sql


def test_a_lower_precision_in_other_units_is_a_change_not_a_source_behind() -> None:
    from cdc_assets.schema.changes import ChangeSourceType
    from cdc_assets.schema.evolution import classify

    micros = with_type(USERS, "updated_at", "datetime(6)").model_copy(update={"spec_version": 2})
    millis = with_type(USERS, "updated_at", "datetime(3)").model_copy(update={"spec_version": 3})
    plan = classify(micros, millis, from_source=True)
    assert [type(c) for c in plan.changes] == [ChangeSourceType], plan.describe()
    assert reencoded_columns(micros, millis) == ["updated_at"]
    # an int where the spec has a bigint is the same number: a source behind, no change
    wide = with_type(USERS, "login_count", "bigint").model_copy(update={"spec_version": 2})
    narrow = with_type(USERS, "login_count", "int").model_copy(update={"spec_version": 3})
    assert not classify(wide, narrow, from_source=True).changes
    assert reencoded_columns(wide, narrow) == []
