"""OAUTHBEARER with OpenID Connect client credentials, end to end: a broker of its own with a
SASL_PLAINTEXT listener that validates tokens against an identity provider's keys (Kafka's
OAuthBearerValidatorCallbackHandler with the provider's JWKS URL), and the project's clients
given only that listener and the ``CDC_ASSETS_KAFKA_OAUTH_*`` settings: librdkafka (offsets,
the preflight, a consumer) and Spark's Kafka source in a process of its own, each fetching its
own tokens from the provider. The broker (Kafka 4.1) reads the provider's keys only because its
JVM allows the JWKS URL (Kafka's allowed-URLs system property); the project puts the token
endpoint into that property on Spark's driver and executors too, which Kafka 4 clients require
(Spark 4.1 ships the 3.9 client, which still allows every URL: this test passes without it, the
unit tier checks the rendering). The provider is a small one of the tests' (support/oidc.py):
no company IdP runs here. A wrong client secret fails the preflight naming the settings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from cdc_assets import kafka_security as ks
from cdc_assets.errors import ConfigError
from cdc_assets.jars.maven import kafka_classpath
from cdc_assets.resources import KafkaResource, preflight
from cdc_assets.settings import ENV_HOME, Settings
from cdc_assets_dev.stack import kafka_broker
from cdc_assets_tests.conftest import PROJECT_ROOT
from cdc_assets_tests.integration.test_ingest import consume_all
from cdc_assets_tests.support.oidc import AUDIENCE, Provider, oidc_provider

pytestmark = pytest.mark.integration

CLIENT_ID = "cdc-assets-ingest"
CLIENT_SECRET = "oidc-client-secret-4711"
TOPIC = "oauth.events"
VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


def _oauth_listener_lines(idp: Provider) -> list[str]:
    prefix = "listener.name.oauth.oauthbearer."
    return [
        "listener.name.oauth.sasl.enabled.mechanisms=OAUTHBEARER",
        f"{prefix}sasl.server.callback.handler.class={VALIDATOR}",
        f"{prefix}sasl.jaas.config={LOGIN_MODULE} required ;",
        f"{prefix}sasl.oauthbearer.jwks.endpoint.url={idp.jwks_url}",
        f"{prefix}sasl.oauthbearer.expected.audience={AUDIENCE}",
        f"{prefix}sasl.oauthbearer.expected.issuer={idp.url}",
    ]


@pytest.fixture(scope="module")
def idp() -> Iterator[Provider]:
    with oidc_provider(CLIENT_ID, CLIENT_SECRET) as provider:
        yield provider


@pytest.fixture(scope="module")
def oauth_broker(
    it_settings: Settings, idp: Provider, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """(plaintext address, OAUTHBEARER address) of a broker of its own, with records on TOPIC."""
    base = tmp_path_factory.mktemp("oauth-broker")
    files = kafka_broker.BrokerFiles(
        server_properties=base / "server.properties",
        log4j_config=base / "log4j2.properties",
        data_dir=base / "data",
        log_file=base / "kafka.log",
    )
    port = kafka_broker.pick_free_port()
    controller = kafka_broker.pick_free_port({port})
    oauth = kafka_broker.pick_free_port({port, controller})
    kafka_broker.write_config(files, port=port, controller_port=controller)
    host = kafka_broker.HOST
    # The stack's single-node config, with one more listener: OAUTH (SASL_PLAINTEXT).
    lines = []
    for line in files.server_properties.read_text(encoding="utf-8").splitlines():
        if line.startswith(("listeners=", "advertised.listeners=")):
            line = line.replace(
                f"PLAINTEXT://{host}:{port}", f"PLAINTEXT://{host}:{port},OAUTH://{host}:{oauth}"
            )
        elif line.startswith("listener.security.protocol.map="):
            line += ",OAUTH:SASL_PLAINTEXT"
        lines.append(line)
    lines += _oauth_listener_lines(idp)
    files.server_properties.write_text("\n".join(lines) + "\n", encoding="utf-8")
    classpath = kafka_classpath(it_settings)
    kafka_broker.format_storage(files, classpath)
    allowed = f"-D{ks.ALLOWED_URLS_PROPERTY}={idp.jwks_url}"
    pid = kafka_broker.start_broker(files, classpath, jvm_options=[allowed])
    try:
        kafka_broker.wait_until_ready(pid, port, files.log_file)
        producer = Producer({"bootstrap.servers": f"{host}:{port}"})
        for i in range(50):
            producer.produce(TOPIC, key=str(i % 7).encode(), value=json.dumps({"i": i}).encode())
        producer.flush(30)
        yield f"{host}:{port}", f"{host}:{oauth}"
    finally:
        kafka_broker.stop_broker(pid)


def _oauth_env(idp: Provider, secret: str) -> dict[str, str]:
    return {
        ks.ENV_PROTOCOL: "SASL_PLAINTEXT",
        ks.ENV_MECHANISM: "OAUTHBEARER",
        ks.ENV_OAUTH_TOKEN_URL: idp.token_url,
        ks.ENV_OAUTH_CLIENT_ID: CLIENT_ID,
        ks.ENV_OAUTH_CLIENT_SECRET: secret,
        ks.ENV_OAUTH_SCOPE: "kafka",
    }


def _secure(monkeypatch: pytest.MonkeyPatch, variables: dict[str, str]) -> None:
    for name in ks.ALL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    preflight._PASSED.clear()


def test_librdkafka_and_spark_read_through_oauthbearer(
    it_settings: Settings,
    idp: Provider,
    oauth_broker: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plain_address, oauth_address = oauth_broker
    plain = KafkaResource(
        bootstrap_servers=plain_address, home=str(it_settings.home), secured=False
    )
    expected = [(o, bytes(v)) for _, o, _, _, v in consume_all(plain, TOPIC)]
    assert len(expected) == 50

    _secure(monkeypatch, _oauth_env(idp, CLIENT_SECRET))
    issued = len(idp.issued)
    secured = KafkaResource(bootstrap_servers=oauth_address, home=str(it_settings.home))
    assert secured.latest_offsets([TOPIC])[TOPIC] == {0: 50}
    assert [(o, bytes(v)) for _, o, _, _, v in consume_all(secured, TOPIC)] == expected
    assert len(idp.issued) > issued  # librdkafka fetched tokens from the provider

    # Spark's Kafka source (the Java client) in a process of its own, configured by the same
    # settings: the resource adds the allowed-URLs property to the driver's JVM options.
    script = """
import json, sys
from cdc_assets.resources import build_resources
from cdc_assets.settings import load_settings
resources = build_resources(load_settings())
spark = resources["spark"].model_copy(update={"master": "local[1]"}).get_session()
rows = (
    spark.read.format("kafka").options(**resources["kafka"].reader_options())
    .option("subscribe", sys.argv[1]).option("startingOffsets", "earliest")
    .option("endingOffsets", "latest").load().select("offset", "value").collect()
)
print(json.dumps([[r["offset"], bytes(r["value"]).decode()] for r in rows]))
spark.stop()
"""
    issued = len(idp.issued)
    env = {
        **os.environ,
        ENV_HOME: str(it_settings.home),
        "CDC_ASSETS_KAFKA_BOOTSTRAP": oauth_address,
    }
    proc = subprocess.run(
        [sys.executable, "-c", script, TOPIC],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [(o, v.encode()) for o, v in rows] == expected
    assert len(idp.issued) > issued  # the Java client fetched its own token
    assert CLIENT_SECRET not in proc.stdout + proc.stderr


def test_a_refused_client_secret_names_the_settings(
    it_settings: Settings,
    idp: Provider,
    oauth_broker: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, oauth_address = oauth_broker
    wrong = "not-the-client-secret"
    _secure(monkeypatch, _oauth_env(idp, wrong))
    refused = idp.refused
    secured = KafkaResource(bootstrap_servers=oauth_address, home=str(it_settings.home))
    with pytest.raises(ConfigError) as error:
        secured.client_conf()
    message = str(error.value)
    assert ks.ENV_OAUTH_CLIENT_SECRET in message
    assert wrong not in message
    assert idp.refused > refused
