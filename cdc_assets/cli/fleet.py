"""`cdc-assets fleet`: every table's health worst first, and its Prometheus exposition."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.table import Table

from cdc_assets.cli.common import console, dagster_instance
from cdc_assets.settings import Settings


def cmd_fleet(settings: Settings, args: argparse.Namespace) -> int:
    """Every table's lag, watermark delay, dead letters by reason, evolutions and run times,
    worst first; with --prometheus, the same as Prometheus exposition text (a file for
    node_exporter's textfile collector, or - for stdout); with --serve, on an HTTP endpoint."""
    from cdc_assets.pipeline.health.fleet import fleet_metrics
    from cdc_assets.quality.fleet import prometheus_text, worst_first
    from cdc_assets.resources import build_resources
    from cdc_assets.spec import load_specs

    specs = load_specs(settings.specs_dir)
    resources = build_resources(settings)
    catalog = resources["iceberg"].load_catalog()

    def measure() -> list[Any]:
        return fleet_metrics(resources["kafka"], catalog, specs, dagster_instance(settings))

    if args.serve is not None:
        return _serve_fleet(args.serve, measure, settings.metrics_token)
    metrics = worst_first(measure())
    if args.prometheus:
        text = prometheus_text(metrics)
        if args.prometheus == "-":
            sys.stdout.write(text)
            return 0
        Path(args.prometheus).write_text(text, encoding="utf-8")
    table = Table(
        "table",
        "server",
        "lag records",
        "lag s",
        "base delay s",
        "dead letters",
        "evolutions",
        "last evolution s",
        "note",
    )
    for m in metrics[: args.limit]:
        table.add_row(
            m.table,
            m.server,
            _number(m.lag_records),
            _number(m.lag_seconds),
            _number(m.watermark_delay_seconds),
            str(m.dead_letter_total),
            str(m.evolutions),
            _number(m.last_evolution_seconds),
            (m.error or "")[:80],
        )
    console.print(table)
    return 0


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def metrics_server(port: int, render: Callable[[], str], token: str | None = None) -> Any:
    """An HTTP server on 127.0.0.1:<port> (0: a free one) answering GET /metrics with
    ``render()``; with ``token``, only to requests that carry ``Authorization: Bearer
    <token>`` (401 otherwise). Not started: call ``serve_forever``."""
    import hmac
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    expected = f"Bearer {token}".encode() if token else None

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.rstrip("/") not in ("", "/metrics"):
                self.send_error(404)
                return
            given = self.headers.get("Authorization", "").encode()
            if expected is not None and not hmac.compare_digest(given, expected):
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Bearer realm="cdc-assets metrics"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = render().encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    return ThreadingHTTPServer(("127.0.0.1", port), Handler)


def _serve_fleet(port: int, measure: Any, token: str | None) -> int:
    """Serve the fleet metrics on 127.0.0.1:<port>/metrics, measured at every scrape."""
    from cdc_assets.quality.fleet import prometheus_text

    server = metrics_server(port, lambda: prometheus_text(measure()), token)
    guarded = " (bearer token required)" if token else ""
    console.print(
        f"fleet metrics on http://127.0.0.1:{server.server_port}/metrics{guarded} (Ctrl-C stops)"
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
