"""Commands and runners other distributions add to `cdc-assets`, found through entry points.

The development distribution (``dev/``, installed by ``make setup``, not by ``pip install
cdc-assets``) adds the local stack's commands (``stack``, ``run``, ``dev``) and the generated-events
demo that ``checks --demo`` runs. The product finds them by name through Python's entry points and
never imports that distribution.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from cdc_assets.errors import CdcAssetsError

COMMANDS_GROUP = "cdc_assets.cli"  # callables that take the sub-command parsers and add theirs
RUNNERS_GROUP = "cdc_assets.runners"  # named callables (settings, args) -> exit code
DEV_PACKAGE_HINT = (
    "it comes with the project's development package (dev/ in the repository; `make setup` "
    "installs it)"
)


def add_plugin_commands(sub: Any) -> None:
    """Let each installed plugin add its sub-commands to ``sub``."""
    for entry in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name):
        entry.load()(sub)


def runner(name: str) -> Callable[[Any, argparse.Namespace], int]:
    """The runner a plugin registered as ``name``; a clear error when none did."""
    found = [e for e in entry_points(group=RUNNERS_GROUP) if e.name == name]
    if not found:
        raise CdcAssetsError(f"no {name!r} runner is installed: {DEV_PACKAGE_HINT}")
    loaded: Callable[[Any, argparse.Namespace], int] = found[0].load()
    return loaded
