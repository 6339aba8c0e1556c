"""Benchmark: reading the stored spec versions (``cdc_meta.spec_versions``) as they pile up.

Every evolution appends one row to that table, and every ingest that read rows, every
definitions load and the spec sensors read it back. A pyiceberg append writes a data file, a
snapshot and (unless the table merges manifests on append) a manifest per commit; a scan opens
every manifest and every data file it cannot prune, and every load parses every snapshot. For
each count of stored versions (one per table, one append each, as evolutions store them) the
script builds the table four ways in one embedded SQLite catalog (pyiceberg's SQL catalog, the
embedded stack's kind):

- ``unmerged`` (the baseline): created without manifest merging, as before bcae74c;
- ``merged``: manifests merged on append, one data file per version (bcae74c);
- ``compacted``: stored with ``record_spec``, the product's path: manifests merged, and every
  ``meta_tables.COMPACT_FILES`` files the rows rewritten into one and the older snapshots
  expired;
- ``upgraded``: the baseline's table, once measured, then one more version stored with
  ``record_spec``, which sets the property on the older table and compacts it in that append
  (its store time is that one append's).

It reports the median time (of ``--repeats``) of the read after an ingest (one spec's versions),
of the read of every version (a definitions load, the spec sensors), of that read again with the
table unchanged (a sensor's next tick, answered from the last full read when ``cache`` is on)
and of loading the table, with ratios to the baseline (whose re-read is the uncached read), and
the manifests, data files and snapshots the table holds. Every case must
return the same stored versions or the script fails. Prints a table, writes
``benchmarks/results/spec_store_reads.json`` and ``.png``.

    python benchmarks/spec_store_reads.py [--versions 100,1000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_common import code_version  # noqa: E402

CASES = ("unmerged", "merged", "compacted", "upgraded")


def _catalog(tmp: Path, name: str) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    (tmp / name).mkdir()
    return SqlCatalog(
        name, uri=f"sqlite:///{tmp / name / 'catalog.db'}", warehouse=f"file://{tmp / name}"
    )


def _specs(count: int) -> list[Any]:
    from cdc_assets.spec.load import load_spec

    spec = load_spec(ROOT / "table_specs" / "users.yaml")
    return [spec.model_copy(update={"name": f"t{i:05d}", "spec_version": 2}) for i in range(count)]


def _appended(catalog: Any, specs: list[Any], specs_dir: Path, *, merge: bool) -> None:
    """The table as an older release left it, one plain append per version: without manifest
    merging (``merge`` False, before bcae74c) or with it (before compaction)."""
    import pyarrow as pa

    from cdc_assets.pipeline.evolution.spec_store import version_row
    from cdc_assets.pipeline.shared.meta_tables import create_meta_table
    from cdc_assets.schema.history import spec_versions_layout

    layout = spec_versions_layout()
    if not merge:
        layout = replace(layout, properties={"format-version": "2"})
    table = create_meta_table(catalog, layout)
    for spec in specs:
        table.append(
            pa.Table.from_pylist([version_row(spec, specs_dir)], table.schema().as_arrow())
        )


def _timed(fn: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _reread(catalog: Any, repeats: int, cache: bool) -> float:
    from cdc_assets.pipeline.evolution.spec_store import stored_specs

    stored_specs(catalog, cache=cache)  # the first tick reads the table
    return _timed(partial(stored_specs, catalog, cache=cache), repeats)


def measure(count: int, repeats: int, tmp: Path) -> list[dict[str, Any]]:
    from cdc_assets.pipeline.evolution.spec_store import record_spec, stored_specs
    from cdc_assets.pipeline.shared.meta_tables import data_files
    from cdc_assets.schema.history import spec_versions_layout

    specs = _specs(count)
    layout = spec_versions_layout()
    ident = f"{layout.namespace}.{layout.name}"
    rows = []
    found = {}

    def row(case: str, catalog: Any, store_s: float, stored: int) -> dict[str, Any]:
        one = specs[count // 2].name
        table = catalog.load_table(ident)
        everything = stored_specs(catalog, cache=False)
        found[case] = {k: v.spec_version for k, v in everything.items() if k[0] != specs[0].name}
        return {
            "versions": count,
            "case": case,
            "manifests": len(table.current_snapshot().manifests(table.io)),
            "data_files": data_files(table),
            "snapshots": len(table.metadata.snapshots),
            "store_s_per_version": round(store_s / stored, 4),
            "read_one_s": round(
                _timed(partial(stored_specs, catalog, {one}, cache=False), repeats), 4
            ),
            "read_all_s": round(_timed(partial(stored_specs, catalog, cache=False), repeats), 4),
            # A sensor's next tick: the table unchanged since its last full read.
            # (The baseline is the release before the cache: every tick reads.)
            "read_all_again_s": round(_reread(catalog, repeats, case != "unmerged"), 4),
            "load_table_s": round(_timed(partial(catalog.load_table, ident), repeats), 4),
        }

    for case in ("unmerged", "merged", "compacted"):
        catalog = _catalog(tmp, f"{case}-{count}")
        started = time.perf_counter()
        if case == "compacted":
            for spec in specs:
                record_spec(catalog, spec, tmp)
        else:
            _appended(catalog, specs, tmp, merge=case == "merged")
        rows.append(row(case, catalog, time.perf_counter() - started, count))
        if case == "unmerged":
            # The same table, measured, then one more version stored by this release.
            started = time.perf_counter()
            record_spec(catalog, specs[0].model_copy(update={"spec_version": 3}), tmp)
            upgraded = row("upgraded", catalog, time.perf_counter() - started, 1)
    rows.append(upgraded)
    if len({json.dumps(sorted(map(str, f.items()))) for f in found.values()}) != 1:
        sizes = {k: len(v) for k, v in found.items()}
        raise SystemExit(f"the cases stored different versions: {sizes}")
    base = rows[0]
    for row in rows:
        for name in ("read_one_s", "read_all_s", "read_all_again_s", "load_table_s"):
            row[name.replace("_s", "_ratio")] = round(row[name] / base[name], 2)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--versions", default="100,1000")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    counts = [int(n) for n in args.versions.split(",")]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="spec-store-") as tmp:
        for count in counts:
            rows += measure(count, args.repeats, Path(tmp))
            print(f"{count} versions measured", flush=True)

    header = ["versions", "case", "manifests", "data_files", "snapshots", "store_s_per_version"]
    header += ["read_one_s"]
    header += ["read_one_ratio", "read_all_s", "read_all_ratio", "read_all_again_s"]
    header += ["read_all_again_ratio", "load_table_s", "load_table_ratio"]
    print(" | ".join(header))
    for row in rows:
        print(" | ".join(str(row[h]) for h in header))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {
        "benchmark": "spec_store_reads",
        "code_version": code_version(),
        "repeats": args.repeats,
        "baseline": "unmerged",
        "results": rows,
    }
    (RESULTS / "spec_store_reads.json").write_text(json.dumps(out, indent=2))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    width = 0.8 / len(CASES)
    for ax, field, label in (
        (axes[0], "read_one_s", "stored versions of one spec, s (median)"),
        (axes[1], "read_all_s", "every stored version, s (median)"),
    ):
        for i, case in enumerate(CASES):
            mine = [r for r in rows if r["case"] == case]
            xs = [j + i * width for j in range(len(mine))]
            ax.bar(xs, [r[field] for r in mine], width, label=case)
        ax.set_xticks(
            [j + width * (len(CASES) - 1) / 2 for j in range(len(counts))],
            [f"{n} versions" for n in counts],
        )
        ax.set_ylabel(label)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "spec_store_reads.png", dpi=100)
    print(f"wrote {RESULTS / 'spec_store_reads.json'}")


if __name__ == "__main__":
    main()
