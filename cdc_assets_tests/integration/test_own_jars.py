"""The project's Spark functions are compiled into the jar cache once, with javac against the
installed pyspark, and again only when their sources change."""

from __future__ import annotations

import dataclasses
import zipfile
from pathlib import Path

import pytest

from cdc_assets.errors import JarSetupError
from cdc_assets.jars import own as own_jars
from cdc_assets.settings import load_settings


def test_compiled_once_then_cached_then_rebuilt_on_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = load_settings({"CDC_ASSETS_HOME": str(tmp_path)})
    jar = own_jars.ensure_udf_jar(settings, quiet=True)
    assert jar == tmp_path / "jars" / "udf" / own_jars.UDF.jar_name
    with zipfile.ZipFile(jar) as zf:
        assert "io/cdcassets/spark/EnvelopeReader.class" in zf.namelist()
    built = jar.stat().st_mtime_ns

    def no_javac(name: str) -> None:
        raise AssertionError(f"{name} should not run when the cache is current")

    with monkeypatch.context() as m:
        m.setattr(own_jars, "require_tool", no_javac)
        assert own_jars.ensure_udf_jar(settings, quiet=True) == jar
    assert jar.stat().st_mtime_ns == built

    # Other sources or another pyspark give another digest: a new build.
    stamp = (jar.parent / ".stamp").read_text().strip()
    monkeypatch.setattr(own_jars, "digest", lambda jar, sources, against: "changed")
    assert own_jars.ensure_udf_jar(settings, quiet=True) == jar
    assert (jar.parent / ".stamp").read_text().strip() == "changed" != stamp
    with zipfile.ZipFile(jar) as zf:
        assert "io/cdcassets/spark/Utf8.class" in zf.namelist()


def test_a_compile_error_is_reported_with_javac_output_and_keeps_the_old_jar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = load_settings({"CDC_ASSETS_HOME": str(tmp_path / "home")})
    jar = own_jars.ensure_udf_jar(settings, quiet=True)
    broken = tmp_path / "src" / "io" / "cdcassets" / "spark"
    broken.mkdir(parents=True)
    (broken / "Broken.java").write_text("package io.cdcassets.spark;\nclass Broken { int x = ; }\n")
    broken_udf = dataclasses.replace(own_jars.UDF, source_dir=tmp_path / "src")
    with pytest.raises(JarSetupError, match=r"javac failed \(exit 1\)") as err:
        own_jars.ensure_jar(broken_udf, settings, quiet=True)
    assert "Broken.java:2" in str(err.value)
    with zipfile.ZipFile(jar) as zf:  # the cache still holds the working jar
        assert "io/cdcassets/spark/EnvelopeReader.class" in zf.namelist()
    assert not [p for p in settings.jars_dir.iterdir() if p.name.startswith(".udf-")]
