"""An HTTPS gateway with HTTP basic auth in front of the stack's schema registry, on loopback.

The stack's registry (Apicurio 2.4) authenticates only through an OpenID Connect server
(Keycloak), which does not run here; companies often put a registry behind such a gateway
anyway. The gateway is real TLS and real basic auth: what the registry client must get right
(credentials sent, the server's certificate checked against the configured CA) is tested for
real; only the registry's own user store is stood in for.
"""

from __future__ import annotations

import base64
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "host", "authorization"}


def pem_pair(store: Path, password: str, into: Path) -> tuple[Path, Path]:
    """The certificate and key of a PKCS#12 store as PEM files (what Python's ssl loads)."""
    key, cert, _ = pkcs12.load_key_and_certificates(store.read_bytes(), password.encode())
    assert key is not None
    assert cert is not None
    into.mkdir(parents=True, exist_ok=True)
    cert_file, key_file = into / "gateway.pem", into / "gateway-key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


@contextmanager
def auth_gateway(
    upstream: str,
    username: str,
    password: str,
    cert: Path | None,
    key: Path | None,
    *,
    bearer: str | None = None,
) -> Iterator[str]:
    """Serve ``https://127.0.0.1:<port>`` (``http://`` without ``cert``) forwarding to
    ``upstream`` (``http://host:port``) the requests that carry the credentials: basic auth, or
    ``Authorization: Bearer <bearer>``; 401 for the others. Yields the gateway's base URL."""
    if bearer is not None:
        expected = f"Bearer {bearer}"
    else:
        expected = "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()
    requests: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _forward(self) -> None:
            requests.append(self.path)
            if self.headers.get("Authorization") != expected:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="registry"')
                self.send_header("Content-Type", "application/json")
                body = b'{"error_code": 401, "message": "Unauthorized"}'
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            length = int(self.headers.get("Content-Length") or 0)
            data = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
            request = urllib.request.Request(
                upstream + self.path, data=data, headers=headers, method=self.command
            )
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    status, body, answer_headers = answer.status, answer.read(), answer.headers
            except urllib.error.HTTPError as err:
                status, body, answer_headers = err.code, err.read(), err.headers
            self.send_response(status)
            for name, value in answer_headers.items():
                if name.lower() not in HOP_HEADERS | {"content-length"}:
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        # The handler API's method names.
        do_GET = do_POST = do_PUT = do_DELETE = _forward  # noqa: N815

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    scheme = "http"
    if cert is not None and key is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    thread = threading.Thread(target=server.serve_forever, name="auth-gateway", daemon=True)
    thread.start()
    try:
        yield f"{scheme}://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
