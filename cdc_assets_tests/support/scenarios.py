"""Seeded schema-change scenarios for the daemon (issue 53): one seed gives one scenario of how
a table starts, what its source changes, how the stream arrives and what fails once. The runner
(`integration/test_daemon_scenarios.py`) plays it through a real `dagster-daemon` and compares
base with the replay oracle; `benchmarks/soak_scenarios.py` runs many seeds.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, replace

# The seeds `make test` runs (a few minutes); each found failure gets a named test of its own.
DEFAULT_SEEDS = (3, 20)
SEEDS_ENV = "CDC_ASSETS_SCENARIO_SEEDS"

CHANGES = ("add", "widen", "rename", "add+widen")
STARTS = ("new spec", "onboarded")
DELIVERIES = ("at once", "in slices")
# Where a run fails once (CDC_ASSETS_FAIL_ONCE), or nowhere.
FAILURES = (None, "evolve_start", "ingest_before_commit", "merge_before_commit")
# Changes added since (issue 54): drawn after everything else, for a share of the seeds, so that
# the other seeds keep the scenario they had.
LATER_CHANGES = ("drop", "drop+add")
LATER_SHARE = 0.3
# What keeps the table fresh: the sensors' micro-batch runs, or a continuous worker
# (pipeline.worker, issue 58) beside the evolution runs. Drawn last: older seeds keep the rest.
KEEPERS = ("runs", "worker")


@dataclass(frozen=True)
class Scenario:
    seed: int
    start: str
    change: str
    delivery: str
    fail_once: str | None
    keys: int
    events: int
    pauses: tuple[float, ...]  # seconds between slices when delivered in slices
    keeper: str = "runs"

    def __str__(self) -> str:
        fail = f", fails once at {self.fail_once}" if self.fail_once else ""
        kept = ", kept by a continuous worker" if self.keeper == "worker" else ""
        return f"seed {self.seed}: {self.start}, {self.change}, {self.delivery}{fail}{kept}"


def scenario(seed: int) -> Scenario:
    rng = random.Random(seed)
    drawn = Scenario(
        seed=seed,
        start=rng.choice(STARTS),
        change=rng.choice(CHANGES),
        delivery=rng.choice(DELIVERIES),
        fail_once=rng.choice(FAILURES),
        keys=rng.randint(8, 30),
        events=rng.randint(20, 90),
        pauses=tuple(round(rng.uniform(0.0, 8.0), 1) for _ in range(2)),
        keeper=rng.choice(KEEPERS),
    )
    if rng.random() < LATER_SHARE:
        return replace(drawn, change=rng.choice(LATER_CHANGES))
    return drawn


def seeds_to_run() -> list[int]:
    """``$CDC_ASSETS_SCENARIO_SEEDS`` (``1,5,9`` or ``100-149``), else the default seeds."""
    text = os.environ.get(SEEDS_ENV, "").strip()
    if not text:
        return list(DEFAULT_SEEDS)
    out: list[int] = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        out += list(range(int(low), int(high or low) + 1))
    return out
