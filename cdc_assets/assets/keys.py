"""Asset keys of a table's layers: ``<layer>/<name>``, where the name says the layer too.

Dagster's asset graph labels a node with the last component of its key only, so a key like
``cdc/users`` reads as ``users`` beside ``raw/users`` and ``base/users``. The name carries the
layer instead: ``raw/users_topic``, ``cdc/users_cdc`` (the ledger's Iceberg name),
``bucketed/users_bucketed``, ``base/users`` (the mirror keeps the table's name),
``history/users_history`` (tables whose spec keeps history) and ``schema/users_schema``.
The layer prefix stays, so prefix selections (``key:"cdc/*"``) keep working. Every key is made
and read here: nothing else splits a key into layer and table.
"""

import dagster as dg

TABLE_LAYERS = ("raw", "cdc", "bucketed", "base", "history", "schema")
SUFFIX = {
    "raw": "_topic",
    "cdc": "_cdc",
    "bucketed": "_bucketed",
    "base": "",
    "history": "_history",
    "schema": "_schema",
}


def asset_key(layer: str, table: str) -> dg.AssetKey:
    """The key of ``table``'s asset in ``layer`` (one of TABLE_LAYERS)."""
    return dg.AssetKey([layer, table + SUFFIX[layer]])


def legacy_key(layer: str, table: str) -> dg.AssetKey:
    """The key the same asset had before names carried their layer (``cdc/users``)."""
    return dg.AssetKey([layer, table])


def layer_and_table(key: dg.AssetKey) -> tuple[str, str] | None:
    """``("cdc", "users")`` for ``cdc/users_cdc``; None for a key that is not a table layer's."""
    if len(key.path) != 2 or key.path[0] not in SUFFIX:
        return None
    layer, name = key.path
    suffix = SUFFIX[layer]
    if suffix and not (name.endswith(suffix) and len(name) > len(suffix)):
        return None
    return layer, name[: len(name) - len(suffix)] if suffix else name


def table_of(key: dg.AssetKey, layers: tuple[str, ...] = TABLE_LAYERS) -> str | None:
    """The table of a table layer's key whose layer is one of ``layers``."""
    parsed = layer_and_table(key)
    return parsed[1] if parsed is not None and parsed[0] in layers else None


def table_or_name(key: dg.AssetKey) -> str:
    """The table of a table layer's key, else the key's last component (a view's name)."""
    return table_of(key) or key.path[-1]


def node_name(layer: str, table: str) -> str:
    """The op name of a table's own op (``schema__users_schema``: only the schema asset has one;
    the other layers are specs of the ``tables`` and ``topics`` ops): run config addresses the
    asset by it."""
    return asset_key(layer, table).to_python_identifier()
