"""Verdicts of the table checks: measured values + thresholds from the spec -> pass or fail.

Pure (no Dagster, Spark or pyiceberg): the measurements come from
``cdc_assets.pipeline.health.health``
and the Dagster shell in this package turns a ``Verdict`` into an ``AssetCheckResult``.

Severity is chosen per rule, not per check:
- ERROR where the mirror is wrong or about to lose data (nulls in NOT NULL columns, a duplicated
  key, a watermark stuck past the SLA, unread records close to Kafka's retention, a schema that
  is not the spec's, an offset that is not accounted for, a field of the stream the spec has
  lacked past a grace period).
- WARN where data is safe but someone should look (dead letters are kept and can be redriven; a
  large but safe Kafka lag; a source that has moved ahead of the spec, which evolution handles;
  a row count that differs from the source while changes are still in flight).
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from cdc_assets.quality.mirror_diff import MirrorDiff

Severity = Literal["ERROR", "WARN"]


@dataclass(frozen=True)
class Verdict:
    passed: bool
    severity: Severity  # the severity reported when the check fails
    summary: str
    metadata: dict[str, object] = field(default_factory=dict)


def _verdict(failures: list[tuple[Severity, str]], ok: str, meta: dict[str, object]) -> Verdict:
    if not failures:
        return Verdict(True, "ERROR", ok, meta)
    severity: Severity = "ERROR" if any(s == "ERROR" for s, _ in failures) else "WARN"
    return Verdict(False, severity, "; ".join(m for _, m in failures), meta)


def per_shard_verdict(verdicts: Mapping[str, Verdict]) -> Verdict:
    """One verdict over a sharded table's shards, each judged on its own ledger: failed if any
    failed (at the worst severity among them), each shard's summary named."""
    if len(verdicts) == 1:
        return next(iter(verdicts.values()))
    failed = {n: v for n, v in verdicts.items() if not v.passed}
    shown = failed or verdicts
    summary = "; ".join(f"shard {n}: {v.summary}" for n, v in shown.items())
    meta: dict[str, object] = {
        "shards": {n: {"passed": v.passed, "summary": v.summary} for n, v in verdicts.items()},
        "failed_shards": sorted(failed),
    }
    if not failed:
        return Verdict(True, "ERROR", summary, meta)
    severity: Severity = "ERROR" if any(v.severity == "ERROR" for v in failed.values()) else "WARN"
    return Verdict(False, severity, summary, meta)


@dataclass(frozen=True)
class NullCounts:
    """Null counts of one table (sink column names); ``since`` for columns added later."""

    rows: int
    nulls: Mapping[str, int]
    # column -> (added at, rows changed since, of which null in that column)
    since: Mapping[str, tuple[datetime, int, int]] = field(default_factory=dict)


def null_counts_verdict(
    counts: NullCounts,
    *,
    required: Sequence[str],
    max_fraction: Mapping[str, float],
    allow_all_null: Sequence[str],
    sla_minutes: int,
    now: datetime,
) -> Verdict:
    """Fail (ERROR) when a NOT NULL column holds nulls, a column is nullier than its limit, or
    a column added more than the SLA ago is still null in every row changed since."""
    failures: list[tuple[Severity, str]] = []
    for col in required:
        if counts.nulls.get(col, 0):
            failures.append(("ERROR", f"{col}: {counts.nulls[col]} nulls in a NOT NULL column"))
    for col, limit in max_fraction.items():
        n = counts.nulls.get(col, 0)
        if counts.rows and n / counts.rows > limit:
            failures.append(
                ("ERROR", f"{col}: {n / counts.rows:.1%} nulls, more than the {limit:.1%} allowed")
            )
    stale_new = {}
    for col, (added_at, changed, null) in counts.since.items():
        age_min = (now - added_at).total_seconds() / 60
        if col in allow_all_null or age_min <= sla_minutes or changed == 0:
            continue
        if null == changed:
            stale_new[col] = round(age_min, 1)
            failures.append(
                (
                    "ERROR",
                    f"{col}: added {age_min:.0f} min ago (SLA {sla_minutes} min) and still null "
                    f"in all {changed} rows changed since",
                )
            )
    meta: dict[str, object] = {
        "rows": counts.rows,
        "null_counts": dict(counts.nulls),
        "null_columns": sorted(
            c for c, n in counts.nulls.items() if counts.rows and n == counts.rows
        ),
    }
    if counts.since:
        meta["added_columns"] = {
            c: {"added_at": a.isoformat(), "rows_changed_since": ch, "null_since": nu}
            for c, (a, ch, nu) in counts.since.items()
        }
    if stale_new:
        meta["still_null_past_sla_min"] = stale_new
    return _verdict(failures, f"{counts.rows} rows, null counts within limits", meta)


@dataclass(frozen=True)
class DuplicateKeys:
    keys: int  # distinct keys held by more than one row
    rows: int  # rows holding them
    sample: Sequence[tuple[str, int]] = ()


def unique_key_verdict(dups: DuplicateKeys, key: Sequence[str]) -> Verdict:
    meta: dict[str, object] = {
        "primary_key": list(key),
        "duplicated_keys": dups.keys,
        "rows_with_duplicated_keys": dups.rows,
    }
    if dups.sample:
        meta["sample"] = {k: n for k, n in dups.sample}
    if not dups.keys:
        return Verdict(True, "ERROR", "every key is held by one row", meta)
    return Verdict(
        False,
        "ERROR",
        f"{dups.keys} keys are held by more than one row ({dups.rows} rows); "
        "downstream consumers must not read this mirror until it is repaired",
        meta,
    )


@dataclass
class ProtectionAudit:
    """Counts over a table's stored values against its protections (never a value)."""

    rows: int = 0
    plain: dict[str, int] = field(default_factory=dict)  # place -> values not protected
    key_ids: set[str] = field(default_factory=set)  # key ids of keyed values and payloads
    dropped_in_images: int = 0  # row images holding a field of pipeline.drop_fields

    def add_plain(self, place: str, count: int) -> None:
        if count:
            self.plain[place] = self.plain.get(place, 0) + count

    @property
    def plain_total(self) -> int:
        """Values not in their protected form, and row images holding a dropped field."""
        return sum(self.plain.values()) + self.dropped_in_images


def protection_verdict(audit: ProtectionAudit, current_key_id: str | None) -> Verdict:
    """Failed (ERROR) while any stored value is not in its protected form, or a dropped field
    is in a row image; the key ids in use are reported (values of a retired key are readable
    with it, so they are not a failure)."""
    meta: dict[str, object] = {
        "rows_read": audit.rows,
        "unprotected_values": dict(sorted(audit.plain.items())),
        "key_ids_in_use": sorted(audit.key_ids),
        "current_key_id": current_key_id,
        "dropped_fields_in_row_images": audit.dropped_in_images,
    }
    failures: list[tuple[Severity, str]] = []
    if audit.plain:
        places = ", ".join(f"{p}: {n}" for p, n in sorted(audit.plain.items()))
        failures.append(
            (
                "ERROR",
                f"values stored unprotected ({places}); a protection set in a later spec "
                "version leaves them until `cdc-assets protect-rewrite <table>` rewrites them",
            )
        )
    if audit.dropped_in_images:
        failures.append(
            ("ERROR", f"{audit.dropped_in_images} row images hold a field of drop_fields")
        )
    others = sorted(audit.key_ids - {current_key_id})
    ok = f"every protected value of {audit.rows} rows is in its protected form"
    if others:
        ok += f" (also made with retired key(s) {', '.join(others)})"
    return _verdict(failures, ok, meta)


@dataclass(frozen=True)
class WatermarkLag:
    """Base's progress against the ledger (times are Kafka record times)."""

    watermark_ts: datetime | None  # newest change applied to base
    pending: int  # ledger rows not applied to base yet
    oldest_pending_ts: datetime | None
    newest_ledger_ts: datetime | None


def watermark_lag_verdict(lag: WatermarkLag, *, sla_minutes: int, now: datetime) -> Verdict:
    """ERROR when a change has waited in the ledger for longer than the SLA. An idle source (no
    pending change) is fresh however old its last change is."""
    waiting_s = (now - lag.oldest_pending_ts).total_seconds() if lag.oldest_pending_ts else 0.0
    behind_ledger_s = 0.0
    if lag.pending and lag.newest_ledger_ts is not None:
        start = lag.watermark_ts or lag.oldest_pending_ts or lag.newest_ledger_ts
        behind_ledger_s = max(0.0, (lag.newest_ledger_ts - start).total_seconds())
    meta: dict[str, object] = {
        "pending_ledger_rows": lag.pending,
        "watermark_ts": lag.watermark_ts.isoformat() if lag.watermark_ts else "",
        "lag_vs_ledger_s": round(behind_ledger_s, 1),
        "oldest_pending_wait_s": round(waiting_s, 1),
        "watermark_age_s": round((now - lag.watermark_ts).total_seconds(), 1)
        if lag.watermark_ts
        else -1.0,
        "sla_minutes": sla_minutes,
    }
    failures: list[tuple[Severity, str]] = []
    if lag.pending and waiting_s > sla_minutes * 60:
        failures.append(
            (
                "ERROR",
                f"{lag.pending} ledger rows wait for the upsert; the oldest for "
                f"{waiting_s / 60:.0f} min, SLA {sla_minutes} min",
            )
        )
    return _verdict(failures, f"{lag.pending} ledger rows pending, within the SLA", meta)


@dataclass(frozen=True)
class KafkaLag:
    lag: int  # records the ledger has not read
    headroom_s: float | None  # before the oldest unread record leaves retention (None: no limit)
    retention_ms: int | None


def kafka_lag_verdict(
    lag: KafkaLag, *, min_headroom_hours: float, max_lag_records: int | None
) -> Verdict:
    meta: dict[str, object] = {
        "ledger_lag_records": lag.lag,
        "retention_headroom_h": round(lag.headroom_s / 3600, 2)
        if lag.headroom_s is not None
        else -1.0,
        "retention_ms": lag.retention_ms if lag.retention_ms is not None else -1,
        "min_retention_headroom_h": min_headroom_hours,
    }
    failures: list[tuple[Severity, str]] = []
    if lag.lag and lag.headroom_s is not None and lag.headroom_s < min_headroom_hours * 3600:
        failures.append(
            (
                "ERROR",
                f"{lag.lag} unread records; the oldest leaves Kafka retention in "
                f"{lag.headroom_s / 3600:.1f} h (minimum {min_headroom_hours} h): ingest now",
            )
        )
    if max_lag_records is not None and lag.lag > max_lag_records:
        failures.append(("WARN", f"{lag.lag} unread records, more than {max_lag_records}"))
    return _verdict(failures, f"{lag.lag} unread records, retention is not close", meta)


def schema_drift_verdict(
    iceberg_diffs: Mapping[str, Sequence[str]],
    source_diffs: Sequence[str] | None,
    source_tables: Mapping[str, tuple[str, str]] | None = None,
) -> Verdict:
    """ERROR when an Iceberg table differs from what the spec renders; WARN when only the source
    has moved ahead of the spec (schema evolution's job).

    ``source_tables``: per source (the table, or each shard) its state from the schema-change
    records and a sentence saying it (`spec.source_table`). A dropped source table warns: the
    mirror keeps its last state, which is what the source held. A renamed one is an ERROR: its
    changes go on under the new name, to a topic the spec does not read, so the mirror falls
    behind without a dead letter to show it."""
    failures: list[tuple[Severity, str]] = [
        ("ERROR", f"{layer}: {d}") for layer, diffs in iceberg_diffs.items() for d in diffs
    ]
    failures += [("WARN", f"source: {d}") for d in source_diffs or ()]
    tables = source_tables or {}
    for state, sentence in tables.values():
        if state == "dropped":
            failures.append(("WARN", sentence))
        elif state == "renamed":
            failures.append(("ERROR", sentence))
    meta: dict[str, object] = {
        "iceberg_differences": {k: list(v) for k, v in iceberg_diffs.items() if v},
        "source_compared": source_diffs is not None,
    }
    if source_diffs:
        meta["source_differences"] = list(source_diffs)
    if tables:
        meta["source_table"] = {name: state for name, (state, _) in sorted(tables.items())}
    return _verdict(failures, "Iceberg tables match the spec", meta)


def dead_letter_rate_verdict(
    read: int, dead: int, commits: int, *, max_rate: float, waiting: int | None = None
) -> Verdict:
    """``dead`` records became dead letters out of ``read`` over ``commits`` ingests; ``waiting``
    of them are still in the dead-letter table (None: unknown, all). The rate that warns is of
    those still waiting: after a redrive there is nothing left to advise."""
    waiting = dead if waiting is None else waiting
    rate = waiting / read if read else 0.0
    meta: dict[str, object] = {
        "records_read": read,
        "dead_letters": dead,
        "dead_letters_waiting": waiting,
        "redriven": dead - waiting,
        "ingest_commits": commits,
        "dead_letter_rate": round(rate, 6),
        "max_dead_letter_rate": max_rate,
    }
    failures: list[tuple[Severity, str]] = []
    if rate > max_rate:
        failures.append(
            (
                "WARN",
                f"{waiting} of {read} records ({rate:.2%}) read by the last {commits} ingests "
                f"are dead letters (limit {max_rate:.2%}); fix and `cdc-assets redrive`",
            )
        )
    done = f", {dead - waiting} of them redriven since" if dead > waiting else ""
    return _verdict(failures, f"{rate:.2%} dead letters waiting over {commits} ingests{done}", meta)


@dataclass(frozen=True)
class ImageMismatches:
    """Typed values that disagree with the raw row images the ledger keeps."""

    ledger_rows: int  # ledger rows with a row image that were compared
    ledger: Mapping[str, int]  # column -> ledger rows whose image holds another value
    ledger_examples: Sequence[str] = ()
    base: int = 0  # base rows holding a change whose ledger row has another value
    base_examples: Sequence[str] = ()
    since: str | None = None  # the oldest ledger dt compared (None: all)
    last_upsert_only: bool = False  # only the ledger rows of base's newest upsert were compared


def image_values_verdict(m: ImageMismatches) -> Verdict:
    """Fail (ERROR) when a row image holds a value that its typed ledger row, or the base row
    holding that change, lacks or holds otherwise: a value lost on the way (say, decoded with an
    older spec and never backfilled). `cdc-assets backfill <table> --column <c>` recovers it."""
    wrong = {c: n for c, n in m.ledger.items() if n}
    meta: dict[str, object] = {
        "ledger_rows_compared": m.ledger_rows,
        "ledger_mismatches": dict(wrong),
        "base_mismatches": m.base,
        "examples": [*m.ledger_examples, *m.base_examples],
        "since_dt": m.since or "all",
        "scope": "the newest upsert's changes" if m.last_upsert_only else "the lookback window",
    }
    failures: list[tuple[Severity, str]] = []
    if wrong:
        listed = ", ".join(f"{c} ({n})" for c, n in sorted(wrong.items()))
        failures.append(("ERROR", f"ledger rows whose row image holds another value: {listed}"))
    if m.base:
        failures.append(("ERROR", f"{m.base} base rows lack a value their ledger change holds"))
    if failures and wrong:
        columns = " ".join(f"--column {c}" for c in sorted(wrong))
        failures.append(("ERROR", f"recover with `cdc-assets backfill <table> {columns}`"))
    return _verdict(
        failures, f"{m.ledger_rows} row images agree with their ledger and base rows", meta
    )


def row_count_verdict(base_rows: int, source_rows: int, pending: int) -> Verdict:
    meta: dict[str, object] = {
        "base_rows": base_rows,
        "source_rows": source_rows,
        "difference": base_rows - source_rows,
        "pending_ledger_rows": pending,
    }
    if base_rows == source_rows:
        return Verdict(True, "WARN", f"base and source both hold {base_rows} rows", meta)
    return Verdict(
        False,
        "WARN",
        f"base holds {base_rows} rows, the source {source_rows}"
        + (f" ({pending} changes still pending)" if pending else ""),
        meta,
    )


# The source_values check reads the whole source table and base: tables with more rows than this
# are not compared (their row counts still are, by source_row_count).
SOURCE_VALUES_MAX_ROWS = 200_000


def source_values_verdict(
    diff: MirrorDiff, in_flight: int, sensitive: Collection[str] = ()
) -> Verdict:
    """Fail when base differs from the source table. ``in_flight``: the changes Kafka, the ledger
    or the upsert still hold after a settling pause: then the difference may be them (WARN);
    with none, it is a divergence (ERROR). Values of ``sensitive`` columns (sink names) are not
    shown."""
    meta: dict[str, object] = {
        "source_rows": diff.source_rows,
        "base_rows": diff.base_rows,
        "missing_from_base": diff.missing,
        "extra_in_base": diff.extra,
        "differing": diff.differing,
        "differing_by_column": dict(diff.by_column),
        "changes_in_flight": in_flight,
    }
    if diff.equal:
        return Verdict(True, "ERROR", f"base equals the source: {diff.source_rows} rows", meta)
    hidden = set(sensitive)
    examples = [
        f"{key}: "
        + "; ".join(
            f"{v.column}: <sensitive>"
            if v.column in hidden
            else f"{v.column}: source {v.source!r} base {v.base!r}"
            for v in values
        )
        for key, values in diff.examples
    ]
    examples += [f"{k}: missing from base" for k in diff.missing_keys]
    meta["examples"] = examples + [f"{k}: not in the source" for k in diff.extra_keys]
    headline = diff.headline()
    if in_flight:
        return Verdict(False, "WARN", f"{headline}; {in_flight} changes still in flight", meta)
    return Verdict(False, "ERROR", f"{headline}, with no change in flight", meta)


def conformance_verdict(rows: int, failure_count: int, examples: Sequence[str]) -> Verdict:
    """Fail (ERROR) when sampled base rows break the table's schema package: a type, a NOT NULL
    or an enum value that consumers of the package rely on."""
    meta: dict[str, object] = {
        "rows_sampled": rows,
        "failures": failure_count,
        "examples": list(examples),
    }
    failures: list[tuple[Severity, str]] = []
    if failure_count:
        failures.append(
            ("ERROR", f"{failure_count} values break the schema package: {'; '.join(examples)}")
        )
    return _verdict(failures, f"{rows} sampled rows conform to the schema package", meta)


def schema_converged_verdict(
    unknown: Mapping[str, tuple[int, int]],
    *,
    known: Collection[str],
    now_ms: int,
    grace_minutes: float,
    refused: Mapping[str, tuple[int, int]] | None = None,
    frozen: bool = False,
) -> Verdict:
    """Whether the table keeps up with its stream's shape. ``unknown``: per field the ledger's
    row images carried without the spec knowing it at the time, (first seen, last seen) as
    epoch milliseconds of the ledger commits. A field the spec knows now (``known``: source
    names, former names of renamed columns, fields deliberately left out) was applied since.
    Any other field seen first more than ``grace_minutes`` ago fails (ERROR): its values go
    nowhere but ``_row_json`` (a column added or renamed at the source whose evolution failed,
    was refused or never ran); a younger one warns (an evolution is due).

    ``refused``: per column, the dead letters waiting because the spec's type or nullability
    refused a value the source stored, as (letters, oldest failure in epoch ms). The source
    holds it, so its column is wider, of another type or nullable now: the spec is behind. The
    same grace applies (an evolution redrives them; letters older than the grace mean it
    failed, was refused or never ran).

    ``frozen``: the table's ``evolution.policy`` is ``freeze``, so new fields staying in
    ``_row_json`` is what was asked for: they warn, never fail. Refused values still fail: those
    rows are not in base."""
    behind = {f: seen for f, seen in unknown.items() if f not in known}
    failures: list[tuple[Severity, str]] = []
    grace_ms = grace_minutes * 60_000
    late = sorted(f for f, (first, _) in behind.items() if now_ms - first > grace_ms)
    due = sorted(f for f in behind if f not in late)
    if frozen and behind:
        failures.append(
            (
                "WARN",
                f"field(s) {', '.join(sorted(behind))} of the stream are kept only in _row_json: "
                "evolution.policy is freeze",
            )
        )
        late = due = []
    if late:
        failures.append(
            (
                "ERROR",
                f"the stream carries field(s) {', '.join(late)} the spec lacks for more than "
                f"{grace_minutes:g} min: their values are only in _row_json (see the schema "
                "history and the schema_changes sensor for why no evolution applied them)",
            )
        )
    if due:
        failures.append(("WARN", f"field(s) {', '.join(due)} new in the stream: evolution due"))
    refused = refused or {}
    stuck = sorted(c for c, (_, oldest) in refused.items() if now_ms - oldest > grace_ms)
    fresh = sorted(c for c in refused if c not in stuck)
    if stuck:
        letters = sum(refused[c][0] for c in stuck)
        failures.append(
            (
                "ERROR",
                f"{letters} dead letter(s) hold values of column(s) {', '.join(stuck)} that the "
                f"spec's type or nullability refused, for more than {grace_minutes:g} min: the "
                "source holds them, so the spec is behind it (evolve the column, then "
                "`cdc-assets redrive`)",
            )
        )
    if fresh:
        failures.append(
            ("WARN", f"column(s) {', '.join(fresh)} refused source values: evolution due")
        )
    meta: dict[str, object] = {
        "refused_values": {
            c: {"dead_letters": n, "oldest": _iso(oldest)}
            for c, (n, oldest) in sorted(refused.items())
        },
        "fields_behind": {
            f: {
                "first_seen": _iso(first),
                "last_seen": _iso(last),
                "minutes": round((now_ms - first) / 60_000, 1),
            }
            for f, (first, last) in sorted(behind.items())
        },
        "grace_minutes": grace_minutes,
    }
    return _verdict(
        failures, "every field of the stream is in the spec, and no value waits for a type", meta
    )


def _iso(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class HistoryComparison:
    """A sample of keys' versions in the history table against a plain-Python replay of the
    same keys' ledger changes (`quality.history_replay`), at the ledger snapshot the history
    reflects."""

    keys: int  # keys compared
    versions: int  # versions the replay expects for them
    differences: int  # keys whose versions differ
    examples: Sequence[str] = ()  # keys and columns only: values may be sensitive
    open_keys: int = 0  # keys with more or fewer than one current version
    built: bool = True  # False: the ledger holds changes, the history was never built from it


def history_verdict(c: HistoryComparison) -> Verdict:
    """Fail (ERROR) when a sampled key's versions differ from the replay of its ledger changes,
    or a key has no current version or two: the history no longer tells what the source held.
    A full recomputation (`cdc-assets history <table> --full`) rebuilds it from the ledger."""
    meta: dict[str, object] = {
        "keys_compared": c.keys,
        "versions_compared": c.versions,
        "keys_differing": c.differences,
        "keys_without_one_current_version": c.open_keys,
        "examples": list(c.examples),
    }
    failures: list[tuple[Severity, str]] = []
    if not c.built:
        # Right after onboarding this is normal for a moment: a warning, not an error.
        failures.append(("WARN", "the ledger holds changes but the history was never built"))
    if c.differences:
        failures.append(
            ("ERROR", f"{c.differences} of {c.keys} sampled keys differ from the ledger's replay")
        )
    if c.open_keys:
        failures.append(("ERROR", f"{c.open_keys} keys have no current version or several"))
    return _verdict(
        failures, f"{c.versions} versions of {c.keys} sampled keys equal the ledger's replay", meta
    )


def cut_verdict(
    published: Sequence[int], lag_ms: int, max_lag_seconds: float, pending: int = 0
) -> Verdict:
    """A consistency group's cut (docs/history.md): ERROR when a published cut lies before an
    earlier one (a reader of the consistent views would have gone back in time) or when it
    trails the newest known transaction by more than ``max_lag_seconds`` of source time; WARN
    before the first cut. ``published``: the cuts' END offsets in publication order."""
    meta: dict[str, object] = {
        "cuts_published": len(published),
        "cut_offset": published[-1] if published else -1,
        "lag_seconds": round(lag_ms / 1000, 3),
        "pending_transactions": pending,
    }
    failures: list[tuple[Severity, str]] = []
    if not published:
        failures.append(("WARN", "no cut published yet"))
    backwards = [(a, b) for a, b in itertools.pairwise(published) if b < a]
    if backwards:
        a, b = backwards[0]
        failures.append(("ERROR", f"the cut moved backwards ({a} then {b})"))
    if lag_ms > max_lag_seconds * 1000:
        failures.append(
            (
                "ERROR",
                f"the cut trails the newest known transaction by {lag_ms / 1000:.0f} s of "
                f"source time (limit {max_lag_seconds:.0f} s)",
            )
        )
    return _verdict(failures, "the cut only moved forward and is within its lag", meta)
