"""The protection key of the process, for the tables whose spec protects values.

Read from the environment each time (``CDC_ASSETS_PROTECTION_KEY`` or its ``_FILE``), like the
other secrets: a run's process holds it, the lakehouse never does.
"""

from __future__ import annotations

import os

from cdc_assets.errors import ConfigError
from cdc_assets.settings import (
    ENV_PROTECTION_KEY,
    ENV_PROTECTION_KEY_ID,
    ENV_PROTECTION_OLD_KEY_PREFIX,
    with_secret_files,
)
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.protect import ProtectionKey


class ProtectionKeyError(ConfigError):
    """A table protects values and no usable protection key is configured."""


def configured_key(env: dict[str, str] | None = None) -> ProtectionKey | None:
    """The configured protection key, None when unset."""
    env = with_secret_files(dict(os.environ) if env is None else env)
    secret = env.get(ENV_PROTECTION_KEY)
    if not secret:
        return None
    try:
        return ProtectionKey(env.get(ENV_PROTECTION_KEY_ID) or "1", secret.encode())
    except ValueError as err:
        raise ProtectionKeyError(f"{ENV_PROTECTION_KEY}: {err}") from None


def configured_keys(env: dict[str, str] | None = None) -> list[ProtectionKey]:
    """Every key values may have been protected with: the current one first, then the retired
    ones still held (``CDC_ASSETS_PROTECTION_OLD_KEY_<ID>``, the id as the variable spells it,
    matched without regard to case), for reading what they sealed or encrypted."""
    env = with_secret_files(dict(os.environ) if env is None else env)
    current = configured_key(env)
    keys = [] if current is None else [current]
    for name, secret in sorted(env.items()):
        if not name.startswith(ENV_PROTECTION_OLD_KEY_PREFIX) or not secret:
            continue
        key_id = name[len(ENV_PROTECTION_OLD_KEY_PREFIX) :]
        if current is not None and key_id.lower() == current.key_id.lower():
            continue
        try:
            keys.append(ProtectionKey(key_id.lower(), secret.encode()))
        except ValueError as err:
            raise ProtectionKeyError(f"{name}: {err}") from None
    return keys


def key_for(spec: TableSpec, env: dict[str, str] | None = None) -> ProtectionKey | None:
    """The key ``spec``'s ingest protects with: None when it protects nothing; an error naming
    the setting when it does and none is configured (before any record is read)."""
    if not spec.protects:
        return None
    key = configured_key(env)
    if key is None:
        raise ProtectionKeyError(
            f"table {spec.name} protects sensitive values (columns with protect, or "
            f"pipeline.drop_fields) and {ENV_PROTECTION_KEY} is not set: set it (or "
            f"{ENV_PROTECTION_KEY}_FILE) to a secret of at least 16 bytes held outside the "
            "lakehouse"
        )
    return key
