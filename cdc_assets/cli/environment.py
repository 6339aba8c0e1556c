"""`cdc-assets jars`, `spark-conf` and `dagster-home`: the jar cache and the configuration a
deployment's own Spark or Dagster gets."""

from __future__ import annotations

import argparse

from cdc_assets.cli.common import console, ensure_dagster_home
from cdc_assets.settings import Settings


def cmd_jars(settings: Settings, _: argparse.Namespace) -> int:
    from cdc_assets.jars.class_archive import ensure_archive
    from cdc_assets.jars.maven import KINDS, cached_spark_jars, ensure_jars, jar_cache_size
    from cdc_assets.jars.own import ensure_connect_jar, ensure_udf_jar

    for kind in KINDS:
        jars = ensure_jars(kind, settings)
        console.print(f"{kind}: {len(jars)} jars in {settings.jars_dir / kind}")
    console.print(f"udf: {ensure_udf_jar(settings)}")
    console.print(f"connect-ext: {ensure_connect_jar(settings)}")
    spark = [str(p) for p in cached_spark_jars(settings)]
    archive = ensure_archive(settings, spark)
    if archive is not None:
        size = archive.stat().st_size / 2**20
        console.print(f"local driver class archive: {archive.name} ({size:.0f} MiB)")
    console.print(f"jar cache: {jar_cache_size(settings) / 2**20:.1f} MiB")
    return 0


def cmd_spark_conf(settings: Settings, args: argparse.Namespace) -> int:
    """The configuration SparkResource renders (the catalog, extensions, jars of the jar cache),
    for a Spark Connect server or driver started by other means (Kubernetes, spark-submit);
    secret values redacted unless ``--show-secrets``."""
    from cdc_assets.resources import build_resources
    from cdc_assets.resources.config import redacted_conf

    conf = build_resources(settings)["spark"].conf()
    hidden = 0
    if not getattr(args, "show_secrets", False):
        conf, hidden = redacted_conf(conf)
    for key, value in sorted(conf.items()):
        print(f"{key} {value}")
    if hidden:
        print(f"# {hidden} secret value(s) shown as ***: --show-secrets prints them")
    return 0


def cmd_dagster_home(settings: Settings, _: argparse.Namespace) -> int:
    print(ensure_dagster_home(settings))
    return 0
