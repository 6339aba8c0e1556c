"""The run executor: a run's steps in this process, with up to ``tables_at_once`` of them at once.

Every step needs the Spark driver, so a run keeps one process and one driver (Dagster's
multiprocess executor would start both per step). A small table's steps mostly wait on the
driver's round trips (planning, Iceberg commits, catalog reads); with several steps at once the
round trips of one table overlap the work of another (``benchmarks/fleet_threads.py``). Dagster
has no threaded executor (dagster-io/dagster#4041), so this one drives Dagster's own plan state
(``ActiveExecution``, the loop of its in-process and multiprocess executors) with step threads:

- the main thread alone starts steps, reads their events in order of arrival and updates the
  plan state; a step thread only runs Dagster's step body and hands its events over;
- each step thread takes a Spark session of its own (``resources.spark.own_session_per_thread``):
  a commit's snapshot properties are session settings, and must not leak into another table's;
- steps of one table depend on each other and run in order; steps of different tables overlap;
- a termination signal stops new steps, lets the running ones finish (each commit is atomic),
  and ends the run as interrupted.

With ``tables_at_once: 1`` it is Dagster's in-process executor, unchanged; the default width is
``settings.DEFAULT_TABLES_AT_ONCE`` (``CDC_ASSETS_TABLES_AT_ONCE``).
Dagster's executor API is private: the pinned version is the one this was written and tested
against.
"""

from __future__ import annotations

import os
import queue
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

import dagster as dg
from dagster._core.events import DagsterEvent, EngineEventData
from dagster._core.execution.api import ExecuteRunWithPlanIterable
from dagster._core.execution.compute_logs import create_compute_log_file_key
from dagster._core.execution.context.system import PlanOrchestrationContext
from dagster._core.execution.context_creation_job import PlanExecutionContextManager
from dagster._core.execution.plan.execute_plan import (
    _trigger_hook,
    dagster_event_sequence_for_step,
)
from dagster._core.execution.plan.instance_concurrency_context import InstanceConcurrencyContext
from dagster._core.execution.plan.plan import ExecutionPlan
from dagster._core.execution.retries import RetryMode, get_retries_config
from dagster._core.executor.base import Executor
from dagster._core.executor.in_process import InProcessExecutor

from cdc_assets.resources.spark import own_session_per_thread

EXECUTOR_NAME = "tables_at_once"
_DONE = object()  # a step thread's last item: its step ended
_POLL_S = 0.5  # how often the main thread looks for a termination signal while steps run


def build_executor(default_tables: int) -> dg.ExecutorDefinition:
    """The executor of every job, ``tables_at_once`` defaulting to ``default_tables``."""

    @dg.executor(
        name=EXECUTOR_NAME,
        config_schema={
            "tables_at_once": dg.Field(
                int,
                default_value=default_tables,
                description="How many steps (tables) of a run execute at once in its process, "
                "each on a Spark session of its own (1: one after another)",
            ),
            "retries": get_retries_config(),  # type: ignore[no-untyped-call]
        },
    )
    def tables_at_once(init_context: Any) -> Executor:
        config = init_context.executor_config
        retries = RetryMode.from_config(config["retries"])
        width = int(config["tables_at_once"])
        if width < 1:
            raise ValueError(f"execution.config.tables_at_once must be 1 or more, not {width}")
        if width == 1:
            return InProcessExecutor(retries=retries or RetryMode.DISABLED)
        return StepThreadsExecutor(retries or RetryMode.DISABLED, width)

    return tables_at_once


class StepThreadsExecutor(Executor):
    """Up to ``width`` steps of a run at once, in threads of the run's process."""

    def __init__(self, retries: RetryMode, width: int) -> None:
        self._retries = retries
        self.width = width

    @property
    def retries(self) -> RetryMode:
        return self._retries

    def execute(
        self, plan_context: PlanOrchestrationContext, execution_plan: ExecutionPlan
    ) -> Iterator[DagsterEvent]:
        yield DagsterEvent.engine_event(
            plan_context,
            f"Executing steps in process (pid: {os.getpid()}), up to {self.width} at once",
            event_specific_data=EngineEventData.in_process(
                os.getpid(), execution_plan.step_keys_to_execute
            ),
        )
        width = self.width

        def iterator(job_context: Any, execution_plan: ExecutionPlan) -> Iterator[DagsterEvent]:
            with InstanceConcurrencyContext(job_context.instance, job_context.dagster_run) as icc:
                yield from _threaded_steps(job_context, execution_plan, icc, width)

        yield from ExecuteRunWithPlanIterable(
            execution_plan=plan_context.execution_plan,
            iterator=iterator,
            execution_context_manager=PlanExecutionContextManager(
                job=plan_context.job,
                retry_mode=plan_context.retry_mode,
                execution_plan=plan_context.execution_plan,
                run_config=plan_context.run_config,
                dagster_run=plan_context.dagster_run,
                instance=plan_context.instance,
                raise_on_error=plan_context.raise_on_error,
                output_capture=plan_context.output_capture,
            ),
        )


def _run_step(key: str, step_context: Any, events: queue.Queue[tuple[str, Any]]) -> None:
    """A step thread: Dagster's step body, its events handed to the main thread in order."""
    own_session_per_thread()
    try:
        for event in dagster_event_sequence_for_step(step_context):
            events.put((key, event))
    except BaseException as exc:  # a framework error: the main thread raises it
        events.put((key, exc))
    finally:
        events.put((key, _DONE))


def _threaded_steps(
    job_context: Any, plan: ExecutionPlan, concurrency: InstanceConcurrencyContext, width: int
) -> Iterator[DagsterEvent]:
    log_manager = job_context.instance.compute_log_manager
    step_keys = [step.key for step in plan.get_steps_to_execute_in_topo_order()]
    events: queue.Queue[tuple[str, Any]] = queue.Queue()
    running: dict[str, tuple[Any, list[DagsterEvent]]] = {}  # key -> (step context, its events)
    failure: BaseException | None = None
    stopping = False
    with ExitStack() as stack:
        active = stack.enter_context(
            plan.start(
                retry_mode=job_context.retry_mode,
                max_concurrent=width,
                instance_concurrency_context=concurrency,
                step_dependency_config=job_context.step_dependency_config,
            )
        )
        pool = stack.enter_context(ThreadPoolExecutor(width, thread_name_prefix="cdc-step"))
        file_key = create_compute_log_file_key()  # type: ignore[no-untyped-call]
        log_key = log_manager.build_log_key_for_run(job_context.run_id, file_key)
        log_context = stack.enter_context(log_manager.capture_logs(log_key))
        yield DagsterEvent.capture_logs(job_context, step_keys, log_key, log_context)

        while running or not (stopping or active.is_complete):
            if not stopping and active.check_for_interrupts():
                stopping = True
                active.mark_interrupted()
                yield DagsterEvent.engine_event(
                    job_context,
                    f"Interrupted: no new steps; waiting for {sorted(running)} to finish",
                    EngineEventData.interrupted(list(running)),
                )
            if not stopping:
                for step in active.get_steps_to_execute(limit=width - len(running)):
                    step_context = job_context.for_step(step, active.get_known_state())
                    running[step.key] = (step_context, [])
                    pool.submit(_run_step, step.key, step_context, events)
                yield from active.concurrency_event_iterator(job_context)
            if not running:
                yield from active.plan_events_iterator(job_context)  # skips, abandoned steps
                if not (stopping or active.is_complete):
                    active.sleep_til_ready()
                continue
            try:
                key, item = events.get(timeout=_POLL_S)
            except queue.Empty:
                continue
            step_context, seen = running[key]
            if item is _DONE:
                del running[key]
                active.verify_complete(job_context, key)
                for event in active.plan_events_iterator(job_context):
                    seen.append(event)
                    yield event
                yield from _trigger_hook(step_context, seen)
            elif isinstance(item, BaseException):
                failure = failure or item
                stopping = True
            else:
                seen.append(item)
                yield item
                active.handle_event(item)
        if failure is not None:
            raise failure
