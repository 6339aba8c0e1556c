"""Fleet metrics: per table (and source server), the numbers a monitoring stack scrapes, in the
Prometheus exposition format, and the order a fleet summary lists tables in (worst first). Pure:
measured values in, text out; ``pipeline.health.fleet`` measures them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Gauge, generate_latest

PREFIX = "cdc_assets"


@dataclass(frozen=True)
class TableMetrics:
    """What one table's mirror looks like now. None: not measurable (nothing ingested yet, a
    topic that does not exist, no Dagster run recorded)."""

    table: str
    server: str
    topic: str
    lag_records: int | None = None  # Kafka records the ledger has not consumed
    lag_seconds: float | None = None  # age of the oldest of them
    watermark_delay_seconds: float | None = None  # now - the newest change base has applied
    dead_letters: Mapping[str, int] = field(default_factory=dict)  # reason -> rows waiting
    evolutions: int = 0  # applied schema changes
    last_evolution_seconds: float | None = None  # detection to applied, newest evolution
    run_seconds: Mapping[str, float] = field(default_factory=dict)  # job -> newest run's time
    error: str | None = None  # why some numbers are missing

    @property
    def dead_letter_total(self) -> int:
        return sum(self.dead_letters.values())

    def badness(self) -> tuple[float, ...]:
        """Sort key, worst first: errors, then the delay of base, then the lag, then dead
        letters."""
        return (
            1.0 if self.error else 0.0,
            self.watermark_delay_seconds or 0.0,
            self.lag_seconds or 0.0,
            float(self.lag_records or 0),
            float(self.dead_letter_total),
        )


def worst_first(metrics: Sequence[TableMetrics]) -> list[TableMetrics]:
    return sorted(metrics, key=lambda m: (tuple(-x for x in m.badness()), m.table))


def prometheus_text(metrics: Sequence[TableMetrics]) -> str:
    """The metrics as Prometheus exposition text (a scrape, or a node_exporter textfile)."""
    registry = CollectorRegistry()
    labels = ("table", "server")

    def gauge(name: str, doc: str, extra: tuple[str, ...] = ()) -> Gauge:
        return Gauge(f"{PREFIX}_{name}", doc, [*labels, *extra], registry=registry)

    lag = gauge("ledger_lag_records", "Kafka records the ledger has not consumed")
    lag_s = gauge("ledger_lag_seconds", "Age of the oldest record the ledger has not consumed")
    delay = gauge("base_watermark_delay_seconds", "Now less the newest change base has applied")
    dead = gauge("dead_letters", "Dead letters waiting, by reason", ("reason",))
    evolutions = gauge("evolutions", "Schema changes applied")
    latency = gauge(
        "evolution_latency_seconds", "Detection to applied, for the newest schema change"
    )
    runs = gauge("run_seconds", "Duration of the newest run, by job", ("job",))
    up = gauge("measured", "1 when every number of the table could be measured, else 0")
    for m in metrics:
        key = (m.table, m.server)
        up.labels(*key).set(0 if m.error else 1)
        if m.lag_records is not None:
            lag.labels(*key).set(m.lag_records)
        if m.lag_seconds is not None:
            lag_s.labels(*key).set(m.lag_seconds)
        if m.watermark_delay_seconds is not None:
            delay.labels(*key).set(m.watermark_delay_seconds)
        for reason, count in m.dead_letters.items():
            dead.labels(*key, reason).set(count)
        evolutions.labels(*key).set(m.evolutions)
        if m.last_evolution_seconds is not None:
            latency.labels(*key).set(m.last_evolution_seconds)
        for job, seconds in m.run_seconds.items():
            runs.labels(*key, job).set(seconds)
    return generate_latest(registry).decode("utf-8")
