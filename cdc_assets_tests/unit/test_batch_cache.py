"""The batch cache's and small batches' session settings: which compression a batch gets, which
batches plan without adaptive execution, that the session's own settings come back
afterwards, and that a driver caches one large batch at a time (no Spark needed: only the conf
calls and the cache declarations are observed)."""

from __future__ import annotations

from typing import Any

import pytest

from cdc_assets.pipeline.shared.batch_cache import (
    COMPRESSED_CONF,
    LARGE_BATCH_RECORDS,
    UNCOMPRESSED_MAX_RECORDS,
    cached_batch,
    session_conf,
)


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = dict(values)

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.values[key] = value

    def unset(self, key: str) -> None:
        self.values.pop(key, None)


class _Session:
    def __init__(self, values: dict[str, str] | None = None) -> None:
        self.conf = _Conf(values or {})


class _Frame:
    """Records the compression setting in force when it is persisted."""

    def __init__(self, session: _Session) -> None:
        self.session = session
        self.persisted_with: str | None = None
        self.level: Any = None
        self.unpersisted = False

    def persist(self, level: Any) -> _Frame:
        self.persisted_with = self.session.conf.get(COMPRESSED_CONF)
        self.level = level
        return self

    def unpersist(self) -> None:
        self.unpersisted = True


def test_session_conf_restores_previous_values_and_unsets_new_ones() -> None:
    spark = _Session({"a": "1"})
    with session_conf(spark, {"a": "2", "b": "3"}):
        assert spark.conf.values == {"a": "2", "b": "3"}
    assert spark.conf.values == {"a": "1"}


def test_session_conf_restores_after_an_error() -> None:
    spark = _Session({"a": "1"})
    with pytest.raises(RuntimeError), session_conf(spark, {"a": "2"}):
        raise RuntimeError("boom")
    assert spark.conf.values == {"a": "1"}


@pytest.mark.parametrize(
    ("records", "compressed"),
    [
        (None, "false"),
        (10, "false"),
        (UNCOMPRESSED_MAX_RECORDS, "false"),
        (UNCOMPRESSED_MAX_RECORDS + 1, "true"),
    ],
)
def test_cached_batch_compresses_only_large_batches(records: int | None, compressed: str) -> None:
    from pyspark import StorageLevel

    spark = _Session({COMPRESSED_CONF: "true"})
    frame = _Frame(spark)
    with cached_batch(spark, frame, records) as kept:
        assert kept is frame
        assert frame.persisted_with == compressed
        assert frame.level == StorageLevel.MEMORY_AND_DISK_DESER
        # The setting only matters when the cache is declared; the session gets its own back.
        assert spark.conf.values == {COMPRESSED_CONF: "true"}
        assert not frame.unpersisted
    assert frame.unpersisted


def test_cached_batch_releases_the_cache_after_an_error() -> None:
    spark = _Session()
    frame = _Frame(spark)
    with pytest.raises(ValueError, match="write failed"), cached_batch(spark, frame, 5):
        raise ValueError("write failed")
    assert frame.unpersisted
    assert spark.conf.values == {}


def test_small_batches_plan_statically_and_large_or_unknown_ones_adaptively() -> None:
    from cdc_assets.pipeline.shared.small_work import (
        ADAPTIVE_CONF,
        SHUFFLE_PARTITIONS_CONF,
        SMALL_WORK_PARTITIONS,
        SMALL_WORK_ROWS,
        offsets_span,
        small_work_conf,
    )

    static = {ADAPTIVE_CONF: "false", SHUFFLE_PARTITIONS_CONF: str(SMALL_WORK_PARTITIONS)}
    assert small_work_conf(0) == static
    assert small_work_conf(SMALL_WORK_ROWS - 1) == static
    assert small_work_conf(SMALL_WORK_ROWS) == {}
    assert small_work_conf(None) == {}
    # a partition new since the start counts from offset 0; one that did not move counts 0
    assert offsets_span({0: 100, 1: 5}, {0: 150, 1: 5, 2: 7}) == 57
    assert offsets_span({}, {}) == 0
    spark = _Session({ADAPTIVE_CONF: "true"})
    with session_conf(spark, small_work_conf(10)):
        assert spark.conf.values[ADAPTIVE_CONF] == "false"
    assert spark.conf.values[ADAPTIVE_CONF] == "true"


def test_only_small_ingest_batches_run_interpreted() -> None:
    from cdc_assets.pipeline.shared.small_work import (
        INTERPRETED_CONF,
        INTERPRETED_ROWS,
        SMALL_WORK_ROWS,
        small_work_conf,
    )

    assert INTERPRETED_ROWS < SMALL_WORK_ROWS
    static = small_work_conf(INTERPRETED_ROWS)
    small = {**static, **INTERPRETED_CONF}
    assert small_work_conf(0, interpreted=True) == small
    assert small_work_conf(INTERPRETED_ROWS - 1, interpreted=True) == small
    assert small_work_conf(INTERPRETED_ROWS, interpreted=True) == static
    assert small_work_conf(SMALL_WORK_ROWS, interpreted=True) == {}
    assert small_work_conf(None, interpreted=True) == {}
    # the upsert's window never runs interpreted, whatever its size
    assert small_work_conf(10) == static


def test_upsert_statements_run_interpreted_when_everything_they_read_is_small() -> None:
    from cdc_assets.pipeline.shared.small_work import (
        INTERPRETED_CONF,
        INTERPRETED_ROWS,
        interpreted_conf,
        snapshot_records,
    )

    assert interpreted_conf(0) == INTERPRETED_CONF
    assert interpreted_conf(INTERPRETED_ROWS - 1) == INTERPRETED_CONF
    assert interpreted_conf(INTERPRETED_ROWS) == {}
    assert interpreted_conf(None) == {}
    # a copy: a caller adding settings to it changes nobody else's
    interpreted_conf(0)["x"] = "y"
    assert "x" not in INTERPRETED_CONF
    assert snapshot_records(None) == 0
    assert snapshot_records({}) == 0
    assert snapshot_records({"total-records": "1234", "total-data-files": "3"}) == 1234


def _overlap(records: tuple[int | None, int | None]) -> bool:
    """Whether two threads' batches of these sizes were cached at the same time."""
    import threading

    inside = threading.Event()
    release = threading.Event()
    overlapped: list[bool] = []

    def first() -> None:
        spark = _Session()
        with cached_batch(spark, _Frame(spark), records[0]):
            inside.set()
            release.wait(5)

    def second() -> None:
        spark = _Session()
        inside.wait(5)
        with cached_batch(spark, _Frame(spark), records[1]):
            overlapped.append(not release.is_set())

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    # The second thread has had time to enter its block unless it waits for the first.
    threads[1].join(0.5)
    release.set()
    for thread in threads:
        thread.join(5)
    return overlapped == [True]


@pytest.mark.parametrize(
    ("records", "overlap"),
    [
        ((10, 10), True),
        ((LARGE_BATCH_RECORDS - 1, LARGE_BATCH_RECORDS - 1), True),
        ((LARGE_BATCH_RECORDS, 10), True),
        ((LARGE_BATCH_RECORDS, LARGE_BATCH_RECORDS), False),
        ((None, 2_000_000), False),
    ],
)
def test_one_large_batch_at_a_time_per_driver(
    records: tuple[int | None, int | None], overlap: bool
) -> None:
    assert _overlap(records) is overlap


def test_a_step_holding_the_large_slot_can_cache_another_batch() -> None:
    spark = _Session()
    with (
        cached_batch(spark, _Frame(spark), LARGE_BATCH_RECORDS),
        cached_batch(spark, _Frame(spark), None) as inner,
    ):
        assert not inner.unpersisted
