"""Which connectors of the local stack write Avro (`stack up --sources --avro ...`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_assets.errors import StackError
from cdc_assets.settings import load_settings
from cdc_assets_dev.stack import connect
from cdc_assets_dev.stack.local_stack import _avro_connectors

pytestmark = pytest.mark.unit


def test_unknown_servers_are_refused_before_anything_starts(tmp_path: Path) -> None:
    settings = load_settings({"CDC_ASSETS_HOME": str(tmp_path)})
    with pytest.raises(StackError, match="--avro names oracle"):
        _avro_connectors(settings, False, ("postgres", "oracle"))
    assert _avro_connectors(settings, False, ()) == {}
    assert not (tmp_path / "stack").exists()


def test_avro_converters_write_the_confluent_wire_format() -> None:
    config = connect.avro_converters("http://127.0.0.1:1/apis/registry/v2")
    for side in ("key", "value"):
        assert config[f"{side}.converter"] == connect.AVRO_CONVERTER
        assert config[f"{side}.converter.apicurio.registry.as-confluent"] == "true"
        assert config[f"{side}.converter.apicurio.registry.headers.enabled"] == "false"
        assert config[f"{side}.converter.apicurio.registry.use-id"] == "contentId"
