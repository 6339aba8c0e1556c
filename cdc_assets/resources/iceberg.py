"""Dagster resource for the Iceberg catalog, opened with pyiceberg (schema work, checks, reads)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dagster import ConfigurableResource
from pydantic import Field

from cdc_assets.resources.config import CatalogConfig, CatalogType, pyiceberg_catalog_props


class IcebergCatalogResource(ConfigurableResource):  # type: ignore[type-arg]
    """The Iceberg catalog shared by Spark and pyiceberg.

    The default is the embedded JDBC catalog on a SQLite file of the local stack; point ``type``,
    ``uri`` and ``warehouse`` at a REST catalog and object storage to run on a cluster.
    """

    name: str = Field(default="lake", description="catalog name, as Spark SQL sees it")
    type: CatalogType = Field(default="jdbc", description="jdbc or rest")
    uri: str = Field(description="JDBC URL (jdbc:sqlite:/path/catalog.db) or REST endpoint")
    warehouse: str = Field(description="warehouse location, e.g. file:///path or s3://bucket/path")
    properties: dict[str, str] = Field(
        default_factory=dict, description="extra catalog properties for both engines"
    )

    def config(self) -> CatalogConfig:
        """The catalog for the engines, with the secrets the config refers to (secret_refs)."""
        from cdc_assets.resources.secret_refs import reveal_secrets

        return CatalogConfig(
            self.name, self.type, self.uri, self.warehouse, reveal_secrets(self.properties)
        )

    def setup_for_execution(self, context: Any) -> None:
        # Before a run or sensor uses the catalog: a shared catalog or object store that cannot
        # work fails here, naming the setting, before anything is written (resources/preflight).
        from cdc_assets.resources.preflight import check_catalog

        check_catalog(self.config())

    def load_catalog(self) -> Any:
        """A pyiceberg Catalog; imported here so loading definitions stays light."""
        from pyiceberg.catalog import load_catalog

        return load_catalog(self.name, **pyiceberg_catalog_props(self.config()))

    def existing_catalog(self) -> Any | None:
        """The catalog, or None for an embedded SQLite catalog whose file does not exist yet:
        for readers that must not create one (loading definitions)."""
        if self.type == "jdbc" and self.uri.startswith("jdbc:sqlite:"):
            path = self.uri.removeprefix("jdbc:sqlite:").removeprefix("//").split("?")[0]
            if not Path(path).exists():
                return None
        return self.load_catalog()
