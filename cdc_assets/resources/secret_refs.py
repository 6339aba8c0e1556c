"""Secrets kept out of the resources' config, which the Dagster UI shows.

`build_resources` puts a reference (``secret-ref:<digest>``) in a resource's config where a
catalog property holds a secret (a password, a secret key, a token, a credential: the names
`config.redacted_conf` hides), and keeps the value in this process. The resource turns the
references back into values when it renders a catalog for an engine. Every process that runs
the pipeline builds its resources from the settings itself (a run worker, a sensor, the CLI), so
its references resolve there; a literal value passes through unchanged.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping

from cdc_assets.errors import ConfigError
from cdc_assets.resources.config import is_secret_key

PREFIX = "secret-ref:"
_VALUES: dict[str, str] = {}
_LOCK = threading.Lock()


def hide(value: str) -> str:
    """A reference to ``value``, resolvable in this process."""
    ref = PREFIX + hashlib.sha256(value.encode()).hexdigest()[:24]
    with _LOCK:
        _VALUES[ref] = value
    return ref


def reveal(value: str) -> str:
    """The value behind a reference; any other text as it is."""
    if not value.startswith(PREFIX):
        return value
    with _LOCK:
        found = _VALUES.get(value)
    if found is None:
        raise ConfigError(
            f"a secret of the resources' config ({value}) was hidden by another process: build "
            "the resources from the settings in this one (cdc_assets.resources.build_resources)"
        )
    return found


def hide_secrets(properties: Mapping[str, str]) -> dict[str, str]:
    """``properties`` with the values of secret keys replaced by references."""
    return {k: hide(v) if is_secret_key(k) else v for k, v in properties.items()}


def reveal_secrets(properties: Mapping[str, str]) -> dict[str, str]:
    return {k: reveal(v) for k, v in properties.items()}
