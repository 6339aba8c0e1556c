"""Dagster resource for a lazily created Spark session wired to the Iceberg catalog."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from dagster import ConfigurableResource
from pydantic import Field, PrivateAttr

from cdc_assets.errors import CdcAssetsError
from cdc_assets.resources.config import spark_conf
from cdc_assets.resources.iceberg import IcebergCatalogResource
from cdc_assets.resources.preflight import check_executors
from cdc_assets.settings import Settings, load_settings

_THREAD = threading.local()

# Spark Connect sessions of this process are released together, when the last resource that
# opened one is torn down. Releasing one Connect session (the client's stop: release, then
# close) while another session of the same process holds a local checkpoint makes the server
# lose that checkpoint ("[INTERNAL_ERROR] No DataFrame with id ... is found in the session"):
# a run's teardown broke the redrive of another run in the same process (the in-process
# driver, the demo, a test session). Sessions of other processes are not affected, and a run
# worker of the daemon is a process of its own, so there this changes nothing.
_CONNECT_LOCK = threading.Lock()
_connect_users = 0
_connect_sessions: list[Any] = []


def _connect_opened() -> None:
    global _connect_users
    with _CONNECT_LOCK:
        _connect_users += 1


def _connect_closed(sessions: list[Any]) -> None:
    """One resource is done with ``sessions``: stop every session of the process once no
    resource uses one any more."""
    global _connect_users
    with _CONNECT_LOCK:
        _connect_sessions.extend(s for s in sessions if all(s is not k for k in _connect_sessions))
        _connect_users = max(_connect_users - 1, 0)
        if _connect_users:
            return
        done = list(_connect_sessions)
        _connect_sessions.clear()
    _stop_within(done, STOP_TIMEOUT_S)


# How long a run's end waits for its Connect sessions to be released. The client retries a
# server that went away for many minutes, at the release and again at the interpreter's exit
# (PySpark registers a cache cleanup per client with atexit): a run worker whose server had
# gone lingered half an hour after its run ended.
STOP_TIMEOUT_S = 15.0


def _stop_within(sessions: list[Any], timeout_s: float) -> None:
    """Stop ``sessions`` (release on the server, close the channel); those not stopped within
    ``timeout_s`` (the server is away) only close their channel, which asks nothing of the
    server, so that nothing at the process's exit waits for it either."""

    def stop_all() -> None:
        for session in sessions:
            with contextlib.suppress(Exception):
                session.stop()

    stopper = threading.Thread(target=stop_all, name="spark-connect-stop", daemon=True)
    stopper.start()
    stopper.join(timeout_s)
    if stopper.is_alive():
        for session in sessions:
            with contextlib.suppress(Exception):
                session.client.close()


def _in_own_thread(make: Any) -> Any:
    """``make()`` run in a short-lived thread of its own; its result (or its exception)."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append((make(), None))
        except BaseException as exc:  # re-raised in the caller
            out.append((None, exc))

    thread = threading.Thread(target=run, name="spark-connect-session")
    thread.start()
    thread.join()
    value, error = out[0]
    if error is not None:
        raise error
    return value


# Spark's error conditions for a Connect session the server no longer has: a server started
# again has none of its predecessor's sessions, and says so on every later call of one.
LOST_SESSION_CONDITIONS = frozenset(
    {
        "NO_ACTIVE_SESSION",
        "INVALID_HANDLE.SESSION_CHANGED",
        "INVALID_HANDLE.SESSION_CLOSED",
        "INVALID_HANDLE.SESSION_NOT_FOUND",
    }
)


def session_lost(exc: BaseException) -> bool:
    """True when ``exc`` (or an exception it was raised from) says the Spark Connect server no
    longer knows the session: a new session works, the old one never will again."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        condition = getattr(current, "getCondition", None)
        if callable(condition) and condition() in LOST_SESSION_CONDITIONS:
            return True
        current = current.__cause__ or current.__context__
    return False


def own_session_per_thread() -> None:
    """From now on, ``get_session()`` in this thread returns a session of its own (created once
    per thread, on the same driver): for threads that run steps of different tables at once,
    since a commit's snapshot properties, temporary views and SQL settings are session state."""
    _THREAD.own = True


class SparkResource(ConfigurableResource):  # type: ignore[type-arg]
    """Spark with Iceberg, the Kafka source and the catalog registered.

    No JVM starts until ``get_session()`` is called, so definitions load without Spark. On a
    cluster set ``master`` (``spark://...``, ``yarn``, ``k8s://...``) and use a REST catalog; the
    jars of the local jar cache are shipped to the executors with ``spark.jars``.
    """

    catalog: IcebergCatalogResource
    master: str = Field(default="local[*]", description="Spark master URL")
    remote: str | None = Field(
        default=None,
        description="sc://host:port of a Spark Connect server to use instead of a driver of "
        "its own (the server holds the Iceberg, Kafka and catalog configuration)",
    )
    app_name: str = "cdc-assets"
    home: str = Field(
        description="CDC_ASSETS_HOME: holds the jar cache that `cdc-assets jars` fills"
    )
    shuffle_partitions: int = 8
    driver_memory: str = "2g"
    ui_enabled: bool = False
    log_level: str = "WARN"
    extra_conf: dict[str, str] = Field(default_factory=dict, description="any other Spark conf")

    _session: Any = PrivateAttr(default=None)
    _lock: Any = PrivateAttr(default_factory=threading.Lock)
    _thread_sessions: list[Any] = PrivateAttr(default_factory=list)
    _opened: bool = PrivateAttr(default=False)

    def settings(self) -> Settings:
        return replace(load_settings(), home=Path(self.home))

    def conf(self) -> dict[str, str]:
        from cdc_assets.jars.maven import cached_spark_jars
        from cdc_assets.resources.class_archive import existing_archive

        settings = self.settings()
        jars = [str(p) for p in cached_spark_jars(settings)]
        return spark_conf(
            master=self.master,
            app_name=self.app_name,
            catalog=self.catalog.config(),
            jars=jars,
            shuffle_partitions=self.shuffle_partitions,
            driver_memory=self.driver_memory,
            ui_enabled=self.ui_enabled,
            extra=dict(self.extra_conf),
            java_options=settings.kafka_security.jvm_options(),
            class_archive=existing_archive(settings, jars),
        )

    def teardown_after_execution(self, context: Any) -> None:
        # A Connect session lives in the server until released; a local driver ends with the
        # run's process (and tests share theirs across runs).
        if self.remote and self._opened:
            sessions = [*self._thread_sessions, *[x for x in (self._session,) if x is not None]]
            self._thread_sessions.clear()
            self._session = None
            self._opened = False
            _connect_closed(sessions)

    def forget_lost_session(self, exc: BaseException) -> bool:
        """After ``exc`` from this thread's session: when it says the Spark Connect server lost
        the session (the server was started again), forget the sessions made on it, so that the
        next ``get_session()`` opens new ones on the server now there. True when it did; a long
        run (a continuous worker) then goes on instead of failing every later call."""
        if not self.remote or not session_lost(exc):
            return False
        sessions = getattr(_THREAD, "sessions", {})
        with self._lock:
            root = self._session
            ours = {id(x) for x in self._thread_sessions}
            # This thread's sessions of this resource (one per root it has seen): all made on
            # a server that has since lost them, or on a root already replaced.
            lost = {key: own for key, own in sessions.items() if id(own) in ours}
            for key in lost:
                del sessions[key]
            if root is not None and (id(root) in lost or not getattr(_THREAD, "own", False)):
                # The root is the lost server's too. (Another thread may have replaced it
                # already: then only this thread's sessions go.)
                self._session = None
            gone = {id(x) for x in lost.values()}
            self._thread_sessions[:] = [x for x in self._thread_sessions if id(x) not in gone]
        return True

    def get_session(self) -> Any:
        """The SparkSession, created on first use (fetching missing jars with Maven and compiling
        the project's functions first); in a thread that asked for one
        (``own_session_per_thread``), that thread's own session of the same driver."""
        with self._lock:
            root = self._root_session()
        if not getattr(_THREAD, "own", False):
            return root
        sessions = getattr(_THREAD, "sessions", None)
        if sessions is None:
            sessions = _THREAD.sessions = {}
        if id(root) not in sessions:
            if self.remote:
                from pyspark.sql import SparkSession

                # A Connect client has no newSession: a second client session of the server,
                # the active one of this thread (create() makes it so when the thread has
                # none, and the root session was made elsewhere).
                own = SparkSession.builder.remote(self.remote).create()
                own.conf.set("spark.sql.shuffle.partitions", str(self.shuffle_partitions))
                with self._lock:
                    self._thread_sessions.append(own)
            else:
                # Same SparkContext, catalogs and cache; its own SQL settings and views. Never
                # stopped: stopping any session of a local driver stops the driver.
                own = root.newSession()
            sessions[id(root)] = own
        return sessions[id(root)]

    def _root_session(self) -> Any:
        if self._session is None and self.remote:
            from pyspark.sql import SparkSession

            require_reachable(self.remote)
            remote = self.remote
            # Made in a thread of its own so that it never becomes the active session of a
            # step thread: PySpark Connect binds the DataFrame that localCheckpoint() returns
            # to the thread's active session, not to the session that made it, and a step
            # thread whose own session (below) was not the active one got checkpoints the
            # server had never heard of ("No DataFrame with id ... is found in the session",
            # an evolution's redrive, issue 53).
            # create(), not getOrCreate(): the resource's own session, never another resource's
            # default one (of another server, or released by its teardown).
            session = _in_own_thread(lambda: SparkSession.builder.remote(remote).create())
            # Runtime settings are per Connect session; the rest is the server's.
            session.conf.set("spark.sql.shuffle.partitions", str(self.shuffle_partitions))
            check_executors(session, self.remote)
            self._session = session
            if not self._opened:  # once per resource, however often a lost session is renewed
                self._opened = True
                _connect_opened()
        if self._session is None:
            from dagster_pyspark.resources import spark_session_from_config

            from cdc_assets.jars.own import spark_jars

            spark_jars(self.settings())
            if self.master.startswith("local"):
                # Spark picks its local address from the hostname otherwise; stay on loopback.
                os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            session = spark_session_from_config(self.conf())  # type: ignore[no-untyped-call]
            session.sparkContext.setLogLevel(self.log_level)
            if not self.master.startswith("local"):
                check_executors(session, self.master)
            self._session = session
        return self._session


# How long a Spark Connect server may take to accept a TCP connection before a run gives up; the
# Connect client itself retries an unreachable server for many minutes.
CONNECT_TIMEOUT_S = 10.0


def require_reachable(remote: str) -> None:
    """Fail fast, naming the setting, when the Spark Connect server of ``remote``
    (``sc://host:port[/;params]``) does not accept connections."""
    from urllib.parse import urlparse

    parsed = urlparse(remote)
    host, port = parsed.hostname or "localhost", parsed.port or 15002
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            return
    except OSError as exc:
        raise CdcAssetsError(
            f"the Spark Connect server {remote} does not answer ({exc}): start it (the local "
            "stack: `cdc-assets stack up --spark-connect`) or fix CDC_ASSETS_SPARK_REMOTE"
        ) from exc
