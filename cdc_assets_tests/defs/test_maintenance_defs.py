"""The shared maintenance job and its schedule: one of each however many tables, one run per due
table with the table in run config and tags, unknown tables refused before Spark starts."""

from __future__ import annotations

from datetime import UTC, datetime

import dagster as dg
import pytest

from cdc_assets.definitions import build_defs
from cdc_assets.errors import SpecError
from cdc_assets.jobs.maintenance import (
    MAINTENANCE_JOB,
    MAINTENANCE_SCHEDULE,
    build_maintenance_job,
    build_maintenance_schedule,
    cron_fired,
    due_tables,
    maintenance_run_config,
    previous_tick,
)
from cdc_assets.settings import Settings, load_settings
from cdc_assets.spec import load_specs
from cdc_assets.spec.models import TableSpec
from cdc_assets_tests.conftest import PROJECT_ROOT

CRONS = {"users": "0 3 * * *", "orders": "30 3 * * *", "order_items": "0 4 * * 1"}


def with_cron(spec: TableSpec, cron: str) -> TableSpec:
    maintenance = spec.base.maintenance.model_copy(update={"cron": cron})
    base = spec.base.model_copy(update={"maintenance": maintenance})
    return spec.model_copy(update={"base": base})


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    home = tmp_path_factory.mktemp("home")
    return load_settings(
        {"CDC_ASSETS_HOME": str(home), "CDC_ASSETS_SPECS": str(PROJECT_ROOT / "table_specs")}
    )


@pytest.fixture(scope="module")
def specs(settings: Settings) -> list[TableSpec]:
    return [with_cron(s, CRONS[s.name]) for s in load_specs(settings.specs_dir)]


@pytest.fixture(scope="module")
def defs(specs: list[TableSpec], settings: Settings) -> dg.Definitions:
    return build_defs(specs=specs, settings=settings)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def evaluate(defs: dg.Definitions, tick: str) -> list[dg.RunRequest]:
    schedule = defs.resolve_schedule_def(MAINTENANCE_SCHEDULE)
    data = schedule.evaluate_tick(dg.build_schedule_context(scheduled_execution_time=at(tick)))
    return list(data.run_requests or [])


def test_one_job_and_one_schedule_for_all_tables(defs: dg.Definitions) -> None:
    repo = defs.get_repository_def()
    assert MAINTENANCE_JOB in repo.job_names
    assert MAINTENANCE_SCHEDULE in [s.name for s in repo.schedule_defs]
    schedule = repo.get_schedule_def(MAINTENANCE_SCHEDULE)
    assert schedule.job_name == MAINTENANCE_JOB
    assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING


def test_schedule_requests_one_run_per_due_table(defs: dg.Definitions) -> None:
    # 2026-03-02 is a Monday. The 03:00 tick serves users; 04:00 serves orders (03:30) and
    # order_items (Mondays 04:00).
    assert evaluate(defs, "2026-03-02T02:00:00") == []
    at_three = evaluate(defs, "2026-03-02T03:00:00")
    assert [r.tags["cdc/table"] for r in at_three] == ["users"]
    assert at_three[0].run_config == maintenance_run_config("users")
    assert at_three[0].tags["cdc/trigger"] == MAINTENANCE_SCHEDULE
    at_four = evaluate(defs, "2026-03-02T04:00:00")
    assert [r.tags["cdc/table"] for r in at_four] == ["order_items", "orders"]
    assert at_four[1].run_config == {"ops": {"maintain_table": {"config": {"table": "orders"}}}}
    keys = [r.run_key for r in at_three + at_four + evaluate(defs, "2026-03-03T03:00:00")]
    assert len(set(keys)) == len(keys) == 4, "a run key per table per tick"
    assert [r.tags["cdc/table"] for r in evaluate(defs, "2026-03-03T04:00:00")] == ["orders"]


def test_cron_windows() -> None:
    assert previous_tick(at("2026-03-02T03:00:00")) == at("2026-03-02T02:00:00")
    assert previous_tick(at("2026-03-02T03:17:00")) == at("2026-03-02T03:00:00")
    assert cron_fired("0 3 * * *", at("2026-03-02T02:00:00"), at("2026-03-02T03:00:00"))
    assert not cron_fired("0 3 * * *", at("2026-03-02T03:00:00"), at("2026-03-02T04:00:00"))
    assert cron_fired("*/15 * * * *", at("2026-03-02T03:00:00"), at("2026-03-02T04:00:00"))


def test_due_tables_scale_to_many_specs(specs: list[TableSpec]) -> None:
    users = next(s for s in specs if s.name == "users")  # due at 03:00
    many = [users.model_copy(update={"name": f"t{i:04d}"}) for i in range(1000)]
    due = due_tables(many, at("2026-03-02T03:00:00"), at("2026-03-02T04:00:00"))
    assert due == []
    due = due_tables(many, at("2026-03-02T02:00:00"), at("2026-03-02T03:00:00"))
    assert len(due) == 1000


def test_unknown_table_is_refused_before_spark_starts(defs: dg.Definitions) -> None:
    from pyspark import SparkContext

    # Compare with what was there before: run after the integration tier, the
    # suite's shared session already exists, and that one is not ours.
    before = SparkContext._active_spark_context
    result = defs.resolve_job_def(MAINTENANCE_JOB).execute_in_process(
        run_config=maintenance_run_config("nope"), raise_on_error=False
    )
    assert not result.success
    failure = result.get_step_failure_events()[0].event_specific_data.error  # type: ignore[union-attr]
    assert "unknown table spec 'nope'" in failure.message
    assert "order_items" in failure.message
    assert SparkContext._active_spark_context is before


def test_table_is_required_in_run_config(defs: dg.Definitions) -> None:
    with pytest.raises(dg.DagsterInvalidConfigError, match="table"):
        defs.resolve_job_def(MAINTENANCE_JOB).execute_in_process(run_config={})


def test_a_cron_dagster_cannot_schedule_fails_at_load(specs: list[TableSpec]) -> None:
    broken = [with_cron(specs[0], "0 3 * * FOO")]
    with pytest.raises(SpecError, match=r"base\.maintenance\.cron"):
        build_maintenance_schedule(broken, build_maintenance_job(broken))
