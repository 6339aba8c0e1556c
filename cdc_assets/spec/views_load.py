"""Load the SQL view definitions of a directory: ``<namespace>/<view>.sql``, one SELECT each
(pure file reading; the schemas are derived by `cdc_assets.schema.views`)."""

from __future__ import annotations

import re
from pathlib import Path

from cdc_assets.schema.views import ViewDefinition, ViewError, view_reads

_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,127}$")


def load_views(directory: Path) -> list[ViewDefinition]:
    """Every view of ``directory`` (none when it does not exist), sorted by name; each parsed
    and naming its namespace for every table it reads."""
    if not directory.is_dir():
        return []
    views = []
    for path in sorted(directory.glob("*/*.sql")):
        namespace, name = path.parent.name, path.stem
        for part, what in ((namespace, "namespace directory"), (name, "view file name")):
            if not _NAME_RE.match(part):
                raise ViewError(
                    f"{path}: {what} {part!r} must be a lowercase identifier (letters, digits, _)"
                )
        sql = path.read_text(encoding="utf-8").strip().rstrip(";").strip()
        if not sql:
            raise ViewError(f"{path}: the file is empty; a view is one SELECT query")
        view = ViewDefinition(f"{namespace}.{name}", sql, str(path))
        view_reads(view)  # parses, and every table names its namespace
        views.append(view)
    stray = sorted(p.name for p in directory.glob("*.sql"))
    if stray:
        raise ViewError(f"{directory}: {stray} must sit in a namespace directory: <ns>/<view>.sql")
    return views
