"""The `cdc-assets` command, one module per command group (`parser` wires them)."""

from cdc_assets.cli.common import DAGSTER_YAML, console, dagster_instance, ensure_dagster_home
from cdc_assets.cli.parser import build_parser, main
from cdc_assets.cli.specs import redact_url, source_jdbc_url, write_spec_checked

__all__ = [
    "DAGSTER_YAML",
    "build_parser",
    "console",
    "dagster_instance",
    "ensure_dagster_home",
    "main",
    "redact_url",
    "source_jdbc_url",
    "write_spec_checked",
]
