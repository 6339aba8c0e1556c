"""Spark SQL of phase 3 of schema evolution: recover a new (or widened) column's values from the
row images the ledger keeps, then carry them to the rows of base that came from those changes
(pure).

Values are decoded from ``_row_json`` by the ingest's own decoding SQL (`cdc_assets.sql.decode`)
under the new spec, so a backfilled value equals what the ingest writes from then on. A value the
ingest would reject (a dead letter under the new spec) is left out and counted. Base rows are
matched by key and by the exact source position of the change they hold, so a row whose newest
change predates the column keeps its null: there is nothing to recover for it. A change that did
not carry the column (PostgreSQL's TOAST placeholder) holds the value the key's newest earlier
change in the ledger carried, as the upsert keeps it.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta

from cdc_assets.schema.retype import Converted
from cdc_assets.schema.types import SinkType
from cdc_assets.schema.wire import FieldPlan, plan_fields, stored_text_plan
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.ddl import literal, quote, spark_type
from cdc_assets.sql.decode import (
    GTID_PATTERN,
    IMAGE_SCHEMA,
    _value_reasons,
    decode_stages,
    is_unavailable,
    ledger_value,
    map_has_field,
    raw,
)
from cdc_assets.sql.upsert import (
    APPLIED_OPS,
    MOVED_CREATE,
    SEQ_PARTS,
    _unavailable,
    key_names,
    order_struct,
)

# Ops whose ledger row keeps a row image (a truncate has none).
IMAGE_OPS = ("c", "u", "r", "d")
# Rows of base (and of the bucketed table) hold the newest change of a key, never a delete.
ROW_OPS = tuple(op for op in APPLIED_OPS if op != "d")


def backfill_plans(spec: TableSpec, columns: Sequence[str]) -> list[FieldPlan]:
    """The decoding plans of ``columns`` (sink names), in spec order; ValueError if unknown. A
    protected column's image holds the stored (protected) text: read as it is."""
    plans = {p.sink_name: stored_text_plan(p) for p in plan_fields(spec)}
    unknown = [c for c in columns if c not in plans]
    if unknown:
        raise ValueError(
            f"{spec.name} version {spec.spec_version} has no column(s) {unknown}; "
            f"its columns are {sorted(plans)}"
        )
    wanted = set(columns)
    return [p for p in plans.values() if p.sink_name in wanted]


def backfill_min_dt(since: datetime | None, lookback_hours: int) -> str | None:
    """The oldest ledger ``dt`` partition to read: the change point less the upsert's lookback
    (Kafka timestamps may run a little behind the change); None reads every partition."""
    if since is None:
        return None
    return (since - timedelta(hours=lookback_hours)).strftime("%Y-%m-%d")


def _old(i: int) -> str:
    return f"__old{i}"


def _rejected(plan: FieldPlan) -> str:
    """True when the ingest would turn a record into a dead letter because of this column."""
    reasons = " OR ".join(f"({cond})" for cond, _ in _value_reasons([plan]))
    return f"({raw(plan)} IS NOT NULL AND ({reasons or 'false'}))"


def _comparable(plan: FieldPlan, ref: str) -> str:
    """A value in a form ``<=>`` compares: Spark compares no maps, so nested values as JSON."""
    return f"to_json({ref})" if plan.sink.is_nested else ref


def nested_columns(spec: TableSpec) -> frozenset[str]:
    """Sink names of the spec's nested columns (compared as JSON text)."""
    return frozenset(p.sink_name for p in plan_fields(spec) if p.sink.is_nested)


def _differ(a: str, b: str, nested: bool) -> str:
    """``a`` is set and is not ``b`` (null-safe; nested values compared as their JSON)."""
    if nested:
        return f"({a} IS NOT NULL AND NOT (to_json({a}) <=> to_json({b})))"
    return f"({a} IS NOT NULL AND NOT ({a} <=> {b}))"


def exact_conversion(value: str, old: SinkType, new: SinkType) -> tuple[str, str]:
    """(the old column's ``value`` in the new type, null where it does not convert exactly;
    the condition that it does not) for a pair `schema.retype.value_converts` takes. A decimal
    that the new scale would round or the new precision cannot hold does not convert. A wall
    clock and an instant are one another in UTC, whatever the session's zone."""
    if old.name == new.name == "decimal":
        converted = f"try_cast({value} AS {spark_type(new)})"
        exact = f"{converted} = {value}"  # null when either is: the cast overflowed
        inexact = f"({value} IS NOT NULL AND NOT coalesce({exact}, false))"
        return f"CASE WHEN {exact} THEN {converted} END", inexact
    if (old.name, new.name) == ("decimal", "string"):
        return f"CAST({value} AS STRING)", "false"  # plain digits, the scale's zeros kept
    if (old.name, new.name) == ("timestamp", "timestamptz"):
        return f"CAST(convert_timezone('UTC', current_timezone(), {value}) AS TIMESTAMP)", "false"
    if (old.name, new.name) == ("timestamptz", "timestamp"):
        wall = f"CAST({value} AS TIMESTAMP_NTZ)"
        return f"convert_timezone(current_timezone(), 'UTC', {wall})", "false"
    raise ValueError(f"{old} -> {new} is not converted from the old column's values")


def _from(i: int) -> str:
    return f"__from{i}"


def _newly_unavailable(plan: FieldPlan) -> str:
    name = literal(plan.sink_name)
    listed = f"array_contains(split(coalesce(__old_unavailable, ''), ','), {name})"
    return f"({is_unavailable(plan)} AND NOT {listed})"


def after_position(spec: TableSpec, position: Mapping[str, object]) -> str | None:
    """A condition on a ledger row ``l``: its change comes after the source position
    ``position`` (a Debezium ``source`` block: binlog ``file``/``pos``, ``gtid``, or ``lsn``),
    in the order of `sql.decode.sequence_columns`; None when the block does not place it."""
    if spec.source.connector == "postgresql":
        lsn = position.get("lsn")
        return f"(l._seq_major > {int(str(lsn))})" if lsn is not None else None
    if spec.source.order == "gtid":
        match = re.fullmatch(GTID_PATTERN, str(position.get("gtid") or ""))
        if match is None:
            return None
        major, minor = int(match.group(3)), position.get("pos")
    else:
        number = re.search(r"\.([0-9]+)$", str(position.get("file") or ""))
        if number is None:
            return None
        major, minor = int(number.group(1)), position.get("pos")
    if minor is None:
        return f"(l._seq_major > {major})"
    return (
        f"(l._seq_major > {major} OR (l._seq_major = {major} AND l._seq_minor > {int(str(minor))}))"
    )


def render_ledger_values(
    spec: TableSpec,
    ledger: str,
    snapshot_id: int,
    columns: Sequence[str],
    *,
    min_dt: str | None = None,
    exclude_files: Sequence[str] = (),
    offsets: Mapping[int, tuple[int, int]] | None = None,
    reencoded: Collection[str] = (),
    after: str | None = None,
    converted: Mapping[str, Converted] | None = None,
    after_by_column: Mapping[str, str] | None = None,
) -> str:
    """SELECT of every ledger row with a row image: its coordinates (dt, hr, Kafka partition and
    offset), each column decoded as the ingest decodes it under ``spec`` (NULL when the image
    lacks it, the source did not send it, or the ingest would reject it), ``_unavailable`` with
    the columns the source did not send added, and the flags ``__changed`` (the row needs an
    update) and ``__rejected`` (some value would be a dead letter under ``spec``).

    ``exclude_files``: ledger data files not to touch (redriven rows base has not applied yet:
    the upsert finds those by file name). ``offsets``: only the ledger rows in these Kafka
    offset ranges (partition -> [start, end)). ``reencoded`` columns (`schema.recover.
    reencoded_columns`) are decoded only in rows ``after`` the source's change (an
    `after_position` condition); other rows keep what they hold, and with no ``after`` every
    row does. ``converted`` columns (`schema.retype.converted_columns`) take the retired
    column's value, converted exactly, in the rows before the change that hold one, and are
    decoded from the image in the others; with no ``after``, a column whose old values may have
    been misread is converted in no row: such a row keeps what it holds, counted as rejected
    when that is nothing. ``after_by_column``: a condition of its own for some columns, in
    place of ``after`` (each column's change came at another position).
    """
    converted = converted or {}
    own_after = after_by_column or {}
    plans = backfill_plans(spec, columns)
    where = [f"l._op IN ({', '.join(literal(o) for o in IMAGE_OPS)})", "l._row_json IS NOT NULL"]
    if min_dt is not None:
        where.append(f"l.dt >= {literal(min_dt)}")
    if exclude_files:
        where.append(f"l._file NOT IN ({', '.join(literal(f) for f in exclude_files)})")
    if offsets is not None:
        where.append(offset_filter(offsets))
    stored = [f"l.{quote(p.sink_name)} AS {_old(i)}" for i, p in enumerate(plans)]
    stored += [f"{own_after[p.sink_name]} AS __after{i}" for i, p in enumerate(plans)
               if p.sink_name in own_after]  # fmt: skip
    for i, p in enumerate(plans):
        if p.sink_name in converted:
            # Converted here, at the scan: the stages below then refer to plain columns.
            conversion = converted[p.sink_name]
            retired = f"l.{quote(conversion.retired)}"
            if conversion.misread and after is None and p.sink_name not in own_after:
                # Which old values were read in the old encoding is unknown: none is converted;
                # a value an earlier backfill gave the row stays, one without is counted.
                value, inexact = f"l.{quote(p.sink_name)}", f"(l.{quote(p.sink_name)} IS NULL)"
            else:
                value, inexact = exact_conversion(retired, conversion.old, conversion.new)
            stored += [f"{retired} AS {_from(i)}", f"{value} AS __conv{i}"]
            stored.append(f"{inexact} AS __inexact{i}")
    sql = (
        "SELECT l.dt, l.hr, l._kafka_partition, l._kafka_offset, l._op AS op, "
        f"{after or 'false'} AS __after_change, "
        f"l._unavailable AS __old_unavailable, {', '.join(stored)}, "
        f"from_json(l._row_json, {literal(IMAGE_SCHEMA)}) AS img "
        f"FROM {ledger} VERSION AS OF {snapshot_id} AS l WHERE {' AND '.join(where)}"
    )
    for n, stage in enumerate(decode_stages(plans)):
        exprs = ", ".join(f"{expr} AS {name}" for name, expr in stage)
        sql = f"SELECT *, {exprs} FROM ({sql}) AS d{n}"
    values = []
    for i, p in enumerate(plans):
        decoded = (
            f"CASE WHEN {_rejected(p)} THEN NULL ELSE {ledger_value(p, map_has_field('img'))} END"
        )
        rejected, unavailable = _rejected(p), _newly_unavailable(p)
        flag = f"__after{i}" if p.sink_name in own_after else "__after_change"
        if p.sink_name in reencoded:
            # Written before the change in the old encoding: kept as the ingest decoded it.
            decoded = f"CASE WHEN {flag} THEN {decoded} ELSE {_old(i)} END"
            rejected = f"({flag} AND {rejected})"
            unavailable = f"({flag} AND {unavailable})"
        elif p.sink_name in converted:
            # A row after the change, or one whose old column holds nothing (written under the
            # new spec, or a null), reads its image; the others take the converted old value.
            from_image = f"({flag} OR {_from(i)} IS NULL)"
            decoded = f"CASE WHEN {from_image} THEN {decoded} ELSE __conv{i} END"
            rejected = f"CASE WHEN {from_image} THEN {rejected} ELSE __inexact{i} END"
            unavailable = f"({from_image} AND {unavailable})"
        values.append(f"{decoded} AS {quote(p.sink_name)}")
        values.append(f"{rejected} AS __rejected{i}")
        values.append(f"{unavailable} AS __unavailable{i}")
    sql = (
        "SELECT dt, hr, _kafka_partition, _kafka_offset, __old_unavailable, "
        f"{', '.join(_old(i) for i in range(len(plans)))}, {', '.join(values)} FROM ({sql}) AS v"
    )
    changed = [
        f"({quote(p.sink_name)} IS NOT NULL AND NOT ({_comparable(p, quote(p.sink_name))} "
        f"<=> {_comparable(p, _old(i))}))"
        for i, p in enumerate(plans)
    ]
    changed += [f"__unavailable{i}" for i in range(len(plans))]
    added = ", ".join(
        f"CASE WHEN __unavailable{i} THEN {literal(p.sink_name)} END" for i, p in enumerate(plans)
    )
    names = ", ".join(quote(p.sink_name) for p in plans)
    rejected = " OR ".join(f"__rejected{i}" for i in range(len(plans)))
    olds = ", ".join(_old(i) for i in range(len(plans)))
    return (
        f"SELECT dt, hr, _kafka_partition, _kafka_offset, {names}, {olds}, "
        f"nullif(concat_ws(',', __old_unavailable, {added}), '') AS _unavailable, "
        f"({' OR '.join(changed)}) AS __changed, ({rejected}) AS __rejected FROM ({sql}) AS w"
    )


def render_ledger_counts(values: str) -> str:
    """One row: ``changed`` and ``rejected`` rows of a `render_ledger_values` query."""
    return (
        "SELECT count_if(__changed) AS changed, count_if(__rejected) AS rejected "
        f"FROM ({values}) AS c"
    )


def render_ledger_rejected(values: str, limit: int) -> str:
    """Up to ``limit`` rows of a `render_ledger_values` query whose image holds a value the
    spec refuses: their Kafka coordinates, in order, to list what a backfill left null."""
    return (
        "SELECT _kafka_partition, _kafka_offset FROM "
        f"({values}) AS r WHERE __rejected ORDER BY _kafka_partition, _kafka_offset LIMIT {limit}"
    )


def _image_differs(i: int, column: str, nested: frozenset[str]) -> str:
    return _differ(quote(column), _old(i), column in nested)


def _shown(expr: str) -> str:
    return f"coalesce(substr(cast({expr} AS STRING), 1, 40), 'null')"


def render_image_mismatch_counts(
    values: str, columns: Sequence[str], nested: frozenset[str] = frozenset()
) -> str:
    """One row: per column (of a `render_ledger_values` query over ``columns``), the ledger rows
    whose row image holds a value the typed column lacks or holds otherwise. ``nested``: the
    columns of nested types (`nested_columns`)."""
    counts = [
        f"count_if({_image_differs(i, c, nested)}) AS {quote(c)}" for i, c in enumerate(columns)
    ]
    return f"SELECT {', '.join(counts)} FROM ({values}) AS m"


def render_image_mismatch_examples(
    values: str, columns: Sequence[str], limit: int = 5, nested: frozenset[str] = frozenset()
) -> str:
    """Up to ``limit`` such ledger rows: Kafka coordinates and what differs, as text."""
    parts = ", ".join(
        f"CASE WHEN {_image_differs(i, c, nested)} THEN concat({literal(c + ': image ')}, "
        f"{_shown(quote(c))}, ' row ', {_shown(_old(i))}) END"
        for i, c in enumerate(columns)
    )
    any_differs = " OR ".join(_image_differs(i, c, nested) for i, c in enumerate(columns))
    return (
        "SELECT _kafka_partition, _kafka_offset, "
        f"concat_ws('; ', {parts}) AS mismatch FROM ({values}) AS m "
        f"WHERE {any_differs} ORDER BY _kafka_partition, _kafka_offset LIMIT {int(limit)}"
    )


def render_ledger_update(
    ledger: str, values: str, columns: Sequence[str], *, min_dt: str | None = None
) -> str:
    """MERGE the decoded values into the ledger rows they were decoded from (same dt, hr, Kafka
    partition and offset). A stored value stays where nothing better was decoded."""
    on = [f"t.{c} = s.{c}" for c in ("dt", "hr", "_kafka_partition", "_kafka_offset")]
    if min_dt is not None:
        on.append(f"t.dt >= {literal(min_dt)}")
    sets = [f"t.{quote(c)} = coalesce(s.{quote(c)}, t.{quote(c)})" for c in columns]
    sets.append("t._unavailable = s._unavailable")
    return (
        f"MERGE INTO {ledger} t USING (SELECT * FROM ({values}) AS v WHERE __changed) s "
        f"ON {' AND '.join(on)} WHEN MATCHED THEN UPDATE SET {', '.join(sets)}"
    )


def offset_filter(offsets: Mapping[int, tuple[int, int]], alias: str = "l") -> str:
    """Ledger rows whose Kafka coordinates fall in ``offsets`` (partition -> [start, end))."""
    ranges = [
        f"({alias}._kafka_partition = {int(p)} AND {alias}._kafka_offset >= {int(start)} "
        f"AND {alias}._kafka_offset < {int(end)})"
        for p, (start, end) in sorted(offsets.items())
        if end > start
    ]
    return "(" + (" OR ".join(ranges) if ranges else "false") + ")"


def _coordinates(spec: TableSpec) -> list[str]:
    """The columns that place a change: its key and its source and Kafka positions."""
    return list(dict.fromkeys([*key_names(spec), *SEQ_PARTS, "_kafka_partition", "_kafka_offset"]))


def _position_source(
    spec: TableSpec,
    ledger: str,
    snapshot_id: int,
    columns: Sequence[str],
    min_dt: str | None,
    offsets: Mapping[int, tuple[int, int]] | None = None,
    nulls: bool = False,
) -> str:
    keys = key_names(spec)
    coordinates = _coordinates(spec)
    where = [f"l._op IN ({', '.join(literal(o) for o in APPLIED_OPS)})"]
    if min_dt is not None:
        where.append(f"l.dt >= {literal(min_dt)}")
    if offsets is not None:
        where.append(offset_filter(offsets))
    # The value a row holds for a column its change did not carry (a TOAST placeholder, listed
    # in _unavailable) is the one the key's newest earlier change carried: the upsert keeps it
    # so. Wrapped in a struct, a carried null is a value and an uncarried column is no value.
    # A delete, or a create that moved the row in from another key, starts a new life of the
    # key: nothing is carried across it (a moved row's values come from its old key).
    partition = ", ".join(f"l.{quote(k)}" for k in keys)
    order = f"ORDER BY {order_struct('l')} ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW"
    barrier = f"l._op = 'd' OR ({MOVED_CREATE.format(a='l')})"
    life = f"sum(CASE WHEN {barrier} THEN 1 ELSE 0 END) OVER (PARTITION BY {partition} {order})"
    lived = (
        f"SELECT l.*, {life} AS __life FROM {ledger} VERSION AS OF {snapshot_id} AS l "
        f"WHERE {' AND '.join(where)}"
    )
    carried = [
        f"last(CASE WHEN l._op <> 'd' AND NOT {_unavailable('l', c)} THEN "
        f"named_struct('v', l.{quote(c)}) END, true) OVER (PARTITION BY {partition}, l.__life "
        f"{order}){'' if nulls else '.v'} AS {quote(c)}"
        for c in columns
        if c not in coordinates
    ]
    held = (
        f"SELECT l._op, {', '.join(['l.' + quote(c) for c in coordinates] + carried)} "
        f"FROM ({lived}) AS l"
    )
    any_value = " OR ".join(f"h.{quote(c)} IS NOT NULL" for c in columns)
    ops = ", ".join(literal(o) for o in ROW_OPS)
    return f"SELECT * FROM ({held}) AS h WHERE h._op IN ({ops}) AND ({any_value})"


def _position_match(spec: TableSpec) -> str:
    on = [f"t.{quote(k)} = s.{quote(k)}" for k in key_names(spec)]
    on += [f"t.{p} <=> s.{p}" for p in SEQ_PARTS]
    on += ["t._kafka_partition = s._kafka_partition", "t._kafka_offset = s._kafka_offset"]
    return " AND ".join(on)


def _carried(spec: TableSpec, column: str, nulls: bool) -> str:
    """The source's value of ``column``: with ``nulls`` a carried column is a struct (null: the
    change carried no value), its value is the struct's field."""
    carried = nulls and column not in _coordinates(spec)
    return f"s.{quote(column)}" + (".v" if carried else "")


def _differs(spec: TableSpec, columns: Sequence[str], nulls: bool = False) -> str:
    nested = nested_columns(spec)
    if not nulls:
        return " OR ".join(_differ(f"s.{quote(c)}", f"t.{quote(c)}", c in nested) for c in columns)
    # A carried null differs too; a column no change carried (a null struct) does not.
    compared = [
        (f"s.{quote(c)}", _carried(spec, c, True), f"t.{quote(c)}", c in nested) for c in columns
    ]
    return " OR ".join(
        f"({s} IS NOT NULL AND NOT ({_json(v, n)} <=> {_json(t, n)}))" for s, v, t, n in compared
    )


def _json(ref: str, nested: bool) -> str:
    return f"to_json({ref})" if nested else ref


def render_position_update(
    spec: TableSpec,
    target: str,
    ledger: str,
    snapshot_id: int,
    columns: Sequence[str],
    *,
    min_dt: str | None = None,
    nulls: bool = False,
) -> str:
    """MERGE ledger values into the rows of ``target`` (base, or the bucketed table) that hold
    the same change: same key and same source position (sequence parts, Kafka partition and
    offset). Only rows whose value differs are rewritten.

    Without ``nulls`` only values are carried: a row keeps what it holds where the ledger has
    null (the evolution's case: base never held more than the ledger). With ``nulls`` a null the
    change carried is written too, for rows a MERGE on an older spec left holding an earlier
    change's value; a column the change did not carry (a TOAST placeholder) is still left."""
    source = _position_source(spec, ledger, snapshot_id, columns, min_dt, nulls=nulls)
    if nulls:
        sets = ", ".join(
            f"t.{quote(c)} = CASE WHEN s.{quote(c)} IS NULL THEN t.{quote(c)} "
            f"ELSE {_carried(spec, c, True)} END"
            for c in columns
        )
    else:
        sets = ", ".join(f"t.{quote(c)} = coalesce(s.{quote(c)}, t.{quote(c)})" for c in columns)
    return (
        f"MERGE INTO {target} t USING ({source}) s ON {_position_match(spec)} "
        f"WHEN MATCHED AND ({_differs(spec, columns, nulls)}) THEN UPDATE SET {sets}"
    )


def render_position_examples(
    spec: TableSpec,
    target: str,
    ledger: str,
    snapshot_id: int,
    columns: Sequence[str],
    *,
    min_dt: str | None = None,
    limit: int = 5,
    offsets: Mapping[int, tuple[int, int]] | None = None,
) -> str:
    """Up to ``limit`` rows `render_position_update` would rewrite: key and what differs."""
    source = _position_source(spec, ledger, snapshot_id, columns, min_dt, offsets)
    keys = ", ".join(f"t.{quote(k)}" for k in key_names(spec))
    nested = nested_columns(spec)
    parts = ", ".join(
        f"CASE WHEN {_differ(f's.{quote(c)}', f't.{quote(c)}', c in nested)} THEN "
        f"concat({literal(c + ': ledger ')}, {_shown('s.' + quote(c))}, ' base ', "
        f"{_shown('t.' + quote(c))}) END"
        for c in columns
    )
    return (
        f"SELECT to_json(struct({keys})) AS key, concat_ws('; ', {parts}) AS mismatch "
        f"FROM {target} t JOIN ({source}) s ON {_position_match(spec)} "
        f"WHERE {_differs(spec, columns)} LIMIT {int(limit)}"
    )


def render_position_count(
    spec: TableSpec,
    target: str,
    ledger: str,
    snapshot_id: int,
    columns: Sequence[str],
    *,
    min_dt: str | None = None,
    offsets: Mapping[int, tuple[int, int]] | None = None,
    nulls: bool = False,
) -> str:
    """One row, ``n``: the rows `render_position_update` would rewrite (of the ledger rows in
    ``offsets`` only, when given)."""
    source = _position_source(spec, ledger, snapshot_id, columns, min_dt, offsets, nulls)
    return (
        f"SELECT count(*) AS n FROM {target} t JOIN ({source}) s ON {_position_match(spec)} "
        f"WHERE {_differs(spec, columns, nulls)}"
    )
