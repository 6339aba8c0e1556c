"""Rewrite the values a table stored before their protection, and delete the files that held
them (`cdc-assets protect-rewrite`).

A string column protected in a later spec version, or JSON paths added to a protection, leave
plaintext in what was written before: typed columns of every layer, the ledger's row images,
the dead letters' payloads, and every older snapshot's files and manifests (a manifest keeps a
removed file's column bounds, which are values). Under the table's pause (`pipeline.shared.pause`):

1. each ledger's rows, its dead letters (sealed) and its bucketed rows are rewritten in place
   (`sql.reprotect`: only values not yet in their protected form, so a rerun changes nothing);
   their manifests are rewritten; the ledger's offsets are stamped on an empty snapshot on top,
   so the state the ingest resumes from no longer lives in a snapshot that holds plaintext;
2. the history is brought up to the ledger (the rewrite is an overwrite: a full run), then the
   history and base are rewritten the same way, compacted with every delete applied (they are
   merge-on-read: the old files stay live until then), their manifests rewritten and their
   state stamped again;
3. every layer's snapshots are expired but its newest and those the pipeline still needs
   (`maintenance.expire_layer`), which deletes the files only they referenced;
4. level-triggered verification: the audit of the current tables and of every snapshot kept.
   A snapshot kept because base has not read it yet is reported; run the command again after
   the next upsert.

With ``rekey`` (`--rekey`), the same steps also encrypt again with the current key what was
encrypted or sealed with a retired one, so that key is no longer needed; a hash cannot be
re-keyed without its plaintext, and its key id stays listed by ``values_protected``.

Rewrites race the pipeline's commits like any writer: a lost commit is tried again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from cdc_assets.pipeline.health.protection_audit import audit_protection
from cdc_assets.pipeline.maintenance.maintenance import (
    StepResult,
    expire_layer,
    isolated_session,
    procedure_options,
    render_procedure,
)
from cdc_assets.pipeline.shared.offsets import (
    COUNTS_PROPERTY,
    KIND_PROPERTY,
    OFFSETS_PROPERTY,
    REPROTECT_KIND,
    SHIFT_PROPERTY,
    START_OFFSETS_PROPERTY,
    TOPIC_PROPERTY,
    committed_snapshot,
)
from cdc_assets.pipeline.shared.pause import table_paused
from cdc_assets.pipeline.shared.protection import configured_keys, key_for
from cdc_assets.pipeline.shared.watermark import (
    STATE_KEYS,
    WATERMARK,
    commit_properties_only,
    is_commit_conflict,
    shard_of,
    snapshot_properties,
    state_key,
)
from cdc_assets.pipeline.upsert.history import STATE_PROPERTY as HISTORY_STATE
from cdc_assets.pipeline.upsert.history import update_history
from cdc_assets.pipeline.upsert.upsert import COMMIT_RETRIES, spark_identifier
from cdc_assets.schema.layers import TableLayout, all_layouts
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.protect import ENCRYPTED_PREFIX, ProtectionKey, render_protection_audit
from cdc_assets.sql.reprotect import (
    render_rewrite,
    render_seal_dead_letters,
    stale_key_sql,
    stored_values,
)

# A compaction that rewrites every file and applies every delete: a merge-on-read table keeps
# an updated row's old file live until then.
REWRITE_ALL = {"rewrite-all": "true", "remove-dangling-deletes": "true"}


@dataclass
class ReprotectResult:
    """What one protection rewrite did and what it left."""

    table: str
    plain_before: int = 0  # stored values not in their protected form, before
    plain_after: int = 0  # and after (current tables)
    rows_rewritten: dict[str, int] = field(default_factory=dict)  # layer -> rows written
    snapshots_expired: int = 0
    # Snapshots kept (the pipeline still needs them) that hold values not protected.
    kept_with_plaintext: list[str] = field(default_factory=list)
    # With re-keying: encrypted values and sealed payloads of another key than the current one,
    # after (a hash cannot be re-keyed without its plaintext: those are not counted).
    stale_after: int = 0
    key_ids_after: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def clean(self) -> bool:
        return self.plain_after == 0 and not self.kept_with_plaintext and not self.stale_after


Step = tuple[str, Callable[[], object]]


def reprotect_table(
    spark: Any,
    catalog: str,
    iceberg_catalog: Any,
    spec: TableSpec,
    *,
    log: Callable[[str], None] | None = None,
    progress: bool = False,
    console: Console | None = None,
    rekey: bool = False,
) -> ReprotectResult:
    """Rewrite ``spec``'s stored values into their protected forms and expire the snapshots
    that held them (see the module's docstring); the result says whether anything is left.
    With ``rekey``, values encrypted and payloads sealed with a retired key (held as
    ``CDC_ASSETS_PROTECTION_OLD_KEY_<ID>``) are encrypted again with the current key, after
    which the retired key is no longer needed to read the table."""
    started = time.monotonic()
    say = log or (lambda _message: None)
    key = key_for(spec)
    old_keys = [k for k in configured_keys() if key is None or k.key_id != key.key_id]
    old_keys = old_keys if rekey else []
    result = ReprotectResult(spec.name)
    result.plain_before = audit_protection(spark, catalog, spec).plain_total
    session = isolated_session(spark)
    layouts = all_layouts(spec)
    steps = _steps(session, catalog, iceberg_catalog, spec, key, old_keys, layouts, result)
    with table_paused(iceberg_catalog, spec, "protect-rewrite"):
        _run(steps, say, progress, console)
    after = audit_protection(spark, catalog, spec)
    result.plain_after = after.plain_total
    result.key_ids_after = sorted(after.key_ids)
    if rekey and key is not None:
        result.stale_after = _stale_encrypted(session, catalog, spec, key)
    result.kept_with_plaintext = _kept_with_plaintext(session, catalog, iceberg_catalog, spec)
    result.seconds = time.monotonic() - started
    return result


def _run(steps: list[Step], say: Callable[[str], None], progress: bool, console: Any) -> None:
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not progress,
    )
    with bar:
        task = bar.add_task("protect-rewrite", total=len(steps))
        for what, action in steps:
            bar.update(task, description=what)
            t0 = time.monotonic()
            _retried(action)
            say(f"{what} ({time.monotonic() - t0:.1f}s)")
            bar.advance(task)


def _retried(action: Callable[[], object]) -> None:
    for attempt in range(1, COMMIT_RETRIES + 1):
        try:
            action()
            return
        except Exception as exc:  # py4j/pyspark and pyiceberg wrap the commit conflicts
            lost = is_commit_conflict(exc) or type(exc).__name__ == "CommitFailedException"
            if attempt == COMMIT_RETRIES or not lost:
                raise
            time.sleep(0.5 * attempt)


def _steps(
    session: Any,
    catalog: str,
    iceberg_catalog: Any,
    spec: TableSpec,
    key: Any,
    old_keys: list[ProtectionKey],
    layouts: dict[str, TableLayout],
    result: ReprotectResult,
) -> list[Step]:
    def ident(layer: str) -> str:
        return spark_identifier(catalog, layouts[layer])

    def load(layer: str) -> Any:
        layout = layouts[layer]
        return iceberg_catalog.load_table(f"{layout.namespace}.{layout.name}")

    def update(layer: str, sql: str) -> Callable[[], None]:
        def action() -> None:
            before = load(layer).current_snapshot()
            with snapshot_properties(session, {KIND_PROPERTY: REPROTECT_KIND}):
                session.sql(sql)
            after = load(layer).current_snapshot()
            if after is not None and (before is None or after.snapshot_id != before.snapshot_id):
                added = int((after.summary.get("added-records") if after.summary else None) or 0)
                if added:
                    result.rows_rewritten[layer] = result.rows_rewritten.get(layer, 0) + added

        return action

    def procedure(layer: str, name: str, **args: str) -> Callable[[], None]:
        def action() -> None:
            with snapshot_properties(session, {KIND_PROPERTY: REPROTECT_KIND}):
                session.sql(render_procedure(catalog, name, ident(layer), **args))

        return action

    def stamp(layer: str, props_of: Callable[[Any], dict[str, str] | None]) -> Callable[[], None]:
        return lambda: _stamp(load(layer), props_of)

    options = procedure_options(REWRITE_ALL)
    steps: list[Step] = []
    for view in spec.shard_specs():
        suffix = f":{view.shard.shard_name}" if view.shard is not None else ""
        cdc, dead, bucketed = f"cdc{suffix}", f"dead_letter{suffix}", f"bucketed{suffix}"
        for layer, ledger in ((cdc, True), (bucketed, False)):
            sql = render_rewrite(ident(layer), view, key, ledger=ledger, old_keys=old_keys)
            if sql is not None:
                steps.append((f"rewrite {layer}", update(layer, sql)))
        if key is not None:
            seal = render_seal_dead_letters(ident(dead), key, old_keys)
            steps.append((f"seal {dead}", update(dead, seal)))
        for layer in (cdc, dead, bucketed):
            steps.append((f"rewrite manifests of {layer}", procedure(layer, "rewrite_manifests")))
        steps.append((f"stamp the offsets on {cdc}", stamp(cdc, _ledger_stamp)))
        steps.append((f"stamp the state on {bucketed}", stamp(bucketed, _bucketed_stamp(view))))
    merge_on_read = ["base"]
    if "history" in layouts:
        merge_on_read.insert(0, "history")
        for view in spec.shard_specs():
            action = partial(update_history, session, catalog, iceberg_catalog, view)
            steps.append(("bring the history up to the ledger", action))
    shards = [shard_of(view) for view in spec.shard_specs()]
    for layer in merge_on_read:
        sql = render_rewrite(ident(layer), spec, key, ledger=False, old_keys=old_keys)
        if sql is not None:
            steps.append((f"rewrite {layer}", update(layer, sql)))
        steps.append((f"compact {layer}", procedure(layer, "rewrite_data_files", options=options)))
        steps.append((f"rewrite manifests of {layer}", procedure(layer, "rewrite_manifests")))
        props_of = _history_stamp if layer == "history" else _base_stamp(shards)
        steps.append((f"stamp the state on {layer}", stamp(layer, props_of)))
    # Base and history first: the ledger's expiry keeps what they have not read.
    order = [*merge_on_read, *(k for k in layouts if k not in ("base", "history", "tombstones"))]
    for layer in order:
        steps.append(
            (
                f"expire snapshots of {layer}",
                _expire(session, catalog, iceberg_catalog, layouts, layer, result),
            )
        )
    return steps


def _expire(
    session: Any,
    catalog: str,
    iceberg_catalog: Any,
    layouts: dict[str, TableLayout],
    layer: str,
    result: ReprotectResult,
) -> Callable[[], None]:
    def action() -> None:
        out = StepResult("expire_snapshots", layer, spark_identifier(catalog, layouts[layer]))
        # Every snapshot older than now but the newest and those the pipeline needs.
        now_ms = int(time.time() * 1000) + 1
        expire_layer(session, catalog, iceberg_catalog, layouts, layer, now_ms, 1, out)
        result.snapshots_expired += out.counts.get("snapshots_expired", 0)

    return action


def _stamp(table: Any, props_of: Callable[[Any], dict[str, str] | None]) -> None:
    """An empty snapshot carrying the table's state (``props_of``) when its current snapshot
    does not carry it already. pyiceberg commits it only on top of the snapshot it read, so a
    state that another writer moved meanwhile is never stamped over the newer one."""
    current = table.current_snapshot()
    props = props_of(table)
    if current is None or not props:
        return
    held = dict(current.summary.additional_properties) if current.summary else {}
    if all(held.get(k) == v for k, v in props.items() if k != KIND_PROPERTY):
        return
    commit_properties_only(table, {**props, KIND_PROPERTY: REPROTECT_KIND})


def _ledger_stamp(ledger: Any) -> dict[str, str] | None:
    snapshot = committed_snapshot(ledger)
    if snapshot is None:
        return None
    props = snapshot.summary.additional_properties
    offsets = props[OFFSETS_PROPERTY]
    # An empty range of records, accounted as such (checks.accounting).
    out = {OFFSETS_PROPERTY: offsets, START_OFFSETS_PROPERTY: offsets, COUNTS_PROPERTY: "{}"}
    for key in (TOPIC_PROPERTY, SHIFT_PROPERTY):
        if key in props:
            out[key] = props[key]
    return out


def _newest_with(table: Any, key: str) -> dict[str, str] | None:
    from pyiceberg.table.snapshots import ancestors_of

    current = table.current_snapshot()
    if current is None:
        return None
    for snapshot in ancestors_of(current, table.metadata):
        props = dict(snapshot.summary.additional_properties) if snapshot.summary else {}
        if key in props:
            return props
    return None


def _bucketed_stamp(view: TableSpec) -> Callable[[Any], dict[str, str] | None]:
    # The upsert reads the bucketed table's state from its current snapshot.
    def props_of(table: Any) -> dict[str, str] | None:
        props = _newest_with(table, state_key(WATERMARK, shard_of(view)))
        if props is None:
            return None
        return {k: v for k, v in props.items() if k.startswith("cdc.") and k != KIND_PROPERTY}

    return props_of


def _base_stamp(shards: list[str | None]) -> Callable[[Any], dict[str, str] | None]:
    def props_of(table: Any) -> dict[str, str] | None:
        out: dict[str, str] = {}
        for shard in shards:
            props = _newest_with(table, state_key(WATERMARK, shard)) or {}
            out.update(
                {
                    state_key(k, shard): props[state_key(k, shard)]
                    for k in STATE_KEYS
                    if state_key(k, shard) in props
                }
            )
        return out

    return props_of


def _history_stamp(table: Any) -> dict[str, str] | None:
    props = _newest_with(table, HISTORY_STATE)
    return None if props is None else {HISTORY_STATE: props[HISTORY_STATE]}


def _stale_encrypted(session: Any, catalog: str, spec: TableSpec, key: ProtectionKey) -> int:
    """Encrypted values and sealed payloads of the spec's current tables made with another key
    than ``key``."""
    stale = 0
    for layer, layout in all_layouts(spec).items():
        kind = layer.partition(":")[0]
        ident = spark_identifier(catalog, layout)
        if kind == "dead_letter":
            current = f"'{ENCRYPTED_PREFIX}:{key.key_id}:'"
            test = f"NOT startswith(payload_b64, {current})"
        elif kind in ("cdc", "bucketed", "base", "history"):
            test = stale_key_sql(stored_values(spec, images=kind == "cdc"), key)
        else:
            continue
        stale += int(session.sql(f"SELECT count_if({test}) AS n FROM {ident}").collect()[0]["n"])
    return stale


def _kept_with_plaintext(
    session: Any, catalog: str, iceberg_catalog: Any, spec: TableSpec
) -> list[str]:
    """Every kept snapshot of the spec's tables that holds a value not in its protected form
    (``layer@snapshot: n``), read AS OF each."""
    found = []
    for layer, layout in all_layouts(spec).items():
        kind = layer.partition(":")[0]
        if kind == "tombstones":
            continue
        table = iceberg_catalog.load_table(f"{layout.namespace}.{layout.name}")
        ident = spark_identifier(catalog, layout)
        for snapshot in table.snapshots():
            at = f"{ident} VERSION AS OF {snapshot.snapshot_id}"
            if kind == "dead_letter":
                prefix = f"'{ENCRYPTED_PREFIX}:'"
                sql = f"SELECT count_if(NOT startswith(payload_b64, {prefix})) AS plain FROM {at}"
                plain = int(session.sql(sql).collect()[0]["plain"] or 0)
            else:
                values = stored_values(spec, images=kind == "cdc")
                sql = render_protection_audit(at, [(v.expr, v.protection, v.many) for v in values])
                row = session.sql(sql).collect()[0].asDict()
                plain = sum(int(row[f"plain_{i}"]) for i in range(len(values)))
            if plain:
                found.append(f"{layer}@{snapshot.snapshot_id}: {plain}")
    return found
