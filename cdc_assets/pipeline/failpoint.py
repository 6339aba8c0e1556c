"""Test hook for crash tests: a named failpoint kills the current process at that point."""

from __future__ import annotations

import os

FAILPOINT_ENV = "CDC_ASSETS_FAILPOINT"


def armed(name: str) -> bool:
    return os.environ.get(FAILPOINT_ENV) == name


def failpoint(name: str) -> None:
    """Die like a crash (SIGKILL, no cleanup) when ``$CDC_ASSETS_FAILPOINT`` names this point."""
    if armed(name):
        os.kill(os.getpid(), 9)
