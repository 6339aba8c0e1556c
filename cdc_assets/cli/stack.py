"""`cdc-assets jars`, `stack`, `dev` and `dagster-home`: the jar cache, the local stack and the
Dagster UI."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path
from typing import Any

from cdc_assets.cli.common import console, ensure_dagster_home
from cdc_assets.settings import ENV_SPECS, Settings


def cmd_jars(settings: Settings, _: argparse.Namespace) -> int:
    from cdc_assets.jars.maven import KINDS, cached_spark_jars, ensure_jars, jar_cache_size
    from cdc_assets.jars.own import ensure_connect_jar, ensure_udf_jar
    from cdc_assets.stack.class_archive import ensure_archive

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


def cmd_stack(settings: Settings, args: argparse.Namespace) -> int:
    from cdc_assets.stack import local_stack

    if args.action == "up":
        state = local_stack.stack_up(
            settings,
            sources=args.sources,
            spark_connect=args.spark_connect,
            cluster=args.cluster,
            registry=args.registry,
            avro=tuple(s.strip() for s in args.avro.split(",") if s.strip()),
            rest=args.rest_catalog,
        )
        console.print(f"stack up: kafka {state.bootstrap_servers} (pid {state.kafka_pid})")
        if args.registry or args.avro:
            console.print(f"schema registry {local_stack.running_registry(settings)}")
        console.print(local_stack.lake_description(settings))
        if args.spark_connect or args.cluster or settings.cluster:
            from cdc_assets.stack import spark_cluster, spark_connect

            cluster = spark_cluster.running(settings)
            if cluster is not None:
                workers = len(cluster.worker_uis)
                console.print(f"Spark master {cluster.master_url} with {workers} workers")

            port = spark_connect.running_port(settings)
            console.print(f"Spark Connect server {spark_connect.remote_url(port or 0)}")
        if args.sources:
            from cdc_assets.stack import source_stack

            for line in source_stack.status(settings).render():
                console.print(line, markup=False)
        return 0
    if args.action == "down":
        local_stack.stack_down(settings, purge=args.purge)
        console.print("stack down" + (" (state removed)" if args.purge else ""))
        return 0
    status = local_stack.stack_status(settings)
    console.print(status.render())
    return 0 if status.healthy else 1


# Seconds `dev` waits for dagster dev's own shutdown after SIGINT/SIGTERM before killing its
# process group: everything it started is gone within 30 s of the signal.
DEV_STOP_GRACE_S = 20.0


def _default_signals() -> None:
    """In dagster dev's process: SIGINT and SIGTERM as Python starts them. Started from a shell
    in the background, a process inherits SIGINT ignored, and Python then never turns SIGINT
    into its KeyboardInterrupt: dagster dev would not stop when asked."""
    import signal

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def cmd_dev(settings: Settings, args: argparse.Namespace) -> int:
    """`make dev`: the stack with a Spark Connect server, then `dagster dev` (webserver, daemon,
    code server) in a process group of its own. Ctrl-C or SIGTERM, in the foreground or the
    background, stops that group (dagster dev's own shutdown, then SIGKILL for whatever is left
    after ``DEV_STOP_GRACE_S``) and a Spark Connect server `dev` itself started, so nothing it
    started is left running (make sends SIGTERM to this process, not to its children); the
    broker and catalog keep running for the next start (`cdc-assets stack down` stops them)."""
    import signal
    import subprocess
    import time

    from cdc_assets.settings import ENV_WEBSERVER
    from cdc_assets.stack import spark_connect
    from cdc_assets.stack.local_stack import stack_up

    connect_was_running = spark_connect.running_port(settings) is not None
    stack_up(settings, spark_connect=True)
    env = {
        **os.environ,
        "DAGSTER_HOME": str(ensure_dagster_home(settings)),
        ENV_SPECS: str(settings.specs_dir),
        ENV_WEBSERVER: f"127.0.0.1:{args.port}",
    }
    command = [str(Path(sys.executable).parent / "dagster"), "dev", "-w", "workspace.yaml"]
    command += ["-h", "127.0.0.1", "-p", str(args.port)]
    child = subprocess.Popen(command, env=env, start_new_session=True, preexec_fn=_default_signals)
    stopping: list[float] = []

    def stop(signum: int, _frame: Any) -> None:
        stopping.append(time.monotonic())
        with contextlib.suppress(ProcessLookupError):
            # dagster dev's own clean shutdown; a second signal asks again
            os.killpg(child.pid, signal.SIGINT if len(stopping) == 1 else signal.SIGTERM)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            try:
                code = child.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if stopping and time.monotonic() - stopping[0] > DEV_STOP_GRACE_S:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(child.pid, signal.SIGKILL)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        try:
            child.wait(timeout=DEV_STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        # Whatever dagster dev left in its group (a code server, a run worker) goes too.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        if not connect_was_running:
            spark_connect.stop_server(settings)
    if stopping:
        console.print(
            "dagster dev stopped; the broker and catalog keep running (`cdc-assets stack down`)"
        )
        return 0
    return code


def cmd_dagster_home(settings: Settings, _: argparse.Namespace) -> int:
    print(ensure_dagster_home(settings))
    return 0
