"""One Kafka security block, rendered for librdkafka, Spark's Kafka source (the Java client),
a Connect worker and Debezium's history clients; bad combinations name the variable to fix; the
broker's refusals become messages that name the setting. The real broker's listeners are in
integration/test_kafka_security.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_assets import kafka_security as ks
from cdc_assets.cli.kafka import render_kafka_conf
from cdc_assets.errors import ConfigError
from cdc_assets.resources.preflight import kafka_refusal
from cdc_assets.settings import load_settings

pytestmark = pytest.mark.unit

SCRAM = {
    ks.ENV_PROTOCOL: "sasl_ssl",
    ks.ENV_MECHANISM: "scram-sha-512",
    ks.ENV_USERNAME: "cdc",
    ks.ENV_PASSWORD: 'p"w\\d',
    ks.ENV_CA: "/etc/kafka/ca.pem",
}


def test_plaintext_by_default_renders_nothing() -> None:
    security = ks.kafka_security({})
    assert not security.enabled
    assert security.librdkafka() == security.java() == security.connect_worker() == {}


def test_scram_over_tls_for_each_client() -> None:
    security = ks.kafka_security(SCRAM)
    assert security.librdkafka() == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "cdc",
        "sasl.password": 'p"w\\d',
        "ssl.ca.location": "/etc/kafka/ca.pem",
        "ssl.endpoint.identification.algorithm": "https",
    }
    java = security.java()
    assert java["sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="cdc" password="p\\"w\\\\d";'
    )
    assert java["ssl.truststore.type"] == "PEM"
    assert java["ssl.truststore.location"] == "/etc/kafka/ca.pem"
    assert security.spark_options()["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    worker = security.connect_worker()
    for prefix in ("", "producer.", "consumer.", "admin."):
        assert worker[f"{prefix}security.protocol"] == "SASL_SSL"
    history = security.debezium_history()
    assert history["schema.history.internal.producer.sasl.jaas.config"] == java["sasl.jaas.config"]
    assert security.secrets() == ['p"w\\d']


def test_mutual_tls_with_a_pkcs12_store() -> None:
    security = ks.kafka_security(
        {
            ks.ENV_PROTOCOL: "SSL",
            ks.ENV_KEYSTORE: "/s/client.p12",
            ks.ENV_KEYSTORE_PASSWORD: "storepw",
            ks.ENV_HOSTNAME_CHECK: "none",
        }
    )
    assert security.librdkafka() == {
        "security.protocol": "SSL",
        "ssl.keystore.location": "/s/client.p12",
        "ssl.keystore.password": "storepw",
        "ssl.endpoint.identification.algorithm": "none",
    }
    assert security.java() == {
        "security.protocol": "SSL",
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": "/s/client.p12",
        "ssl.keystore.password": "storepw",
        "ssl.endpoint.identification.algorithm": "",
    }


def test_oauthbearer_client_credentials() -> None:
    security = ks.kafka_security(
        {
            ks.ENV_PROTOCOL: "SASL_SSL",
            ks.ENV_MECHANISM: "OAUTHBEARER",
            ks.ENV_OAUTH_TOKEN_URL: "https://idp.example/token",
            ks.ENV_OAUTH_CLIENT_ID: "cdc-assets",
            ks.ENV_OAUTH_CLIENT_SECRET: "sekret",
            ks.ENV_OAUTH_SCOPE: "kafka",
        }
    )
    librdkafka = security.librdkafka()
    assert librdkafka["sasl.oauthbearer.method"] == "oidc"
    assert librdkafka["sasl.oauthbearer.client.secret"] == "sekret"
    java = security.java()
    assert java["sasl.login.callback.handler.class"] == ks.OAUTH_CALLBACK_HANDLER
    assert java["sasl.oauthbearer.token.endpoint.url"] == "https://idp.example/token"
    assert 'clientSecret="sekret"' in java["sasl.jaas.config"]


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({ks.ENV_PROTOCOL: "TLS"}, ks.ENV_PROTOCOL),
        ({ks.ENV_PROTOCOL: "SASL_SSL"}, ks.ENV_MECHANISM),
        ({ks.ENV_PROTOCOL: "SASL_SSL", ks.ENV_MECHANISM: "GSSAPI"}, ks.ENV_MECHANISM),
        ({**SCRAM, ks.ENV_PASSWORD: ""}, ks.ENV_PASSWORD),
        ({ks.ENV_PROTOCOL: "SASL_SSL", ks.ENV_MECHANISM: "OAUTHBEARER"}, ks.ENV_OAUTH_TOKEN_URL),
        ({ks.ENV_USERNAME: "cdc"}, ks.ENV_USERNAME),
        ({ks.ENV_PROTOCOL: "PLAINTEXT", ks.ENV_CA: "/ca.pem"}, ks.ENV_CA),
        ({ks.ENV_PROTOCOL: "SSL", ks.ENV_KEYSTORE: "/c.p12"}, ks.ENV_KEYSTORE_PASSWORD),
        ({ks.ENV_PROTOCOL: "SSL", ks.ENV_HOSTNAME_CHECK: "off"}, ks.ENV_HOSTNAME_CHECK),
    ],
)
def test_unusable_combinations_name_the_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        ks.kafka_security(env)


def test_password_from_a_file_and_never_printed(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("from-a-file\n", encoding="utf-8")
    env = {**SCRAM, f"{ks.ENV_PASSWORD}_FILE": str(secret)}
    del env[ks.ENV_PASSWORD]
    settings = load_settings(env)
    assert settings.kafka_security.password == "from-a-file"
    for client in ("librdkafka", "spark", "connect", "debezium"):
        lines = render_kafka_conf(settings, client, show_secrets=False)
        assert not any("from-a-file" in line for line in lines)
        assert lines[-1].startswith("# ")
    shown = render_kafka_conf(settings, "librdkafka", show_secrets=True)
    assert "sasl.password=from-a-file" in shown


SCRAM_SECURITY = ks.kafka_security(SCRAM)
MTLS = ks.kafka_security(
    {ks.ENV_PROTOCOL: "SSL", ks.ENV_KEYSTORE: "/c.p12", ks.ENV_KEYSTORE_PASSWORD: "x"}
)
LOG = (
    "FAIL [rdkafka#producer-3] [thrd:sasl_ssl://127.0.0.1:9094/bootstrap]: "
    "sasl_ssl://127.0.0.1:9094/bootstrap: "
)


@pytest.mark.parametrize(
    ("security", "line", "named"),
    [
        (
            SCRAM_SECURITY,
            "SASL authentication error: Authentication failed during authentication due to "
            "invalid credentials with SASL mechanism SCRAM-SHA-512",
            ks.ENV_PASSWORD,
        ),
        (
            SCRAM_SECURITY,
            "SSL handshake failed: error:0A000086:SSL routines::certificate verify failed: "
            "broker certificate could not be verified",
            ks.ENV_CA,
        ),
        (
            SCRAM_SECURITY,
            "SSL handshake failed: Disconnected: SSL connection closed by peer: connecting to "
            "a PLAINTEXT broker listener?",
            ks.ENV_PROTOCOL,
        ),
        (
            MTLS,
            "Receive failed: error:0A000412:SSL routines::ssl/tls alert bad certificate: "
            "SSL alert number 42",
            ks.ENV_KEYSTORE,
        ),
    ],
)
def test_refusals_name_the_setting(security: ks.KafkaSecurity, line: str, named: str) -> None:
    message = kafka_refusal("127.0.0.1:9094", security, [LOG + line])
    assert message is not None
    assert named in message
    assert "rdkafka#" not in message  # the log line's prefix is dropped


def test_a_token_endpoint_that_refuses_names_the_oauth_settings() -> None:
    oauth = ks.kafka_security(
        {
            ks.ENV_PROTOCOL: "SASL_SSL",
            ks.ENV_MECHANISM: "OAUTHBEARER",
            ks.ENV_OAUTH_TOKEN_URL: "https://idp.example/token",
            ks.ENV_OAUTH_CLIENT_ID: "ingest",
            ks.ENV_OAUTH_CLIENT_SECRET: "s3cret",
        }
    )
    line = (
        "OIDC [rdkafka#producer-1] [thrd:background]: Failed to retrieve OIDC token from "
        '"https://idp.example/token": {"error": "invalid_client"} (401)'
    )
    message = kafka_refusal("127.0.0.1:9094", oauth, [line])
    assert message is not None
    assert ks.ENV_OAUTH_CLIENT_SECRET in message
    assert ks.ENV_OAUTH_TOKEN_URL in message
    assert message.endswith('({"error": "invalid_client"} (401))')
    assert "s3cret" not in message


def test_the_java_client_is_allowed_the_token_endpoint() -> None:
    oauth = ks.kafka_security(
        {
            ks.ENV_PROTOCOL: "SASL_SSL",
            ks.ENV_MECHANISM: "OAUTHBEARER",
            ks.ENV_OAUTH_TOKEN_URL: "https://idp.example/token",
            ks.ENV_OAUTH_CLIENT_ID: "ingest",
            ks.ENV_OAUTH_CLIENT_SECRET: "s3cret",
        }
    )
    allowed = f"-D{ks.ALLOWED_URLS_PROPERTY}=https://idp.example/token"
    assert oauth.jvm_options() == [allowed]
    assert SCRAM_SECURITY.jvm_options() == []
    from cdc_assets.resources.config import CatalogConfig, spark_conf

    conf = spark_conf(
        master="local[1]",
        app_name="t",
        catalog=CatalogConfig(name="lake", type="jdbc", uri="jdbc:sqlite:/x.db", warehouse="/w"),
        jars=[],
        shuffle_partitions=1,
        driver_memory="1g",
        ui_enabled=False,
        extra={},
        java_options=oauth.jvm_options(),
    )
    assert conf["spark.driver.extraJavaOptions"].endswith(allowed)
    assert conf["spark.executor.extraJavaOptions"].endswith(allowed)


def test_an_unreachable_broker_is_not_a_refusal() -> None:
    line = LOG + "Connect to ipv4#127.0.0.1:9094 failed: Connection refused"
    assert kafka_refusal("127.0.0.1:9094", SCRAM_SECURITY, [line]) is None


def test_registry_credentials() -> None:
    auth = ks.registry_auth(
        {
            ks.ENV_REGISTRY_USERNAME: "cdc",
            ks.ENV_REGISTRY_PASSWORD: "pw:with:colons",
            ks.ENV_REGISTRY_CA: "/ca.pem",
        }
    )
    assert auth.client_conf() == {
        "basic.auth.user.info": "cdc:pw:with:colons",
        "ssl.ca.location": "/ca.pem",
    }
    assert ks.registry_auth({}).client_conf() == {}
    with pytest.raises(ConfigError, match=ks.ENV_REGISTRY_PASSWORD):
        ks.registry_auth({ks.ENV_REGISTRY_USERNAME: "cdc"})
    with pytest.raises(ConfigError, match="cannot hold ':'"):
        ks.registry_auth({ks.ENV_REGISTRY_USERNAME: "a:b", ks.ENV_REGISTRY_PASSWORD: "x"})
