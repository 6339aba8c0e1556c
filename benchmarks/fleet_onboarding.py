"""Benchmark: onboarding a fleet of tables with `onboard_tables` against the way it was done before
(the baseline, in this script, on the same specs and the same stack).

For each N, generates N specs (``fleet_scale.generate_specs``: three shapes, one with a composite
key) twice, under two namespaces, and onboards each copy into a package index of its own:

- ``baseline``: one table after another, as `onboard_tables` did up to 3b4549c: per spec, every
  layer's ``CREATE NAMESPACE IF NOT EXISTS``, ``tableExists``, ``CREATE TABLE`` and its
  ``ALTER``s, then the schema package built by a ``python -m build --wheel --no-isolation``
  process and the whole index rewritten (every package's page);
- ``onboard_tables``: the real job through the in-process driver: each namespace created once,
  the packages built by ``build``'s API up to four at once while Spark creates the tables, and a
  publish rewriting only the root page and its package's page.

Both must leave the same tables (the catalog's listing of each namespace) and the same packages
(the index's wheels), or the script fails. Prints a table (seconds per table and the ratio to the
baseline), writes ``benchmarks/results/fleet_onboarding.json`` and ``.png``.

    .venv/bin/python benchmarks/fleet_onboarding.py [--tables 10,100]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import ROOT, code_version, make_home
from fleet_scale import generate_specs

RESULTS = ROOT / "benchmarks" / "results"


def cli_publish(spec: Any, index_root: Path) -> None:
    """The baseline's publish: a ``python -m build`` process, then every index page rewritten."""
    from cdc_assets.pipeline.evolution.artifacts import (
        MANIFEST_SUFFIX,
        normalized,
        published_versions,
        schema_digest,
        write_index,
        write_sources,
    )
    from cdc_assets.schema.artifacts import render_artifact
    from cdc_assets.schema.views import table_schema

    artifact = render_artifact(
        table_schema(spec, pipeline_columns=False), f"{spec.spec_version}.0.0"
    )
    if artifact.version in published_versions(index_root, artifact.distribution):
        return
    project = index_root / "simple" / normalized(artifact.distribution)
    with tempfile.TemporaryDirectory(prefix="cdc-baseline-") as tmp:
        source = Path(tmp) / "src"
        write_sources(artifact, source)
        command = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", tmp]
        subprocess.run([*command, str(source)], capture_output=True, check=True)
        project.mkdir(parents=True, exist_ok=True)
        for wheel in Path(tmp).glob("*.whl"):
            shutil.copy2(wheel, project / wheel.name)
    digest = schema_digest(artifact)
    (project / f"{artifact.version}{MANIFEST_SUFFIX}").write_text(digest + "\n")
    write_index(index_root)  # no project: every page, as every publish did


def baseline(spark: Any, catalog: str, specs: list[Any], index_root: Path) -> None:
    from cdc_assets.pipeline.shared.tables import ensure_tables

    for spec in specs:
        ensure_tables(spark, catalog, spec)  # no namespaces given: one statement per layer
        cli_publish(spec, index_root)


def outcome(spark: Any, catalog: str, namespace: str, index_root: Path) -> dict[str, Any]:
    """What an onboarding left: the namespace's tables and the index's wheels."""
    tables = sorted(
        r["tableName"] for r in spark.sql(f"SHOW TABLES IN {catalog}.{namespace}").collect()
    )
    wheels = sorted(w.name for w in (index_root / "simple").glob("*/*.whl"))
    return {"tables": tables, "wheels": wheels}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", default="10,100", help="fleet sizes")
    args = parser.parse_args()
    counts = [int(n) for n in args.tables.split(",") if n]

    import dagster as dg

    from cdc_assets.jobs.inprocess import PipelineDriver
    from cdc_assets.resources import build_resources
    from cdc_assets.settings import ENV_ARTIFACTS
    from cdc_assets.spec import load_specs
    from cdc_assets_dev.stack.local_stack import stack_down, stack_up

    rows: dict[int, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        home = make_home(tmp)
        stack_up(home)
        try:
            resources = build_resources(home)
            resources["spark"] = resources["spark"].model_copy(update={"master": "local[2]"})
            spark = resources["spark"].get_session()
            catalog = resources["spark"].catalog.name
            # Warm the driver and the build tooling once, unmeasured.
            warm = tmp / "warm"
            generate_specs(3, warm, prefix="warm", namespace="warm")
            baseline(spark, catalog, load_specs(warm), tmp / "warm_index")
            for n in counts:
                row: dict[str, Any] = {}
                results = {}
                for variant in ("baseline", "onboard_tables"):
                    namespace = f"{'b' if variant == 'baseline' else 'j'}{n}"
                    spec_dir = tmp / f"specs_{namespace}"
                    # Same table names in both copies (the namespace differs).
                    generate_specs(n, spec_dir, prefix=namespace, namespace=namespace)
                    specs = load_specs(spec_dir)
                    index_root = tmp / f"index_{namespace}"
                    started = time.perf_counter()
                    if variant == "baseline":
                        baseline(spark, catalog, specs, index_root)
                    else:
                        settings = replace(home, specs_dir=spec_dir)
                        os.environ[ENV_ARTIFACTS] = str(index_root)  # read at publish time
                        with dg.DagsterInstance.ephemeral() as instance:
                            PipelineDriver(
                                settings, instance, resource_overrides=resources
                            ).onboard()
                    row[variant] = time.perf_counter() - started
                    results[variant] = outcome(spark, catalog, namespace, index_root)
                    print(f"  {n} tables, {variant}: {row[variant]:.1f} s", file=sys.stderr)
                if results["baseline"]["tables"] != results["onboard_tables"]["tables"]:
                    raise SystemExit(f"{n} tables: the two onboardings made different tables")
                if len(results["baseline"]["wheels"]) != len(results["onboard_tables"]["wheels"]):
                    raise SystemExit(f"{n} tables: the two onboardings made different packages")
                row["iceberg_tables"] = len(results["onboard_tables"]["tables"])
                row["packages"] = len(results["onboard_tables"]["wheels"])
                rows[n] = row
        finally:
            stack_down(home, purge=True)
    report(rows)


def report(rows: dict[int, dict[str, Any]]) -> None:
    print("\nOnboarding N tables: wall seconds (per table), ratio to the baseline")
    print(
        f"  {'tables':>6} {'baseline':>18} {'onboard_tables':>18} {'ratio':>6} "
        f"{'Iceberg tables':>14}"
    )
    for n, r in sorted(rows.items()):
        print(
            f"  {n:>6} {r['baseline']:>8.1f}s ({r['baseline'] / n:.2f}s) "
            f"{r['onboard_tables']:>8.1f}s ({r['onboard_tables'] / n:.2f}s) "
            f"{r['onboard_tables'] / r['baseline']:>6.2f} {r['iceberg_tables']:>14}"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {"code": code_version(), "rows": {str(n): r for n, r in sorted(rows.items())}}
    (RESULTS / "fleet_onboarding.json").write_text(json.dumps(payload, indent=2))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    ns = sorted(rows)
    for variant in ("baseline", "onboard_tables"):
        ax.plot(ns, [rows[n][variant] / n for n in ns], marker="o", label=variant)
    ax.set(
        title="onboarding: seconds per table",
        xlabel="tables",
        ylabel="seconds per table",
        xscale="log",
    )
    ax.set_ylim(bottom=0)
    ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "fleet_onboarding.png", dpi=110)


if __name__ == "__main__":
    main()
