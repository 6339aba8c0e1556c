"""A class-data-sharing archive for local Spark drivers: the classes a session loads (Spark,
Iceberg, Scala, the JDBC drivers), parsed and verified once and mapped by every later driver JVM.

A local driver's JVM spends most of its first seconds loading classes; every Dagster run, CLI
command and test process starts one. The archive is made by `make setup` (`cdc-assets jars`): a
driver with the project's own configuration runs a small Iceberg workload (create, insert,
MERGE, a JSON read) and writes what it loaded when it exits (HotSpot's dynamic archive,
``-XX:ArchiveClassesAtExit``). A later local driver of the same JVM, PySpark and jars maps it
(``-XX:SharedArchiveFile``): ``benchmarks/driver_startup.py`` measures the gain. The file's name
is a digest of the JVM, PySpark's version and every jar (path, size, time), so a changed jar or
JVM finds no archive and its drivers run as before; so does a JVM that cannot map it (the
archive is an optimisation: the JVM ignores one it cannot use, quietly with
``resources.config.QUIET_CDS``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from cdc_assets.resources.class_archive import archive_path
from cdc_assets.settings import Settings


def ensure_archive(settings: Settings, jars: Sequence[str]) -> Path | None:
    """The archive for these jars, made now by a driver of its own when there is none (about
    half a minute); None when it cannot be made (the reason printed: drivers run without)."""
    from cdc_assets.jars.maven import locked

    target = archive_path(settings, jars)
    if target is None:
        print("class archive: no java found; local drivers start without one", file=sys.stderr)
        return None
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with locked(target.parent / ".lock"):
        if target.is_file():
            return target
        for old in target.parent.glob("driver-*.jsa"):
            old.unlink()  # made for other jars or another JVM: never mapped again
        partial = target.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "cdc_assets.jars.class_archive",
                str(settings.home),
                str(partial),
            ],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0 or not partial.is_file():
            partial.unlink(missing_ok=True)
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            print(
                "class archive not made; local drivers start without one:", *tail, file=sys.stderr
            )
            return None
        os.replace(partial, target)
    return target


# The workload the archiving driver runs: what every ingest, upsert and check loads first.
_WORKLOAD = (
    "CREATE NAMESPACE IF NOT EXISTS archive.ns",
    "CREATE TABLE archive.ns.t (id bigint, v string, ts timestamp) USING iceberg "
    "PARTITIONED BY (bucket(4, id)) TBLPROPERTIES ('write.delete.mode'='merge-on-read', "
    "'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read')",
    "INSERT INTO archive.ns.t SELECT id, CAST(id AS STRING), current_timestamp() FROM range(200)",
    "MERGE INTO archive.ns.t t USING (SELECT id, to_json(named_struct('a', id)) AS v, "
    "current_timestamp() AS ts FROM range(100, 300)) s ON t.id = s.id "
    "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
    "SELECT count(*), max(CAST(from_json(v, 'map<string,variant>')['a'] AS STRING)) "
    "FROM archive.ns.t",
    "SELECT * FROM archive.ns.t.snapshots",
)


def _archive(home: Path, out: Path) -> None:
    """Run the workload in a local driver configured as `SparkResource` configures one, with
    the JVM told to write its loaded classes to ``out`` when it exits."""
    from dataclasses import replace

    from pyspark.sql import SparkSession

    from cdc_assets.jars.maven import cached_spark_jars
    from cdc_assets.resources.config import (
        DRIVER_JAVA_OPTIONS,
        QUIET_CDS,
        CatalogConfig,
        spark_conf,
    )
    from cdc_assets.settings import load_settings

    settings = replace(load_settings(), home=home)
    scratch = Path(tempfile.mkdtemp(prefix="cdc-class-archive-"))
    try:
        catalog = CatalogConfig(
            name="archive",
            type="jdbc",
            uri=f"jdbc:sqlite:{scratch / 'catalog.db'}",
            warehouse=(scratch / "warehouse").as_uri(),
            properties={},
        )
        conf = spark_conf(
            master="local[2]",
            app_name="cdc-assets class archive",
            catalog=catalog,
            jars=[str(p) for p in cached_spark_jars(settings)],
            shuffle_partitions=2,
            driver_memory="1g",
            ui_enabled=False,
            extra={},
        )
        conf[DRIVER_JAVA_OPTIONS] += f" -XX:ArchiveClassesAtExit={out} {QUIET_CDS}"
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = SparkSession.builder
        for key, value in conf.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        session.sparkContext.setLogLevel("ERROR")
        for statement in _WORKLOAD:
            session.sql(statement).collect()
        # The JVM writes the archive as it exits, when this process ends.
        session.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    _archive(Path(sys.argv[1]), Path(sys.argv[2]))
