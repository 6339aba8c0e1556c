"""Bootstrap from a dump (Parquet, CSV, JDBC) stitched to the change stream; watermark rollback."""

from __future__ import annotations

import csv
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cdc_assets.pipeline.bootstrap.bootstrap import (
    BootstrapError,
    bootstrap_base,
    read_files,
    read_jdbc,
    rollback_watermark,
)
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.schema.position import Position
from cdc_assets.spec.models import TableSpec
from cdc_assets_dev.demo.events import DebeziumEventFactory, KafkaRecord, produce
from cdc_assets_tests.integration.test_ingest import consume_all, isolated
from cdc_assets_tests.integration.test_upsert import assert_base_matches, ingest, upsert
from cdc_assets_tests.support.bad_records import base_row, users_spec
from cdc_assets_tests.support.base_oracle import Key, replay_base
from cdc_assets_tests.support.oracle import expected_outcome

Row = dict[str, object]


def scenario(spec: TableSpec) -> tuple[list[KafkaRecord], list[KafkaRecord], dict[int, Row]]:
    """Changes before the dump, the changes after it, and the source table at the dump."""
    f = DebeziumEventFactory(spec)
    table: dict[int, Row] = {}
    before: list[KafkaRecord] = []
    for i in range(1, 9):
        table[i] = base_row(id=i, login_count=i, display_name=f"user {i}")
        before.append(f.create(table[i]))
    table[1] = {**table[1], "login_count": 50}
    before.append(f.update(base_row(id=1), table[1]))
    before += [f.delete(table[2]), f.tombstone(table[2])]
    del table[2]
    table[3] = {**table[3], "country": "NO"}  # the last change the dump contains
    before.append(f.update(base_row(id=3), table[3]))
    dump = {k: dict(v) for k, v in table.items()}
    after = [
        f.update(table[3], {**table[3], "country": "DE"}),
        f.delete(table[4]),
        f.tombstone(table[4]),
        f.create(base_row(id=9, display_name="after the dump")),
        f.update(table[1], {**table[1], "login_count": 51}),
    ]
    return before, after, dump


def expected_after_bootstrap(
    spec: TableSpec, kafka: KafkaResource, dump_keys: list[int]
) -> tuple[dict[Key, dict[str, Any]], Position]:
    """The dump rows stamped with the dump position, then every later change replayed."""
    rows = []
    for p, o, ts, k, v in consume_all(kafka, spec.source.topic):
        outcome = expected_outcome(spec, p, o, ts, k, v)
        if outcome.status == "ledger":
            assert outcome.row is not None
            rows.append(outcome.row)
    # The dump was taken right after the 12th change event (see scenario()).
    at_dump = rows[:11]
    last = at_dump[-1]
    position = Position(int(last["_seq_major"]), int(last["_seq_minor"]), int(last["_seq_row"]))
    state = replay_base(spec, at_dump)
    stamp = {
        "_op": "r",
        "_source_ts": None,
        "_seq_major": position.major,
        "_seq_minor": position.minor,
        "_seq_row": position.row,
        "_kafka_partition": -1,
        "_kafka_offset": -1,
    }
    initial = {key: {**row, **stamp} for key, row in state.items()}
    assert sorted(k[0] for k in initial) == dump_keys
    floor = (position.major, position.minor, position.row)
    return replay_base(spec, rows, initial=initial, floor=floor), position


def _csv_value(value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    return "" if value is None else value


def write_dump(kind: str, dump: dict[int, Row], tmp: Path) -> tuple[str, str]:
    """(reader kind, location) of the dump written as a database export tool would."""
    rows = list(dump.values())
    names = list(rows[0])
    if kind == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), tmp / "users.parquet")
        return "parquet", str(tmp / "users.parquet")
    if kind == "csv":
        with (tmp / "users.csv").open("w", newline="", encoding="utf-8") as out:
            writer = csv.writer(out)
            writer.writerow([n.upper() for n in names])  # column names match case-insensitively
            writer.writerows([_csv_value(r[n]) for n in names] for r in rows)
        return "csv", str(tmp / "users.csv")
    db = tmp / "source.db"
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TABLE users (id BIGINT PRIMARY KEY, email TEXT, display_name TEXT, "
            "country TEXT, is_active BOOLEAN, login_count INTEGER, created_ms BIGINT, "
            "updated_at TEXT)"
        )
        conn.executemany(
            f"INSERT INTO users VALUES ({', '.join('?' for _ in names)})",
            [[_csv_value(r[n]) or None for n in names] for r in rows],
        )
    return "jdbc", f"jdbc:sqlite:{db}"


def load_dump(spark: Any, kind: str, location: str) -> Any:
    if kind == "jdbc":
        return read_jdbc(spark, location, "users", {"driver": "org.sqlite.JDBC"})
    return read_files(spark, location, kind)


@pytest.mark.parametrize("kind", ["parquet", "csv", "jdbc"])
def test_bootstrap_stitches_the_dump_to_the_stream(
    spark: Any,
    iceberg: IcebergCatalogResource,
    kafka: KafkaResource,
    tmp_path: Path,
    kind: str,
) -> None:
    spec = isolated(users_spec(), kafka=kafka)
    ensure_tables(spark, "lake", spec)
    before, after, dump = scenario(spec)
    # The connector ran before the dump, so the ledger holds changes from before it as well.
    produce([*before, *after], spec.source.topic, kafka.resolved_bootstrap())
    ingest(spark, iceberg, kafka, spec)
    expected, position = expected_after_bootstrap(spec, kafka, sorted(dump))

    reader, location = write_dump(kind, dump, tmp_path)
    result = bootstrap_base(
        spark,
        "lake",
        iceberg.load_catalog(),
        spec,
        load_dump(spark, reader, location),
        position,
        source=kind,
        progress=False,
    )
    assert result.rows == len(dump)
    bucketed, merged = upsert(spark, iceberg, spec)
    assert merged.applied
    # changes at or before the dump position are skipped; the 5 after it are applied
    assert bucketed.rows == 4  # keys 3, 4, 9 and 1
    assert_base_matches(spec, iceberg, expected)

    if kind == "parquet":
        # Recovery: restore base to the bootstrap snapshot, roll the watermark back, converge.
        base = iceberg.load_catalog().load_table(f"{spec.sink.namespace}.users")
        boot = next(
            s
            for s in base.metadata.snapshots
            if s.summary and s.summary.additional_properties.get("cdc.kind") == "bootstrap"
        )
        spark.sql(
            f"CALL lake.system.rollback_to_snapshot('{spec.sink.namespace}.users', "
            f"{boot.snapshot_id})"
        )
        rolled = rollback_watermark(
            spark, "lake", iceberg.load_catalog(), spec, datetime.now(UTC) - timedelta(days=1)
        )
        assert rolled.after.floor == position
        upsert(spark, iceberg, spec)
        assert_base_matches(spec, iceberg, expected)


def test_bad_dumps_are_refused_with_reasons(
    spark: Any, iceberg: IcebergCatalogResource, kafka: KafkaResource, tmp_path: Path
) -> None:
    spec = isolated(users_spec(), kafka=kafka)
    ensure_tables(spark, "lake", spec)
    good = {i: base_row(id=i) for i in (1, 2)}
    _, location = write_dump("csv", good, tmp_path)
    text = Path(location).read_text(encoding="utf-8").splitlines()
    header, rows = text[0], text[1:]
    far = next(csv.reader([rows[0]]))
    far[header.split(",").index("CREATED_MS")] = str(2**62)  # ms: far past the year 9999
    cases = {
        "not a number": (rows[0].replace("1,", "x1,", 1), r"column 'id': 1 value\(s\)"),
        "epoch out of range": (",".join(far), r"column 'created_ms': 1 value\(s\) do not"),
        "null key": ("," + rows[0].split(",", 1)[1], r"1 row\(s\) with a NULL key"),
        "duplicate": (rows[0], r"1 row\(s\) with a duplicate key"),
    }
    pos = Position(3, 1000, 0)
    for name, (bad_line, message) in cases.items():
        path = tmp_path / f"{name.replace(' ', '_')}.csv"
        path.write_text("\n".join([header, bad_line, *rows]) + "\n", encoding="utf-8")
        with pytest.raises(BootstrapError, match=message):
            bootstrap_base(
                spark,
                "lake",
                iceberg.load_catalog(),
                spec,
                read_files(spark, str(path), "csv"),
                pos,
                progress=False,
            )
    missing = read_files(spark, location, "csv").drop("EMAIL")
    with pytest.raises(BootstrapError, match=r"no column\(s\) \['email'\]"):
        bootstrap_base(spark, "lake", iceberg.load_catalog(), spec, missing, pos, progress=False)

    dump = read_files(spark, location, "csv")
    bootstrap_base(spark, "lake", iceberg.load_catalog(), spec, dump, pos, progress=False)
    with pytest.raises(BootstrapError, match="base already holds 2 rows"):
        bootstrap_base(spark, "lake", iceberg.load_catalog(), spec, dump, pos, progress=False)
    again = bootstrap_base(
        spark, "lake", iceberg.load_catalog(), spec, dump, pos, replace=True, progress=False
    )
    assert again.rows == 2
