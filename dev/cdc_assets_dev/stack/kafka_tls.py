"""Certificates and credentials for the local broker's secured listeners (SASL_SSL and SSL with
client certificates), made once per stack with the `cryptography` library.

A CA of the stack's own signs the broker's certificate (for 127.0.0.1 and localhost) and a
client certificate; both are PKCS#12 stores. The CA's key stays in the directory so tests can
issue more client certificates (an expired one, say). Everything sits in ``<stack>/kafka/tls``,
readable by the owner only: this is a local development stack, not a key management system.
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_FILE = "ca.pem"
CA_KEY_FILE = "ca-key.pem"
BROKER_STORE = "broker.p12"
CLIENT_STORE = "client.p12"
SECRETS_FILE = "secrets.json"
USERNAME = "cdc"
VALID_DAYS = 3650


@dataclass(frozen=True)
class TlsMaterial:
    """Where the secured listeners' files are, and the local credentials."""

    directory: Path
    store_password: str  # of both PKCS#12 stores
    username: str
    password: str  # the SASL user's (SCRAM and PLAIN)

    @property
    def ca(self) -> Path:
        return self.directory / CA_FILE

    @property
    def ca_key(self) -> Path:
        return self.directory / CA_KEY_FILE

    @property
    def broker_store(self) -> Path:
        return self.directory / BROKER_STORE

    @property
    def client_store(self) -> Path:
        return self.directory / CLIENT_STORE


def stack_directory(stack_dir: Path) -> Path:
    """Where the local stack keeps its broker's TLS material and SASL user."""
    return stack_dir / "kafka" / "tls"


def ensure_material(directory: Path) -> TlsMaterial:
    """The stack's TLS material in ``directory``, made on first use."""
    secrets_file = directory / SECRETS_FILE
    if secrets_file.exists():
        data = json.loads(secrets_file.read_text(encoding="utf-8"))
        material = TlsMaterial(
            directory, data["store_password"], data["username"], data["password"]
        )
        if all(p.exists() for p in (material.ca, material.broker_store, material.client_store)):
            return material
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    material = TlsMaterial(
        directory,
        store_password=secrets.token_urlsafe(18),
        username=USERNAME,
        password=secrets.token_urlsafe(18),
    )
    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cdc-assets local CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write_private(
        material.ca_key,
        ca_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )
    material.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    issue_store(
        material,
        material.broker_store,
        "localhost",
        not_before=now - timedelta(minutes=5),
        not_after=now + timedelta(days=VALID_DAYS),
        server=True,
    )
    issue_store(
        material,
        material.client_store,
        material.username,
        not_before=now - timedelta(minutes=5),
        not_after=now + timedelta(days=VALID_DAYS),
    )
    _write_private(
        secrets_file,
        json.dumps(
            {
                "store_password": material.store_password,
                "username": material.username,
                "password": material.password,
            }
        ).encode(),
    )
    return material


def issue_store(
    material: TlsMaterial,
    path: Path,
    common_name: str,
    *,
    not_before: datetime,
    not_after: datetime,
    server: bool = False,
    password: str | None = None,
) -> Path:
    """A PKCS#12 store at ``path`` holding a new key and a certificate the stack's CA signed,
    valid from ``not_before`` to ``not_after``; a server certificate names 127.0.0.1 and
    localhost. The store's password is ``password``, else the stack's."""
    ca_key = serialization.load_pem_private_key(material.ca_key.read_bytes(), password=None)
    ca_cert = x509.load_pem_x509_certificate(material.ca.read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    cert = builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    store = pkcs12.serialize_key_and_certificates(
        common_name.encode(),
        key,
        cert,
        [ca_cert],
        serialization.BestAvailableEncryption((password or material.store_password).encode()),
    )
    _write_private(path, store)
    return path


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to a file only its owner can read."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
