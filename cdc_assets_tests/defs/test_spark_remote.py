"""A Spark Connect server that does not answer is a clear error at once, naming the setting (the
Connect client alone retries for many minutes); a session the server lost (it was started again)
is told apart from other failures and replaced."""

import socket
import threading
import time
from typing import Any

import pytest
from pyspark.errors.exceptions.connect import SparkConnectException

import cdc_assets.resources.spark as spark_module
from cdc_assets.errors import CdcAssetsError
from cdc_assets.resources.iceberg import IcebergCatalogResource
from cdc_assets.resources.spark import (
    SparkResource,
    own_session_per_thread,
    require_reachable,
    session_lost,
)

pytestmark = pytest.mark.defs


def test_an_unreachable_server_fails_fast_naming_the_setting() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(CdcAssetsError, match="CDC_ASSETS_SPARK_REMOTE"):
        require_reachable(f"sc://127.0.0.1:{port}")
    assert time.monotonic() - started < 5


def test_a_listening_server_passes() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        require_reachable(f"sc://127.0.0.1:{server.getsockname()[1]}/;use_ssl=false")


def _remote_resource() -> SparkResource:
    catalog = IcebergCatalogResource(uri="jdbc:sqlite::memory:", warehouse="file:///unused")
    return SparkResource(catalog=catalog, home="unused", remote="sc://127.0.0.1:1")


def _lost() -> Exception:
    return SparkConnectException(errorClass="NO_ACTIVE_SESSION", messageParameters={})


def test_a_session_the_server_no_longer_has_is_told_apart_from_other_failures() -> None:
    assert session_lost(_lost())
    wrapped = RuntimeError("the ingest failed")
    wrapped.__cause__ = _lost()
    assert session_lost(wrapped)  # found through the chain
    other = SparkConnectException(
        errorClass="CANNOT_PARSE_DATATYPE", messageParameters={"msg": "x"}
    )
    assert not session_lost(other)
    assert not session_lost(ValueError("the broker is away"))


def _in_thread(work: Any) -> Any:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(work()))
    thread.start()
    thread.join()
    return out[0]


def test_a_lost_session_is_forgotten_so_the_next_one_is_new() -> None:
    """Two table loops on one resource: the first to fail forgets the root and its own session;
    the second, whose session came from the same lost root, forgets only its own then."""
    spark = _remote_resource()
    lost_root, fresh_root = object(), object()
    spark._session = lost_root
    spark._opened = True

    def loop(own: object) -> tuple[bool, object]:
        own_session_per_thread()
        spark._thread_sessions.append(own)
        sessions = {id(lost_root): own}
        spark_module._THREAD.sessions = sessions
        return spark.forget_lost_session(_lost()), spark._session

    first, second = object(), object()
    assert _in_thread(lambda: loop(first)) == (True, None)
    spark._session = fresh_root  # the first loop's next cycle opened a new root
    assert _in_thread(lambda: loop(second)) == (True, fresh_root)
    assert spark._thread_sessions == []
    # Any other failure keeps every session; a local driver never forgets one.
    assert not spark.forget_lost_session(ValueError("the broker is away"))
    assert spark._session is fresh_root
    local = SparkResource(catalog=spark.catalog, home="unused")
    assert not local.forget_lost_session(_lost())


class _Client:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


class _Session:
    """A Connect session whose release waits on ``release`` (a server away retries for long)."""

    def __init__(self, release: threading.Event | None = None) -> None:
        self.release = release
        self.stopped = False
        self.client = _Client()

    def stop(self) -> None:
        if self.release is not None:
            self.release.wait()
        self.stopped = True


def test_a_run_end_never_waits_long_for_a_server_that_went_away() -> None:
    """Sessions are stopped; those that do not stop in time (the server is away) only close
    their channel, so that neither the run's end nor the process's exit waits for the
    server."""
    never = threading.Event()
    fine, stuck = _Session(), _Session(release=never)
    started = time.monotonic()
    spark_module._stop_within([fine, stuck], 0.5)
    assert time.monotonic() - started < 5
    assert fine.stopped
    assert not stuck.stopped
    assert stuck.client.closed
    never.set()
