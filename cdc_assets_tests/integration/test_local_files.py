"""A local driver's ``file:`` file system (``LocalFiles.java``): Iceberg commits work through it,
files get the permissions Hadoop's would give them, no ``.crc`` files appear, and a checksum file
already beside a file is still verified. And Iceberg plans the driver's scans in the calling
thread (``SERIAL_PLANNING``), and the driver runs the throughput collector (``LOCAL_GC``)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from cdc_assets.resources.config import LOCAL_FILES_CLASS

pytestmark = pytest.mark.integration


def _local_fs(spark: Any) -> Any:
    jvm = spark._jvm
    return jvm.org.apache.hadoop.fs.FileSystem.get(
        jvm.java.net.URI("file:///"), spark._jsc.hadoopConfiguration()
    )


def _write(spark: Any, fs: Any, path: Path, data: bytes) -> None:
    out = fs.create(spark._jvm.org.apache.hadoop.fs.Path(path.as_uri()), True)
    out.write(bytearray(data))
    out.close()


def test_files_get_permissions_in_process_and_no_checksum_files(spark: Any, tmp_path: Path) -> None:
    fs = _local_fs(spark)
    assert fs.getClass().getName() == LOCAL_FILES_CLASS
    jvm = spark._jvm
    target = tmp_path / "a" / "b" / "file.bin"
    _write(spark, fs, target, b"hello")
    assert target.read_bytes() == b"hello"
    assert sorted(p.name for p in target.parent.iterdir()) == ["file.bin"]  # no .file.bin.crc
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask
    fs.setPermission(
        jvm.org.apache.hadoop.fs.Path(target.as_uri()),
        jvm.org.apache.hadoop.fs.permission.FsPermission.createImmutable(0o640),
    )
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    # The sticky bit has no java.nio form: Hadoop's own chmod sets it.
    fs.setPermission(
        jvm.org.apache.hadoop.fs.Path(tmp_path.as_uri()),
        jvm.org.apache.hadoop.fs.permission.FsPermission.createImmutable(0o1777),
    )
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o1777


def test_an_existing_checksum_file_is_still_verified(spark: Any, tmp_path: Path) -> None:
    fs = _local_fs(spark)
    jvm = spark._jvm
    target = tmp_path / "old.bin"
    # Written by Hadoop's checksummed file system (as before this file system): with a .crc.
    checked = jvm.org.apache.hadoop.fs.LocalFileSystem(
        jvm.org.apache.hadoop.fs.RawLocalFileSystem()
    )
    checked.initialize(jvm.java.net.URI("file:///"), spark._jsc.hadoopConfiguration())
    _write(spark, checked, target, b"x" * 1000)
    assert (tmp_path / ".old.bin.crc").exists()
    with open(target, "r+b") as f:  # corrupt one byte behind the checksum's back
        f.seek(10)
        f.write(b"y")
    stream = fs.open(jvm.org.apache.hadoop.fs.Path(target.as_uri()))
    with pytest.raises(Exception, match=r"ChecksumException|Checksum error"):
        stream.read(spark.sparkContext._gateway.new_array(jvm.byte, 1000))
    stream.close()


def test_an_iceberg_table_round_trips_through_it(spark: Any, tmp_path: Path) -> None:
    spark.sql("CREATE NAMESPACE IF NOT EXISTS local_files")
    spark.sql("DROP TABLE IF EXISTS local_files.t PURGE")
    spark.sql(
        "CREATE TABLE local_files.t (id bigint, v string) USING iceberg "
        "PARTITIONED BY (bucket(2, id))"
    )
    try:
        spark.sql("INSERT INTO local_files.t SELECT id, 'a' FROM range(0, 100)")
        spark.sql(
            "MERGE INTO local_files.t t USING (SELECT id, 'b' AS v FROM range(50, 150)) s "
            "ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *"
        )
        rows = spark.sql("SELECT v, count(*) AS n FROM local_files.t GROUP BY v ORDER BY v")
        assert [(r["v"], r["n"]) for r in rows.collect()] == [("a", 50), ("b", 100)]
        location = (
            spark.sql("DESCRIBE TABLE EXTENDED local_files.t")
            .where("col_name = 'Location'")
            .collect()[0]["data_type"]
        )
        files = list(Path(location.removeprefix("file:")).rglob("*"))
        assert any(p.suffix == ".parquet" for p in files)
        assert not [p for p in files if p.name.endswith(".crc")]
    finally:
        spark.sql("DROP TABLE IF EXISTS local_files.t PURGE")


def test_iceberg_plans_scans_in_the_drivers_own_thread(spark: Any) -> None:
    entry = spark._jvm.org.apache.iceberg.SystemConfigs.SCAN_THREAD_POOL_ENABLED
    assert entry.propertyKey() == "iceberg.scan.plan-in-worker-pool"
    assert entry.value() is False


def test_the_driver_collects_garbage_with_the_throughput_collector(spark: Any) -> None:
    beans = spark._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    names = {bean.getName() for bean in beans}
    # The parallel collector's young and old generations; G1's are "G1 Young Generation" etc.
    assert names == {"PS Scavenge", "PS MarkSweep"}
