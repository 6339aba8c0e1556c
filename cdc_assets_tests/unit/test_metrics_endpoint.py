"""`fleet --serve`'s endpoint on loopback: the metrics, and with a token only for its bearer."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from cdc_assets.cli.fleet import metrics_server


@contextmanager
def serving(token: str | None) -> Iterator[str]:
    server = metrics_server(0, lambda: "cdc_table_lag_records 1\n", token)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        assert host == "127.0.0.1"
        yield f"http://127.0.0.1:{port}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def get(url: str, **headers: str) -> tuple[int, Any, str]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, ""


def test_metrics_without_a_token() -> None:
    with serving(None) as url:
        status, _, body = get(url)
        assert (status, body) == (200, "cdc_table_lag_records 1\n")
        assert get(url.replace("/metrics", "/other"))[0] == 404


@pytest.mark.parametrize("given", [None, "Bearer wrong", "Basic c2VjcmV0"])
def test_a_token_guards_the_metrics(given: str | None) -> None:
    with serving("secret") as url:
        status, headers, body = get(url, **({"Authorization": given} if given else {}))
        assert (status, body) == (401, "")
        assert headers["WWW-Authenticate"].startswith("Bearer")
        status, _, body = get(url, Authorization="Bearer secret")
        assert (status, body) == (200, "cdc_table_lag_records 1\n")
