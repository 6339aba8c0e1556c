"""Which tables a run needs the definitions of: ``CDC_ASSETS_RUN_TABLES``, set on a run's pod on
Kubernetes by the ``dagster-k8s/config`` tag the sensors put on their runs (with
``CDC_ASSETS_K8S_RUN_TABLES=1``). The definitions module then builds only those tables'
definitions. Dagster's default run launcher gives a run worker no per-run environment: there every
worker builds the whole code location. Plain Python: no Dagster import.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from cdc_assets.assets.keys import table_of

K8S_CONFIG_TAG = "dagster-k8s/config"  # dagster-k8s's per-run pod configuration

RUN_TABLES_ENV = "CDC_ASSETS_RUN_TABLES"
# Linux refuses a single environment string over 128 KiB; a run of more tables than fit loads
# every definition instead (it is then a run of most of a large fleet anyway).
MAX_ENV_CHARS = 100_000


def run_tables(
    asset_keys: Iterable[Any] | None, check_keys: Iterable[Any] | None
) -> list[str] | None:
    """The tables a run's selection touches, or None when the run needs every definition: no
    selection (the whole job), a key that is not a table layer's (a view), or more tables than
    one environment variable holds."""
    if asset_keys is None:
        return None
    keys = [*asset_keys, *(c.asset_key for c in check_keys or ())]
    tables = {table_of(k) for k in keys}
    if not keys or None in tables:
        return None
    named = sorted(t for t in tables if t is not None)
    return named if sum(len(t) + 1 for t in named) <= MAX_ENV_CHARS else None


def tables_from_env(environ: Mapping[str, str] = os.environ) -> frozenset[str] | None:
    """The tables a run worker builds (``CDC_ASSETS_RUN_TABLES``), or None: every table."""
    value = environ.get(RUN_TABLES_ENV)
    if value is None:
        return None
    return frozenset(t for t in value.split(",") if t)


def k8s_config_tag(
    asset_keys: Iterable[Any] | None, check_keys: Iterable[Any] | None = None
) -> dict[str, str]:
    """The ``dagster-k8s/config`` run tag that gives the pod of a run selecting ``asset_keys``
    and ``check_keys`` ``CDC_ASSETS_RUN_TABLES`` naming its tables (dagster-k8s merges it into
    the pod's container); none where the run needs every definition (``run_tables``)."""
    tables = run_tables(asset_keys, check_keys)
    if tables is None:
        return {}
    config = {"container_config": {"env": [{"name": RUN_TABLES_ENV, "value": ",".join(tables)}]}}
    return {K8S_CONFIG_TAG: json.dumps(config, separators=(",", ":"))}
