"""Load table specs from YAML, strictly: every problem becomes one SpecError naming the file,
the field and what would be valid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from cdc_assets.errors import SpecError
from cdc_assets.spec.models import TableSpec


# libyaml's parser (in PyYAML's wheels) is several times faster on thousands of specs.
class _StrictLoader(yaml.CSafeLoader):
    """Safe loader that rejects duplicate keys instead of silently keeping the last one."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return dict(loader.construct_mapping(node))


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _format_loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The pydantic model a location points into, to list valid keys for an unknown one."""
    model: type[BaseModel] = TableSpec
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) or next(
            (f for f in model.model_fields.values() if f.alias == part), None
        )
        if field is None:
            return None
        annotation = field.annotation
        inner = getattr(annotation, "__args__", (annotation,))
        nested = [a for a in inner if isinstance(a, type) and issubclass(a, BaseModel)]
        if not nested:
            return None
        model = nested[0]
    return model


def _describe(error: Any) -> str:
    loc = tuple(error["loc"])
    kind = error["type"]
    msg = str(error["msg"])
    if kind == "value_error":
        # Cross-field rules already say "field: message".
        text = msg.removeprefix("Value error, ")
        where = _format_loc(loc)
        return text if loc == () or text.startswith(f"{where}.") else f"{where}: {text}"
    field = _format_loc(loc) or "(top level)"
    if kind == "extra_forbidden":
        parent = _model_at(loc[:-1])
        valid = sorted(f.alias or n for n, f in parent.model_fields.items()) if parent else []
        return f"{field}: unknown field; valid fields here: {', '.join(valid)}"
    if kind == "missing":
        return f"{field}: required field is missing"
    return f"{field}: {msg} (got {error.get('input')!r})"


def load_spec_text(text: str, source: str) -> TableSpec:
    """Parse one spec from YAML text; ``source`` names it in error messages."""
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
    except yaml.YAMLError as err:
        raise SpecError(f"{source}: not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{source}: a table spec must be a YAML mapping, got {type(data).__name__}")
    try:
        return TableSpec.model_validate(data)
    except ValidationError as err:
        lines = [_describe(e) for e in err.errors()]
        raise SpecError(f"{source}: " + "; ".join(lines)) from None


def load_spec(path: Path) -> TableSpec:
    """Load one spec file; its ``name`` must equal the file name without ``.yaml``."""
    spec = load_spec_text(path.read_text(encoding="utf-8"), str(path))
    if spec.name != path.stem:
        raise SpecError(f"{path}: name: {spec.name!r} must match the file name {path.name!r}")
    return spec


def load_specs(directory: Path) -> list[TableSpec]:
    """Load every ``*.yaml`` spec in a directory, sorted by name, rejecting clashes between them."""
    if not directory.is_dir():
        raise SpecError(f"{directory}: table spec directory does not exist")
    specs = [load_spec(p) for p in sorted(directory.glob("*.yaml"))]
    _check_unique(specs, directory)
    return specs


def _check_unique(specs: list[TableSpec], directory: Path) -> None:
    topics: dict[str, str] = {}
    sinks: dict[tuple[str, str], str] = {}
    sources: dict[tuple[str, str, str, str], str] = {}
    servers: dict[str, tuple[str, str]] = {}  # explicit server -> (schema-change topic, spec)
    for table in specs:
        sink = (table.sink.namespace, table.sink.table or table.name)
        other = sinks.setdefault(sink, table.name)
        if other != table.name:
            raise SpecError(
                f"{directory}: sink {'.'.join(sink)} is written by both {other!r} and "
                f"{table.name!r}"
            )
        for spec in table.shard_specs():
            _check_source(spec, directory, topics, sources, servers)


def _check_source(
    spec: TableSpec,
    directory: Path,
    topics: dict[str, str],
    sources: dict[tuple[str, str, str, str], str],
    servers: dict[str, tuple[str, str]],
) -> None:
    """One source (a spec, or one shard of it) against those seen before it."""
    other = topics.setdefault(spec.source.topic, spec.name)
    if other != spec.name:
        raise SpecError(
            f"{directory}: source.topic {spec.source.topic!r} is used by both "
            f"{other!r} and {spec.name!r}; each topic feeds one table"
        )
    identity = spec.source.identity
    other = sources.setdefault(identity.key, spec.name)
    if other != spec.name:
        raise SpecError(
            f"{directory}: source {identity} is the source of both {other!r} and "
            f"{spec.name!r}; tables of the same name on different servers need "
            "source.server (the connector's topic.prefix) set apart"
        )
    server, changes = spec.source.server, spec.source.schema_changes
    if server is not None and changes is not None:
        seen_topic, seen_spec = servers.setdefault(server, (changes, spec.name))
        if seen_topic != changes:
            raise SpecError(
                f"{directory}: source.server {server!r} has schema-change topic "
                f"{seen_topic!r} in {seen_spec!r} but {changes!r} in {spec.name!r}; one "
                "server (one connector) writes one schema-change topic"
            )
