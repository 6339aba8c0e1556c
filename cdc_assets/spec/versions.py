"""Write a table spec version as YAML in the repository's style, for a reviewable change.

Fields at their defaults are left out; each column is one flow mapping (``- {id: 1, name: ...}``),
in block style only when that line would be too long. The text loads back through
``cdc_assets.spec.load`` to an equal spec.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from cdc_assets.spec.models import TableSpec

_WIDTH = 100


def render_spec_yaml(spec: TableSpec, header: str | None = None) -> str:
    """The spec as YAML text; ``header`` becomes leading ``#`` comment lines."""
    data = spec.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    lines = [f"# {line}".rstrip() for line in (header or "").splitlines()]
    for key, value in data.items():
        if key == "columns":
            lines.append("columns:")
            lines += [line for column in value for line in _column(column)]
        else:
            lines.append(_dump({key: value}).rstrip("\n"))
    return "\n".join(lines) + "\n"


def write_spec(spec: TableSpec, path: Path, header: str | None = None) -> Path:
    """Write the spec to ``path`` (its directory must exist) and return the path."""
    path.write_text(render_spec_yaml(spec, header), encoding="utf-8")
    return path


def _column(column: dict[str, Any]) -> list[str]:
    flow = "  - " + _flow(column)
    if len(flow) <= _WIDTH:
        return [flow]
    first, *rest = _dump(column).rstrip("\n").splitlines()
    return ["  - " + first, *("    " + line for line in rest)]


def _flow(value: Any) -> str:
    return yaml.safe_dump(
        value, default_flow_style=True, sort_keys=False, width=10**6, allow_unicode=True
    ).strip()


class _Dumper(yaml.SafeDumper):
    """Block mappings; lists of scalars in flow style, e.g. ``primary_key: [order_id, line_no]``."""


def _represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    flow = not any(isinstance(v, dict | list) for v in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(list, _represent_list)


def _dump(value: Any) -> str:
    return yaml.dump(
        value,
        Dumper=_Dumper,
        default_flow_style=False,
        sort_keys=False,
        width=_WIDTH,
        allow_unicode=True,
    )


def newest(file_spec: TableSpec, stored: TableSpec | None) -> TableSpec:
    """The spec to run with: the stored version when an evolution made one newer than the file
    (the file is the reviewed starting point and wins a tie: a person may have edited it)."""
    if stored is not None and stored.spec_version > file_spec.spec_version:
        return stored
    return file_spec
