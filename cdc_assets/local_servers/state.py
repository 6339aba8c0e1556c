"""The local stack's one state file, ``<stack dir>/state.json``: a section per group of servers.

- ``kafka``: the broker's pid, ports and start time, and where the catalog and warehouse are
  (``local_stack``);
- ``sources``: the database servers' ports, the ``cdc`` user's password, Kafka Connect's pid and
  port and the registered connectors (``sources``, ``connect``);
- ``spark_connect``: the Spark Connect server's pid and port (``spark_connect``).

Every writer changes its own section only, under an exclusive lock, and the file is replaced
atomically, so two processes that start and stop parts of one stack do not lose each other's
entries. It is readable by its owner only: it holds a password. A stack directory written by an
older release (``sources.json``, ``spark-connect/server.json``, ``kafka.pid``) is folded in on
first use. A damaged file is an error that names ``cdc-assets stack down``, which resets it.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cdc_assets.errors import StackError
from cdc_assets.settings import Settings

STATE_FILE = "state.json"
LOCK_FILE = ".state.lock"
# Files of older releases, folded into their section on first use.
LEGACY = {"sources": Path("sources.json"), "spark_connect": Path("spark-connect/server.json")}
LEGACY_PID_FILE = Path("kafka.pid")


def state_path(settings: Settings) -> Path:
    return settings.stack_dir / STATE_FILE


def read(settings: Settings) -> dict[str, Any]:
    """The whole state ({} when nothing was ever started).

    A reader takes no lock and creates nothing: writers replace the file atomically, so a read
    sees one whole version. (A reader that created the lock file raced ``stack down --purge``
    deleting the directory.) Only a directory with files of an older release is locked, to fold
    them in."""
    if not settings.stack_dir.exists():
        return {}
    if not _has_legacy(settings):
        path = state_path(settings)
        try:
            return _parse(path)
        except FileNotFoundError:
            return {}
    with _locked(settings):
        return _load(settings)


def section(settings: Settings, name: str) -> dict[str, Any]:
    """One section ({} when absent)."""
    value = read(settings).get(name)
    return value if isinstance(value, dict) else {}


def has_section(settings: Settings, name: str) -> bool:
    return isinstance(read(settings).get(name), dict)


def put(settings: Settings, **entries: Any) -> None:
    """Set (or, with None, remove) top-level entries."""
    with _locked(settings):
        data = _load(settings)
        for key, value in entries.items():
            if value is None:
                data.pop(key, None)
            else:
                data[key] = value
        _save(settings, data)


def update(settings: Settings, name: str, **entries: Any) -> dict[str, Any]:
    """Set (or, with None, remove) entries of section ``name``; return the new section."""
    with _locked(settings):
        data = _load(settings)
        current = data.get(name)
        merged: dict[str, Any] = dict(current) if isinstance(current, dict) else {}
        for key, value in entries.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        data[name] = merged
        _save(settings, data)
        return merged


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock across processes on ``path`` (created, with its folder, if missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _locked(settings: Settings) -> Any:
    return file_lock(settings.stack_dir / LOCK_FILE)


def _has_legacy(settings: Settings) -> bool:
    return any(
        (settings.stack_dir / relative).exists() for relative in (*LEGACY.values(), LEGACY_PID_FILE)
    )


def _load(settings: Settings) -> dict[str, Any]:
    path = state_path(settings)
    data = _parse(path) if path.exists() else {}
    folded = False
    for name, relative in LEGACY.items():
        legacy = settings.stack_dir / relative
        if legacy.exists():
            if name not in data:
                data[name] = _parse(legacy)
            legacy.unlink()
            folded = True
    # The old pid file only repeated the broker entry's pid.
    (settings.stack_dir / LEGACY_PID_FILE).unlink(missing_ok=True)
    if folded:
        _save(settings, data)
    return data


def _parse(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise StackError(
            f"{path} is not valid JSON ({exc}); `cdc-assets stack down` resets it"
        ) from exc
    if not isinstance(data, dict):
        raise StackError(f"{path} does not hold a JSON object; `cdc-assets stack down` resets it")
    return data


def _save(settings: Settings, data: dict[str, Any]) -> None:
    path = state_path(settings)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
