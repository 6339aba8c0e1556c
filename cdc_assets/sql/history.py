"""Spark SQL for history tables (SCD type 2): ledger changes -> versions per key -> MERGE.

The rules are those of `cdc_assets.quality.history_replay`, the plain-Python reference: every
change of a key is a version, valid until the key's next change; deletes and truncates are
versions in which the key is absent; a change delivered twice counts once; a column the source
did not send carries the newest earlier value of the key's current life.

A run recomputes the whole timeline of every key it touches, from the key's stored versions
(``prior``) and the ledger's new changes, so the result does not depend on the order changes
arrived in: a late change lands in its place and the versions around it are re-closed.
"""

from __future__ import annotations

from cdc_assets.schema.layers import history_layout, txn_columns
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.ddl import literal, quote
from cdc_assets.sql.upsert import (
    CHANGE_COLUMNS,
    SEQ_PARTS,
    data_names,
    key_names,
    old_key_rows,
    order_struct,
)

ROW_OPS = "('c', 'u', 'r')"
DELETE_OPS = "('d', 't')"
POSITION_COLUMNS = ("_source_ts", *SEQ_PARTS, "_kafka_partition", "_kafka_offset")


def txn_names(spec: TableSpec) -> list[str]:
    """The transaction columns a change carries (tables of a consistency group)."""
    return [c.name for c in txn_columns(spec)]


def event_columns(spec: TableSpec) -> list[str]:
    """The columns a change has on its way to a version: data, the change's own, placeholders
    and its transaction."""
    return [*data_names(spec), *CHANGE_COLUMNS, "_unavailable", *txn_names(spec)]


def _cols(names: list[str], alias: str) -> str:
    return ", ".join(f"{alias}.{quote(c)}" for c in names)


def render_changes(spec: TableSpec, ledger: str, *, old_keys: bool = True) -> str:
    """SELECT of the row changes (c, u, r, d) in ``ledger`` (a view with the ledger's columns)
    in the event columns, and a delete of the old key for every update whose before image
    holds another key (when the key's encoding can be read back from the image's text)."""
    columns = event_columns(spec)
    sql = f"SELECT {_cols(columns, 'l')} FROM {ledger} l WHERE l._op IN ('c', 'u', 'r', 'd')"
    rows = old_key_rows(spec, columns) if old_keys else None
    if rows is None:
        return sql
    values, where = rows
    return f"{sql} UNION ALL SELECT {', '.join(values)} FROM {ledger} l WHERE {' AND '.join(where)}"


def render_touched_keys(spec: TableSpec, changes: str) -> str:
    keys = key_names(spec)
    return f"SELECT DISTINCT {_cols(keys, 'c')} FROM {changes} c"


def render_prior(spec: TableSpec, history: str, touched: str) -> str:
    """The stored versions of the touched keys as changes (truncates are re-derived)."""
    on = " AND ".join(f"h.{quote(k)} = k.{quote(k)}" for k in key_names(spec))
    return (
        f"SELECT {_cols(event_columns(spec), 'h')} FROM {history} h "
        f"LEFT SEMI JOIN {touched} k ON {on} WHERE h._op <> 't'"
    )


def _first_delivery(partition: list[str]) -> str:
    """A window that numbers the deliveries of one change (rows of ``partition`` at the same
    source position, or the same record without one) from the first (lowest partition, offset)."""
    no_position = " AND ".join(f"{p} IS NULL" for p in SEQ_PARTS)
    identity = [
        *partition,
        *SEQ_PARTS,
        f"CASE WHEN {no_position} THEN _kafka_partition END",
        f"CASE WHEN {no_position} THEN _kafka_offset END",
    ]
    return (
        f"row_number() OVER (PARTITION BY {', '.join(identity)} "
        "ORDER BY _kafka_partition, _kafka_offset)"
    )


def render_truncates(spec: TableSpec, ledger: str) -> str:
    """The truncates in ``ledger``, each once (a redelivery is the same truncate): their
    position, source time and transaction."""
    columns = ", ".join(quote(c) for c in (*POSITION_COLUMNS, *txn_names(spec)))
    return (
        f"SELECT {columns} FROM (SELECT {columns}, {_first_delivery([])} AS _dup "
        f"FROM {ledger} WHERE _op = 't') WHERE _dup = 1"
    )


def _unavailable(alias: str, column: str) -> str:
    return f"array_contains(split(coalesce({alias}._unavailable, ''), ','), {literal(column)})"


def render_versions(
    spec: TableSpec, changes: list[str], truncates: str, *, carry_unavailable: bool
) -> str:
    """SELECT of every version of the keys in ``changes`` (views of event columns, stored and
    new changes together), in the history layout's columns."""
    keys = key_names(spec)
    data = data_names(spec)
    columns = event_columns(spec)
    part = ", ".join(quote(k) for k in keys)
    union = " UNION ALL ".join(f"SELECT {_cols(columns, 'c')} FROM {v} c" for v in changes)
    marks = []
    for c in columns:
        if c in keys:
            marks.append(f"f.{quote(c)}")
        elif c == "_op":
            marks.append("'t' AS _op")
        elif c in POSITION_COLUMNS or c in txn_names(spec):
            marks.append(f"t.{quote(c)}")
        else:
            marks.append(f"NULL AS {quote(c)}")
    order = order_struct("e")
    window = f"PARTITION BY {_cols(keys, 'e')} ORDER BY {order}"
    before = "ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING"
    life_window = f"PARTITION BY {_cols(keys, 'e')}, e._life ORDER BY {order} {before}"
    outputs = []
    for c in data:
        ref = f"e.{quote(c)}"
        if carry_unavailable and c not in keys:
            sent = f"e._op IN {ROW_OPS} AND NOT {_unavailable('e', c)}"
            newest = f"last(CASE WHEN {sent} THEN named_struct('v', {ref}) END, true)"
            ref = (
                f"CASE WHEN e._op IN {ROW_OPS} AND {_unavailable('e', c)} THEN "
                f"coalesce({newest} OVER ({life_window}), named_struct('v', {ref})).v "
                f"ELSE {ref} END"
            )
        outputs.append(f"{ref} AS {quote(c)}")
    outputs += [f"e.{c}" for c in CHANGE_COLUMNS]
    outputs.append(f"CASE WHEN e._op IN {ROW_OPS} THEN e._unavailable END AS _unavailable")
    outputs += [f"e.{c}" for c in txn_names(spec)]
    nxt = f"lead(named_struct('ts', e._source_ts, 'op', e._op, {_seq_fields('e')})) OVER ({window})"
    outputs.append("e._source_ts AS _valid_from")
    closing = {
        "_valid_to": "_n.ts",
        "_valid_to_seq_major": "_n.s0",
        "_valid_to_seq_minor": "_n.s1",
        "_valid_to_seq_row": "_n.s2",
        "_closed_by": "_n.op",
    }
    final = [
        *(quote(c) for c in data),
        *CHANGE_COLUMNS,
        "_unavailable",
        "_valid_from",
        *(f"{v} AS {k}" for k, v in closing.items()),
        "_n IS NULL AS _is_current",
        f"_op IN {DELETE_OPS} AS _is_deleted",
        *txn_names(spec),
    ]
    return (
        f"WITH changes AS ({union}), "
        # One version per source position (a redelivery is the same change): the first.
        f"deduped AS (SELECT * FROM (SELECT c.*, {_first_delivery([quote(k) for k in keys])} "
        "AS _dup FROM changes c) WHERE _dup = 1), "
        f"firsts AS (SELECT {part}, min({order_struct('d')}) AS _first FROM deduped d "
        f"GROUP BY {part}), "
        f"marks AS (SELECT {', '.join(marks)} FROM firsts f JOIN {truncates} t "
        f"ON {order_struct('t')} > f._first), "
        f"events AS (SELECT {', '.join(quote(c) for c in columns)} FROM deduped "
        f"UNION ALL SELECT * FROM marks), "
        f"lives AS (SELECT e.*, coalesce(sum(CASE WHEN e._op IN {DELETE_OPS} THEN 1 END) "
        f"OVER ({window} {before}), 0) AS _life FROM events e), "
        f"closed AS (SELECT {', '.join(outputs)}, {nxt} AS _n FROM lives e) "
        f"SELECT {', '.join(final)} FROM closed"
    )


def _seq_fields(alias: str) -> str:
    return ", ".join(f"'s{i}', {alias}.{p}" for i, p in enumerate(SEQ_PARTS))


def _same_version(target: str, source: str) -> str:
    """A stored version (``target``) is the recomputed one (``source``): same key, same change."""
    no_position = " AND ".join(f"{source}.{p} IS NULL" for p in SEQ_PARTS)
    seq = " AND ".join(f"{target}.{p} <=> {source}.{p}" for p in SEQ_PARTS)
    record = (
        f"{target}._kafka_partition = {source}._kafka_partition AND "
        f"{target}._kafka_offset = {source}._kafka_offset"
    )
    return f"{seq} AND (NOT ({no_position}) OR ({record}))"


def render_history_merge(spec: TableSpec, history: str, versions: str) -> str:
    """MERGE the recomputed versions into the history table: new versions are inserted, stored
    ones that differ (re-closed by a late change, carried values) are updated."""
    names = history_layout(spec).column_names
    keys = key_names(spec)
    on = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in keys)
    on += " AND " + _same_version("t", "s")
    changed = " OR ".join(f"NOT (t.{quote(n)} <=> s.{quote(n)})" for n in names if n not in keys)
    sets = ", ".join(f"t.{quote(n)} = s.{quote(n)}" for n in names if n not in keys)
    return (
        f"MERGE INTO {history} t USING {versions} s ON {on} "
        f"WHEN MATCHED AND ({changed}) THEN UPDATE SET {sets} "
        f"WHEN NOT MATCHED THEN INSERT ({', '.join(quote(n) for n in names)}) "
        f"VALUES ({', '.join('s.' + quote(n) for n in names)})"
    )


def render_as_of(
    spec: TableSpec,
    history: str,
    *,
    at: str | None = None,
    position: tuple[int, int, int] | None = None,
) -> str:
    """SELECT of the table as the source held it at source time ``at`` (a Spark SQL timestamp
    expression) or at a source ``position``: each key's version valid then, deleted ones left
    out, in base's data columns."""
    if (at is None) == (position is None):
        raise ValueError("give exactly one of at (a source time) or position")
    if at is not None:
        valid = f"_valid_from <= {at} AND (_valid_to IS NULL OR _valid_to > {at})"
    else:
        assert position is not None
        p = (
            "named_struct("
            + ", ".join(f"'p{i}', CAST({v} AS BIGINT)" for i, v in enumerate(position))
            + ")"
        )
        start = (
            "named_struct("
            + ", ".join(
                f"'p{i}', coalesce({c}, CAST(-1 AS BIGINT))" for i, c in enumerate(SEQ_PARTS)
            )
            + ")"
        )
        end = (
            "named_struct("
            + ", ".join(
                f"'p{i}', coalesce(_valid_to_seq_{n}, CAST(-1 AS BIGINT))"
                for i, n in enumerate(("major", "minor", "row"))
            )
            + ")"
        )
        valid = f"{start} <= {p} AND (_is_current OR {end} > {p})"
    columns = ", ".join(quote(c) for c in data_names(spec))
    return f"SELECT {columns} FROM {history} WHERE NOT _is_deleted AND {valid}"
