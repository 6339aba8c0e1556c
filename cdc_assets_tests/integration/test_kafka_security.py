"""A secured Kafka: the local broker's SASL_SSL listener (SCRAM-SHA-512 and PLAIN) and its SSL
listener that requires client certificates, made by `stack up` (stack/kafka_tls.py).

The secured resource is given only the secured listener's address, so every Kafka call of the
sensor, the run and the checks (librdkafka) and of Spark's Kafka source (Java client) must pass
its authentication and TLS to work at all. Records are produced through the plaintext listener
and the oracle reads them there. A wrong password, an unknown CA and an expired certificate each
fail with the setting's name before anything is written.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from cdc_assets import kafka_security as ks
from cdc_assets.checks.runner import run_checks
from cdc_assets.definitions import build_defs
from cdc_assets.demo.events import produce, workload
from cdc_assets.errors import ConfigError
from cdc_assets.jobs.checks import CHECK_JOB
from cdc_assets.pipeline.ingest import ingest_incremental, read_kafka
from cdc_assets.pipeline.tables import ensure_tables
from cdc_assets.resources import IcebergCatalogResource, KafkaResource, preflight
from cdc_assets.schema.layers import ledger_layout
from cdc_assets.settings import Settings
from cdc_assets.stack import kafka_tls
from cdc_assets.stack.local_stack import StackState, tls_material
from cdc_assets_tests.integration.test_ingest import (
    assert_ledger_matches,
    consume_all,
    isolated,
    read_table,
)
from cdc_assets_tests.integration.test_upsert import (
    assert_base_matches,
    example_spec,
    expected_base,
)
from cdc_assets_tests.support.oracle import expected_outcome

pytestmark = pytest.mark.integration


@pytest.fixture
def material(it_settings: Settings, stack: StackState) -> kafka_tls.TlsMaterial:
    assert stack.sasl_ssl_bootstrap is not None, "the stack has no secured listeners"
    assert stack.ssl_bootstrap is not None
    return tls_material(it_settings)


@pytest.fixture
def plain(it_settings: Settings, stack: StackState) -> KafkaResource:
    """The plaintext listener, whatever the security variables say: the producer's and the
    oracle's way in."""
    return KafkaResource(
        bootstrap_servers=stack.bootstrap_servers, home=str(it_settings.home), secured=False
    )


def secure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variables: dict[str, str]) -> None:
    """Set the security variables of this process, secrets through `*_FILE` files."""
    for name in ks.ALL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        if name in (ks.ENV_PASSWORD, ks.ENV_KEYSTORE_PASSWORD):
            secret = tmp_path / f"{name.lower()}.txt"
            secret.write_text(value + "\n", encoding="utf-8")
            monkeypatch.setenv(f"{name}_FILE", str(secret))
        else:
            monkeypatch.setenv(name, value)
    preflight._PASSED.clear()  # each test's setup is checked afresh


def scram(material: kafka_tls.TlsMaterial, password: str | None = None) -> dict[str, str]:
    return {
        ks.ENV_PROTOCOL: "SASL_SSL",
        ks.ENV_MECHANISM: "SCRAM-SHA-512",
        ks.ENV_USERNAME: material.username,
        ks.ENV_PASSWORD: password or material.password,
        ks.ENV_CA: str(material.ca),
    }


def secured_kafka(bootstrap: str, settings: Settings) -> KafkaResource:
    return KafkaResource(bootstrap_servers=bootstrap, home=str(settings.home), timeout_s=10.0)


def test_sensor_run_and_checks_through_sasl_ssl(
    it_settings: Settings,
    stack: StackState,
    material: kafka_tls.TlsMaterial,
    spark: Any,
    iceberg: IcebergCatalogResource,
    plain: KafkaResource,
    resources: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """The new-offsets sensor sees the topic grow, its run ingests and upserts, and the checks
    pass, all through SCRAM-SHA-512 over TLS; ledger and base match the oracle row for row."""
    spec = isolated(example_spec(it_settings, "users"), kafka=plain)
    records = workload(spec, random.Random(56), keys=25, events=120)
    produce(records, spec.source.topic, stack.bootstrap_servers)
    secure(monkeypatch, tmp_path, scram(material))
    assert stack.sasl_ssl_bootstrap is not None
    secured = secured_kafka(stack.sasl_ssl_bootstrap, it_settings)
    overrides = {**resources, "kafka": secured}
    defs = build_defs(specs=[spec], settings=it_settings, resource_overrides=overrides)
    instance = dg.DagsterInstance.ephemeral()

    sensor = defs.get_sensor_def("new_kafka_offsets")
    context = dg.build_sensor_context(
        instance=instance, resources={"kafka": secured}, repository_def=defs.get_repository_def()
    )
    tick = sensor.evaluate_tick(context)
    assert tick.run_requests, tick.skip_message
    request = tick.run_requests[0]
    run = defs.resolve_job_def(sensor.job_name).execute_in_process(
        instance=instance,
        asset_selection=request.asset_selection,
        tags=request.tags,
        partition_key=request.partition_key,
    )
    assert run.success

    outcomes = {
        (p, o): expected_outcome(spec, p, o, ts, k, v)
        for p, o, ts, k, v in consume_all(plain, spec.source.topic)
    }
    layout = ledger_layout(spec)
    assert_ledger_matches(spec, outcomes, read_table(iceberg, layout.namespace, layout.name))
    assert_base_matches(spec, iceberg, expected_base(spec, plain))

    checked = defs.resolve_job_def(CHECK_JOB).execute_in_process(instance=instance)
    assert checked.success
    results, _ = run_checks(defs, instance)
    failed = [(r.check, r.description) for r in results if not r.passed]
    assert results
    assert not failed, failed

    # The password never reaches the event log: messages, metadata, resource config.
    logged = [
        repr(entry) for record in instance.get_runs() for entry in instance.all_logs(record.run_id)
    ]
    logged += [repr(record.run_config) for record in instance.get_runs()]
    assert len(logged) > 100
    assert not [line for line in logged if material.password in line]


@pytest.mark.parametrize("how", ["plain", "mtls"])
def test_plain_and_client_certificates(
    it_settings: Settings,
    stack: StackState,
    material: kafka_tls.TlsMaterial,
    spark: Any,
    plain: KafkaResource,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    how: str,
) -> None:
    """SASL PLAIN, and mutual TLS with a PKCS#12 client store: offsets through librdkafka and
    the records through Spark's Kafka source, the same as on the plaintext listener."""
    spec = isolated(example_spec(it_settings, "users"), kafka=plain)
    produce(
        workload(spec, random.Random(7), keys=5, events=30),
        spec.source.topic,
        stack.bootstrap_servers,
    )
    topic = spec.source.topic
    if how == "plain":
        secure(monkeypatch, tmp_path, {**scram(material), ks.ENV_MECHANISM: "PLAIN"})
        bootstrap = stack.sasl_ssl_bootstrap
    else:
        secure(
            monkeypatch,
            tmp_path,
            {
                ks.ENV_PROTOCOL: "SSL",
                ks.ENV_CA: str(material.ca),
                ks.ENV_KEYSTORE: str(material.client_store),
                ks.ENV_KEYSTORE_PASSWORD: material.store_password,
            },
        )
        bootstrap = stack.ssl_bootstrap
    assert bootstrap is not None
    secured = secured_kafka(bootstrap, it_settings)
    latest = secured.latest_offsets([topic])[topic]
    assert latest == plain.latest_offsets([topic])[topic]
    assert latest[0] > 0
    rows = read_kafka(spark, secured, topic, {0: 0}, latest).collect()
    assert [(r["offset"], r["value"]) for r in rows] == [
        (o, bytearray(v) if v is not None else None) for _, o, _, _, v in consume_all(plain, topic)
    ]


def _refused(
    it_settings: Settings,
    spark: Any,
    iceberg: IcebergCatalogResource,
    plain: KafkaResource,
    stack: StackState,
    bootstrap: str,
) -> str:
    """The error an ingest through ``bootstrap`` raises; asserts it wrote nothing."""
    spec = isolated(example_spec(it_settings, "users"), kafka=plain)
    produce(
        workload(spec, random.Random(3), keys=3, events=10),
        spec.source.topic,
        stack.bootstrap_servers,
    )
    ensure_tables(spark, "lake", spec)
    layout = ledger_layout(spec)
    secured = secured_kafka(bootstrap, it_settings)

    def snapshots() -> list[int]:
        ledger = iceberg.load_catalog().load_table(f"{layout.namespace}.{layout.name}")
        return [s.snapshot_id for s in ledger.snapshots()]

    before = snapshots()
    with pytest.raises(ConfigError) as error:
        ingest_incremental(spark, "lake", iceberg.load_catalog(), secured, spec)
    assert snapshots() == before, "a refused ingest committed"
    return str(error.value)


def test_wrong_password_names_the_setting_and_writes_nothing(
    it_settings: Settings,
    stack: StackState,
    material: kafka_tls.TlsMaterial,
    spark: Any,
    iceberg: IcebergCatalogResource,
    plain: KafkaResource,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    wrong = "not-" + material.password
    secure(monkeypatch, tmp_path, scram(material, password=wrong))
    assert stack.sasl_ssl_bootstrap is not None
    message = _refused(it_settings, spark, iceberg, plain, stack, stack.sasl_ssl_bootstrap)
    assert ks.ENV_PASSWORD in message
    assert "refused the SCRAM-SHA-512 credentials" in message
    assert wrong not in message
    assert material.password not in message


def test_unknown_ca_names_the_setting(
    it_settings: Settings,
    stack: StackState,
    material: kafka_tls.TlsMaterial,
    spark: Any,
    iceberg: IcebergCatalogResource,
    plain: KafkaResource,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    other = kafka_tls.ensure_material(tmp_path / "other-ca")  # a CA that signed nothing here
    secure(monkeypatch, tmp_path, {**scram(material), ks.ENV_CA: str(other.ca)})
    assert stack.sasl_ssl_bootstrap is not None
    message = _refused(it_settings, spark, iceberg, plain, stack, stack.sasl_ssl_bootstrap)
    assert ks.ENV_CA in message
    assert "not signed by a trusted CA" in message


def test_expired_or_missing_client_certificate_names_the_setting(
    it_settings: Settings,
    stack: StackState,
    material: kafka_tls.TlsMaterial,
    spark: Any,
    iceberg: IcebergCatalogResource,
    plain: KafkaResource,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """An expired certificate is refused from the file, before connecting; none at all is
    refused by the broker, which requires one on that listener."""
    now = datetime.now(UTC)
    expired = kafka_tls.issue_store(
        material,
        tmp_path / "expired.p12",
        "cdc",
        not_before=now - timedelta(days=30),
        not_after=now - timedelta(days=1),
    )
    mtls = {
        ks.ENV_PROTOCOL: "SSL",
        ks.ENV_CA: str(material.ca),
        ks.ENV_KEYSTORE: str(expired),
        ks.ENV_KEYSTORE_PASSWORD: material.store_password,
    }
    secure(monkeypatch, tmp_path, mtls)
    assert stack.ssl_bootstrap is not None
    message = _refused(it_settings, spark, iceberg, plain, stack, stack.ssl_bootstrap)
    assert ks.ENV_KEYSTORE in message
    assert "expired on" in message

    secure(monkeypatch, tmp_path, {ks.ENV_PROTOCOL: "SSL", ks.ENV_CA: str(material.ca)})
    message = _refused(it_settings, spark, iceberg, plain, stack, stack.ssl_bootstrap)
    assert ks.ENV_KEYSTORE in message
    assert "refused the TLS handshake" in message
