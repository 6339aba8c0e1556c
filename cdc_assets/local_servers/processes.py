"""Whether a process the local stack started still runs, and is the one it started: a pid with
a marker on its command line (a reused pid is someone else's). Read by the product (the stack's
endpoints) and by the stack itself, which also registers the processes it started here."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

# Popen objects of the processes this interpreter started (``stack.local_process``): polling
# reaps one that died, which would otherwise linger as a zombie that os.kill(pid, 0) still
# reports as alive.
STARTED: dict[int, subprocess.Popen[bytes]] = {}


def pid_alive(pid: int) -> bool:
    """True when ``pid`` is a running (not zombie) process."""
    proc = STARTED.get(pid)
    if proc is not None:
        return proc.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return True
    # The command name in parentheses may itself contain spaces, so read after the last ')'.
    fields = stat.rsplit(")", 1)[-1].split()
    if not (fields and fields[0] in ("Z", "X")):
        return True
    # A zombie leader whose other threads have not exited yet still holds the process's files.
    try:
        return len(list(Path(f"/proc/{pid}/task").iterdir())) > 1
    except OSError:
        return False


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        if Path("/proc").is_dir():
            return []
        # No procfs (macOS): ask ps; splitting on spaces is enough to spot our arguments.
        done = subprocess.run(
            ["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True, check=False
        )
        return done.stdout.split()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def runs(pid: int | None, marker: str) -> bool:
    """True when ``pid`` is alive and one of its arguments contains ``marker``."""
    if pid is None or not pid_alive(pid):
        return False
    return any(marker in arg for arg in cmdline(pid))
