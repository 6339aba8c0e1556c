"""Test hooks: a named failpoint kills the current process at that point (crash tests); a hold
point pauses it until the test releases it (races forced deterministically)."""

from __future__ import annotations

import os

FAILPOINT_ENV = "CDC_ASSETS_FAILPOINT"


def armed(name: str) -> bool:
    return os.environ.get(FAILPOINT_ENV) == name


def failpoint(name: str) -> None:
    """Die like a crash (SIGKILL, no cleanup) when ``$CDC_ASSETS_FAILPOINT`` names this point."""
    if armed(name):
        os.kill(os.getpid(), 9)


FAIL_ONCE_ENV = "CDC_ASSETS_FAIL_ONCE"


class InjectedFailureError(RuntimeError):
    """A transient failure a test injected (``$CDC_ASSETS_FAIL_ONCE``)."""


def fail_once(name: str) -> None:
    """Raise InjectedFailureError the first time this point is passed when ``$CDC_ASSETS_FAIL_ONCE``
    is ``<name>=<directory>`` (``<directory>/<name>.failed`` records it): a run that fails for
    a reason that goes away, as a Spark Connect session error or a catalog timeout does, so a
    test can see it retried."""
    point, _, directory = os.environ.get(FAIL_ONCE_ENV, "").partition("=")
    if point != name or not directory:
        return
    from pathlib import Path

    marker = Path(directory) / f"{name}.failed"
    # Created exclusively: of two processes passing the point at once only one fails.
    try:
        with marker.open("x", encoding="utf-8") as out:
            out.write(str(os.getpid()))
    except FileExistsError:
        return
    raise InjectedFailureError(f"injected failure at {name} (test hook {FAIL_ONCE_ENV})")


HOLD_ENV = "CDC_ASSETS_HOLD"
HOLD_TIMEOUT_S = 600.0


def hold_directory(name: str) -> str | None:
    """The directory of hold point ``name`` when ``$CDC_ASSETS_HOLD`` arms it, else None."""
    point, _, directory = os.environ.get(HOLD_ENV, "").partition("=")
    return directory if point == name and directory else None


def hold(name: str) -> None:
    """Pause here while a test makes another run happen, when ``$CDC_ASSETS_HOLD`` is
    ``<name>=<directory>`` (see ``hold_at``). Forces a race deterministically, across processes
    (a daemon's run worker) as within one."""
    directory = hold_directory(name)
    if directory is not None:
        hold_at(name, directory)


def hold_at(name: str, directory: str) -> None:
    """Write ``<directory>/<name>.held``, then wait for ``<directory>/<name>.release`` (created
    by the test; at most ten minutes). Once released, passing again does not wait."""
    import time
    from pathlib import Path

    base = Path(directory)
    release = base / f"{name}.release"
    if release.exists():
        return
    (base / f"{name}.held").write_text(str(os.getpid()), encoding="utf-8")
    deadline = time.monotonic() + HOLD_TIMEOUT_S
    while not release.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"hold point {name}: no release within {HOLD_TIMEOUT_S:.0f} s")
        time.sleep(0.1)
