"""Checks a run makes of a shared deployment before it writes anything: the catalog answers, the
warehouse bucket exists and takes the configured credentials, and the cluster gives the run an
executor. Each failure is a ConfigError that names the setting to fix, instead of an AWS, JDBC
or Spark error halfway through a job (or a job that waits forever for executors).

The embedded default (a SQLite catalog file and a warehouse directory made by `stack up`) needs no
check; a check that passed is not repeated in the same process.
"""

from __future__ import annotations

import threading
from typing import Any

from cdc_assets.errors import ConfigError
from cdc_assets.resources.config import CatalogConfig, pyiceberg_catalog_props
from cdc_assets.settings import (
    ENV_CATALOG_PROPERTIES,
    ENV_CATALOG_URI,
    ENV_SPARK_MASTER,
    ENV_SPARK_REMOTE,
    ENV_WAREHOUSE,
)

# A cluster's first executors take seconds to start; a run that has none after this long will
# not get one (the cluster is full, or no worker can host spark.executor.memory/cores).
EXECUTOR_TIMEOUT_S = 90.0
_PASSED: set[tuple[str, ...]] = set()


def _is_embedded(catalog: CatalogConfig) -> bool:
    return catalog.uri.startswith("jdbc:sqlite:") and catalog.warehouse.startswith("file:")


def check_catalog(catalog: CatalogConfig) -> None:
    """The catalog opens and lists its namespaces, and an ``s3://`` warehouse's bucket exists and
    accepts the credentials; else ConfigError naming the setting."""
    key = ("catalog", catalog.uri, catalog.warehouse, repr(sorted(catalog.properties.items())))
    if _is_embedded(catalog) or key in _PASSED:
        return
    from pyiceberg.catalog import load_catalog

    try:
        load_catalog(catalog.name, **pyiceberg_catalog_props(catalog)).list_namespaces()
    except Exception as exc:  # any driver's or HTTP error: all mean "this catalog cannot work"
        raise ConfigError(
            f"the Iceberg catalog {catalog.type} {catalog.uri} ({ENV_CATALOG_URI}) answered with "
            f"an error: {_first_line(exc)}. Check {ENV_CATALOG_URI} and the catalog's "
            f"credentials in {ENV_CATALOG_PROPERTIES} (jdbc.user/jdbc.password, a REST token)"
        ) from exc
    if catalog.warehouse.startswith(("s3://", "s3a://")):
        check_bucket(catalog)
    _PASSED.add(key)


def s3_filesystem(properties: dict[str, str]) -> Any:
    """A PyArrow S3 file system from Iceberg's S3 catalog properties (the ones S3FileIO reads)."""
    from pyarrow import fs

    options: dict[str, Any] = {"connect_timeout": 5, "request_timeout": 20}
    if endpoint := properties.get("s3.endpoint"):
        options["endpoint_override"] = endpoint
    if key := properties.get("s3.access-key-id"):
        options["access_key"] = key
        options["secret_key"] = properties.get("s3.secret-access-key", "")
    if region := properties.get("s3.region") or properties.get("client.region"):
        options["region"] = region
    return fs.S3FileSystem(**options)


def check_bucket(catalog: CatalogConfig) -> None:
    """The warehouse's bucket exists and the credentials may read it (one HEAD request)."""
    from pyarrow import fs

    bucket = catalog.warehouse.split("://", 1)[1].split("/", 1)[0]
    endpoint = catalog.properties.get("s3.endpoint", "AWS S3")
    try:
        info = s3_filesystem(catalog.properties).get_file_info(bucket)
    except OSError as exc:
        text = str(exc)
        if any(s in text for s in ("ACCESS_DENIED", "InvalidAccessKeyId", "SignatureDoesNotMatch")):
            raise ConfigError(
                f"the object store {endpoint} refused the credentials for bucket {bucket!r}: fix "
                f"s3.access-key-id / s3.secret-access-key in {ENV_CATALOG_PROPERTIES} "
                "(or the environment's AWS credentials)"
            ) from exc
        raise ConfigError(
            f"the object store {endpoint} of the warehouse {catalog.warehouse} ({ENV_WAREHOUSE}) "
            f"cannot be reached: {_first_line(exc)}. Check s3.endpoint in "
            f"{ENV_CATALOG_PROPERTIES}"
        ) from exc
    if info.type == fs.FileType.NotFound:
        raise ConfigError(
            f"the warehouse bucket {bucket!r} does not exist on {endpoint}: create it or point "
            f"{ENV_WAREHOUSE} at one that does"
        )


def check_executors(session: Any, where: str, timeout: float = EXECUTOR_TIMEOUT_S) -> None:
    """A one-row job finishes within ``timeout`` s; else the job is cancelled and ConfigError
    says that the cluster gave no executor. ``where`` is the master or Connect URL."""
    key = ("executors", where)
    if key in _PASSED:
        return
    outcome: list[BaseException | None] = []

    def probe() -> None:
        try:
            session.range(1).count()
            outcome.append(None)
        except BaseException as exc:  # reported below
            outcome.append(exc)

    thread = threading.Thread(target=probe, name="cdc-assets-executor-probe", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        _cancel(session)
        raise ConfigError(
            f"the Spark cluster at {where} ran no task in {timeout:.0f} s: no worker accepted "
            "an executor. The cluster may be full, or its workers have less memory or fewer "
            "cores than spark.executor.memory / spark.executor.cores ask for (see the master's "
            f"UI); fix the workers or those settings of the driver ({ENV_SPARK_REMOTE}, "
            f"{ENV_SPARK_MASTER})"
        )
    if outcome and outcome[0] is not None:
        raise ConfigError(
            f"the Spark cluster at {where} failed a one-row job: {_first_line(outcome[0])}"
        ) from outcome[0]
    _PASSED.add(key)


def _cancel(session: Any) -> None:
    from cdc_assets.pipeline.session_kind import is_connect

    try:
        if is_connect(session):
            session.interruptAll()
        else:
            session.sparkContext.cancelAllJobs()
    except Exception:  # the error raised next says what matters
        pass


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:400]
