"""The local stack against a real Kafka broker: start, restart, crash recovery, stop, jar cache."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from confluent_kafka import Consumer, Producer

from cdc_assets.errors import StackError
from cdc_assets.jars.maven import ensure_jars, jar_cache_size
from cdc_assets.local_servers.endpoints import require_bootstrap
from cdc_assets.settings import (
    ENV_HOME,
    ENV_KAFKA_BOOTSTRAP,
    ENV_KAFKA_PORT,
    Settings,
    load_settings,
)
from cdc_assets_dev.stack import kafka_broker
from cdc_assets_dev.stack.local_stack import (
    read_state,
    stack_down,
    stack_status,
    stack_up,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def shared_jars_dir() -> Path:
    """The project's real jar cache, filled once, so Maven does not run for every test home."""
    real = load_settings()
    ensure_jars("kafka", real)
    return real.jars_dir


def make_settings(home: Path, jars_dir: Path, **overrides: str) -> Settings:
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "jars").exists():
        (home / "jars").symlink_to(jars_dir, target_is_directory=True)
    env = dict(os.environ)
    env.pop(ENV_KAFKA_BOOTSTRAP, None)
    env.update({ENV_HOME: str(home), ENV_KAFKA_PORT: "0", **overrides})
    return load_settings(env)


@pytest.fixture
def settings(tmp_path: Path, shared_jars_dir: Path) -> Iterator[Settings]:
    resolved = make_settings(tmp_path / "home", shared_jars_dir)
    yield resolved
    # A failing test must not leave a broker behind.
    stack_down(resolved)


def processes_mentioning(text: str) -> list[str]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if text in cmdline and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(f"{proc.info['pid']}: {cmdline}")
    return found


def round_trip(bootstrap: str, count: int) -> list[bytes]:
    """Produce ``count`` messages to a new, auto-created topic and consume them back."""
    topic = f"roundtrip-{uuid.uuid4().hex[:8]}"
    # Idempotent: the first sends to a topic still being created are retried, and without
    # idempotence a retried message can land after the ones sent behind it (seen once in CI).
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(count):
        producer.produce(topic, key=str(i).encode(), value=f"message-{i}".encode())
    assert producer.flush(30) == 0

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    received: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(received) < count and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            assert message.error() is None, message.error()
            value = message.value()
            assert isinstance(value, bytes)
            received.append(value)
    finally:
        consumer.close()
    return received


def wait_until_dead(pid: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while kafka_broker.pid_alive(pid):
        assert time.monotonic() < deadline, f"process {pid} still alive after {timeout} s"
        time.sleep(0.1)


def test_up_twice_round_trip_and_down_leaves_nothing(settings: Settings) -> None:
    state = stack_up(settings)
    assert state.bootstrap_servers == f"127.0.0.1:{state.kafka_port}"
    assert settings.local_catalog_file.is_file()
    assert settings.local_warehouse.is_dir()

    again = stack_up(settings)
    assert again.kafka_pid == state.kafka_pid
    assert again.bootstrap_servers == state.bootstrap_servers

    status = stack_status(settings)
    assert status.healthy, status.render()
    assert status.kafka.state == "running"
    assert status.kafka.pid == state.kafka_pid

    assert require_bootstrap(settings) == state.bootstrap_servers
    received = round_trip(state.bootstrap_servers, 100)
    assert received == [f"message-{i}".encode() for i in range(100)]

    stack_down(settings)
    assert not psutil.pid_exists(state.kafka_pid)
    assert processes_mentioning(str(settings.home)) == []
    assert read_state(settings) is None
    assert stack_status(settings).kafka.state == "stopped"
    with pytest.raises(StackError, match="stack up"):
        require_bootstrap(settings)
    stack_down(settings)  # harmless when nothing runs


def test_configured_port_in_use_names_the_port(tmp_path: Path, shared_jars_dir: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        settings = make_settings(tmp_path / "home", shared_jars_dir, **{ENV_KAFKA_PORT: str(port)})
        try:
            with pytest.raises(StackError, match=str(port)) as raised:
                stack_up(settings)
            assert ENV_KAFKA_PORT in str(raised.value)
            assert read_state(settings) is None
            assert processes_mentioning(str(settings.home)) == []
        finally:
            stack_down(settings)


def test_killed_broker_is_reported_dead_and_up_recovers(settings: Settings) -> None:
    first = stack_up(settings)
    os.kill(first.kafka_pid, signal.SIGKILL)
    wait_until_dead(first.kafka_pid)

    status = stack_status(settings)
    assert not status.healthy
    assert status.kafka.state == "dead"
    assert str(first.kafka_pid) in status.kafka.reason
    assert str(first.kafka_pid) in status.render()

    second = stack_up(settings)
    assert second.kafka_pid != first.kafka_pid
    # The previous port was free again, so clients configured with it keep working.
    assert second.kafka_port == first.kafka_port
    assert stack_status(settings).healthy
    assert round_trip(second.bootstrap_servers, 5) == [f"message-{i}".encode() for i in range(5)]

    stack_down(settings)
    assert processes_mentioning(str(settings.home)) == []


def test_ensure_jars_second_call_runs_nothing(
    monkeypatch: pytest.MonkeyPatch, shared_jars_dir: Path
) -> None:
    real = load_settings()
    first = ensure_jars("kafka", real, quiet=True)
    assert first
    assert all(jar.parent == shared_jars_dir / "kafka" for jar in first)

    def no_process(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"ensure_jars tried to run or find a tool: {args!r}")

    monkeypatch.setattr(shutil, "which", no_process)
    monkeypatch.setattr(subprocess, "run", no_process)
    monkeypatch.setattr(subprocess, "Popen", no_process)
    started = time.perf_counter()
    second = ensure_jars("kafka", real)
    elapsed = time.perf_counter() - started
    assert second == first
    assert jar_cache_size(real) >= sum(jar.stat().st_size for jar in first)
    assert elapsed < 0.5, f"cached ensure_jars took {elapsed:.3f} s"
