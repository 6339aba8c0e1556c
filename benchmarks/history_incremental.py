"""Benchmark: incremental history (SCD2) upkeep against a rebuild from the whole ledger (issue 55).

For each history size (default 2M and 20M versions, the users shape, 4 versions per key) a
ledger of that many changes is written straight into Iceberg (no Kafka: the ingest is not what
is measured) and the history is built from it. Then, ``--repeats`` times, ``--changed`` random
keys get one new change each (an append to the ledger, as an ingest makes) and:

- (inc) ``update_history``: the incremental run, timed;
- (full) ``update_history(full=True)``: a rebuild from the whole ledger on the same data, timed.

Every run is verified: the history holds one version per ledger change and one current version
per key. Prints a table, writes ``benchmarks/results/history_incremental.json`` and ``.png``,
and reads the figures against the issue's target: from the smallest to the largest history,
the incremental run grows by at most 1.5x.

    python benchmarks/history_incremental.py [--rows 2000000,20000000] [--changed 100000]
        [--repeats 2] [--versions 4]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_common import local_driver, results_plot, save_results

TARGET_GROWTH = 1.5


def _value(sink: Any, seed: str) -> str:
    """A Spark SQL expression of a column's type, varying with ``seed`` (an integer SQL)."""
    from cdc_assets.sql.ddl import spark_type

    kind = spark_type(sink)
    if sink.name in ("int", "long"):
        return f"CAST(({seed}) % 100000 AS {kind})"
    if sink.name == "string":
        return f"concat('v', CAST(({seed}) % 1000003 AS STRING))"
    if sink.name == "boolean":
        return f"(({seed}) % 2 = 0)"
    if sink.name in ("timestamp", "timestamptz"):
        return f"CAST(timestamp_micros(1700000000000000 + ({seed}) * 1000) AS {kind})"
    if sink.name == "date":
        return f"date_add(DATE '2020-01-01', CAST(({seed}) % 3000 AS INT))"
    if sink.name in ("float", "double", "decimal"):
        return f"CAST((({seed}) % 100000) / 100.0 AS {kind})"
    return f"CAST(NULL AS {kind})"


def ledger_insert(spec: Any, ledger: str, source: str) -> str:
    """INSERT of generated changes into the ledger; ``source`` yields ``k`` (the key), ``op``
    and ``pos`` (the position, also the Kafka offset)."""
    from cdc_assets.schema.layers import ledger_layout
    from cdc_assets.sql.ddl import quote

    keys = set(spec.key_sink_names)
    exprs = []
    for column in ledger_layout(spec).columns:
        name = column.name
        if name in keys:
            value = f"CAST(k AS {column_type(column)})"
        elif name == "_op":
            value = "op"
        elif name == "_source_ts":
            value = "timestamp_micros(1760000000000000 + pos * 1000)"
        elif name == "_seq_major":
            value = "CAST(1 AS BIGINT)"
        elif name == "_seq_minor":
            value = "pos"
        elif name == "_seq_row":
            value = "CAST(0 AS BIGINT)"
        elif name == "_kafka_partition":
            value = "0"
        elif name == "_kafka_offset":
            value = "pos"
        elif name in ("_kafka_ts", "_processed_at"):
            value = "timestamp_micros(1760000000000000 + pos * 1000)"
        elif name == "dt":
            value = "'2026-12-01'"
        elif name == "hr":
            value = "CAST(pos % 24 AS INT)"
        elif name.startswith("_"):
            value = f"CAST(NULL AS {column_type(column)})"
        else:
            value = _value(column.type, "k * 31 + pos")
        exprs.append(f"{value} AS {quote(name)}")
    typed = f"SELECT CAST(k AS BIGINT) AS k, op, CAST(pos AS BIGINT) AS pos FROM ({source})"
    return f"INSERT INTO {ledger} SELECT {', '.join(exprs)} FROM ({typed})"


def column_type(column: Any) -> str:
    from cdc_assets.sql.ddl import spark_type

    return str(spark_type(column.type))


def counts(spark: Any, history: str) -> tuple[int, int]:
    row = spark.sql(f"SELECT count(1) AS n, count_if(_is_current) AS c FROM {history}").collect()[0]
    return int(row["n"]), int(row["c"])


def run_size(spark: Any, catalog: Any, settings: Any, rows: int, args: Any) -> dict[str, Any]:
    from cdc_assets.pipeline.shared.tables import ensure_tables
    from cdc_assets.pipeline.upsert.history import update_history
    from cdc_assets.schema.layers import history_layout, ledger_layout
    from cdc_assets.spec import load_specs
    from cdc_assets.spec.models import HistorySpec
    from cdc_assets.sql.ddl import quote

    users = next(
        s for s in load_specs(Path(__file__).parent.parent / "table_specs") if s.name == "users"
    )
    spec = users.model_copy(
        update={
            "history": HistorySpec(mode="scd2"),
            "sink": users.sink.model_copy(update={"namespace": f"bench_history_{rows}"}),
        }
    )
    ensure_tables(spark, settings.catalog_name, spec)
    ledger_l, history_l = ledger_layout(spec), history_layout(spec)
    ledger = ".".join(quote(p) for p in (settings.catalog_name, ledger_l.namespace, ledger_l.name))
    history = ".".join(
        quote(p) for p in (settings.catalog_name, history_l.namespace, history_l.name)
    )
    keys = rows // args.versions
    started = time.monotonic()
    # pos = v * keys + k: every key's versions spread over the whole position range.
    spark.sql(
        ledger_insert(
            spec,
            ledger,
            f"SELECT id % {keys} AS k, CASE WHEN id < {keys} THEN 'c' ELSE 'u' END AS op, "
            f"id AS pos FROM range({keys * args.versions})",
        )
    )
    loaded = time.monotonic() - started
    started = time.monotonic()
    built = update_history(spark, settings.catalog_name, catalog, spec)
    build_s = time.monotonic() - started
    print(f"{rows:,} versions: ledger written in {loaded:.0f}s, history built in {build_s:.0f}s")
    rng = random.Random(args.seed + rows)
    next_pos = keys * args.versions
    total = keys * args.versions
    runs = []
    for repeat in range(args.repeats):
        changed = rng.sample(range(keys), min(args.changed, keys))
        spark.createDataFrame([(k,) for k in changed], "k BIGINT").createOrReplaceTempView(
            "bench_changed"
        )
        spark.sql(
            ledger_insert(
                spec,
                ledger,
                f"SELECT k, 'u' AS op, {next_pos} + row_number() OVER (ORDER BY k) AS pos "
                "FROM bench_changed",
            )
        )
        next_pos += len(changed) + 1
        total += len(changed)
        started = time.monotonic()
        inc = update_history(spark, settings.catalog_name, catalog, spec)
        inc_s = time.monotonic() - started
        ok_inc = inc.mode == "incremental" and counts(spark, history) == (total, keys)
        started = time.monotonic()
        full = update_history(spark, settings.catalog_name, catalog, spec, full=True)
        full_s = time.monotonic() - started
        ok_full = full.mode == "full" and counts(spark, history) == (total, keys)
        runs.append(
            {
                "repeat": repeat,
                "incremental_s": inc_s,
                "full_s": full_s,
                "touched_keys": inc.touched_keys,
                "verified": ok_inc and ok_full,
            }
        )
        print(
            f"  changes {repeat + 1}: incremental {inc_s:.1f}s ({inc.touched_keys:,} keys), "
            f"full {full_s:.1f}s, verified {ok_inc and ok_full}"
        )
    spark.sql(f"DROP TABLE {history} PURGE")
    spark.sql(f"DROP TABLE {ledger} PURGE")
    return {
        "rows": rows,
        "keys": keys,
        "changed": args.changed,
        "ledger_write_s": loaded,
        "first_build_s": build_s,
        "first_build_mode": built.mode,
        "incremental_s": statistics.median(r["incremental_s"] for r in runs),
        "full_s": statistics.median(r["full_s"] for r in runs),
        "verified": all(r["verified"] for r in runs),
        "runs": runs,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="2000000,20000000")
    parser.add_argument("--changed", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--versions", type=int, default=4, help="versions per key in the ledger")
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    sizes = [int(x) for x in args.rows.split(",") if x.strip()]
    results = []
    with tempfile.TemporaryDirectory() as tmp, local_driver(Path(tmp)) as (home, _, resources):
        spark = resources["spark"].get_session()
        catalog = resources["iceberg"].load_catalog()
        for rows in sizes:
            results.append(run_size(spark, catalog, home, rows, args))
    small, large = results[0], results[-1]
    growth = large["incremental_s"] / small["incremental_s"] if len(results) > 1 else None
    print(
        f"\n{'versions':>12} {'keys':>11} {'changed':>8} {'incremental s':>14} {'full s':>8} "
        f"{'full/inc':>9} verified"
    )
    for r in results:
        print(
            f"{r['rows']:>12,} {r['keys']:>11,} {r['changed']:>8,} {r['incremental_s']:>14.1f} "
            f"{r['full_s']:>8.1f} {r['full_s'] / r['incremental_s']:>9.1f} {r['verified']}"
        )
    reading = {
        "incremental_growth": growth,
        "full_growth": large["full_s"] / small["full_s"] if len(results) > 1 else None,
        "target_incremental_growth_max": TARGET_GROWTH,
        "meets_target": growth is not None and growth <= TARGET_GROWTH,
    }
    print(json.dumps(reading, indent=2))
    save_results(
        "history_incremental",
        {"args": vars(args), "results": results, "reading": reading},
    )
    with results_plot("history_incremental") as ax:
        xs = [r["rows"] / 1e6 for r in results]
        ax.plot(xs, [r["incremental_s"] for r in results], marker="o", label="incremental")
        ax.plot(xs, [r["full_s"] for r in results], marker="o", label="rebuild from the ledger")
        ax.set(
            xlabel="history versions (millions)",
            ylabel="seconds",
            title=f"history upkeep, {args.changed:,} changed keys",
        )
        ax.set_xscale("log")
        ax.set_xticks(xs, [f"{x:g}M" for x in xs])
        ax.minorticks_off()
        ax.grid(alpha=0.3)
        ax.legend()
    return 0 if all(r["verified"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
