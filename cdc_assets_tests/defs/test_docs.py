"""The docs site: its reference pages are what the code renders now, it builds with MkDocs in
strict mode (a broken link or anchor fails), and the README's links point at files that exist."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from cdc_assets_tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.defs


def _generator() -> ModuleType:
    path = PROJECT_ROOT / "scripts" / "generate_docs.py"
    spec = importlib.util.spec_from_file_location("generate_docs", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_reference_pages_are_what_the_code_renders(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("CDC_ASSETS_") and n != "CDC_ASSETS_HOME"]:
        monkeypatch.delenv(name)
    stale = _generator().stale_pages()
    assert stale == [], f"stale: {stale}; run `python scripts/generate_docs.py`"


def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").exists()


def test_readme_links_point_at_existing_pages() -> None:
    readme = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert links
    missing = [link for link in links if not (PROJECT_ROOT / link).exists()]
    assert missing == []


def test_readme_stays_short() -> None:
    assert len((PROJECT_ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 200


def _documented_commands() -> list[str]:
    """Every `cdc-assets` command line in the README's and the docs' shell blocks, without
    placeholders (``[...]`` options, ``<...>`` values), comments and environment prefixes."""
    found = []
    for page in [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").glob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for block in re.findall(r"```(?:bash|sh)\n(.*?)```", text, re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = re.sub(r"\s+#.*$", "", line).split("&&")[0].strip()
                if "bin/cdc-assets " not in line or re.search(r"\[|<", line):
                    continue
                found.append(line.split("bin/cdc-assets ", 1)[1])
    return found


def test_the_documented_commands_parse() -> None:
    """Each documented command line names a real command with real options (parsed, not run)."""
    import shlex

    from cdc_assets.cli import build_parser

    commands = _documented_commands()
    assert len(commands) > 15
    failures = {}
    for command in commands:
        try:
            build_parser().parse_args(shlex.split(command))
        except SystemExit:
            failures[command] = "does not parse"
    assert failures == {}
