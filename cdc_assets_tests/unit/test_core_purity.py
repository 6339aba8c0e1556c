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


def test_no_module_is_part_of_an_import_cycle() -> None:
    """No module of the product or the development package imports, through any chain of
    imports (those inside functions included), a module that imports it back. The import
    contracts check this per package; this checks every module of both distributions at once."""
    import grimp

    graph = grimp.build_graph("cdc_assets", "cdc_assets_dev")
    cycles = _strongly_connected(
        {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    )
    assert cycles == []


def _strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_strongly_connected_finds_a_cycle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _strongly_connected(edges) == [["a", "b", "c"]]
    assert _strongly_connected({"a": {"b"}, "b": set()}) == []
