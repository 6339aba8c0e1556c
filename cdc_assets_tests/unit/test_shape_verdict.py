"""One decision for "has the source changed shape?", shared by push (`schema_changes` sensor) and
pull (`check_schema_drift`): the same CREATE TABLE gets the same answer from both."""

from __future__ import annotations

import pytest

from cdc_assets.schema.shape import leading_server, shape_verdict
from cdc_assets.spec import load_spec_text

pytestmark = pytest.mark.unit

SPEC_YAML = """
spec_version: {version}
name: users
source: {{connector: mariadb, database: app, table: users, topic: a.app.users}}
columns:
  - {{id: 1, name: id, type: bigint, nullable: false}}
  - {{id: 2, name: email, type: varchar(255)}}
  - {{id: 3, name: score, type: bigint}}
{more}primary_key: [id]
sink: {{namespace: app}}
"""
SPEC = load_spec_text(SPEC_YAML.format(version=1, more=""), "users.yaml")
COLUMNS = "id BIGINT NOT NULL, email VARCHAR(255)"
SAME = f"CREATE TABLE users ({COLUMNS}, score BIGINT, PRIMARY KEY (id))"
ADDED = f"CREATE TABLE users ({COLUMNS}, score BIGINT, phone VARCHAR(32), PRIMARY KEY (id))"
NARROWED = f"CREATE TABLE users ({COLUMNS}, score INT, PRIMARY KEY (id))"
# A key's type cannot change (another type of a non-key column becomes a new column).
REFUSED = (
    "CREATE TABLE users (id VARCHAR(20) NOT NULL, email VARCHAR(255), score BIGINT, "
    "PRIMARY KEY (id))"
)


def test_the_spec_own_shape_is_no_change() -> None:
    verdict = shape_verdict(SPEC, SAME)
    assert not verdict.changed
    assert verdict.plan is not None
    assert not verdict.plan.changes


def test_an_added_column_is_a_change() -> None:
    verdict = shape_verdict(SPEC, ADDED, ["ALTER TABLE users ADD COLUMN phone VARCHAR(32)"])
    assert verdict.changed
    assert "phone" in verdict.describe()


def test_an_unsupported_change_starts_a_run_that_reports_it_unless_types_only() -> None:
    verdict = shape_verdict(SPEC, REFUSED)
    assert verdict.changed
    assert verdict.plan is not None
    assert not verdict.plan.supported
    assert not verdict.applicable  # nothing else to apply beside the refusal
    assert not shape_verdict(SPEC, REFUSED, types_only=True).changed


def test_a_narrower_source_type_is_behind_not_a_change() -> None:
    # A shard or server whose ALTER has not run yet, or events older than the spec: the
    # spec's bigint holds every int (issue 53: a lagging shard's record was refused whole).
    for types_only in (False, True):
        verdict = shape_verdict(SPEC, NARROWED, types_only=types_only)
        assert not verdict.changed, verdict.describe()


def test_a_safe_addition_is_applicable_beside_a_refused_column() -> None:
    both = (
        "CREATE TABLE users (id VARCHAR(20) NOT NULL, email VARCHAR(255), score BIGINT, "
        "phone VARCHAR(32), PRIMARY KEY (id))"
    )
    verdict = shape_verdict(SPEC, both)
    assert verdict.changed
    assert verdict.applicable
    assert verdict.plan is not None
    assert [str(c) for c in verdict.plan.applicable.changes] == [
        "add column phone varchar(32) (id 4, after score)"
    ]
    assert [r.column for r in verdict.plan.rejections] == ["id"]


def test_an_unreadable_shape_is_reported_by_a_run_unless_types_only() -> None:
    verdict = shape_verdict(SPEC, "CREATE TABLE users (")
    assert verdict.changed
    assert verdict.plan is None
    assert verdict.describe().startswith("cannot read the source's shape")
    assert not shape_verdict(SPEC, "CREATE TABLE users (", types_only=True).changed


# The spec after `phone` was added on one shard; the other shards have not run the ALTER yet.
WITH_PHONE = load_spec_text(
    SPEC_YAML.format(version=2, more="  - {id: 4, name: phone, type: varchar(32)}\n"), "users.yaml"
)
NO_SCORE = f"CREATE TABLE users ({COLUMNS}, phone VARCHAR(32), PRIMARY KEY (id))"


def test_pull_reports_a_refused_shape_first_then_a_change_of_any_shard() -> None:
    assert leading_server(SPEC, {"a": SAME, "b": ADDED}) == "b"
    assert leading_server(SPEC, {"a": ADDED, "b": REFUSED, "c": SAME}) == "b"
    assert leading_server(SPEC, {"a": SAME, "b": SAME}) == "a"
    assert leading_server(SPEC, {"only": REFUSED}) == "only"
    assert leading_server(SPEC, {"a": NARROWED, "b": ADDED}) == "b"


def test_a_shard_that_only_lacks_columns_another_has_is_behind_not_a_drop() -> None:
    # Shard a has not run the ALTER yet: no drift, the evolved shard b is reported.
    assert leading_server(WITH_PHONE, {"a": SAME, "b": ADDED}) == "b"
    assert not shape_verdict(WITH_PHONE, ADDED).changed
    # Every shard lacks phone: that is a drop, reported.
    assert leading_server(WITH_PHONE, {"a": SAME, "b": SAME}) == "a"
    assert leading_server(WITH_PHONE, {"a": SAME}) == "a"
    # Each lacks a different column: no shape to evolve towards.
    assert leading_server(WITH_PHONE, {"a": SAME, "b": NO_SCORE}) is None
