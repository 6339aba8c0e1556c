"""A Spark Connect server that does not answer is a clear error at once, naming the setting (the
Connect client alone retries for many minutes)."""

import socket
import time

import pytest

from cdc_assets.errors import CdcAssetsError
from cdc_assets.resources.spark import require_reachable

pytestmark = pytest.mark.defs


def test_an_unreachable_server_fails_fast_naming_the_setting() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(CdcAssetsError, match="CDC_ASSETS_SPARK_REMOTE"):
        require_reachable(f"sc://127.0.0.1:{port}")
    assert time.monotonic() - started < 5


def test_a_listening_server_passes() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        require_reachable(f"sc://127.0.0.1:{server.getsockname()[1]}/;use_ssl=false")
