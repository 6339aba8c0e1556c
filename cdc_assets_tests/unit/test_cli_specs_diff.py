"""`cdc-assets specs diff` (files, directories, git revisions) and `specs import-ddl`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from cdc_assets.cli import main
from cdc_assets.spec import load_spec, load_spec_text
from cdc_assets_tests.conftest import PROJECT_ROOT

ORDERS = (PROJECT_ROOT / "table_specs" / "orders.yaml").read_text(encoding="utf-8")


def next_version(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace("spec_version: 1", "spec_version: 2").replace(old, new)


WIDENED = next_version(
    ORDERS, 'type: "numeric(12,2)", nullable: false', 'type: "numeric(14,2)", nullable: false'
)
RESCALED = next_version(
    ORDERS, 'type: "numeric(12,2)", nullable: false', 'type: "numeric(12,3)", nullable: false'
)


def output(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    return " ".join((captured.out + captured.err).split())


def write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_supported_change_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, new = write(tmp_path / "a.yaml", ORDERS), write(tmp_path / "b.yaml", WIDENED)
    assert main(["specs", "diff", old, new]) == 0
    out = output(capsys)
    assert "orders: version 1 -> 2: supported" in out
    assert "widen column amount: decimal(12,2) -> decimal(14,2)" in out
    assert "1 spec(s) compared, all supported" in out


def test_rejected_change_exits_1_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = write(tmp_path / "a.yaml", ORDERS), write(tmp_path / "b.yaml", RESCALED)
    assert main(["specs", "diff", old, new]) == 1
    out = output(capsys)
    assert (
        "! column amount: decimal(12,2) -> decimal(12,3) changes the scale; "
        "history would be re-scaled" in out
    )
    assert "unsupported: orders" in out


def test_a_soft_drop_must_stay_in_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    removed = next_version(ORDERS, "  - {id: 11, name: note, type: text}\n", "")
    old, new = write(tmp_path / "a.yaml", ORDERS), write(tmp_path / "b.yaml", removed)
    assert main(["specs", "diff", old, new]) == 1
    assert "column note: is soft-dropped: keep it in the spec with `dropped: true`" in output(
        capsys
    )
    kept = next_version(ORDERS, "name: note, type: text}", "name: note, type: text, dropped: true}")
    write(tmp_path / "b.yaml", kept)
    assert main(["specs", "diff", old, new]) == 0
    assert "soft-drop column note" in output(capsys)


def test_a_rename_needs_the_audit_trail_or_the_former_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bare = next_version(
        ORDERS,
        "{id: 11, name: note, type: text}",
        "{id: 11, name: remark, type: text, sink: {name: note}}",
    )
    old, new = write(tmp_path / "a.yaml", ORDERS), write(tmp_path / "b.yaml", bare)
    assert main(["specs", "diff", old, new]) == 1
    assert "column note: renamed to remark (id 11) without proof" in output(capsys)
    # the reviewed version states it itself: the old name among the column's former names
    stated = next_version(
        ORDERS,
        "{id: 11, name: note, type: text}",
        "{id: 11, name: remark, type: text, sink: {name: note}, former_names: [note]}",
    )
    new = write(tmp_path / "c.yaml", stated)
    assert main(["specs", "diff", old, new]) == 0
    assert "rename column note -> remark (Iceberg column note kept)" in output(capsys)
    audit = write(tmp_path / "audit.sql", "ALTER TABLE public.orders RENAME COLUMN note TO remark;")
    assert main(["specs", "diff", old, new, "--audit", audit]) == 0
    assert "rename column note -> remark (Iceberg column note kept)" in output(capsys)


def test_invalid_new_version_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, new = write(tmp_path / "a.yaml", ORDERS), write(tmp_path / "b.yaml", "name: [")
    assert main(["specs", "diff", old, new]) == 1
    assert "the new version is invalid" in output(capsys)


def test_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["specs", "diff", write(tmp_path / "a.yaml", ORDERS)]) == 2
    assert "needs OLD NEW" in output(capsys)
    assert main(["specs", "diff", str(tmp_path / "a.yaml"), str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read" in output(capsys)


def test_directories(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = tmp_path / "old"
    shutil.copytree(PROJECT_ROOT / "table_specs", old)
    new = tmp_path / "new"
    shutil.copytree(old, new)
    write(new / "orders.yaml", WIDENED)
    (new / "users.yaml").unlink()
    assert main(["specs", "diff", str(old), str(new)]) == 0
    out = output(capsys)
    assert "order_items: no changes (version 1)" in out
    assert "orders: version 1 -> 2: supported" in out
    assert "users: spec removed" in out


def git(repo: Path, *args: str) -> None:
    ident = ["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", *ident, *args], cwd=repo, check=True, capture_output=True)


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_revisions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "specs-repo"
    shutil.copytree(PROJECT_ROOT / "table_specs", repo / "table_specs")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "v1")
    write(repo / "table_specs" / "orders.yaml", WIDENED)
    write(
        repo / "table_specs" / "audit_log.yaml",
        ORDERS.replace("name: orders", "name: audit_log")
        .replace("topic: shop.public.orders", "topic: shop.public.audit_log")
        .replace("  namespace: shop", "  namespace: audit"),
    )
    git(repo, "commit", "-q", "-am", "widen")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "new table")
    monkeypatch.chdir(repo)
    assert main(["specs", "diff", "--git", "HEAD~2", "HEAD"]) == 0
    out = output(capsys)
    assert "audit_log: new table, onboarded at version 1" in out
    assert "widen column amount" in out
    write(repo / "table_specs" / "orders.yaml", RESCALED)
    git(repo, "commit", "-q", "-am", "rescale")
    assert main(["specs", "diff", "--git", "HEAD~3", "HEAD", "--dir", "table_specs"]) == 1
    assert "changes the scale" in output(capsys)
    assert main(["specs", "diff", "--git", "nope", "HEAD"]) == 2
    assert "git ls-tree" in output(capsys)


MYSQL_DDL = """CREATE TABLE `users` (
  `id` bigint NOT NULL AUTO_INCREMENT,
  `email` varchar(255) NOT NULL,
  `display_name` varchar(100) DEFAULT NULL,
  PRIMARY KEY (`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='Registered users';
"""


def test_import_ddl_then_evolve(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ddl = write(tmp_path / "users.sql", MYSQL_DDL)
    out = tmp_path / "specs" / "users.yaml"
    out.parent.mkdir()
    args = ["specs", "import-ddl", ddl, "--connector", "mysql", "--database", "app"]
    args += ["--topic", "app.app.users", "--namespace", "app", "--sensitive", "email"]
    assert main([*args, "--out", str(out)]) == 0
    v1 = load_spec(out)
    assert [(c.id, c.name, c.sensitive) for c in v1.columns] == [
        (1, "id", False),
        (2, "email", True),
        (3, "display_name", False),
    ]
    assert v1.description == "Registered users"
    assert v1.base.buckets == 16  # no size known: the spec's default
    capsys.readouterr()
    # --buckets names the count of a new spec; an existing spec keeps its own.
    sized = tmp_path / "users.yaml"
    assert main([*args, "--buckets", "2", "--out", str(sized)]) == 0
    assert load_spec(sized).base.buckets == 2
    assert main(["specs", "import-ddl", ddl, "--spec", str(out), "--buckets", "4"]) == 2
    assert "an existing table keeps its bucket count" in output(capsys)
    # Printed to stdout without --out: a loadable spec.
    assert main(args) == 0
    assert load_spec_text(capsys.readouterr().out, "stdout") == v1

    changed = MYSQL_DDL.replace("`display_name`", "`nick`").replace(
        "  PRIMARY KEY", "  `age` int DEFAULT NULL,\n  PRIMARY KEY"
    )
    ddl2 = write(tmp_path / "users_v2.sql", changed)
    evolve = ["specs", "import-ddl", ddl2, "--spec", str(out)]
    assert main(evolve) == 1
    assert "column display_name: disappears while nick, age are new" in output(capsys)
    audit = write(
        tmp_path / "audit.sql", "ALTER TABLE users CHANGE COLUMN display_name nick varchar(100);"
    )
    v2_path = tmp_path / "specs" / "users_v2.yaml"
    assert main([*evolve, "--audit", audit, "--out", str(v2_path)]) == 0
    assert "rename column display_name -> nick" in output(capsys)
    v2 = load_spec_text(v2_path.read_text(), "v2")
    assert v2.spec_version == 2
    assert [(c.id, c.name, c.sink_name) for c in v2.columns] == [
        (1, "id", "id"),
        (2, "email", "email"),
        (3, "nick", "display_name"),
        (4, "age", "age"),
    ]
    # The written version passes the spec-change check, given the same audit trail.
    assert main(["specs", "diff", str(out), str(v2_path), "--audit", audit]) == 0


def test_import_ddl_needs_the_onboarding_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ddl = write(tmp_path / "users.sql", MYSQL_DDL)
    assert main(["specs", "import-ddl", ddl, "--connector", "mysql"]) == 2
    assert "needs --database, --topic, --namespace" in output(capsys)


def test_import_ddl_protects_and_drops_columns_of_a_new_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ddl = write(tmp_path / "users.sql", MYSQL_DDL)
    out = tmp_path / "users.yaml"
    args = ["specs", "import-ddl", ddl, "--connector", "mysql", "--database", "app"]
    args += ["--topic", "app.app.users", "--namespace", "app"]
    protect = ["--protect", "email=hash", "--drop-fields", "display_name"]
    assert main([*args, *protect, "--out", str(out)]) == 0
    spec = load_spec(out)
    assert [(c.name, c.sensitive, c.protect) for c in spec.columns] == [
        ("id", False, None),
        ("email", True, "hash"),
    ]
    assert spec.pipeline.sensitive
    assert spec.pipeline.drop_fields == ["display_name"]
    capsys.readouterr()
    assert main([*args, "--protect", "email"]) == 2
    assert "give COLUMN=PROTECTION" in output(capsys)
    assert main([*args, "--protect", "id=hash"]) == 2
    assert "part of the key" in output(capsys)
    assert main(["specs", "import-ddl", ddl, "--spec", str(out), "--protect", "email=hash"]) == 2
    assert "are for a new spec" in output(capsys)
