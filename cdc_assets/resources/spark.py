"""Dagster resource for a lazily created Spark session wired to the Iceberg catalog."""

from __future__ import annotations

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

    def settings(self) -> Settings:
        return replace(load_settings(), home=Path(self.home))

    def conf(self) -> dict[str, str]:
        from cdc_assets.stack.jars import cached_spark_jars

        jars = [str(p) for p in cached_spark_jars(self.settings())]
        return spark_conf(
            master=self.master,
            app_name=self.app_name,
            catalog=self.catalog.config(),
            jars=jars,
            shuffle_partitions=self.shuffle_partitions,
            driver_memory=self.driver_memory,
            ui_enabled=self.ui_enabled,
            extra=dict(self.extra_conf),
        )

    def teardown_after_execution(self, context: Any) -> None:
        # A Connect session lives in the server until released; a local driver ends with the
        # run's process (and tests share theirs across runs).
        if self.remote and self._session is not None:
            for session in self._thread_sessions:
                session.stop()
            self._thread_sessions.clear()
            self._session.stop()
            self._session = None

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

                # A Connect client has no newSession: a second client session of the server.
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
            session = SparkSession.builder.remote(self.remote).getOrCreate()
            # Runtime settings are per Connect session; the rest is the server's.
            session.conf.set("spark.sql.shuffle.partitions", str(self.shuffle_partitions))
            check_executors(session, self.remote)
            self._session = session
        if self._session is None:
            from dagster_pyspark.resources import spark_session_from_config

            from cdc_assets.stack.jars import spark_jars

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
