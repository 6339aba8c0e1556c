"""The ``tables`` op's pool (assets/tables.py) on plain Dagster assets: the tables of a run go
at once in threads of its one step, each table's layers in order, a table that fails stops its
own layers and not the others', and the step then fails naming it; one at a time is one after
another."""

import itertools
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg
import pytest

from cdc_assets.assets import tables as tables_module
from cdc_assets.assets.keys import asset_key
from cdc_assets.assets.tables import _DONE, _Failed, _run_tables, selected_layers

pytestmark = pytest.mark.defs

TABLES = ("a", "b", "c")
LAYERS = ("cdc", "bucketed", "base")


@dataclass(frozen=True)
class _Spec:
    name: str


class _Work:
    """Stands in for the Spark work: each layer sleeps and records its thread and span."""

    def __init__(self, fail: str | None = None) -> None:
        self.fail = fail
        self.spans: dict[tuple[str, str], tuple[str, float, float]] = {}

    def run(self, spec: _Spec, layers: Sequence[str], out: queue.Queue[Any]) -> None:
        try:
            for layer in layers:
                started = time.monotonic()
                if (spec.name, layer) == (self.fail, layer) and layer == "bucketed":
                    out.put(_Failed(spec.name, layer, RuntimeError(f"{spec.name} broke"), "tb"))
                    return
                time.sleep(0.3 if layer == "cdc" else 0.05)
                self.spans[(spec.name, layer)] = (
                    threading.current_thread().name,
                    started,
                    time.monotonic(),
                )
                out.put(dg.MaterializeResult(asset_key=asset_key(layer, spec.name)))
        finally:
            out.put(_DONE)


def _run(width: int, fail: str | None = None) -> tuple[dg.ExecuteInProcessResult, _Work]:
    work = _Work(fail)
    specs = [dg.AssetSpec(asset_key(layer, t)) for t in TABLES for layer in LAYERS]

    @dg.multi_asset(specs=specs, can_subset=True, name="tables")
    def tables(context: dg.AssetExecutionContext) -> Iterator[dg.MaterializeResult]:  # type: ignore[type-arg]
        selected = selected_layers(context.selected_asset_keys)
        items = [(_Spec(t), layers) for t, layers in selected.items()]
        yield from _run_tables(context, items, work, width)  # type: ignore[arg-type]

    result = dg.materialize([tables], raise_on_error=False)
    return result, work


def _overlap(work: _Work, x: tuple[str, str], y: tuple[str, str]) -> bool:
    (_, a0, a1), (_, b0, b1) = work.spans[x], work.spans[y]
    return a0 < b1 and b0 < a1


def test_tables_run_at_once_and_each_table_s_layers_in_order() -> None:
    result, work = _run(3)
    assert result.success
    assert set(work.spans) == {(t, layer) for t in TABLES for layer in LAYERS}
    assert _overlap(work, ("a", "cdc"), ("b", "cdc"))
    assert _overlap(work, ("b", "cdc"), ("c", "cdc"))
    for t in TABLES:
        ends = [work.spans[(t, layer)] for layer in LAYERS]
        assert ends[0][2] <= ends[1][1]
        assert ends[1][2] <= ends[2][1]
        assert len({thread for thread, _, _ in ends}) == 1  # in one thread
    assert len({work.spans[(t, "cdc")][0] for t in TABLES}) == 3  # three threads
    keys = {e.asset_key for e in result.get_asset_materialization_events()}
    assert keys == {asset_key(layer, t) for t in TABLES for layer in LAYERS}


def test_one_at_a_time_is_one_after_another() -> None:
    result, work = _run(1)
    assert result.success
    spans = sorted(work.spans.values(), key=lambda s: s[1])
    assert all(x[2] <= y[1] for x, y in itertools.pairwise(spans))


def test_a_failing_table_stops_its_own_layers_and_not_the_others() -> None:
    result, work = _run(3, fail="b")
    assert not result.success
    keys = {e.asset_key for e in result.get_asset_materialization_events()}
    # b's ledger was committed and reported; its later layers never ran.
    assert keys == {asset_key(layer, t) for t in ("a", "c") for layer in LAYERS} | {
        asset_key("cdc", "b")
    }
    assert ("b", "base") not in work.spans
    (failure,) = result.get_step_failure_events()
    assert "b broke" in str(failure.event_specific_data.error)


def test_selected_layers_group_a_selection_by_table_in_layer_order() -> None:
    keys = [asset_key("base", "b"), asset_key("cdc", "b"), asset_key("history", "a")]
    keys += [asset_key("raw", "a"), dg.AssetKey(["view", "x"])]
    assert selected_layers(keys) == {"a": ["history"], "b": ["cdc", "base"]}


class _Slow(_Work):
    """Table ``a``'s ledger takes ``seconds``; the others' layers are quick."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.started: list[str] = []

    def run(self, spec: _Spec, layers: Sequence[str], out: queue.Queue[Any]) -> None:
        self.started.append(spec.name)
        if spec.name == "a":
            time.sleep(self.seconds)
        super().run(spec, layers, out)


def _terminated_run(
    work: _Work, monkeypatch: pytest.MonkeyPatch, instance: dg.DagsterInstance | None = None
) -> dg.ExecuteInProcessResult:
    """One table at a time, the run marked terminating from the step's first look on."""
    monkeypatch.setattr(tables_module, "_STATUS_S", 0.0)
    monkeypatch.setattr(tables_module, "_terminating", lambda context: True)
    specs = [dg.AssetSpec(asset_key(layer, t)) for t in TABLES for layer in LAYERS]

    @dg.multi_asset(specs=specs, can_subset=True, name="tables")
    def tables(context: dg.AssetExecutionContext) -> Iterator[dg.MaterializeResult]:  # type: ignore[type-arg]
        items = [(_Spec(t), layers) for t, layers in selected_layers(specs_keys(specs)).items()]
        yield from _run_tables(context, items, work, 1)  # type: ignore[arg-type]

    return dg.materialize([tables], raise_on_error=False, instance=instance)


def specs_keys(specs: list[dg.AssetSpec]) -> list[dg.AssetKey]:
    return [s.key for s in specs]


def test_a_termination_starts_no_table_and_lets_the_running_one_commit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    work = _Slow(1.5)
    instance = dg.DagsterInstance.ephemeral()
    result = _terminated_run(work, monkeypatch, instance)
    assert not result.success
    assert work.started == ["a"]  # b and c never started
    assert {k for k, _ in work.spans} == {"a"}  # a ran to its end
    # a's commits are recorded although the step was interrupted (outside the run)
    recorded = {
        key
        for key in (asset_key(layer, t) for t in TABLES for layer in LAYERS)
        if instance.get_latest_materialization_event(key) is not None
    }
    assert recorded == {asset_key(layer, "a") for layer in LAYERS}


def test_a_table_stuck_past_the_grace_period_does_not_hold_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tables_module, "TERMINATION_GRACE_S", 1.0)
    started = time.monotonic()
    result = _terminated_run(_Slow(60.0), monkeypatch)
    assert not result.success
    assert time.monotonic() - started < 20
