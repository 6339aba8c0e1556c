"""Where a table stores values that a protection covers, and the SQL that rewrites those stored
before the protection (pure).

A column protected in a later spec version (`schema.evolution` takes ``protect`` set on a string
column, or JSON paths added) holds plaintext in the rows written before it: the typed column of
every layer, the ledger's row images ``_row_json`` and ``_before_json``, and the dead letters'
payloads. `pipeline.maintenance.reprotect` runs these statements; each one changes only values not
yet in
their protected form (`sql.protect.protected_form_sql`), so running it again changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from functools import partial
from typing import NamedTuple

from cdc_assets.schema.types import SinkType
from cdc_assets.spec.json_paths import segments
from cdc_assets.spec.models import ColumnSpec, Protection, TableSpec
from cdc_assets.sql.ddl import literal, quote, spark_type
from cdc_assets.sql.protect import (
    ENCRYPTED_PREFIX,
    IMAGE_VALUE,
    ProtectionKey,
    document_sql,
    image_sql,
    opened_payload_sql,
    protect_again_sql,
    protected_form_sql,
    sealed_payload_sql,
)


class StoredValue(NamedTuple):
    """A place a protection covers: ``expr`` is a STRING expression, or with ``many`` an
    ARRAY<STRING> of every value at a path through arrays."""

    place: str
    expr: str
    protection: Protection
    many: bool = False


Stored = list[StoredValue]


def protected_columns(spec: TableSpec) -> list[ColumnSpec]:
    """The spec's columns with a protection of the whole value or of paths inside it."""
    return [c for c in spec.columns if c.protect is not None or c.protect_paths]


def document_type(spec: TableSpec, column: ColumnSpec) -> SinkType | None:
    """The nested type a column with ``protect_paths`` reads its document into; None when the
    document is stored as text."""
    sink = column.sink_type(spec.source.connector)
    return sink if column.protect_paths and sink.is_nested else None


def path_values_sql(text: str, path: str) -> tuple[str, bool]:
    """The values at ``path`` (`spec.json_paths`) in the JSON document ``text``: one STRING
    (False), or with ``[]`` in the path an ARRAY<STRING> of every element's (True)."""
    steps = segments(path)
    if not any(arrays for _, arrays in steps):
        return f"get_json_object({text}, {literal('$.' + path)})", False
    values = f"array(try_parse_json({text}))"
    for name, arrays in steps:
        values = f"transform({values}, _x -> try_variant_get(_x, {literal('$.' + name)}))"
        for _ in range(arrays):
            elements = "coalesce(try_variant_get(_x, '$', 'array<variant>'), array())"
            values = f"flatten(transform({values}, _x -> {elements}))"
    return f"transform({values}, _x -> CAST(_x AS STRING))", True


def stored_values(spec: TableSpec, *, images: bool) -> Stored:
    """What a protection covers in a table with the spec's typed columns (and, for a ledger,
    its row images: each field under every name it had)."""
    out: Stored = []
    for c in spec.columns:
        column = quote(c.sink_name)
        if document_type(spec, c) is not None:
            column = f"to_json({column})"
        places = [(c.sink_name, column)]
        if images:
            places += [
                (f"_row_json.{n}", f"get_json_object(_row_json, {literal('$.' + n)})")
                for n in (c.name, *c.former_names)
            ]
        for place, expr in places:
            if c.protect is not None:
                out.append(StoredValue(place, expr, c.protect))
            for path, protection in sorted(c.protect_paths.items()):
                value, many = path_values_sql(expr, path)
                out.append(StoredValue(f"{place}.{path}", value, protection, many))
    return out


def any_sql(value: StoredValue, test: Callable[[str], str]) -> str:
    """``test`` (of a STRING expression) of the value, or of any of its values."""
    if value.many:
        return f"exists({value.expr}, _v -> {test('_v')})"
    return test(value.expr)


def plain_sql(values: Sequence[StoredValue]) -> str:
    """True where any of ``values`` holds a value not in its protected form."""
    tests = [any_sql(v, partial(_plain, v.protection)) for v in values]
    return " OR ".join(tests) or "false"


def _plain(protection: Protection, value: str) -> str:
    return f"({value} IS NOT NULL AND NOT ({protected_form_sql(protection, value)}))"


def stale_key_sql(values: Sequence[StoredValue], key: ProtectionKey) -> str:
    """True where any encrypted value of ``values`` was made with another key than ``key``."""
    current = literal(f"{ENCRYPTED_PREFIX}:{key.key_id}:")
    enc = literal(ENCRYPTED_PREFIX + ":")
    tests = [
        any_sql(v, lambda e: f"(startswith({e}, {enc}) AND NOT startswith({e}, {current}))")
        for v in values
        if v.protection is Protection.ENCRYPT
    ]
    return " OR ".join(tests) or "false"


def column_value_sql(
    spec: TableSpec,
    column: ColumnSpec,
    key: ProtectionKey | None,
    old_keys: Sequence[ProtectionKey] = (),
) -> str:
    """The protected value of a typed column, from what it stores (kept when already so; with
    ``old_keys``, an encrypted value of one of them encrypted again with ``key``). A document
    read into a nested type is protected as JSON and read into its type again."""
    value = quote(column.sink_name)
    if column.protect is not None:
        return protect_again_sql(column.protect, value, key, old_keys)
    paths = sorted(column.protect_paths.items())
    nested = document_type(spec, column)
    if nested is None:
        return document_sql(value, paths, key, again=old_keys)
    protected = document_sql(f"to_json({value})", paths, key, again=old_keys)
    return f"from_json({protected}, {literal(spark_type(nested))})"


def _image_value_sql(
    spec: TableSpec,
    column: ColumnSpec,
    key: ProtectionKey | None,
    old_keys: Sequence[ProtectionKey],
) -> str:
    """A row image's protected field (a VARIANT), as the ingest writes it: the typed column's
    protected value, or for a document read into a nested type the image's own document
    protected (the typed column holds only the members the type declares)."""
    if document_type(spec, column) is not None:
        text = f"CAST({IMAGE_VALUE} AS STRING)"
        paths = sorted(column.protect_paths.items())
        return f"CAST({document_sql(text, paths, key, again=old_keys)} AS VARIANT)"
    return f"CAST({column_value_sql(spec, column, key, old_keys)} AS VARIANT)"


def _fields_sql(image: str, names: Collection[str]) -> str:
    listed = ", ".join(literal(n) for n in sorted(names))
    return (
        f"({image} IS NOT NULL AND size(array_intersect(json_object_keys({image}), "
        f"array({listed}))) > 0)"
    )


def render_rewrite(
    table: str,
    spec: TableSpec,
    key: ProtectionKey | None,
    *,
    ledger: bool,
    old_keys: Sequence[ProtectionKey] = (),
) -> str | None:
    """``UPDATE`` of the rows of ``table`` (a layer with the spec's typed columns; a ledger
    with ``ledger``) holding a value not in its protected form; None when nothing is protected.

    A row image's protected field takes the typed column's protected value, as the ingest
    writes it; a field whose typed value is null (a placeholder for a value the source did not
    send) is kept. The before image, read for its key alone, loses the protected fields, and
    both images lose ``pipeline.drop_fields``. With ``old_keys`` (re-keying), the rows holding
    a value encrypted with another key than ``key`` are rewritten too."""
    columns = protected_columns(spec)
    dropped = set(spec.pipeline.drop_fields) if ledger else set()
    if not columns and not dropped:
        return None
    sets = [f"{quote(c.sink_name)} = {column_value_sql(spec, c, key, old_keys)}" for c in columns]
    values = stored_values(spec, images=ledger)
    where = [plain_sql(values)]
    if old_keys and key is not None and any(v.protection is Protection.ENCRYPT for v in values):
        where.append(stale_key_sql(values, key))
    if ledger:
        stored = {
            name: (
                f"CASE WHEN {quote(c.sink_name)} IS NULL THEN {IMAGE_VALUE} "
                f"ELSE {_image_value_sql(spec, c, key, old_keys)} END"
            )
            for c in columns
            for name in (c.name, *c.former_names)
        }
        sets.append(f"_row_json = {image_sql('_row_json', stored, dropped)}")
        sets.append(f"_before_json = {image_sql('_before_json', {}, dropped | set(stored))}")
        if stored or dropped:
            where.append(_fields_sql("_before_json", dropped | set(stored)))
        if dropped:
            where.append(_fields_sql("_row_json", dropped))
    return f"UPDATE {table} SET {', '.join(sets)} WHERE {' OR '.join(where)}"


def render_seal_dead_letters(
    table: str, key: ProtectionKey, old_keys: Sequence[ProtectionKey] = ()
) -> str:
    """``UPDATE`` sealing the dead letters' payloads stored before the table protected values
    (a payload is sealed whole, as the ingest seals one; see `sql.protect.sealed_payload_sql`);
    with ``old_keys``, sealing again with ``key`` those sealed with one of them (a payload
    sealed with a key not given stops the statement, naming the key)."""
    if not old_keys:
        sealed = sealed_payload_sql("unbase64(payload_b64)", key)
        prefix = literal(f"{ENCRYPTED_PREFIX}:")
    else:
        sealed = sealed_payload_sql(opened_payload_sql("payload_b64", [key, *old_keys]), key)
        prefix = literal(f"{ENCRYPTED_PREFIX}:{key.key_id}:")
    return (
        f"UPDATE {table} SET payload_b64 = {sealed} "
        f"WHERE payload_b64 IS NOT NULL AND NOT startswith(payload_b64, {prefix})"
    )
