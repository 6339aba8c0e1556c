"""The core stays pure: spec parsing, type and schema rules, SQL rendering and the checks' verdicts
import no engine (Dagster, Spark, pyiceberg, Kafka clients) and nothing of the shell (resources,
pipeline, Dagster wiring), so they are tested fast and reused by every rendering. Read from the
source text, not by importing, so an import inside a function counts too."""

from __future__ import annotations

import ast

import pytest

from cdc_assets_tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.unit

CORE = ("spec", "schema", "sql", "quality")
ENGINES = ("dagster", "dagster_pyspark", "pyspark", "pyiceberg", "confluent_kafka", "py4j")
SHELL = ("resources", "pipeline", "assets", "jobs", "checks", "sensors", "cli", "demo")


def _imports(path: str) -> list[str]:
    tree = ast.parse((PROJECT_ROOT / path).read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
    return found


def _private_names_from_dagster(path: str) -> list[str]:
    """``from dagster import _core``: a private package imported by name."""
    tree = ast.parse((PROJECT_ROOT / path).read_text(encoding="utf-8"))
    return [
        f"dagster.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "dagster"
        for alias in node.names
        if alias.name.startswith("_")
    ]


def _core_files() -> list[str]:
    files = []
    for package in CORE:
        files += [
            str(p.relative_to(PROJECT_ROOT))
            for p in sorted((PROJECT_ROOT / "cdc_assets" / package).rglob("*.py"))
        ]
    return files


def test_there_is_a_core_to_check() -> None:
    assert len(_core_files()) > 20


@pytest.mark.parametrize("path", _core_files())
def test_core_module_imports_no_engine_and_no_shell(path: str) -> None:
    bad = [
        name
        for name in _imports(path)
        if name.split(".")[0] in ENGINES
        or (name.startswith("cdc_assets.") and name.split(".")[1] in SHELL)
    ]
    assert bad == [], f"{path} imports {bad}"


def test_no_module_imports_dagster_private_packages() -> None:
    """Dagster's ``dagster._...`` packages change without notice between releases: the product,
    the dev package, the benchmarks, the scripts and the tests use its public API only."""
    private = {}
    for top in ("cdc_assets", "cdc_assets_tests", "benchmarks", "dev", "scripts"):
        for path in sorted((PROJECT_ROOT / top).rglob("*.py")):
            relative = str(path.relative_to(PROJECT_ROOT))
            names = [n for n in _imports(relative) if n.startswith("dagster._")]
            names += _private_names_from_dagster(relative)
            if names:
                private[relative] = names
    assert private == {}
