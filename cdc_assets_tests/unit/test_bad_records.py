"""The bad-record corpus agrees with the oracle, and its valid edge cases decode as intended."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cdc_assets_tests.support.bad_records import Case, cases, users_spec
from cdc_assets_tests.support.oracle import Outcome, expected_outcome

KAFKA_TS = datetime(2026, 3, 4, 23, 59, 59, 999_000, tzinfo=UTC)
CASES = cases()
DATA_COLUMNS = [c.sink_name for c in users_spec().columns]


def outcome(case: Case, offset: int = 17) -> Outcome:
    return expected_outcome(users_spec(), 2, offset, KAFKA_TS, case.key, case.value)


def row_of(name: str) -> dict[str, object]:
    result = outcome(next(c for c in CASES if c.name == name))
    assert result.status == "ledger", result
    assert result.row is not None
    return result.row


def test_corpus_is_large_and_named_uniquely() -> None:
    assert len(CASES) >= 34
    assert len({c.name for c in CASES}) == len(CASES)
    assert {c.status for c in CASES} == {"ledger", "dead", "skip"}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_matches_oracle(case: Case) -> None:
    result = outcome(case)
    assert (result.status, result.stage, result.reason) == (case.status, case.stage, case.reason)
    assert (result.row is not None) == (case.status == "ledger")


def test_ledger_row_layout() -> None:
    row = row_of("snapshot_read")
    assert list(row)[: len(DATA_COLUMNS)] == DATA_COLUMNS
    assert row["id"] == 7
    assert row["created_at"] == datetime(2026, 1, 1, 0, 0, 0, 123_000, tzinfo=UTC)
    assert row["updated_at"] == datetime(2026, 1, 2, 3, 4, 5, 123_000)
    assert row["is_active"] is True
    assert row["_op"] == "r"
    assert row["_seq_major"] == 3
    assert row["_seq_row"] == 0
    assert isinstance(row["_seq_minor"], int)
    assert row["_kafka_partition"] == 2
    assert row["_kafka_offset"] == 17
    assert row["_kafka_ts"] == KAFKA_TS
    assert (row["dt"], row["hr"]) == ("2026-03-04", 23)
    assert row["_before_json"] is None
    assert row["_unavailable"] is None
    assert isinstance(row["_source_ts"], datetime)
    assert row["_source_ts"].tzinfo is not None


def test_toast_column_is_unavailable_not_null() -> None:
    row = row_of("toast_display_name")
    assert row["display_name"] is None
    assert row["_unavailable"] == "display_name"
    assert row["email"] == "ada@example.com"


def test_unicode_survives() -> None:
    row = row_of("unicode_strings")
    assert row["email"] == "zoë.łódź@例え.jp"
    assert row["display_name"] == "Zoë 日本語 👩‍💻 O'Brien"


def test_primary_key_change_keeps_both_images() -> None:
    row = row_of("update_changing_primary_key")
    assert row["id"] == 2
    assert isinstance(row["_before_json"], dict)
    assert row["_before_json"]["id"] == 1


def test_truncate_has_no_data() -> None:
    row = row_of("truncate")
    assert all(row[c] is None for c in DATA_COLUMNS)
    assert row["_op"] == "t"
    assert row["_row_json"] is None


def test_embedded_schema_and_field_order_do_not_matter() -> None:
    plain = row_of("embedded_schema")
    assert plain["id"] == 3
    assert plain["login_count"] == 3
    create = row_of("fields_in_different_order")
    assert create["id"] == 1
    assert create["country"] == "GB"


def test_extra_fields_and_absent_nullable_columns() -> None:
    extra = row_of("unknown_extra_field_in_after")
    assert "nickname" not in extra
    assert isinstance(extra["_row_json"], dict)
    assert extra["_row_json"]["nickname"] == "ada"
    assert row_of("nullable_column_missing_from_after")["display_name"] is None
    assert row_of("is_active_as_nonzero_tinyint")["is_active"] is True


def test_delete_reads_before_without_not_null_checks() -> None:
    row = row_of("delete_with_null_not_null_column")
    assert row["_op"] == "d"
    assert row["email"] is None
    assert row["id"] == 1
    assert row["_row_json"] == row["_before_json"]
