"""Fleet metrics rendered for Prometheus and ordered worst first (checks.fleet), read back with
prometheus_client's own parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from cdc_assets.quality.fleet import TableMetrics, prometheus_text, worst_first


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_every_number_becomes_a_labelled_sample() -> None:
    quiet = TableMetrics("users", "a", "a.inventory.users", 0, 0.0, 0.0)
    busy = TableMetrics(
        "users",
        "b",
        "b.inventory.users",
        lag_records=1200,
        lag_seconds=95.5,
        watermark_delay_seconds=30.0,
        dead_letters={"column 'score': out of range": 3},
        evolutions=2,
        last_evolution_seconds=41.0,
        run_seconds={"ingest_ledgers": 12.5},
    )
    samples = _samples(prometheus_text([quiet, busy]))
    b = (("server", "b"), ("table", "users"))
    assert samples[("cdc_assets_ledger_lag_records", b)] == 1200
    assert samples[("cdc_assets_ledger_lag_seconds", b)] == 95.5
    assert samples[("cdc_assets_base_watermark_delay_seconds", b)] == 30.0
    reason = tuple(
        sorted({"server": "b", "table": "users", "reason": "column 'score': out of range"}.items())
    )
    assert samples[("cdc_assets_dead_letters", reason)] == 3
    assert samples[("cdc_assets_evolutions", b)] == 2
    assert samples[("cdc_assets_evolution_latency_seconds", b)] == 41.0
    job = tuple(sorted({"server": "b", "table": "users", "job": "ingest_ledgers"}.items()))
    assert samples[("cdc_assets_run_seconds", job)] == 12.5
    # two servers holding the same table name stay apart
    a = (("server", "a"), ("table", "users"))
    assert samples[("cdc_assets_ledger_lag_records", a)] == 0
    assert samples[("cdc_assets_measured", a)] == 1


def test_worst_first_puts_errors_then_delay_then_lag_first() -> None:
    fine = TableMetrics("fine", "s", "t1", 0, 0.0, 0.0)
    lagging = TableMetrics("lagging", "s", "t2", 500, 60.0, 0.0)
    late = TableMetrics("late", "s", "t3", 10, 5.0, 600.0)
    broken = TableMetrics("broken", "s", "t4", error="kafka: topic not found")
    order = [m.table for m in worst_first([fine, lagging, late, broken])]
    assert order == ["broken", "late", "lagging", "fine"]
    samples = _samples(prometheus_text([broken]))
    assert samples[("cdc_assets_measured", (("server", "s"), ("table", "broken")))] == 0
