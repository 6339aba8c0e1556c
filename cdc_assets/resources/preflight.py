"""Checks a run makes of a shared deployment before it writes anything: the catalog answers, the
warehouse bucket exists and takes the configured credentials, the cluster gives the run an
executor, and a secured Kafka takes the configured credentials and certificates. Each failure
is a ConfigError that names the setting to fix, instead of an AWS, JDBC, Kafka or Spark
error halfway through a job (or a job that waits forever for executors).

The embedded default (a SQLite catalog file and a warehouse directory made by `stack up`) needs no
check; a check that passed is not repeated in the same process.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cdc_assets.errors import ConfigError
from cdc_assets.kafka_security import (
    ENV_CA,
    ENV_HOSTNAME_CHECK,
    ENV_KEYSTORE,
    ENV_KEYSTORE_PASSWORD,
    ENV_MECHANISM,
    ENV_OAUTH_CLIENT_ID,
    ENV_OAUTH_CLIENT_SECRET,
    ENV_OAUTH_SCOPE,
    ENV_OAUTH_TOKEN_URL,
    ENV_PASSWORD,
    ENV_PROTOCOL,
    ENV_USERNAME,
    KafkaSecurity,
)
from cdc_assets.resources.config import CatalogConfig, pyiceberg_catalog_props
from cdc_assets.settings import (
    ENV_CATALOG_PROPERTIES,
    ENV_CATALOG_URI,
    ENV_KAFKA_BOOTSTRAP,
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
    from cdc_assets.pipeline.shared.session_kind import is_connect

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


# How long the credentials check waits for the broker's verdict. An unreachable broker is not
# this check's business (the run's own Kafka calls wait and report it as before): only an
# answer that refuses the credentials or the certificates fails here.
KAFKA_CHECK_TIMEOUT_S = 10.0


def check_kafka(
    bootstrap: str,
    security: KafkaSecurity,
    conf: dict[str, Any],
    timeout_s: float = KAFKA_CHECK_TIMEOUT_S,
) -> None:
    """The security files are usable, then the broker accepts the credentials and the TLS
    handshake; else ConfigError naming the setting to fix. Passes once per process and setup."""
    key = ("kafka", bootstrap, repr(security))
    if key in _PASSED:
        return
    check_kafka_files(security)
    from confluent_kafka.admin import AdminClient

    # librdkafka tells why a connection failed only in its log lines (the exception says
    # "transport failure"): a logger of the check's own collects them.
    errors: list[str] = []
    collector = _Collector(errors)
    logger = logging.getLogger(f"{__name__}.kafka.{id(collector)}")
    logger.propagate = False
    logger.addHandler(collector)
    client_conf: dict[str, Any] = {**conf, "logger": logger, "error_cb": lambda e: None}
    admin = AdminClient(client_conf)
    try:
        deadline = time.monotonic() + min(timeout_s, KAFKA_CHECK_TIMEOUT_S)
        while time.monotonic() < deadline:
            try:
                admin.list_topics(timeout=1.0)
                _PASSED.add(key)
                return
            except Exception:  # KafkaException: timed out or refused; the log says which
                admin.poll(0.1)  # serves the log lines collected so far
            if refused := kafka_refusal(bootstrap, security, errors):
                raise ConfigError(refused)
    finally:
        logger.removeHandler(collector)


class _Collector(logging.Handler):
    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record.getMessage())


def kafka_refusal(bootstrap: str, security: KafkaSecurity, errors: list[str]) -> str | None:
    """The clear message for librdkafka errors that mean "these credentials or certificates
    will not work", or None when none of ``errors`` is such a refusal."""
    text = " | ".join(errors)
    lowered = text.lower()
    first = next((e for e in errors if "ssl" in e.lower() or "sasl" in e.lower()), "")
    # "FAIL [rdkafka#producer-3] [thrd:sasl_ssl://host:port/bootstrap]: sasl_ssl://...: why"
    first = re.sub(r"^.*?\]: \S+: ", "", first)[:300]
    oidc = next((e for e in errors if "failed to retrieve oidc token" in e.lower()), None)
    if oidc is not None:
        # "OIDC [rdkafka#...] [thrd:background]: Failed to retrieve OIDC token from "url": why"
        why = re.sub(r"^.*?Failed to retrieve OIDC token from \S+: ", "", oidc)[:300]
        return (
            f"the OAuth token endpoint {security.oauth_token_url} ({ENV_OAUTH_TOKEN_URL}) gave "
            f"no token for Kafka at {bootstrap}: check {ENV_OAUTH_TOKEN_URL}, "
            f"{ENV_OAUTH_CLIENT_ID} / {ENV_OAUTH_CLIENT_SECRET} and {ENV_OAUTH_SCOPE} ({why})"
        )
    if "authentication failed" in lowered or "sasl authentication error" in lowered:
        names = (
            f"{ENV_OAUTH_CLIENT_ID} / {ENV_OAUTH_CLIENT_SECRET}"
            if security.mechanism == "OAUTHBEARER"
            else f"{ENV_USERNAME} / {ENV_PASSWORD}"
        )
        return (
            f"Kafka at {bootstrap} refused the {security.mechanism} credentials: check {names} "
            f"and {ENV_MECHANISM} ({first})"
        )
    if "certificate verify failed" in lowered:
        if "hostname mismatch" in lowered or "ip address mismatch" in lowered:
            return (
                f"the certificate of Kafka at {bootstrap} does not name that host: connect by a "
                f"name it holds, or set {ENV_HOSTNAME_CHECK}=none ({first})"
            )
        return (
            f"the certificate of Kafka at {bootstrap} is not signed by a trusted CA: point "
            f"{ENV_CA} at the CA that signed the brokers' certificates ({first})"
        )
    if "ssl handshake failed" in lowered or ("alert" in lowered and "ssl" in lowered):
        if any(
            s in lowered
            for s in ("wrong version number", "packet length too long", "plaintext broker")
        ):
            return (
                f"Kafka at {bootstrap} does not speak TLS on that port: check "
                f"{ENV_KAFKA_BOOTSTRAP} and {ENV_PROTOCOL} ({first})"
            )
        if not security.keystore:
            return (
                f"Kafka at {bootstrap} refused the TLS handshake: it may require a client "
                f"certificate; set {ENV_KEYSTORE} ({first})"
            )
        return (
            f"Kafka at {bootstrap} refused the TLS handshake, usually the client certificate "
            f"(expired, or not signed by a CA the brokers trust): check {ENV_KEYSTORE} "
            f"({first})"
        )
    return None


def check_kafka_files(security: KafkaSecurity) -> None:
    """The CA file holds PEM certificates, and the key store opens with its password and holds
    a certificate valid now; else ConfigError naming the setting."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import pkcs12

    if security.ca:
        try:
            x509.load_pem_x509_certificates(Path(security.ca).expanduser().read_bytes())
        except OSError as exc:
            raise ConfigError(f"{ENV_CA}: cannot read {security.ca}: {exc.strerror}") from None
        except ValueError:
            raise ConfigError(
                f"{ENV_CA}: {security.ca} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
            ) from None
    if security.keystore:
        try:
            data = Path(security.keystore).expanduser().read_bytes()
        except OSError as exc:
            raise ConfigError(
                f"{ENV_KEYSTORE}: cannot read {security.keystore}: {exc.strerror}"
            ) from None
        try:
            _, cert, _ = pkcs12.load_key_and_certificates(
                data, (security.keystore_password or "").encode()
            )
        except ValueError:
            raise ConfigError(
                f"{ENV_KEYSTORE}: {security.keystore} is not a PKCS#12 key store that "
                f"{ENV_KEYSTORE_PASSWORD} opens"
            ) from None
        if cert is None:
            raise ConfigError(f"{ENV_KEYSTORE}: {security.keystore} holds no certificate")
        now = datetime.now(UTC)
        if cert.not_valid_after_utc < now:
            raise ConfigError(
                f"{ENV_KEYSTORE}: the client certificate in {security.keystore} expired on "
                f"{cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC: renew it"
            )
        if cert.not_valid_before_utc > now:
            raise ConfigError(
                f"{ENV_KEYSTORE}: the client certificate in {security.keystore} is valid only "
                f"from {cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC"
            )
