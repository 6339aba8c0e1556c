"""The asset checks of one table spec, with thresholds from its ``checks`` and ``freshness``.

Each check measures with ``cdc_assets.pipeline.health.health`` and judges with ``rules``; which
severity a failure gets is decided per rule there. ``primary_key_unique`` is blocking: when it
fails, assets downstream of base in the same run are not materialized.

The checks of every table are one op (``@multi_asset_check``, each check a spec with its own key,
a run executing the ones it selects), not an op each: at a thousand tables, ten thousand check
ops were half of the definitions' build and much of Dagster's resolving them. A run's selected
tables run their checks in threads, several at once on one Spark driver, as the ``tables`` op's
layers do (``assets/tables.py``). The ingest's accounting is one of them: the sensors' ingest
runs select it alone.
"""

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import dagster as dg
from dagster import AssetCheckExecutionContext

from cdc_assets.assets.keys import asset_key, table_or_name
from cdc_assets.checks import accounting
from cdc_assets.checks.failsafe import failsafe
from cdc_assets.jobs.upsert import UPSERT_JOB
from cdc_assets.pipeline.evolution.schema_topic import source_tables
from cdc_assets.pipeline.health import conformance, health
from cdc_assets.pipeline.health.protection_audit import audit_protection
from cdc_assets.pipeline.shared.protection import configured_key
from cdc_assets.pipeline.upsert.history import compare_history
from cdc_assets.quality import rules
from cdc_assets.resources.iceberg import IcebergCatalogResource
from cdc_assets.resources.kafka import KafkaResource
from cdc_assets.resources.spark import SparkResource, own_session_per_thread
from cdc_assets.schema.drift import source_differences
from cdc_assets.spec.models import TableSpec


@dataclass(frozen=True)
class CheckResources:
    """What a check reads: its run's context, Spark, the Iceberg catalog and Kafka."""

    context: dg.AssetCheckExecutionContext
    spark: SparkResource
    iceberg: IcebergCatalogResource
    kafka: KafkaResource

    def session(self) -> Any:
        return self.spark.get_session()

    @property
    def catalog_name(self) -> str:
        return self.spark.catalog.name


CheckBody = Callable[[CheckResources], dg.AssetCheckResult]
CHECKS_OP = "table_checks"

# Checks that read a whole source table: run by the checks schedule and CI, not after every
# upsert (a busy table would read its source, and wait out its changes in flight, each time).
SCHEDULED_ONLY = ("source_values",)


def scheduled_only_checks(keys: Iterable[dg.AssetCheckKey]) -> list[dg.AssetCheckKey]:
    """The ``SCHEDULED_ONLY`` checks among ``keys`` (a table has them only where its source is
    reachable)."""
    return [k for k in keys if k.name in SCHEDULED_ONLY]


def check_result(verdict: rules.Verdict, **extra: Any) -> dg.AssetCheckResult:
    metadata: dict[str, Any] = {"summary": verdict.summary, **verdict.metadata, **extra}
    return dg.AssetCheckResult(
        passed=verdict.passed,
        severity=dg.AssetCheckSeverity[verdict.severity],
        description=verdict.summary,
        metadata=metadata,
    )


def per_source(spec: TableSpec, judge: Callable[[TableSpec], rules.Verdict]) -> rules.Verdict:
    """``judge`` run on each source of the table: itself, or each shard's view (own ledger,
    topic and upsert state) of a sharded table."""
    return rules.per_shard_verdict(
        {v.shard.shard_name if v.shard else v.name: judge(v) for v in spec.shard_specs()}
    )


def _sink(spec: TableSpec, names: list[str]) -> list[str]:
    return [spec.columns_by_name[n].sink_name for n in names]


def build_table_checks(
    spec: TableSpec, source_url: str | None = None, shard_urls: Mapping[str, str] | None = None
) -> list[tuple[dg.AssetCheckSpec, CheckBody]]:
    """Every check of ``spec``, as (its spec, its body); the source comparisons only where
    ``source_url`` is given (for a sharded spec, ``shard_urls``: shard name -> URL, each shard
    compared with its source). ``build_checks_op`` makes one op of every table's."""
    # (the view a source comparison reads base through, its source's URL)
    urls = dict(shard_urls or {})
    sources: list[tuple[TableSpec, str]] = (
        [
            (v, urls[v.shard.shard_name])
            for v in spec.shard_specs()
            if v.shard is not None and v.shard.shard_name in urls
        ]
        if spec.source.shards
        else ([(spec, source_url)] if source_url is not None else [])
    )
    raw = asset_key("raw", spec.name)
    cdc = asset_key("cdc", spec.name)
    base = asset_key("base", spec.name)
    limits = spec.checks
    sla = spec.freshness.sla_minutes
    required = _sink(spec, [c.name for c in spec.columns if not c.nullable])
    max_fraction = dict(
        zip(
            _sink(spec, list(limits.max_null_fraction)),
            limits.max_null_fraction.values(),
            strict=True,
        )
    )
    allow_all_null = _sink(spec, list(limits.allow_all_null))
    # MySQL/MariaDB sources record drops and renames on their schema-change topics.
    watches_source_table = any(v.source.schema_changes for v in spec.shard_specs())
    # Each check's spec and body, run by the table's one check op (see the module docstring).
    registered: list[tuple[dg.AssetCheckSpec, CheckBody]] = []

    def check(
        *, asset: dg.AssetKey, name: str, description: str, blocking: bool = False
    ) -> Callable[[CheckBody], CheckBody]:
        def register(body: CheckBody) -> CheckBody:
            check_spec = dg.AssetCheckSpec(
                name, asset=asset, description=description, blocking=blocking
            )
            registered.append((check_spec, failsafe(body)))
            return body

        return register

    @check(
        asset=cdc, name=accounting.ACCOUNTING_CHECK, description=accounting.ACCOUNTING_DESCRIPTION
    )
    def offsets_accounted(r: CheckResources) -> dg.AssetCheckResult:
        return accounting.offsets_accounted(r.iceberg.load_catalog(), spec)

    @check(
        asset=raw,
        name="kafka_lag_retention",
        description="Records the ledger has not read, and how long before the oldest of them "
        f"falls out of Kafka's retention (error under {limits.min_retention_headroom_hours} h).",
    )
    def kafka_lag_retention(r: CheckResources) -> dg.AssetCheckResult:
        catalog = r.iceberg.load_catalog()
        return check_result(
            per_source(
                spec,
                lambda view: rules.kafka_lag_verdict(
                    health.kafka_lag(r.kafka, catalog, view),
                    min_headroom_hours=limits.min_retention_headroom_hours,
                    max_lag_records=limits.max_kafka_lag_records,
                ),
            )
        )

    @check(
        asset=cdc,
        name="dead_letter_rate",
        description=f"Dead letters per record read over the last {limits.dead_letter_commits} "
        f"ingests (warn above {limits.max_dead_letter_rate:.2%}).",
    )
    def dead_letter_rate(r: CheckResources) -> dg.AssetCheckResult:
        catalog = r.iceberg.load_catalog()

        def judge(view: TableSpec) -> rules.Verdict:
            read, dead, commits, waiting = health.dead_letter_counts(
                catalog, view, limits.dead_letter_commits
            )
            return rules.dead_letter_rate_verdict(
                read, dead, commits, max_rate=limits.max_dead_letter_rate, waiting=waiting
            )

        return check_result(per_source(spec, judge))

    @check(
        asset=cdc,
        name="ledger_null_counts",
        description=f"Nulls per column in the row images of the newest "
        f"{limits.ledger_partitions} ledger partitions (NOT NULL columns must have none).",
    )
    def ledger_null_counts(r: CheckResources) -> dg.AssetCheckResult:
        catalog = r.iceberg.load_catalog()
        partitions: list[str] = []

        def judge(view: TableSpec) -> rules.Verdict:
            counts, hours = health.ledger_null_counts(
                r.session(), r.catalog_name, catalog, view, limits.ledger_partitions
            )
            partitions.extend(f"{dt}-{hr:02d}" for dt, hr in hours)
            return rules.null_counts_verdict(
                counts,
                required=required,
                max_fraction={},
                allow_all_null=[],
                sla_minutes=sla,
                now=datetime.now(UTC),
            )

        verdict = per_source(spec, judge)
        return check_result(verdict, partitions=sorted(set(partitions)))

    @check(
        asset=base,
        name="null_counts",
        description="Nulls per column of base: none in NOT NULL columns, at most the spec's "
        f"limits, and no column added more than {sla} min ago still null in every row "
        "changed since.",
    )
    def null_counts(r: CheckResources) -> dg.AssetCheckResult:
        counts = health.base_null_counts(
            r.session(), r.catalog_name, r.iceberg.load_catalog(), spec
        )
        return check_result(
            rules.null_counts_verdict(
                counts,
                required=required,
                max_fraction=max_fraction,
                allow_all_null=allow_all_null,
                sla_minutes=sla,
                now=datetime.now(UTC),
            )
        )

    @check(
        asset=base,
        name="image_values",
        description="Typed values agree with the raw row images the ledger keeps: no ledger row "
        "whose image holds a value its column lacks or holds otherwise, no base row lacking a "
        f"value of the ledger change it holds (ledger partitions of the last "
        f"{spec.base.lookback_hours} h; in an upsert run, the changes that upsert applied). "
        "Catches values lost to a spec that did not know them.",
    )
    def image_values(r: CheckResources) -> dg.AssetCheckResult:
        # Right after an upsert, the rows it applied: the run's cost follows the change set
        # (the whole window re-decoded every JSON image of the lookback, 60% of a small
        # upsert run). The scheduled and CI runs of the check still cover the whole window.
        catalog = r.iceberg.load_catalog()
        return check_result(
            per_source(
                spec,
                lambda view: rules.image_values_verdict(
                    health.image_mismatches(
                        r.session(),
                        r.catalog_name,
                        catalog,
                        view,
                        last_upsert_only=r.context.run.job_name == UPSERT_JOB,
                    )
                ),
            )
        )

    @check(
        asset=base,
        name="sample_conforms",
        description=f"A sample of base ({conformance.SAMPLE_ROWS} rows) passes the pandera model "
        "of the table's schema package (types, nullability, enum values): consumers who pin "
        "the package get what it promises.",
    )
    def sample_conforms(r: CheckResources) -> dg.AssetCheckResult:
        found = conformance.check_sample(r.session(), r.catalog_name, spec)
        return check_result(
            rules.conformance_verdict(found.rows, found.failure_count, found.failures)
        )

    @check(
        asset=base,
        name="primary_key_unique",
        blocking=True,
        description=f"Every key ({', '.join(spec.primary_key)}) is held by exactly one row of "
        "base. Blocking: a broken mirror stops downstream assets.",
    )
    def primary_key_unique(r: CheckResources) -> dg.AssetCheckResult:
        dups = health.duplicate_keys(r.session(), r.catalog_name, spec)
        return check_result(rules.unique_key_verdict(dups, spec.primary_key))

    if spec.protects:

        @check(
            asset=base,
            name="values_protected",
            description="Every stored value of a protected column is in its protected form "
            "(typed columns of base, history and the ledger, the ledger's row images, dead "
            "letters' payloads sealed) and no row image holds a dropped field; reports the "
            "protection key ids in use. Counts only: never a value.",
        )
        def values_protected(r: CheckResources) -> dg.AssetCheckResult:
            audit = audit_protection(r.session(), r.catalog_name, spec)
            key = configured_key()
            return check_result(rules.protection_verdict(audit, key.key_id if key else None))

    @check(
        asset=base,
        name="watermark_lag",
        description=f"No change waits in the ledger for the upsert longer than the {sla} min "
        "SLA; reports base's lag behind the newest ledger event and behind now.",
    )
    def watermark_lag(r: CheckResources) -> dg.AssetCheckResult:
        catalog = r.iceberg.load_catalog()
        return check_result(
            per_source(
                spec,
                lambda view: rules.watermark_lag_verdict(
                    health.watermark_lag(r.session(), r.catalog_name, catalog, view),
                    sla_minutes=sla,
                    now=datetime.now(UTC),
                ),
            )
        )

    @check(
        asset=cdc,
        name="schema_converged",
        description="Every field the stream's row images carried is in the spec (a column, a "
        "renamed column's former name, or checks.unmirrored_fields): a field the spec has "
        f"lacked for more than {limits.schema_grace_minutes:g} min fails, since its values "
        "reach only _row_json (an evolution that failed, was refused or never ran); a newer "
        "one warns. Likewise dead letters whose value the spec's type or nullability refused "
        "(the source holds it: the spec is behind).",
    )
    def schema_converged(r: CheckResources) -> dg.AssetCheckResult:
        catalog = r.iceberg.load_catalog()
        now_ms = int(datetime.now(UTC).timestamp() * 1000)
        return check_result(
            per_source(
                spec,
                lambda view: rules.schema_converged_verdict(
                    health.unknown_fields(catalog, view),
                    known=health.known_fields(spec),
                    now_ms=now_ms,
                    grace_minutes=limits.schema_grace_minutes,
                    refused=health.refused_values(catalog, view),
                    frozen=spec.evolution.policy == "freeze",
                ),
            )
        )

    @check(
        asset=base,
        name="schema_drift",
        description="The live Iceberg schemas of every table of this spec (ledger, bucketed, "
        "base, dead letters, tombstones) are what the spec renders (error)"
        + (", and the source has no column the spec lacks (warn)" if sources else "")
        + (
            "; the source table was not dropped (warn: the mirror is kept) or renamed (error: "
            "its changes go to a topic the spec does not read), as its schema-change topic says."
            if watches_source_table
            else "."
        ),
    )
    def schema_drift(r: CheckResources) -> dg.AssetCheckResult:
        diffs = health.iceberg_differences(r.iceberg.load_catalog(), spec)
        tables: dict[str, tuple[str, str]] = {}
        if watches_source_table:
            found = source_tables(r.kafka, spec)
            for view in spec.shard_specs():
                name = view.shard.shard_name if view.shard is not None else spec.name
                if name in found:
                    table = (view.source.database, view.source.table)
                    tables[name] = (found[name].state, found[name].describe(*table))
        source = None
        if sources:
            source = []
            for view, url in sources:
                columns = health.source_columns(r.session(), url, view)
                where = f"shard {view.shard.shard_name}: " if view.shard is not None else ""
                source += [f"{where}{d}" for d in source_differences(view, columns)]
        return check_result(
            rules.schema_drift_verdict(diffs, source, tables), spec_version=spec.spec_version
        )

    if spec.history.enabled:

        @check(
            asset=asset_key("history", spec.name),
            name="history_matches_ledger",
            description="A sample of keys' versions in the history equal a plain-Python replay "
            "of their ledger changes, and every key has exactly one current version.",
        )
        def history_matches_ledger(r: CheckResources) -> dg.AssetCheckResult:
            catalog = r.iceberg.load_catalog()
            return check_result(
                per_source(
                    spec,
                    lambda view: rules.history_verdict(
                        compare_history(r.session(), r.catalog_name, catalog, view)
                    ),
                )
            )

    if sources:

        @check(
            asset=base,
            name="source_row_count",
            description="Rows in base equal rows in the source table (warn: a busy source is "
            "ahead of base by the changes in flight).",
        )
        def source_row_count(r: CheckResources) -> dg.AssetCheckResult:
            session = r.session()
            catalog = r.iceberg.load_catalog()
            verdicts = {}
            for view, url in sources:
                lag = health.watermark_lag(session, r.catalog_name, catalog, view)
                verdicts[view.shard.shard_name if view.shard else view.name] = (
                    rules.row_count_verdict(
                        health.base_row_count(session, r.catalog_name, view),
                        health.source_row_count(session, url, view),
                        lag.pending,
                    )
                )
            return check_result(rules.per_shard_verdict(verdicts))

        @check(
            asset=base,
            name="source_values",
            description="Every row of base equals the source table's, value for value (tables of "
            f"up to {rules.SOURCE_VALUES_MAX_ROWS:,} rows; a difference while changes are in "
            "flight warns, one with none left fails).",
        )
        def source_values(r: CheckResources) -> dg.AssetCheckResult:
            session = r.session()
            catalog = r.iceberg.load_catalog()
            hidden = [c.sink_name for c in spec.columns if c.sensitive]
            verdicts = {}
            for view, url in sources:
                name = view.shard.shard_name if view.shard else view.name
                rows = health.base_row_count(session, r.catalog_name, view)
                if rows > rules.SOURCE_VALUES_MAX_ROWS:
                    verdicts[name] = rules.Verdict(
                        True,
                        "WARN",
                        f"not compared: base holds {rows:,} rows, more than "
                        f"{rules.SOURCE_VALUES_MAX_ROWS:,}",
                        {"base_rows": rows},
                    )
                    continue
                diff, in_flight = health.source_values(
                    session, r.catalog_name, catalog, r.kafka, view, url
                )
                verdicts[name] = rules.source_values_verdict(diff, in_flight, hidden)
            return check_result(rules.per_shard_verdict(verdicts))

    return registered


def build_checks_op(
    registered: Sequence[tuple[dg.AssetCheckSpec, CheckBody]], tables_at_once: int
) -> dg.AssetChecksDefinition:
    """Every table's checks (``build_table_checks``) as one op: a run executes the checks it
    selects, each table's in turn in a thread of a pool of ``tables_at_once``, on a Spark
    session of its own (see the module docstring)."""
    bodies = {check_spec.key: body for check_spec, body in registered}

    @dg.multi_asset_check(
        specs=[check_spec for check_spec, _ in registered],
        can_subset=True,
        name=CHECKS_OP,
        description="The checks of every table (one op; a run executes the selected ones).",
    )
    def table_checks(
        context: AssetCheckExecutionContext,
        spark: SparkResource,
        iceberg: IcebergCatalogResource,
        kafka: KafkaResource,
    ) -> Iterator[dg.AssetCheckResult]:
        resources = CheckResources(context, spark, iceberg, kafka)
        by_table: dict[str, list[dg.AssetCheckKey]] = {}
        for key in bodies:  # the order they were registered in
            if key in context.selected_asset_check_keys:
                by_table.setdefault(table_or_name(key.asset_key), []).append(key)

        def run_table(keys: list[dg.AssetCheckKey]) -> list[dg.AssetCheckResult]:
            own_session_per_thread()
            return [_named(bodies[key](resources), key) for key in keys]

        width = max(1, min(tables_at_once, len(by_table)))
        with ThreadPoolExecutor(width, thread_name_prefix="cdc-checks") as pool:
            for results in pool.map(run_table, by_table.values()):
                yield from results

    return table_checks


def _named(result: dg.AssetCheckResult, key: dg.AssetCheckKey) -> dg.AssetCheckResult:
    """``result`` as the result of check ``key`` (an op with several checks names each)."""
    return dg.AssetCheckResult(
        asset_key=key.asset_key,
        check_name=key.name,
        passed=result.passed,
        severity=result.severity,
        description=result.description,
        metadata=result.metadata,
    )
