"""The embedded SQLite catalog under concurrent writers (issue 20, part 5): Spark and several
pyiceberg processes commit at once, to tables of their own and to one shared table, as Dagster
runs of different tables and of the same table do. No writer sees "database is locked", no
commit is lost: every table ends with exactly one snapshot and one row per successful commit.

A commit that loses the race (another writer moved the table first) is retried by both engines;
the retries are counted, and the shared table proves they happen.
"""

from __future__ import annotations

import multiprocessing
import threading
from typing import Any

import pyarrow as pa
import pytest

from cdc_assets.resources import IcebergCatalogResource

pytestmark = pytest.mark.integration

WRITERS = 3
COMMITS = 15
NAMESPACE = "concurrency"
SCHEMA = pa.schema([("writer", pa.int64()), ("n", pa.int64())])


def _pyiceberg_writer(props: dict[str, str], writer: int, tables: list[str], out: Any) -> None:
    """A process of its own (as a Dagster run is): COMMITS appends to each table, alternating."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import CommitFailedException

    catalog = load_catalog("lake", **props)
    done, retried, errors = 0, 0, []
    for n in range(COMMITS):
        for name in tables:
            while True:
                try:
                    catalog.load_table(name).append(
                        pa.table({"writer": [writer], "n": [n]}, schema=SCHEMA)
                    )
                    done += 1
                    break
                except CommitFailedException:
                    retried += 1
                except Exception as err:  # "database is locked" and anything else: a failure
                    errors.append(f"{type(err).__name__}: {err}"[:300])
                    break
    out.put((writer, done, retried, errors))


def test_concurrent_commits_from_both_engines_are_all_kept(
    spark: Any, iceberg: IcebergCatalogResource
) -> None:
    catalog = iceberg.load_catalog()
    catalog.create_namespace_if_not_exists(NAMESPACE)
    names = [f"{NAMESPACE}.shared", f"{NAMESPACE}.spark"] + [
        f"{NAMESPACE}.own_{w}" for w in range(WRITERS)
    ]
    for name in names:
        if catalog.table_exists(name):
            catalog.drop_table(name)
        # Enough retries for every writer hammering one table on 2 cores.
        catalog.create_table(name, schema=SCHEMA, properties={"commit.retry.num-retries": "50"})

    props = dict(catalog.properties)
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    processes = [
        ctx.Process(
            target=_pyiceberg_writer,
            args=(props, w, [f"{NAMESPACE}.own_{w}", f"{NAMESPACE}.shared"], out),
        )
        for w in range(WRITERS)
    ]
    spark_errors: list[str] = []
    spark_done = [0]

    def spark_writer() -> None:
        # Spark's own JDBC catalog connection: its table of its own and the shared one.
        for n in range(COMMITS):
            for table in ("spark", "shared"):
                try:
                    spark.sql(f"INSERT INTO lake.{NAMESPACE}.{table} VALUES (99, {n})")
                    spark_done[0] += 1
                except Exception as err:
                    spark_errors.append(str(err)[:300])

    for process in processes:
        process.start()
    thread = threading.Thread(target=spark_writer)
    thread.start()
    results = [out.get(timeout=600) for _ in processes]
    thread.join(timeout=600)
    for process in processes:
        process.join(timeout=60)

    errors = [e for _, _, _, errs in results for e in errs] + spark_errors
    assert errors == [], errors
    assert not any("locked" in e for e in errors)
    done = {writer: n for writer, n, _, _ in results}
    assert done == {w: 2 * COMMITS for w in range(WRITERS)}
    assert spark_done[0] == 2 * COMMITS

    expected = {
        f"{NAMESPACE}.shared": (WRITERS + 1) * COMMITS,
        f"{NAMESPACE}.spark": COMMITS,
        **{f"{NAMESPACE}.own_{w}": COMMITS for w in range(WRITERS)},
    }
    for name, commits in expected.items():
        table = iceberg.load_catalog().load_table(name)
        assert len(table.snapshots()) == commits, name
        assert table.scan().to_arrow().num_rows == commits, name
    # Spark sees the same: one row per commit of every writer on the shared table.
    shared = spark.sql(
        f"SELECT writer, count(*) AS c FROM lake.{NAMESPACE}.shared GROUP BY writer"
    ).collect()
    assert {r["writer"]: r["c"] for r in shared} == {
        **{w: COMMITS for w in range(WRITERS)},
        99: COMMITS,
    }
