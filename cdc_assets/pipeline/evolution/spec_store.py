"""Spec versions made by schema evolution, kept in the catalog (``cdc_meta.spec_versions``), so
that every process of a deployment runs with them.

An evolution runs on whichever machine ran its run; the code location, the daemon's sensors and
other runs read their own spec directory, which may be another machine's checkout. So the spec
directory is the reviewed starting point, and a version an evolution makes exists once it is in
this table (one Iceberg commit, the same catalog every engine shares); the spec file the run
also writes is for review and version control. Every reader takes the newer of its file and the
store (``spec.versions.newest``): the definitions when the code location loads, the evolution
itself, the drift check, the schema-change sensor, and the ingest's catch-up.
"""

from __future__ import annotations

import logging
import socket
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cdc_assets.errors import SpecError
from cdc_assets.pipeline.shared.meta_tables import append_row, create_meta_table
from cdc_assets.schema.history import spec_versions_layout
from cdc_assets.schema.layers import base_layout
from cdc_assets.spec.load import load_spec, load_spec_text
from cdc_assets.spec.models import TableSpec
from cdc_assets.spec.versions import newest, render_spec_yaml

log = logging.getLogger(__name__)


def _table(iceberg_catalog: Any, *, create: bool) -> Any | None:
    from pyiceberg.exceptions import NoSuchTableError

    layout = spec_versions_layout()
    identifier = f"{layout.namespace}.{layout.name}"
    if create:
        return create_meta_table(iceberg_catalog, layout)
    try:
        return iceberg_catalog.load_table(identifier)
    except NoSuchTableError:
        return None


def record_spec(iceberg_catalog: Any, spec: TableSpec, specs_dir: Path) -> None:
    """Make ``spec`` the stored version of its table (appended; the newest version wins)."""
    append_row(iceberg_catalog, spec_versions_layout(), version_row(spec, specs_dir))


def version_row(spec: TableSpec, specs_dir: Path) -> dict[str, Any]:
    """The row of ``cdc_meta.spec_versions`` that stores ``spec``."""
    return {
        "table": spec.name,
        "base_table": base_table(spec),
        "spec_version": spec.spec_version,
        "spec_yaml": render_spec_yaml(spec),
        "recorded_at": datetime.now(UTC),
        "recorded_by": f"{socket.gethostname()}:{specs_dir}",
    }


def base_table(spec: TableSpec) -> str:
    """What a stored version belongs to besides its name: its base table in the catalog."""
    base = base_layout(spec)
    return f"{base.namespace}.{base.name}"


Stored = dict[tuple[str, str], TableSpec]


# The last full read, by the metadata file it read (a new commit writes a new one): the spec
# sensors read every version each tick, 1.7 s at 1,000 versions, where the table mostly has
# not changed since the last tick (benchmarks/spec_store_reads.py).
_LAST_READ: dict[str, Stored] = {}
_LAST_READ_LOCK = threading.Lock()


def stored_specs(
    iceberg_catalog: Any, names: set[str] | None = None, *, cache: bool = True
) -> Stored:
    """The newest stored version of each (spec name, base table), of ``names`` when given.
    With ``cache``, a table unchanged since the last full read in this process is not read
    again."""
    table = _table(iceberg_catalog, create=False)
    if table is None or names == set():
        return {}
    location = table.metadata_location
    with _LAST_READ_LOCK:
        last = _LAST_READ.get(location) if cache else None
    if last is not None:
        return dict(last) if names is None else {k: v for k, v in last.items() if k[0] in names}
    found = _read_versions(table, names)
    if names is None and cache:
        with _LAST_READ_LOCK:
            _LAST_READ.clear()
            _LAST_READ[location] = found
        return dict(found)
    return found


def _read_versions(table: Any, names: set[str] | None) -> Stored:
    from pyiceberg.expressions import In

    fields = ("table", "base_table", "spec_version", "spec_yaml")
    scan = (
        table.scan(selected_fields=fields)
        if names is None
        else table.scan(row_filter=In(term="table", literals=names), selected_fields=fields)
    )
    best: dict[tuple[str, str], tuple[int, str]] = {}
    for row in scan.to_arrow().to_pylist():
        key = (row["table"], row["base_table"])
        if key not in best or row["spec_version"] > best[key][0]:
            best[key] = (row["spec_version"], row["spec_yaml"])
    return {
        key: load_spec_text(text, f"{key[0]} v{version} in {spec_versions_layout().name}")
        for key, (version, text) in best.items()
    }


def current_of(spec: TableSpec, stored: Stored) -> TableSpec:
    """The spec to run with, of a spec as its file reads and the stored versions."""
    return newest(spec, stored.get((spec.name, base_table(spec))))


def current_spec(iceberg_catalog: Any, specs_dir: Path, table: str) -> TableSpec:
    """The spec ``table`` runs with now: the newer of its file and its stored version."""
    path = specs_dir / f"{table}.yaml"
    if not path.exists():
        raise SpecError(f"{path}: no spec for table {table!r}")
    return current_of(load_spec(path), stored_specs(iceberg_catalog, {table}))


def with_stored_versions(specs: list[TableSpec], iceberg_catalog: Any) -> list[TableSpec]:
    """``specs`` with each one replaced by its stored version where that is newer."""
    stored = stored_specs(iceberg_catalog, {s.name for s in specs})
    return [current_of(s, stored) for s in specs]


def load_with_stored_versions(specs: list[TableSpec], load_catalog: Any) -> list[TableSpec]:
    """For loading definitions: ``with_stored_versions`` when the catalog answers (``load_catalog``
    returns None when there is none yet: nothing was stored), else the
    files as they are, with a warning (a code location must load without its catalog, say in
    the UI before the stack runs)."""
    try:
        catalog = load_catalog()
        return specs if catalog is None else with_stored_versions(specs, catalog)
    except Exception as exc:
        log.warning(
            "stored spec versions not read (%s: %s); the spec files are used as they are",
            type(exc).__name__,
            exc,
        )
        return specs
