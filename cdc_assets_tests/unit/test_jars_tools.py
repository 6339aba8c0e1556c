"""A missing java or mvn stops the jar setup with a message saying what to install."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_assets.errors import ToolMissingError
from cdc_assets.jars import maven as jars
from cdc_assets.settings import load_settings


@pytest.mark.parametrize(
    ("missing", "message"),
    [
        ("java", "java not found on PATH: install a Java 17 JDK"),
        ("mvn", "mvn not found on PATH: install Apache Maven (Debian: apt-get install maven)"),
    ],
)
def test_missing_tool_is_named_with_install_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, missing: str, message: str
) -> None:
    real_which = jars.shutil.which
    monkeypatch.setattr(
        jars.shutil, "which", lambda name: None if name == missing else real_which(name)
    )
    settings = load_settings({"CDC_ASSETS_HOME": str(tmp_path)})
    with pytest.raises(ToolMissingError) as err:
        jars.ensure_jars("spark", settings, quiet=True)
    assert str(err.value).startswith(message)
    assert not list((tmp_path / "jars").glob("spark/*.jar"))


def test_unknown_jar_kind() -> None:
    with pytest.raises(ValueError, match="unknown jar kind 'flink'"):
        jars.pom_path("flink")


def test_missing_javac_stops_the_udf_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cdc_assets.jars import own as own_jars

    real_which = jars.shutil.which
    monkeypatch.setattr(
        jars.shutil, "which", lambda name: None if name == "javac" else real_which(name)
    )
    settings = load_settings({"CDC_ASSETS_HOME": str(tmp_path)})
    with pytest.raises(ToolMissingError, match="javac not found on PATH: install a Java 17 JDK"):
        own_jars.ensure_udf_jar(settings, quiet=True)
    assert not (tmp_path / "jars" / "udf").exists()


def test_sessions_start_without_the_udf_jar_when_it_cannot_be_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The project's functions are a speed-up: no javac means a warning and Spark's own
    functions (pipeline.ingest.envelope_reader), not a session that cannot start."""
    from cdc_assets.jars import own as own_jars

    maven = [tmp_path / "iceberg.jar"]
    monkeypatch.setattr(own_jars, "ensure_jars", lambda kind, settings: maven)
    real_which = jars.shutil.which
    monkeypatch.setattr(
        jars.shutil, "which", lambda name: None if name == "javac" else real_which(name)
    )
    settings = load_settings({"CDC_ASSETS_HOME": str(tmp_path)})
    with caplog.at_level("WARNING"):
        assert own_jars.spark_jars(settings) == maven
    assert "javac not found on PATH" in caplog.text
    assert "decoded with Spark's own from_json" in caplog.text
