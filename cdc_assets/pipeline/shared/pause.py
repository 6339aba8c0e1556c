"""A table's pause: a lease on its base table's properties that an evolution or a maintenance run
takes while it commits, and that a continuous worker honours by leaving the table alone.

Correctness never rests on it: every commit a worker makes is checked against the state it was
built from, so a worker that ignored the pause would lose a commit race and retry. The pause
saves that contention (a compaction of base or an evolution's backfill would otherwise compete
with a commit every few seconds, and could lose again and again). It lives in the catalog, so
every process of a deployment sees it, whatever started the run (a sensor, the UI, the CLI). A
lease rather than a flag: a run killed while it holds the pause leaves it behind, and the worker
takes the table back once the lease ends.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from cdc_assets.schema.layers import base_layout
from cdc_assets.spec.models import TableSpec

log = logging.getLogger(__name__)

PAUSED_BY = "cdc.paused.by"  # who holds it: "<what> <token>", e.g. "maintenance 3f2a9c1d"
PAUSED_UNTIL = "cdc.paused.until"  # epoch seconds when the lease ends
DEFAULT_LEASE_S = 1800.0  # longer than an evolution or a maintenance run of a table takes


@dataclass(frozen=True)
class Pause:
    by: str
    until: float

    def describe(self, now: float) -> str:
        return f"paused by {self.by} for at most {max(self.until - now, 0):.0f} s more"


def pause_of(properties: Mapping[str, str], now: float) -> Pause | None:
    """The pause these table properties hold at ``now``; None when there is none or it ended."""
    by, until = properties.get(PAUSED_BY), properties.get(PAUSED_UNTIL)
    if not by or not until:
        return None
    try:
        ends = float(until)
    except ValueError:
        return None  # not ours to interpret: never a reason to stop a table
    return Pause(by, ends) if ends > now else None


def _base(iceberg_catalog: Any, spec: TableSpec) -> Any | None:
    layout = base_layout(spec)
    identifier = f"{layout.namespace}.{layout.name}"
    return (
        iceberg_catalog.load_table(identifier) if iceberg_catalog.table_exists(identifier) else None
    )


def table_pause(iceberg_catalog: Any, spec: TableSpec, now: float | None = None) -> Pause | None:
    """The pause on the spec's table now (None also before its base table exists)."""
    table = _base(iceberg_catalog, spec)
    if table is None:
        return None
    return pause_of(table.properties, time.time() if now is None else now)


@contextmanager
def table_paused(
    iceberg_catalog: Any, spec: TableSpec, what: str, lease_s: float = DEFAULT_LEASE_S
) -> Iterator[None]:
    """Hold the table's pause for the block (``what`` says who: evolution, maintenance).

    Taking or giving it back is a metadata-only commit of base's properties; one that fails is
    logged and the block runs anyway, since the pause only saves work. On the way out the pause
    is removed only while it is still this one's (another run may have taken it since).
    """
    holder = f"{what} {uuid.uuid4().hex[:8]}"
    taken = False
    try:
        table = _base(iceberg_catalog, spec)
        if table is not None:
            with table.transaction() as tx:
                tx.set_properties({PAUSED_BY: holder, PAUSED_UNTIL: f"{time.time() + lease_s:.0f}"})
            taken = True
    except Exception as exc:  # the catalog refused a property commit: carry on unpaused
        log.warning(f"{spec.name}: could not pause the table for {what}: {exc}")
    try:
        yield
    finally:
        if taken:
            _give_back(iceberg_catalog, spec, holder)


def _give_back(iceberg_catalog: Any, spec: TableSpec, holder: str) -> None:
    try:
        table = _base(iceberg_catalog, spec)
        if table is not None and table.properties.get(PAUSED_BY) == holder:
            with table.transaction() as tx:
                tx.remove_properties(PAUSED_BY, PAUSED_UNTIL)
    except Exception as exc:  # left behind: the lease ends it
        log.warning(f"{spec.name}: the pause of {holder} stays until its lease ends: {exc}")
