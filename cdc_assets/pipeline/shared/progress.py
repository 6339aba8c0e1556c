"""Progress of long Spark work (bootstrap loads, backfills) on the console, from Spark's own
status tracker: tasks done of the stages running, polled from a side thread."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from cdc_assets.pipeline.shared.session_kind import is_connect


@contextmanager
def spark_progress(
    spark: Any, description: str, *, enabled: bool = True, console: Console | None = None
) -> Iterator[None]:
    """Show Spark tasks completed / total while the block runs (nothing when not enabled)."""
    if not enabled:
        yield
        return
    if is_connect(spark):
        # A Connect client has no status tracker: say what runs, without task counts.
        with (console or Console(stderr=True)).status(f"{description} (on Spark Connect)"):
            yield
        return
    tracker = spark.sparkContext.statusTracker()
    seen: dict[int, tuple[int, int]] = {}  # stage id -> (completed, total), kept when finished
    stop = threading.Event()
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("Spark tasks"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )
    task = progress.add_task(description, total=None)

    def poll() -> None:
        while not stop.wait(0.5):
            for stage_id in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage_id)
                if info is not None:
                    seen[stage_id] = (info.numCompletedTasks, info.numTasks)
            done = sum(c for c, _ in seen.values())
            total = sum(t for _, t in seen.values())
            progress.update(task, completed=done, total=total or None)

    watcher = threading.Thread(target=poll, name="spark-progress", daemon=True)
    with progress:
        watcher.start()
        try:
            yield
        finally:
            stop.set()
            watcher.join()
            total = sum(t for _, t in seen.values())
            progress.update(task, completed=total, total=total or 1)
