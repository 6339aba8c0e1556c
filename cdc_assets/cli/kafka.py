"""`cdc-assets kafka-conf`: the Kafka client settings this deployment's security block renders,
for the clients the project does not start itself (a company's Kafka Connect workers and
Debezium connectors, a spark-submit job)."""

from __future__ import annotations

import argparse

from cdc_assets.settings import Settings

CLIENTS = ("librdkafka", "spark", "connect", "debezium")


def render_kafka_conf(settings: Settings, client: str, *, show_secrets: bool) -> list[str]:
    """``key=value`` lines for ``client``; secret values as ``***`` unless ``show_secrets``."""
    security = settings.kafka_security
    conf = {
        "librdkafka": security.librdkafka,
        "spark": security.spark_options,
        "connect": security.connect_worker,
        "debezium": security.debezium_history,
    }[client]()
    lines = [f"{key}={value}" for key, value in sorted(conf.items())]
    if client != "librdkafka" and (options := security.jvm_options()):
        # Not a client property: the JVM's command line (KAFKA_OPTS, extraJavaOptions).
        lines.append(f"# and on the JVM's command line: {' '.join(options)}")
    if show_secrets:
        return lines
    hidden = 0
    out = []
    for line in lines:
        shown = line
        for secret in security.secrets():
            shown = shown.replace(secret, "***")
        hidden += shown != line
        out.append(shown)
    if hidden:
        out.append(f"# {hidden} line(s) with secrets shown as ***: --show-secrets prints them")
    return out


def cmd_kafka_conf(settings: Settings, args: argparse.Namespace) -> int:
    if not settings.kafka_security.enabled:
        print("# CDC_ASSETS_KAFKA_SECURITY_PROTOCOL is unset or PLAINTEXT: no settings")
        return 0
    for line in render_kafka_conf(settings, args.client, show_secrets=args.show_secrets):
        print(line)
    return 0
