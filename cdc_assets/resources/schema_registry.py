"""The writer schemas of a topic's value subject, from a Confluent-compatible schema registry.

A registry's Avro serializers frame each record with the id of its writer schema. The ingest
decodes every id of the topic's value subject (TopicNameStrategy: ``<topic>-value``, what
Debezium's converters use by default), so it asks the registry for the subject's versions
before each batch. A schema id never changes what it names, so each version's schema is fetched
once per process. A registry that cannot be reached raises: the run fails and is retried, and no
record is dead-lettered for an outage.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cdc_assets.errors import CdcAssetsError

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
    from confluent_kafka.schema_registry import SchemaRegistryClient

    with _LOCK:
        if url not in _CLIENTS:
            _CLIENTS[url] = SchemaRegistryClient({"url": url})
        return _CLIENTS[url]


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
        raise SchemaRegistryError(f"schema registry at {url}: {err}") from err
    except Exception as err:  # connection refused, timeouts: the run fails and is retried
        raise SchemaRegistryError(f"schema registry at {url} cannot be reached: {err}") from err
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
    from cdc_assets.stack.local_stack import running_registry

    settings = load_settings()
    return settings.schema_registry_url or running_registry(settings)
