"""Kafka client security from one block of settings, rendered for each client that needs it;
and the schema registry client's credentials.

The project talks to Kafka through three clients whose settings differ: librdkafka (sensors, the
CLI, offsets, schema-change topics), the Java client inside Spark's Kafka source (the ingest, on
executors), and the Java client inside Kafka Connect (a company's Debezium workers). One
`KafkaSecurity`, read from ``CDC_ASSETS_KAFKA_*`` variables (secrets also from files, see
`settings.with_secret_files`), renders to each. Plain data, no I/O: `resources.preflight` checks
the files and the broker's answer before a run writes anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cdc_assets.errors import ConfigError

ENV_PROTOCOL = "CDC_ASSETS_KAFKA_SECURITY_PROTOCOL"
ENV_MECHANISM = "CDC_ASSETS_KAFKA_SASL_MECHANISM"
ENV_USERNAME = "CDC_ASSETS_KAFKA_SASL_USERNAME"
ENV_PASSWORD = "CDC_ASSETS_KAFKA_SASL_PASSWORD"
ENV_CA = "CDC_ASSETS_KAFKA_SSL_CA_LOCATION"
ENV_KEYSTORE = "CDC_ASSETS_KAFKA_SSL_KEYSTORE_LOCATION"
ENV_KEYSTORE_PASSWORD = "CDC_ASSETS_KAFKA_SSL_KEYSTORE_PASSWORD"
ENV_HOSTNAME_CHECK = "CDC_ASSETS_KAFKA_SSL_ENDPOINT_IDENTIFICATION"
ENV_OAUTH_TOKEN_URL = "CDC_ASSETS_KAFKA_OAUTH_TOKEN_URL"
ENV_OAUTH_CLIENT_ID = "CDC_ASSETS_KAFKA_OAUTH_CLIENT_ID"
ENV_OAUTH_CLIENT_SECRET = "CDC_ASSETS_KAFKA_OAUTH_CLIENT_SECRET"
ENV_OAUTH_SCOPE = "CDC_ASSETS_KAFKA_OAUTH_SCOPE"

ALL_VARIABLES = (
    ENV_PROTOCOL,
    ENV_MECHANISM,
    ENV_USERNAME,
    ENV_PASSWORD,
    ENV_CA,
    ENV_KEYSTORE,
    ENV_KEYSTORE_PASSWORD,
    ENV_HOSTNAME_CHECK,
    ENV_OAUTH_TOKEN_URL,
    ENV_OAUTH_CLIENT_ID,
    ENV_OAUTH_CLIENT_SECRET,
    ENV_OAUTH_SCOPE,
)

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")

# The Java client's login modules per mechanism (sasl.jaas.config).
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "OAUTHBEARER": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
}
# Fetches OAuth tokens with client credentials (Kafka 3.4 and later, KIP-768).
OAUTH_CALLBACK_HANDLER = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
)
# Kafka 4's Java client calls only the OAuth token endpoints this JVM-wide system property
# allows (empty by default): every JVM that runs one (Spark's driver and executors, a Connect
# worker) needs it on its command line; librdkafka has no such list.
ALLOWED_URLS_PROPERTY = "org.apache.kafka.sasl.oauthbearer.allowed.urls"
# The prefixes under which a Connect worker passes client settings to its producers, consumers
# and admin clients, and under which Debezium's MySQL/MariaDB connectors pass them to the
# clients of their schema history topic.
CONNECT_CLIENT_PREFIXES = ("", "producer.", "consumer.", "admin.")
DEBEZIUM_HISTORY_PREFIXES = (
    "schema.history.internal.producer.",
    "schema.history.internal.consumer.",
)


@dataclass(frozen=True)
class KafkaSecurity:
    """How Kafka clients authenticate and encrypt. The default is plaintext, no authentication.

    ``ca``: the CA certificates (PEM) that signed the brokers' certificates; unset means the
    system's trust store. ``keystore``: the client's certificate and key as PKCS#12 (mutual TLS),
    with ``keystore_password``. ``hostname_check``: False turns off the check that a broker's
    certificate names its host (only for brokers reached by an address their certificate lacks).
    """

    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    ca: str | None = None
    keystore: str | None = None
    keystore_password: str | None = None
    hostname_check: bool = True
    oauth_token_url: str | None = None
    oauth_client_id: str | None = None
    oauth_client_secret: str | None = None
    oauth_scope: str | None = None

    @property
    def enabled(self) -> bool:
        """True unless this is the unauthenticated plaintext default."""
        return self.protocol != "PLAINTEXT"

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.protocol.endswith("SSL")

    def secrets(self) -> list[str]:
        """The secret values, for redaction."""
        values = (self.password, self.keystore_password, self.oauth_client_secret)
        return [v for v in values if v]

    def librdkafka(self) -> dict[str, str]:
        """Settings for librdkafka (confluent-kafka's Consumer, Producer and AdminClient)."""
        if not self.enabled:
            return {}
        out = {"security.protocol": self.protocol}
        if self.uses_sasl and self.mechanism:
            out["sasl.mechanism"] = self.mechanism
            if self.mechanism == "OAUTHBEARER":
                out["sasl.oauthbearer.method"] = "oidc"
                out.update(
                    _present(
                        {
                            "sasl.oauthbearer.token.endpoint.url": self.oauth_token_url,
                            "sasl.oauthbearer.client.id": self.oauth_client_id,
                            "sasl.oauthbearer.client.secret": self.oauth_client_secret,
                            "sasl.oauthbearer.scope": self.oauth_scope,
                        }
                    )
                )
            else:
                credentials = {"sasl.username": self.username, "sasl.password": self.password}
                out.update(_present(credentials))
        if self.uses_tls:
            out.update(
                _present(
                    {
                        "ssl.ca.location": self.ca,
                        "ssl.keystore.location": self.keystore,
                        "ssl.keystore.password": self.keystore_password,
                    }
                )
            )
            check = "https" if self.hostname_check else "none"
            out["ssl.endpoint.identification.algorithm"] = check
        return out

    def java(self) -> dict[str, str]:
        """Settings for Kafka's Java client, unprefixed (Spark's Kafka source takes each under
        ``kafka.``; a Connect worker takes them as `connect_worker` renders)."""
        if not self.enabled:
            return {}
        out = {"security.protocol": self.protocol}
        if self.uses_sasl and self.mechanism:
            out["sasl.mechanism"] = self.mechanism
            out["sasl.jaas.config"] = self._jaas()
            if self.mechanism == "OAUTHBEARER":
                out["sasl.login.callback.handler.class"] = OAUTH_CALLBACK_HANDLER
                out.update(_present({"sasl.oauthbearer.token.endpoint.url": self.oauth_token_url}))
        if self.uses_tls:
            if self.ca:
                out["ssl.truststore.type"] = "PEM"
                out["ssl.truststore.location"] = self.ca
            if self.keystore:
                out["ssl.keystore.type"] = "PKCS12"
                out["ssl.keystore.location"] = self.keystore
                out.update(_present({"ssl.keystore.password": self.keystore_password}))
            out["ssl.endpoint.identification.algorithm"] = "https" if self.hostname_check else ""
        return out

    def jvm_options(self) -> list[str]:
        """JVM options the Java client needs besides its properties: the OAUTHBEARER token
        endpoint allowed (ALLOWED_URLS_PROPERTY)."""
        if self.uses_sasl and self.mechanism == "OAUTHBEARER" and self.oauth_token_url:
            return [f"-D{ALLOWED_URLS_PROPERTY}={self.oauth_token_url}"]
        return []

    def spark_options(self) -> dict[str, str]:
        """Options of Spark's Kafka source (``kafka.`` + the Java client's settings)."""
        return {f"kafka.{k}": v for k, v in self.java().items()}

    def connect_worker(self) -> dict[str, str]:
        """A Kafka Connect worker's properties: the worker's own clients and, prefixed, the
        producers, consumers and admin clients it makes for connectors."""
        java = self.java()
        return {f"{p}{k}": v for p in CONNECT_CLIENT_PREFIXES for k, v in java.items()}

    def debezium_history(self) -> dict[str, str]:
        """Connector properties for the clients of Debezium's schema history topic (MySQL and
        MariaDB connectors): they do not inherit the worker's settings."""
        java = self.java()
        return {f"{p}{k}": v for p in DEBEZIUM_HISTORY_PREFIXES for k, v in java.items()}

    def _jaas(self) -> str:
        module = _LOGIN_MODULES[self.mechanism or ""]
        if self.mechanism == "OAUTHBEARER":
            options = {
                "clientId": self.oauth_client_id,
                "clientSecret": self.oauth_client_secret,
                "scope": self.oauth_scope,
            }
        else:
            options = {"username": self.username, "password": self.password}
        rendered = " ".join(f'{k}="{_jaas_quote(v)}"' for k, v in options.items() if v)
        return f"{module} required {rendered};"


def _present(values: Mapping[str, str | None]) -> dict[str, str]:
    return {k: v for k, v in values.items() if v}


def _jaas_quote(value: str) -> str:
    """A JAAS option value inside double quotes: backslash and quote escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def kafka_security(env: Mapping[str, str]) -> KafkaSecurity:
    """Read and validate the ``CDC_ASSETS_KAFKA_*`` security variables; ConfigError naming the
    variable when they do not make a usable combination."""

    def get(name: str) -> str | None:
        value = env.get(name, "").strip()
        return value or None

    protocol = (get(ENV_PROTOCOL) or "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise ConfigError(f"{ENV_PROTOCOL} must be one of {', '.join(PROTOCOLS)}, not {protocol!r}")
    mechanism = get(ENV_MECHANISM)
    mechanism = mechanism.upper() if mechanism else None
    hostname = (get(ENV_HOSTNAME_CHECK) or "https").lower()
    if hostname not in ("https", "none"):
        raise ConfigError(f"{ENV_HOSTNAME_CHECK} must be https or none, not {hostname!r}")
    out = KafkaSecurity(
        protocol=protocol,
        mechanism=mechanism,
        username=get(ENV_USERNAME),
        password=env.get(ENV_PASSWORD) or None,  # a password keeps its spaces
        ca=get(ENV_CA),
        keystore=get(ENV_KEYSTORE),
        keystore_password=env.get(ENV_KEYSTORE_PASSWORD) or None,
        hostname_check=hostname == "https",
        oauth_token_url=get(ENV_OAUTH_TOKEN_URL),
        oauth_client_id=get(ENV_OAUTH_CLIENT_ID),
        oauth_client_secret=env.get(ENV_OAUTH_CLIENT_SECRET) or None,
        oauth_scope=get(ENV_OAUTH_SCOPE),
    )
    _validate(out)
    return out


def _validate(s: KafkaSecurity) -> None:
    if s.uses_sasl:
        if s.mechanism is None:
            raise ConfigError(
                f"{ENV_PROTOCOL}={s.protocol} needs {ENV_MECHANISM} ({', '.join(MECHANISMS)})"
            )
        if s.mechanism not in MECHANISMS:
            raise ConfigError(
                f"{ENV_MECHANISM} must be one of {', '.join(MECHANISMS)}, not {s.mechanism!r}"
            )
        needed: tuple[str, ...]
        values: tuple[str | None, ...]
        if s.mechanism == "OAUTHBEARER":
            needed = (ENV_OAUTH_TOKEN_URL, ENV_OAUTH_CLIENT_ID, ENV_OAUTH_CLIENT_SECRET)
            values = (s.oauth_token_url, s.oauth_client_id, s.oauth_client_secret)
        else:
            needed, values = (ENV_USERNAME, ENV_PASSWORD), (s.username, s.password)
        missing = [n for n, v in zip(needed, values, strict=True) if not v]
        if missing:
            raise ConfigError(f"{ENV_MECHANISM}={s.mechanism} needs {' and '.join(missing)}")
    elif s.mechanism or s.username or s.password:
        raise ConfigError(
            f"{ENV_MECHANISM}, {ENV_USERNAME} and {ENV_PASSWORD} apply only when "
            f"{ENV_PROTOCOL} is SASL_SSL or SASL_PLAINTEXT (it is {s.protocol})"
        )
    if not s.uses_tls and (s.ca or s.keystore):
        raise ConfigError(
            f"{ENV_CA} and {ENV_KEYSTORE} apply only when {ENV_PROTOCOL} is SSL or SASL_SSL "
            f"(it is {s.protocol})"
        )
    if s.keystore and not s.keystore_password:
        raise ConfigError(
            f"{ENV_KEYSTORE} needs {ENV_KEYSTORE_PASSWORD} (a PKCS#12 key store has one)"
        )


ENV_REGISTRY_USERNAME = "CDC_ASSETS_SCHEMA_REGISTRY_USERNAME"
ENV_REGISTRY_PASSWORD = "CDC_ASSETS_SCHEMA_REGISTRY_PASSWORD"
ENV_REGISTRY_CA = "CDC_ASSETS_SCHEMA_REGISTRY_CA_LOCATION"


@dataclass(frozen=True)
class RegistryAuth:
    """How the schema registry client authenticates (HTTP basic auth) and which CA it trusts
    for an ``https`` registry (unset: the system's trust store)."""

    username: str | None = None
    password: str | None = None
    ca: str | None = None

    def secrets(self) -> list[str]:
        return [self.password] if self.password else []

    def client_conf(self) -> dict[str, str]:
        """Settings of confluent-kafka's SchemaRegistryClient, besides its ``url``."""
        out = {}
        if self.username:
            out["basic.auth.user.info"] = f"{self.username}:{self.password or ''}"
        if self.ca:
            out["ssl.ca.location"] = self.ca
        return out


def registry_auth(env: Mapping[str, str]) -> RegistryAuth:
    """Read the ``CDC_ASSETS_SCHEMA_REGISTRY_*`` credentials; a username needs a password."""
    username = env.get(ENV_REGISTRY_USERNAME, "").strip() or None
    password = env.get(ENV_REGISTRY_PASSWORD) or None
    if bool(username) != bool(password):
        raise ConfigError(
            f"set both {ENV_REGISTRY_USERNAME} and {ENV_REGISTRY_PASSWORD}, or neither"
        )
    if username and ":" in username:
        raise ConfigError(f"{ENV_REGISTRY_USERNAME} cannot hold ':' (HTTP basic auth splits on it)")
    return RegistryAuth(username, password, env.get(ENV_REGISTRY_CA, "").strip() or None)
