"""`make dev` (`cdc-assets dev`) stops cleanly (issue 27): started on a stack of its own, it
serves the UI; SIGTERM to it (what make forwards, or a service manager sends) stops `dagster dev`
and everything that started (webserver, daemon, code server): no process of its group is left.
Ctrl-C reaches the same handler (SIGINT)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdc_assets.settings import ENV_HOME, ENV_SPECS, Settings
from cdc_assets_dev.stack.local_stack import stack_down, stack_up
from cdc_assets_tests.conftest import PROJECT_ROOT
from cdc_assets_tests.integration.conftest import make_home
from cdc_assets_tests.integration.test_webserver import _free_port

pytestmark = pytest.mark.integration

STARTUP_S = 300.0


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state first); None: gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def _descendants(root: int) -> set[int]:
    """Live processes below ``root`` (following parent pids)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            parents[int(entry.name)] = int(stat[1])
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return {p for p in found if _alive(p)}


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """A home of its own: `dev` starts a Spark Connect server, which the session's stack must
    not get (its resources would then use it). The stack stays up between the two starts."""
    settings = make_home(tmp_path_factory.mktemp("dev") / "home")
    # Started here: the stack's broker and Spark Connect server outlive `dev` on purpose, so
    # they must not count among what `dev` has to stop.
    stack_up(settings, spark_connect=True)
    try:
        yield settings
    finally:
        stack_down(settings, purge=True)


def _as_background_job() -> None:
    """What a non-interactive shell does to a command started with ``&``: SIGINT ignored (which
    its children inherit; dagster dev then ignored the SIGINT `dev` sent it, issue 53)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize(
    ("sig", "background"),
    [(signal.SIGTERM, False), (signal.SIGINT, False), (signal.SIGTERM, True)],
)
def test_dev_stops_everything_it_started(
    sig: signal.Signals, background: bool, home: Settings
) -> None:
    port = _free_port()
    log = home.home / f"dev-{sig.name}-{'bg' if background else 'fg'}.log"
    home.home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, ENV_HOME: str(home.home), ENV_SPECS: str(PROJECT_ROOT / "table_specs")}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "cdc-assets"), "dev", "--port", str(port)],
            cwd=PROJECT_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_as_background_job if background else None,
        )
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            assert proc.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, log.read_text()[-4000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5):
                    break
            except OSError:
                time.sleep(1)
        started = _descendants(proc.pid)  # dagster dev, its webserver, daemon, code server
        assert len(started) >= 3, started
        proc.send_signal(sig)  # to the command only, as make forwards SIGTERM
        stopped = time.monotonic()
        assert proc.wait(timeout=60) == 0, log.read_text()[-4000:]
        assert time.monotonic() - stopped < 30, log.read_text()[-4000:]
        left = {p for p in started if _alive(p)}
        assert not left, left
        with pytest.raises(urllib.error.URLError):  # nobody listens any more
            urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
