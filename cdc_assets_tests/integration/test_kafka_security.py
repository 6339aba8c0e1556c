"""A secured Kafka: the local broker's SASL_SSL listener (SCRAM-SHA-512 and PLAIN) and its SSL
listener that requires client certificates, made by `stack up` (stack/kafka_tls.py).

The daemon and the secured resource are given only a secured listener's address, so every Kafka
call of the sensor, the run and the checks (librdkafka) and of Spark's Kafka source (Java client)
must pass its authentication and TLS to work at all. Records are produced through the plaintext
listener and the oracle reads them there. A wrong password, an unknown CA and an expired
certificate each fail with the setting's name before anything is written.
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
from cdc_assets.errors import ConfigError
from cdc_assets.jobs.checks import CHECK_JOB
from cdc_assets.pipeline.ingest.ingest import ingest_incremental, read_kafka
from cdc_assets.pipeline.shared.tables import ensure_tables
from cdc_assets.resources import IcebergCatalogResource, KafkaResource, preflight
from cdc_assets.schema.layers import ledger_layout
from cdc_assets.settings import Settings
from cdc_assets.spec.versions import write_spec
from cdc_assets_dev.demo.events import produce, workload
from cdc_assets_dev.stack import kafka_tls
from cdc_assets_dev.stack.local_stack import StackState, tls_material
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
from cdc_assets_tests.support.daemon import dagster_home, running_daemon, wait_until
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
            (tmp_path / "secrets").mkdir(exist_ok=True)
            secret = tmp_path / "secrets" / f"{name.lower()}.txt"
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


def test_daemon_runs_and_checks_through_sasl_ssl(
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
    """A real `dagster-daemon` whose settings name only the SASL_SSL listener: its new-offsets
    sensor sees the topic grow and its run worker ingests and upserts, through SCRAM-SHA-512
    over TLS; ledger and base equal the oracle's, and the table's checks pass. The password,
    given in a file, is in none of the files the daemon, its runs and Dagster wrote, nor in the
    event log."""
    spec = isolated(example_spec(it_settings, "users"), kafka=plain)
    specs_dir = tmp_path / "specs"
    specs_dir.mkdir()
    write_spec(spec, specs_dir / f"{spec.name}.yaml")
    ensure_tables(spark, "lake", spec)
    records = workload(spec, random.Random(56), keys=25, events=120)
    produce(records, spec.source.topic, stack.bootstrap_servers)
    assert stack.sasl_ssl_bootstrap is not None
    (tmp_path / "secrets").mkdir()
    password_file = tmp_path / "secrets" / "kafka-password"
    password_file.write_text(material.password + "\n", encoding="utf-8")
    env = {
        "CDC_ASSETS_HOME": str(it_settings.home),
        "CDC_ASSETS_SPECS": str(specs_dir),
        "CDC_ASSETS_KAFKA_BOOTSTRAP": stack.sasl_ssl_bootstrap,
        **{k: v for k, v in scram(material).items() if k != ks.ENV_PASSWORD},
        f"{ks.ENV_PASSWORD}_FILE": str(password_file),
    }
    home = dagster_home(tmp_path)
    log = tmp_path / "daemon.log"
    instance = dg.DagsterInstance.from_config(str(home))
    layout = ledger_layout(spec)
    outcomes = {
        (p, o): expected_outcome(spec, p, o, ts, k, v)
        for p, o, ts, k, v in consume_all(plain, spec.source.topic)
    }
    wanted = sum(1 for o in outcomes.values() if o.status == "ledger")

    def caught_up(runs: list[Any]) -> bool:
        if not runs or not all(r.is_finished for r in runs):
            return False
        return len(read_table(iceberg, layout.namespace, layout.name)) >= wanted

    with running_daemon(home, env, log) as daemon:
        runs = wait_until(instance, daemon, log, caught_up, "the secured ingest", timeout=300)
    failed = [(r.job_name, r.status.value) for r in runs if r.status != dg.DagsterRunStatus.SUCCESS]
    assert not failed, failed
    assert_ledger_matches(spec, outcomes, read_table(iceberg, layout.namespace, layout.name))
    assert_base_matches(spec, iceberg, expected_base(spec, plain))

    secure(monkeypatch, tmp_path, scram(material))
    secured = secured_kafka(stack.sasl_ssl_bootstrap, it_settings)
    overrides = {**resources, "kafka": secured}
    defs = build_defs(specs=[spec], settings=it_settings, resource_overrides=overrides)
    checked = defs.resolve_job_def(CHECK_JOB).execute_in_process(instance=instance)
    assert checked.success
    results, _ = run_checks(defs, instance)
    failed_checks = [(r.check, r.description) for r in results if not r.passed]
    assert results
    assert not failed_checks, failed_checks

    secret = material.password.encode()
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.parent.name != "secrets"]
    assert len(written) > 5
    assert not [p for p in written if secret in p.read_bytes()]
    logged = [repr(e) for r in instance.get_runs() for e in instance.all_logs(r.run_id)]
    logged += [repr(r.run_config) for r in instance.get_runs()]
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
