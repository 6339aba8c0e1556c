"""Detached local server processes of the stack (the Kafka broker, MariaDB, PostgreSQL, Kafka
Connect, Spark Connect): one registry for all of them.

Start in a session of its own with output appended to a log, recognise by command line (guards
pid reuse), stop by signal with a SIGKILL fallback. A process counts as gone only when all its
threads are: a killed JVM's main thread turns zombie while its other threads still hold its
sockets, and a server restarted on the same port in that moment finds the port taken. What each
server is recorded as (pid, ports) lives in one state file (``local_servers/state.py``).

Why not a kept library: the servers must outlive the command that started them (`stack up`
returns, `stack down` runs later from another process) and be found again by command line, and
the stack must need nothing beyond pip. supervisord would add a daemon of its own with its own
configuration to keep in step; mirakuru's executors own their process for the life of a Python
object and stop it when the object goes; port-for only picks ports, which binding port 0 does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from cdc_assets.errors import StackError
from cdc_assets.local_servers.processes import STARTED, cmdline, pid_alive, runs

__all__ = ["cmdline", "pid_alive", "runs"]  # where the stack's modules have always found them


def log_tail(log_file: Path, lines: int) -> list[str]:
    """The last ``lines`` lines of ``log_file`` (empty if there is none)."""
    try:
        with log_file.open(encoding="utf-8", errors="replace") as handle:
            return [line.rstrip("\n") for line in deque(handle, maxlen=lines)]
    except FileNotFoundError:
        return []


def start_detached(
    command: Sequence[str],
    log_file: Path,
    *,
    cwd: Path,
    user: str | None = None,
    env: dict[str, str] | None = None,
) -> int:
    """Start ``command`` in its own session, stdout and stderr appended to ``log_file``."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        try:
            proc = subprocess.Popen(
                list(command),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=cwd,
                env=env,
                user=user,
                group=user,
                extra_groups=[] if user else None,
            )
        except OSError as exc:
            raise StackError(f"cannot start {command[0]}: {exc}") from exc
    STARTED[proc.pid] = proc
    return proc.pid


def exit_code(pid: int) -> int | None:
    proc = STARTED.get(pid)
    return None if proc is None else proc.poll()


def find_pids(program: str, marker: str) -> list[int]:
    """Live processes whose executable name ends with ``program`` and that mention ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        args = cmdline(pid)
        ours = bool(args) and Path(args[0]).name.endswith(program)
        if ours and any(marker in a for a in args) and pid_alive(pid):
            found.append(pid)
    return sorted(found)


def stop(pid: int, what: str, *, sig: signal.Signals = signal.SIGTERM, timeout: float = 30) -> None:
    """Send ``sig`` to the process group of ``pid``, SIGKILL after ``timeout``; wait until gone."""
    _signal_group(pid, sig)
    if _wait_gone(pid, timeout):
        return
    _signal_group(pid, signal.SIGKILL)
    if not _wait_gone(pid, 10.0):
        raise StackError(f"{what} process {pid} survived SIGKILL")


def died_message(what: str, pid: int, log_file: Path, lines: int = 30) -> str:
    code = exit_code(pid)
    how = f"exited with code {code}" if code is not None else "exited"
    tail = "\n".join(log_tail(log_file, lines))
    return f"{what} (pid {pid}) {how} during startup; last {lines} lines of {log_file}:\n{tail}"


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if not pid_alive(pid):
            STARTED.pop(pid, None)
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
