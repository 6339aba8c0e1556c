"""A small OpenID Connect provider on loopback, standing in for a company's identity provider
(Keycloak, Okta, Entra ID) in the OAUTHBEARER tests: the client-credentials grant at ``/token``
(credentials by HTTP basic auth, as Kafka's Java client and librdkafka send them, or in the form)
and its signing key at ``/jwks``. Tokens are RS256 JWTs with the claims Kafka's broker validates
(iss, aud, sub, exp, iat, nbf, scope), signed with the ``cryptography`` library.
"""

from __future__ import annotations

import base64
import json
import secrets
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

KEY_ID = "cdc-assets-test"
AUDIENCE = "kafka"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _uint(value: int) -> str:
    return _b64url(value.to_bytes((value.bit_length() + 7) // 8, "big"))


@dataclass
class Provider:
    url: str  # the issuer
    client_id: str
    client_secret: str
    issued: list[str] = field(default_factory=list)  # subjects of the tokens issued
    refused: int = 0

    @property
    def token_url(self) -> str:
        return f"{self.url}/token"

    @property
    def jwks_url(self) -> str:
        return f"{self.url}/jwks"


def _credentials(headers: Any, form: dict[str, list[str]]) -> tuple[str, str]:
    header = headers.get("Authorization", "")
    if header.startswith("Basic "):
        decoded = base64.b64decode(header[6:]).decode("utf-8")
        user, _, password = decoded.partition(":")
        return urllib.parse.unquote(user), urllib.parse.unquote(password)
    return form.get("client_id", [""])[0], form.get("client_secret", [""])[0]


@contextmanager
def oidc_provider(client_id: str, client_secret: str, lifetime_s: int = 3600) -> Iterator[Provider]:
    """Serve the provider on a free loopback port until the block ends."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    numbers = key.public_key().public_numbers()
    jwks = {
        "keys": [
            {
                "kty": "RSA",
                "kid": KEY_ID,
                "use": "sig",
                "alg": "RS256",
                "n": _uint(numbers.n),
                "e": _uint(numbers.e),
            }
        ]
    }
    provider: Provider

    def token(subject: str, scope: str) -> str:
        now = int(time.time())
        header = {"alg": "RS256", "typ": "JWT", "kid": KEY_ID}
        claims = {
            "iss": provider.url,
            "aud": AUDIENCE,
            "sub": subject,
            "iat": now,
            "nbf": now - 5,
            "exp": now + lifetime_s,
            "jti": secrets.token_hex(8),
            "scope": scope,
        }
        signing_input = ".".join(
            _b64url(json.dumps(part, separators=(",", ":")).encode("utf-8"))
            for part in (header, claims)
        ).encode("ascii")
        signature = key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
        return signing_input.decode("ascii") + "." + _b64url(signature)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: the tests' output is the evidence

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.startswith("/jwks"):
                self._send(200, jwks)
            else:
                self._send(404, {"error": "not_found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            form = urllib.parse.parse_qs(self.rfile.read(length).decode("utf-8"))
            if not self.path.startswith("/token"):
                self._send(404, {"error": "not_found"})
                return
            if form.get("grant_type", [""])[0] != "client_credentials":
                self._send(400, {"error": "unsupported_grant_type"})
                return
            user, password = _credentials(self.headers, form)
            if not (
                secrets.compare_digest(user, provider.client_id)
                and secrets.compare_digest(password, provider.client_secret)
            ):
                provider.refused += 1
                self._send(401, {"error": "invalid_client"})
                return
            provider.issued.append(user)
            scope = form.get("scope", [""])[0]
            self._send(
                200,
                {
                    "access_token": token(user, scope),
                    "token_type": "Bearer",
                    "expires_in": lifetime_s,
                },
            )

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    provider = Provider(f"http://127.0.0.1:{server.server_address[1]}", client_id, client_secret)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield provider
    finally:
        server.shutdown()
        server.server_close()
