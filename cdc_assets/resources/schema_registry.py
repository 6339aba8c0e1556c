"""The writer schemas of a topic's value subject, from a Confluent-compatible schema registry.

A registry's Avro serializers frame each record with the id of its writer schema. The ingest
decodes every id of the topic's value subject (TopicNameStrategy: ``<topic>-value``, what
Debezium's converters use by default), so it asks the registry for the subject's versions
before each batch. A schema id never changes what it names, so each version's schema is fetched
once per process. A registry that cannot be reached raises: the run fails and is retried, and no
record is dead-lettered for an outage.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cdc_assets.errors import CdcAssetsError
from cdc_assets.local_servers.endpoints import running_registry

# (registry url, subject, version) -> (schema id, schema text): immutable in a registry.
_VERSIONS: dict[tuple[str, str, int], tuple[int, str]] = {}
_CLIENTS: dict[str, Any] = {}
_LOCK = threading.Lock()
SUBJECT_NOT_FOUND = 40401


class SchemaRegistryError(CdcAssetsError):
    """The schema registry could not be asked (unreachable, or an unexpected answer)."""


@dataclass(frozen=True)
class TopicSchemas:
    """The writer schemas a topic's framed records may carry: schema id -> Avro schema text.

    ``url`` is None when no registry is configured: a framed record is then a dead letter that
    says so, and a redrive once a registry is configured decodes it.
    """

    url: str | None
    subject: str
    schemas: Mapping[int, str] = field(default_factory=dict)


def value_subject(topic: str) -> str:
    return f"{topic}-value"


def _client(url: str) -> Any:
    """One client per registry and credentials (the settings' CDC_ASSETS_SCHEMA_REGISTRY_*)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from cdc_assets.settings import load_settings

    auth = load_settings().registry_auth
    key = f"{url} {auth!r}"
    with _LOCK:
        if key not in _CLIENTS:
            _CLIENTS[key] = SchemaRegistryClient({"url": url, **auth.client_conf()})
        return _CLIENTS[key]


def _refusal(url: str, err: Exception) -> str:
    """What a failed registry call means, naming the setting when the registry refused the
    credentials or its certificate is not trusted."""
    from cdc_assets.kafka_security import (
        ENV_REGISTRY_CA,
        ENV_REGISTRY_PASSWORD,
        ENV_REGISTRY_USERNAME,
    )

    status = getattr(err, "http_status_code", None)
    if status in (401, 403):
        return (
            f"schema registry at {url} refused the credentials (HTTP {status}): check "
            f"{ENV_REGISTRY_USERNAME} / {ENV_REGISTRY_PASSWORD}"
        )
    text = str(err)
    if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
        return (
            f"the certificate of the schema registry at {url} is not signed by a trusted CA: "
            f"point {ENV_REGISTRY_CA} at the CA that signed it"
        )
    return ""


def topic_schemas(url: str | None, topic: str) -> TopicSchemas:
    """Every writer schema of the topic's value subject (none if the subject does not exist)."""
    subject = value_subject(topic)
    if url is None:
        return TopicSchemas(None, subject)
    from confluent_kafka.schema_registry.error import SchemaRegistryError as ClientError

    client = _client(url)
    try:
        versions = client.get_versions(subject)
    except ClientError as err:
        if err.error_code == SUBJECT_NOT_FOUND:
            return TopicSchemas(url, subject)
        raise SchemaRegistryError(_refusal(url, err) or f"schema registry at {url}: {err}") from err
    except Exception as err:  # connection refused, timeouts: the run fails and is retried
        raise SchemaRegistryError(
            _refusal(url, err) or f"schema registry at {url} cannot be reached: {err}"
        ) from err
    schemas = {}
    for version in versions:
        key = (url, subject, int(version))
        if key not in _VERSIONS:
            try:
                registered = client.get_version(subject, version)
            except Exception as err:
                raise SchemaRegistryError(
                    f"schema registry at {url}: version {version} of {subject}: {err}"
                ) from err
            _VERSIONS[key] = (int(registered.schema_id), registered.schema.schema_str)
        schema_id, text = _VERSIONS[key]
        schemas[schema_id] = text
    return TopicSchemas(url, subject, schemas)


def configured_registry() -> str | None:
    """The registry of this process's settings: CDC_ASSETS_SCHEMA_REGISTRY_URL, else the local
    stack's while it runs, else None."""
    from cdc_assets.settings import load_settings

    settings = load_settings()
    if settings.schema_registry_url:
        return settings.schema_registry_url
    registry = running_registry(settings)
    return registry.url if registry is not None else None


def framed_schema_id(value: bytes | None) -> int | None:
    """The writer schema id of a registry-framed value (magic byte 0), else None."""
    if value is None or len(value) < 5 or value[0] != 0:
        return None
    return int.from_bytes(value[1:5], "big")


_PARSED: dict[str, Any] = {}


def decode_framed(value: bytes | None, schemas: TopicSchemas) -> Any | None:
    """A framed value decoded in Python (records the sensors read one at a time: schema-change
    events), or None when its id is not a version of the subject or the payload does not read."""
    import io

    import fastavro

    schema_id = framed_schema_id(value)
    text = schemas.schemas.get(schema_id) if schema_id is not None else None
    if value is None or text is None:
        return None
    if text not in _PARSED:
        _PARSED[text] = fastavro.parse_schema(json.loads(text))
    try:
        return fastavro.schemaless_reader(io.BytesIO(value[5:]), _PARSED[text], None)
    except Exception:
        return None


def writer_schema(value: bytes | None, schemas: TopicSchemas) -> dict[str, Any] | None:
    """The parsed writer schema of a framed value whose id is a version of the subject."""
    schema_id = framed_schema_id(value)
    text = schemas.schemas.get(schema_id) if schema_id is not None else None
    return json.loads(text) if text is not None else None
