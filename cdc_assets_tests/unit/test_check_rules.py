"""The check rules (verdicts, drift, SQL) on hand-made measurements: where each threshold lies and
which severity a failure gets."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlglot

from cdc_assets.quality import rules
from cdc_assets.quality.mirror_diff import MirrorDiff, ValueDifference
from cdc_assets.schema.drift import LiveColumn, layout_differences, source_differences
from cdc_assets.schema.layers import base_layout
from cdc_assets.spec import load_specs
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql import checks as sql
from cdc_assets_tests.conftest import PROJECT_ROOT

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def orders() -> TableSpec:
    return next(s for s in load_specs(PROJECT_ROOT / "table_specs") if s.name == "orders")


def _nulls(**kw: object) -> rules.Verdict:
    counts = rules.NullCounts(
        rows=100,
        nulls={"a": 0, "b": 10, "c": 0, **kw.pop("nulls", {})},  # type: ignore[dict-item]
        since=kw.pop("since", {}),  # type: ignore[arg-type]
    )
    args: dict[str, object] = {
        "required": ["a"],
        "max_fraction": {},
        "allow_all_null": [],
        "sla_minutes": 60,
        "now": NOW,
        **kw,
    }
    return rules.null_counts_verdict(counts, **args)  # type: ignore[arg-type]


def test_null_counts_pass_and_report() -> None:
    v = _nulls()
    assert v.passed
    assert v.metadata["null_counts"] == {"a": 0, "b": 10, "c": 0}
    assert v.metadata["null_columns"] == []


def test_null_in_required_column_is_an_error() -> None:
    v = _nulls(nulls={"a": 3})
    assert not v.passed
    assert v.severity == "ERROR"
    assert v.summary == "a: 3 nulls in a NOT NULL column"


@pytest.mark.parametrize(("limit", "passed"), [(0.1, True), (0.09, False)])
def test_null_fraction_limit(limit: float, passed: bool) -> None:
    assert _nulls(max_fraction={"b": limit}).passed is passed


def _added(minutes_ago: int, changed: int, null: int) -> dict[str, tuple[datetime, int, int]]:
    return {"c": (NOW - timedelta(minutes=minutes_ago), changed, null)}


@pytest.mark.parametrize(
    ("minutes_ago", "changed", "null", "allow", "passed"),
    [
        (90, 5, 5, [], False),  # past the SLA, every changed row still null: values are lost
        (30, 5, 5, [], True),  # within the SLA: evolution may still be backfilling
        (90, 5, 4, [], True),  # some values arrived
        (90, 0, 0, [], True),  # nothing changed since: null is right
        (90, 5, 5, ["c"], True),  # declared as possibly all-null
    ],
)
def test_new_column_still_null_past_its_sla(
    minutes_ago: int, changed: int, null: int, allow: list[str], passed: bool
) -> None:
    v = _nulls(since=_added(minutes_ago, changed, null), allow_all_null=allow)
    assert v.passed is passed
    assert v.metadata["added_columns"]["c"]["rows_changed_since"] == changed  # type: ignore[index]
    if not passed:
        assert v.severity == "ERROR"
        assert "added 90 min ago (SLA 60 min) and still null in all 5 rows" in v.summary


def test_duplicate_keys() -> None:
    assert rules.unique_key_verdict(rules.DuplicateKeys(0, 0), ["id"]).passed
    v = rules.unique_key_verdict(rules.DuplicateKeys(2, 5, [("7", 3), ("9", 2)]), ["id"])
    assert not v.passed
    assert v.severity == "ERROR"
    assert v.metadata["sample"] == {"7": 3, "9": 2}


def _lag(pending: int, oldest_min: float | None, watermark_min: float | None) -> rules.Verdict:
    def ago(m: float | None) -> datetime | None:
        return None if m is None else NOW - timedelta(minutes=m)

    lag = rules.WatermarkLag(ago(watermark_min), pending, ago(oldest_min), ago(0))
    return rules.watermark_lag_verdict(lag, sla_minutes=60, now=NOW)


def test_watermark_lag() -> None:
    idle = _lag(0, None, 600)  # nothing pending: an idle source is fresh
    assert idle.passed
    assert idle.metadata["watermark_age_s"] == 36000.0
    assert _lag(10, 59, 70).passed
    stale = _lag(10, 61, 70)
    assert not stale.passed
    assert stale.severity == "ERROR"
    assert stale.metadata["lag_vs_ledger_s"] == 4200.0
    never = _lag(3, 120, None)  # base never merged
    assert not never.passed
    assert never.metadata["watermark_ts"] == ""


def test_kafka_lag_and_retention() -> None:
    def v(lag: int, headroom_h: float | None, max_lag: int | None = None) -> rules.Verdict:
        head = None if headroom_h is None else headroom_h * 3600
        return rules.kafka_lag_verdict(
            rules.KafkaLag(lag, head, 7 * 86400000), min_headroom_hours=24, max_lag_records=max_lag
        )

    assert v(0, None).passed
    assert v(100, 48).passed
    assert v(100, None).passed  # infinite retention
    near = v(100, 2)
    assert not near.passed
    assert near.severity == "ERROR"
    big = v(100, 48, max_lag=50)
    assert not big.passed
    assert big.severity == "WARN"
    both = v(100, 2, max_lag=50)
    assert both.severity == "ERROR"


def test_drift_severity() -> None:
    assert rules.schema_drift_verdict({"base": []}, None).passed
    assert rules.schema_drift_verdict({"base": []}, []).passed
    source_only = rules.schema_drift_verdict({"base": []}, ["column x is in the source"])
    assert not source_only.passed
    assert source_only.severity == "WARN"
    both = rules.schema_drift_verdict({"base": ["column y is missing"]}, ["x"])
    assert both.severity == "ERROR"
    assert both.summary == "base: column y is missing; source: x"


def test_dead_letter_rate_and_row_count() -> None:
    assert rules.dead_letter_rate_verdict(0, 0, 0, max_rate=0.01).passed
    assert rules.dead_letter_rate_verdict(1000, 10, 3, max_rate=0.01).passed
    v = rules.dead_letter_rate_verdict(1000, 11, 3, max_rate=0.01)
    assert not v.passed
    assert v.severity == "WARN"
    # after a redrive took them, nothing is left to advise
    done = rules.dead_letter_rate_verdict(1000, 11, 3, max_rate=0.01, waiting=0)
    assert done.passed
    assert done.summary == "0.00% dead letters waiting over 3 ingests, 11 of them redriven since"
    assert done.metadata["redriven"] == 11
    assert not rules.dead_letter_rate_verdict(1000, 30, 3, max_rate=0.01, waiting=20).passed
    assert rules.row_count_verdict(5, 5, 0).passed
    off = rules.row_count_verdict(4, 5, 2)
    assert not off.passed
    assert off.severity == "WARN"
    assert off.summary == "base holds 4 rows, the source 5 (2 changes still pending)"


def test_source_values_fail_only_when_nothing_is_in_flight() -> None:
    same = MirrorDiff("t", 3, 3)
    assert rules.source_values_verdict(same, 0).passed
    diff = MirrorDiff(
        "t",
        3,
        3,
        differing=1,
        by_column={"score": 1, "email": 1},
        examples=[
            (
                (2,),
                [ValueDifference("score", None, 0), ValueDifference("email", "a@x", "b@x")],
            )
        ],
    )
    settled = rules.source_values_verdict(diff, 0, ["email"])
    assert (settled.passed, settled.severity) == (False, "ERROR")
    assert settled.summary.endswith("1 differing (email 1, score 1), with no change in flight")
    # a sensitive column's values are never shown
    assert settled.metadata["examples"] == ["(2,): score: source None base 0; email: <sensitive>"]
    busy = rules.source_values_verdict(diff, 4)
    assert (busy.passed, busy.severity) == (False, "WARN")
    assert busy.summary.endswith("4 changes still in flight")
    assert "a@x" in str(busy.metadata["examples"])


def test_layout_differences(orders: TableSpec) -> None:
    layout = base_layout(orders)
    live = [LiveColumn(c.name, str(c.type), c.required) for c in layout.columns]
    assert layout_differences(layout, live, "bucket(8, order_id)") == []
    live[1] = LiveColumn("user_id", "int", True)
    live[3] = LiveColumn("amount", "decimal(12, 2)")  # same type, other spelling
    del live[4]
    live.append(LiveColumn("extra", "string"))
    assert layout_differences(layout, live, "bucket(16, order_id)") == [
        "column user_id is int, the spec says long",
        "column user_id is required, the spec says optional",
        "column tax (decimal(12,2)) is missing",
        "column extra (string) is not in the spec",
        "partitioned by [bucket(16, order_id)], the spec says [bucket(8, order_id)]",
    ]


def test_source_differences(orders: TableSpec) -> None:
    names = [c.name for c in orders.columns]
    assert source_differences(orders, [n.upper() for n in names]) == []
    assert source_differences(orders, [*names[1:], "coupon"]) == [
        "column coupon is in the source, not in spec v1",
        "column order_id of spec v1 is not in the source",
    ]


@pytest.mark.parametrize(
    "query",
    [
        sql.render_null_counts(
            "`lake`.`shop`.`orders`",
            ["order_id", "note"],
            toast_aware=True,
            added=[sql.AddedColumnProbe("note", NOW)],
            where=sql.ledger_image_filter([("2026-11-22", 3)]),
        ),
        sql.render_duplicate_key_count("t", ["a", "b"]),
        sql.render_duplicate_key_sample("t", ["a", "b"]),
        sql.render_pending("t", {0: 10, 1: 5}, "2026-11-21"),
        sql.render_pending("t", {}),
    ],
)
def test_check_sql_parses_as_spark(query: str) -> None:
    assert sqlglot.parse_one(query, read="spark") is not None


def test_pending_filter_and_ledger_filter() -> None:
    assert sql.pending_filter({}) == "true"
    assert sql.pending_filter({1: 5, 0: 10}) == (
        "NOT ((_kafka_partition = 0 AND _kafka_offset < 10) OR "
        "(_kafka_partition = 1 AND _kafka_offset < 5))"
    )
    assert sql.ledger_image_filter([]).endswith("AND (false)")


def test_image_values_fail_with_the_columns_and_examples() -> None:
    clean = rules.image_values_verdict(rules.ImageMismatches(120, {"phone": 0, "score": 0}))
    assert clean.passed
    assert clean.summary == "120 row images agree with their ledger and base rows"
    lost = rules.image_values_verdict(
        rules.ImageMismatches(
            120,
            {"phone": 150, "score": 0},
            ["ledger p0@7: phone: image +1-555 row null"],
            3,
            ['base {"id":7}: phone: ledger +1-555 base null'],
            since="2026-11-24",
        )
    )
    assert not lost.passed
    assert lost.severity == "ERROR"
    assert "phone (150)" in lost.summary
    assert "3 base rows" in lost.summary
    assert "cdc-assets backfill <table> --column phone" in lost.summary
    assert lost.metadata["examples"] == [
        "ledger p0@7: phone: image +1-555 row null",
        'base {"id":7}: phone: ledger +1-555 base null',
    ]


def test_schema_converged_fails_once_a_field_waits_past_the_grace_period() -> None:
    from cdc_assets.quality.rules import schema_converged_verdict

    minute = 60_000
    now = 1_000 * minute
    unknown = {"email_address": (now - 45 * minute, now - minute), "tier": (now - minute, now)}
    verdict = schema_converged_verdict(unknown, known={"id", "email"}, now_ms=now, grace_minutes=30)
    assert not verdict.passed
    assert verdict.severity == "ERROR"
    assert "email_address" in verdict.summary
    assert "tier" in verdict.summary  # new: an evolution is due (warned beside the error)
    fields = verdict.metadata["fields_behind"]
    assert isinstance(fields, dict)
    assert fields["email_address"]["minutes"] == 45.0
    young = schema_converged_verdict(
        {"tier": unknown["tier"]}, known=set(), now_ms=now, grace_minutes=30
    )
    assert (young.passed, young.severity) == (False, "WARN")
    # known now (applied, a former name, or left out on purpose): converged
    done = schema_converged_verdict(
        unknown, known={"email_address", "tier"}, now_ms=now, grace_minutes=30
    )
    assert done.passed


def test_schema_converged_fails_on_values_a_type_refused_past_the_grace_period() -> None:
    from cdc_assets.quality.rules import schema_converged_verdict

    minute = 60_000
    now = 1_000 * minute
    refused = {"score": (7, now - 40 * minute), "note": (1, now - minute)}
    verdict = schema_converged_verdict(
        {}, known=set(), now_ms=now, grace_minutes=30, refused=refused
    )
    assert (verdict.passed, verdict.severity) == (False, "ERROR")
    assert "7 dead letter(s) hold values of column(s) score" in verdict.summary
    assert "note" in verdict.summary  # younger: warned beside the error
    values = verdict.metadata["refused_values"]
    assert isinstance(values, dict)
    assert values["score"]["dead_letters"] == 7
    young = schema_converged_verdict(
        {}, known=set(), now_ms=now, grace_minutes=30, refused={"note": refused["note"]}
    )
    assert (young.passed, young.severity) == (False, "WARN")
    assert schema_converged_verdict({}, known=set(), now_ms=now, grace_minutes=30).passed


def test_refused_column_reads_the_reasons_a_type_or_nullability_gives() -> None:
    from cdc_assets.schema.recover import refused_column

    assert refused_column("column 'score': value does not fit int") == "score"
    assert refused_column("column 'qty': cannot decode as bigint") == "qty"
    assert refused_column("column 'email' is null but declared not nullable") == "email"
    assert refused_column('column "it\'s": value does not fit int') == "it's"
    # not the spec's type: a transform, a key, a framing or envelope error
    assert refused_column("column 'created_ms': cannot apply epoch_millis_to_timestamp") is None
    assert refused_column("primary key column 'id' is null") is None
    assert refused_column("value is not JSON") is None


def test_schema_converged_under_freeze_warns_for_fields_and_fails_for_lost_values() -> None:
    from cdc_assets.quality.rules import schema_converged_verdict

    minute = 60_000
    now = 1_000 * minute
    unknown = {"tier": (now - 90 * minute, now)}
    frozen = schema_converged_verdict(
        unknown, known=set(), now_ms=now, grace_minutes=30, frozen=True
    )
    assert (frozen.passed, frozen.severity) == (False, "WARN")
    assert "evolution.policy is freeze" in frozen.summary
    lost = schema_converged_verdict(
        unknown,
        known=set(),
        now_ms=now,
        grace_minutes=30,
        refused={"score": (3, now - 90 * minute)},
        frozen=True,
    )
    assert (lost.passed, lost.severity) == (False, "ERROR")
