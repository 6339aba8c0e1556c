"""Every error this project raises on purpose, in one flat module."""


class CdcAssetsError(Exception):
    """Base class: an error with a message meant for the person running the pipeline."""


class SpecError(CdcAssetsError):
    """A table spec is invalid; the message names the file, the field and what would be valid."""


class UnsupportedTypeError(SpecError):
    """A source column type has no mapping to an Iceberg type."""


class ToolMissingError(CdcAssetsError):
    """A required executable (java, mvn) is not installed."""


class JarSetupError(CdcAssetsError):
    """Maven could not fetch the JVM dependencies."""


class StackError(CdcAssetsError):
    """The local stack cannot start, is unhealthy, or is not running when needed."""


class ProduceError(CdcAssetsError):
    """Records could not be written to Kafka (delivery failed or timed out)."""


class EvolutionError(CdcAssetsError):
    """A schema evolution cannot be applied to the live tables (rejected plan, unknown column,
    missing table); no table was changed by the step that raised it."""


class ConfigError(CdcAssetsError):
    """A setting has a value that cannot work (malformed, or a server it names refuses); the
    message names the setting to fix. Raised before any data is written."""


class ShardedSpecError(CdcAssetsError):
    """A per-source operation was asked of a spec with several shards: take one shard's view."""


class SchemaChangeStopError(CdcAssetsError):
    """A table whose ``evolution.policy`` is ``fail`` met a source schema change: its ingest
    stops (commits nothing) until the spec file is changed by hand."""
