"""Which topic an ingest reads next after a followed rename of the source table, and how the
ledger numbers it (pipeline.shared.offsets.next_read; pure but for the ``unread`` callback)."""

from __future__ import annotations

import pytest

from cdc_assets.pipeline.shared.offsets import ForeignTopicError, LedgerMark, next_read

pytestmark = pytest.mark.unit


def never(topic: str) -> bool:
    raise AssertionError(f"{topic} need not be asked about")


def test_a_ledger_on_its_spec_s_topic_reads_on_in_kafka_s_numbering() -> None:
    mark = LedgerMark("srv.db.b", {0: 130, 1: 7}, {0: 100})
    read = next_read("srv.db.b", ["srv.db.a"], mark, never)
    assert (read.topic, read.committed) == ("srv.db.b", {0: 30, 1: 7})
    assert read.ledger({0: 45, 1: 9}) == {0: 145, 1: 9}
    first = next_read("srv.db.a", [], LedgerMark(), never)
    assert (first.topic, first.shift, first.committed) == ("srv.db.a", {}, {})


def test_a_former_topic_is_read_to_its_end_before_the_next() -> None:
    mark = LedgerMark("srv.db.a", {0: 100}, {})
    read = next_read("srv.db.c", ["srv.db.a", "srv.db.b"], mark, lambda t: True)
    assert (read.topic, read.committed) == ("srv.db.a", {0: 100})
    # drained: the next former name's topic, numbered on from the old end, from its start
    read = next_read("srv.db.c", ["srv.db.a", "srv.db.b"], mark, lambda t: False)
    assert (read.topic, read.shift, read.committed) == ("srv.db.b", {0: 100}, None)
    assert read.ledger({0: 0}) == {0: 100}
    mark = LedgerMark("srv.db.b", {0: 140}, {0: 100})
    read = next_read("srv.db.c", ["srv.db.a", "srv.db.b"], mark, lambda t: False)
    assert (read.topic, read.shift, read.committed) == ("srv.db.c", {0: 140}, None)


def test_a_topic_the_spec_does_not_know_is_an_error_not_a_fresh_start() -> None:
    with pytest.raises(ForeignTopicError, match="neither reads"):
        next_read("srv.db.b", [], LedgerMark("srv.db.a", {0: 5}), never, "people")
