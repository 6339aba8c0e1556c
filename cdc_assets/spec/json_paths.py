"""Paths to fields inside a JSON document (a column's ``protect_paths``), and their rules (pure).

A path is object member names joined by dots; ``[]`` after a name stands for every element of
the array that member holds: ``contact.email``, ``phones[]`` (each element), ``items[].secret``
(a member of each element), ``grid[][]`` (each element of each inner array). A spec's paths
together form one tree (`path_tree`), which the SQL rendering and its Python twin walk.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cdc_assets.schema.types import SinkType

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_SEGMENT = rf"{_NAME}(?:\[\]){{0,3}}"
PATH_PATTERN = rf"^{_SEGMENT}(?:\.{_SEGMENT}){{0,7}}$"
_SEGMENT_RE = re.compile(rf"^({_NAME})((?:\[\])*)$")


@dataclass
class Each:
    """Every element of an array: ``node`` applies to each one."""

    node: Any = None


def segments(path: str) -> list[tuple[str, int]]:
    """``path`` as (member name, how many ``[]`` follow it) pairs."""
    out = []
    for part in path.split("."):
        match = _SEGMENT_RE.match(part)
        if match is None:
            raise ValueError(f"{path!r} is not a path: member names joined by dots, [] for arrays")
        out.append((match.group(1), len(match.group(2)) // 2))
    return out


def _steps(path: str) -> list[str | None]:
    """A name per member, then None per array level."""
    out: list[str | None] = []
    for name, arrays in segments(path):
        out += [name, *([None] * arrays)]
    return out


def path_tree(paths: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """The paths as one tree: member name -> a subtree (dict), `Each` (the member is an array),
    or the path's leaf value. Raises ValueError naming the paths when one lies inside another
    or when a member is an object in one path and an array in another."""
    tree: dict[str, Any] = {}
    for path, leaf in paths:
        steps = _steps(path)
        parent: Any = tree
        where = ""
        for i, step in enumerate(steps):
            where = where + "[]" if step is None else f"{where}.{step}".lstrip(".")
            node = parent.node if step is None else parent.get(step)
            if i == len(steps) - 1:
                if node is not None:
                    raise ValueError(f"{path!r} overlaps another path at {where!r}")
                node = leaf
            elif node is None:
                node = Each() if steps[i + 1] is None else {}
            elif not isinstance(node, dict | Each):
                raise ValueError(f"{path!r} lies inside another path, {where!r}: give one of them")
            elif (steps[i + 1] is None) != isinstance(node, Each):
                shape = "an array" if isinstance(node, Each) else "an object"
                raise ValueError(f"{path!r}: {where!r} is {shape} in another path")
            if step is None:
                parent.node = node
            else:
                parent[step] = node
            parent = node
    return tree


def typed_reason(sink: SinkType, path: str) -> str | None:
    """Why a protected value at ``path`` cannot be stored in a document read as ``sink`` (a
    nested type), or None. The protected value is a string, so where ``sink`` declares the path
    it must declare a string there; a path ``sink`` does not declare is kept in the row image
    only, and a path into a member declared as a string is protected inside that text."""
    at: SinkType | None = sink
    where = ""
    for step in _steps(path):
        if at is None or at.name == "string":
            return None
        if step is None:
            if at.element is None:
                return f"{where!r} is declared {at} in sink.type, not a list"
            at, where = at.element, where + "[]"
            continue
        if at.value is not None:
            at = at.value
        elif at.fields:
            at = dict(at.fields).get(step)
        else:
            return f"{where!r} is declared {at} in sink.type, not an object"
        where = f"{where}.{step}".lstrip(".")
    if at is None or at.name == "string":
        return None
    return f"{path!r} is declared {at} in sink.type: a protected value is a string, declare it so"
