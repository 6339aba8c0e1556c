"""What the product's wheel holds: no Java sources (they compile from the repository's ``java/``
directory in a checkout), and the data files its code reads."""

import tomllib
from pathlib import Path

import pytest

from cdc_assets.jars import own

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_the_package_holds_no_java_sources() -> None:
    assert sorted((ROOT / "cdc_assets").rglob("*.java")) == []
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = data["tool"]["setuptools"]["package-data"]["cdc_assets"]
    assert [p for p in patterns if p.endswith(".java")] == []


def test_a_checkout_has_the_sources_of_every_own_jar() -> None:
    for jar in (own.UDF, own.CONNECT_EXT, own.REST):
        assert jar.source_dir.is_relative_to(ROOT / "java"), jar.kind
        assert jar.sources(), f"{jar.kind}: no Java sources under {jar.source_dir}"


def test_without_its_sources_a_jar_is_not_built_and_the_error_says_why(tmp_path: Path) -> None:
    from dataclasses import replace

    from cdc_assets.errors import JarSetupError
    from cdc_assets.settings import load_settings

    settings = load_settings({"CDC_ASSETS_HOME": str(tmp_path)})
    absent = replace(own.UDF, source_dir=tmp_path / "java" / "udf")
    with pytest.raises(JarSetupError, match="not with the wheel"):
        own.ensure_jar(absent, settings)


def test_the_stack_and_the_demo_are_a_distribution_of_their_own() -> None:
    # The product's package holds neither; `make setup` installs dev/ beside it, whose entry
    # points add the stack's commands to `cdc-assets` (the product never imports it).
    assert not (ROOT / "cdc_assets" / "stack").exists()
    assert not (ROOT / "cdc_assets" / "demo").exists()
    dev = tomllib.loads((ROOT / "dev" / "pyproject.toml").read_text(encoding="utf-8"))
    assert dev["project"]["entry-points"]["cdc_assets.cli"] == {
        "dev": "cdc_assets_dev.cli:register"
    }
    from cdc_assets.cli.parser import build_parser

    for command in (["stack", "status"], ["run"], ["dev"]):
        assert build_parser().parse_args(command).fn.__module__ == "cdc_assets_dev.cli"
