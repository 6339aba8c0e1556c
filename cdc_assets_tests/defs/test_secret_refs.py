"""Catalog secrets stay out of the resources' config, which the Dagster UI shows: the config
holds references, the engines get the values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdc_assets.definitions import build_defs
from cdc_assets.errors import ConfigError
from cdc_assets.resources import build_resources
from cdc_assets.resources.secret_refs import PREFIX, hide, reveal
from cdc_assets.settings import load_settings
from cdc_assets_tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.defs

SECRETS = {"jdbc.password": "pg-s3cr3t", "s3.secret-access-key": "aws-s3cr3t", "token": "t0k3n"}


def test_resource_config_refers_to_secrets_and_engines_get_them(tmp_path: Path) -> None:
    properties = {**SECRETS, "s3.endpoint": "http://127.0.0.1:9000", "jdbc.user": "lake"}
    secret_file = tmp_path / "catalog.json"
    secret_file.write_text(json.dumps(properties), encoding="utf-8")
    settings = load_settings(
        {
            "CDC_ASSETS_HOME": str(tmp_path / "home"),
            "CDC_ASSETS_SPECS": str(PROJECT_ROOT / "table_specs"),
            "CDC_ASSETS_CATALOG_URI": "jdbc:postgresql://127.0.0.1:5432/lake",
            "CDC_ASSETS_WAREHOUSE": "s3://warehouse/",
            "CDC_ASSETS_CATALOG_PROPERTIES_FILE": str(secret_file),
        }
    )
    resources = build_resources(settings)
    shown = json.dumps(
        [resources["iceberg"].model_dump(), resources["spark"].model_dump()], default=str
    )
    for value in SECRETS.values():
        assert value not in shown
    assert "lake" in shown  # what is not secret is shown as it is
    assert "http://127.0.0.1:9000" in shown
    config = resources["iceberg"].config()
    assert {k: config.properties[k] for k in SECRETS} == SECRETS
    spark_conf = resources["spark"].conf()
    assert spark_conf["spark.sql.catalog.lake.jdbc.password"] == "pg-s3cr3t"

    defs = build_defs(settings=settings)
    top = defs.get_repository_def().get_top_level_resources()
    assert not [v for v in SECRETS.values() if v in repr(top)]


def test_references_resolve_in_their_process_only() -> None:
    ref = hide("value")
    assert ref.startswith(PREFIX)
    assert reveal(ref) == "value"
    assert reveal("literal") == "literal"
    with pytest.raises(ConfigError, match="another process"):
        reveal(PREFIX + "0" * 24)
