"""`cdc-assets specs export` (issue 59): spec versions an evolution stored in the catalog go back
into the team's git checkout on a branch of their own, as one commit naming each change and the
source position it came from, ready for `specs diff --git`."""

from __future__ import annotations

import subprocess
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cdc_assets.cli import console, main
from cdc_assets.pipeline.evolution.spec_store import record_spec
from cdc_assets.pipeline.shared.meta_tables import record_history
from cdc_assets.resources import IcebergCatalogResource
from cdc_assets.schema.changes import AddColumn
from cdc_assets.schema.evolution import EvolutionPlan, apply_plan
from cdc_assets.schema.history import HistoryEntry
from cdc_assets.settings import Settings
from cdc_assets.spec.load import load_spec
from cdc_assets.spec.models import ColumnSpec
from cdc_assets.spec.versions import write_spec
from cdc_assets_tests.integration.test_upsert import example_spec

DDL = "ALTER TABLE users ADD COLUMN tier VARCHAR(16)"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, check=True
    ).stdout


def test_stored_versions_become_a_reviewable_commit(
    it_settings: Settings,
    iceberg: IcebergCatalogResource,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    repo = tmp_path / "repo"
    (repo / "table_specs").mkdir(parents=True)
    users = example_spec(it_settings, "users")
    v1 = users.model_copy(
        update={"sink": users.sink.model_copy(update={"namespace": f"it_x{uuid.uuid4().hex[:8]}"})}
    )
    write_spec(v1, repo / "table_specs" / "users.yaml")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "v1")

    monkeypatch.setenv("CDC_ASSETS_HOME", str(it_settings.home))
    assert main(["specs", "export", "--to", str(repo)]) == 0  # nothing stored yet
    assert git(repo, "branch", "--show-current").strip() == "main"

    # An evolution elsewhere stored v2 and its decision in the catalog.
    tier = ColumnSpec(id=9, name="tier", type="varchar(16)")
    plan = EvolutionPlan("users", 1, (AddColumn(tier, "updated_at"),))
    v2 = apply_plan(v1, plan)
    catalog = iceberg.load_catalog()
    record_spec(catalog, v2, tmp_path / "elsewhere")
    record_history(
        catalog,
        HistoryEntry(
            table="users",
            from_version=1,
            to_version=2,
            diff=plan.describe(),
            trigger="push",
            decision="applied",
            applied_at=datetime.now(UTC),
            source_ddl=DDL,
            kafka_offsets={0: 1234},
        ),
    )
    # local edits to the file are never overwritten
    path = repo / "table_specs" / "users.yaml"
    path.write_text("# edited by hand\n" + path.read_text())
    with console.capture() as refused:
        assert main(["specs", "export", "--to", str(repo)]) == 2
    assert "uncommitted changes to users.yaml" in refused.get()
    assert git(repo, "branch", "--show-current").strip() == "main"
    git(repo, "checkout", "--", "table_specs/users.yaml")

    assert main(["specs", "export", "--to", str(repo), "--branch", "evolved"]) == 0
    assert git(repo, "branch", "--show-current").strip() == "evolved"
    exported = load_spec(repo / "table_specs" / "users.yaml")
    assert exported.spec_version == 2
    assert exported.columns_by_name["tier"].type == "varchar(16)"
    message = git(repo, "log", "-1", "--format=%B")
    assert message.startswith("Spec versions from schema evolution: users v1 -> v2")
    assert "add column tier varchar(16)" in message
    assert DDL in message
    assert "ledger Kafka offsets when applied: 0:1234" in message
    assert git(repo, "diff", "--name-only", "main", "evolved").split() == ["table_specs/users.yaml"]
    # the branch reviews as supported with the project's own diff
    monkeypatch.chdir(repo)
    assert main(["specs", "diff", "--git", "main", "evolved"]) == 0
    # exported once: the checkout is up to date now
    assert main(["specs", "export", "--to", str(repo), "--no-commit"]) == 0
