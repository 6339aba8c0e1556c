"""I/O boundary: Dagster resources (Spark, Iceberg catalog, Kafka) and the local stack."""

from __future__ import annotations

from typing import Any

from cdc_assets.local_servers import endpoints
from cdc_assets.resources.iceberg import IcebergCatalogResource
from cdc_assets.resources.kafka import KafkaResource
from cdc_assets.resources.secret_refs import hide_secrets
from cdc_assets.resources.spark import SparkResource
from cdc_assets.settings import Settings

__all__ = ["IcebergCatalogResource", "KafkaResource", "SparkResource", "build_resources"]


def build_resources(settings: Settings) -> dict[str, Any]:
    """The resources every job uses, configured from settings; unset values mean local stack.
    Secret catalog properties appear in their config as references (secret_refs), since the
    Dagster UI shows resource config."""
    catalog = _configured_catalog(settings) or _local_catalog(settings)
    catalog = catalog.model_copy(update={"properties": hide_secrets(catalog.properties)})
    return {
        "iceberg": catalog,
        "spark": SparkResource(
            catalog=catalog,
            master=settings.spark_master,
            remote=settings.spark_remote or _local_spark_connect(settings),
            home=str(settings.home),
        ),
        "kafka": KafkaResource(
            bootstrap_servers=settings.kafka_bootstrap,
            home=str(settings.home),
            schema_registry_url=settings.schema_registry_url,
        ),
    }


def _configured_catalog(settings: Settings) -> IcebergCatalogResource | None:
    """The catalog the settings name (CDC_ASSETS_CATALOG_URI), or None."""
    if not settings.catalog_uri:
        return None
    return IcebergCatalogResource(
        name=settings.catalog_name,
        type="rest" if settings.catalog_type == "rest" else "jdbc",
        uri=settings.catalog_uri,
        warehouse=settings.warehouse or settings.local_warehouse.as_uri(),
        properties=settings.catalog_properties,
    )


def _local_catalog(settings: Settings) -> IcebergCatalogResource:
    """The local stack's catalog: its REST catalog server while one is recorded (`stack up
    --rest-catalog`, the cluster profile's default), over the cluster profile's object store
    when one is recorded; else the cluster profile's JDBC catalog and object store when those
    are recorded (``CDC_ASSETS_CLUSTER_CATALOG=jdbc``); else the embedded SQLite file and
    warehouse directory."""
    rest = endpoints.recorded_rest_catalog(settings)
    server = endpoints.recorded_catalog_server(settings)
    store = endpoints.recorded_object_store(settings)
    if rest is not None and server is not None and store is not None:
        # The cluster profile on REST: the server holds the catalog's database credentials; the
        # engines write data files themselves, so they keep the object store's properties.
        return IcebergCatalogResource(
            name=settings.catalog_name,
            type="rest",
            uri=rest.url,
            warehouse=settings.warehouse or store.warehouse,
            properties={
                **store.catalog_properties(),
                **rest.client_properties(),
                **settings.catalog_properties,
            },
        )
    if rest is not None:
        return IcebergCatalogResource(
            name=settings.catalog_name,
            type="rest",
            uri=rest.url,
            warehouse=settings.warehouse or settings.local_warehouse.as_uri(),
            properties={**rest.client_properties(), **settings.catalog_properties},
        )
    if server is not None and store is not None:
        return IcebergCatalogResource(
            name=settings.catalog_name,
            type="jdbc",
            uri=server.jdbc_url,
            warehouse=settings.warehouse or store.warehouse,
            properties={
                **server.properties(),
                **store.catalog_properties(),
                **settings.catalog_properties,
            },
        )
    return IcebergCatalogResource(
        name=settings.catalog_name,
        type="jdbc",
        uri=f"jdbc:sqlite:{settings.local_catalog_file}",
        warehouse=settings.warehouse or settings.local_warehouse.as_uri(),
        properties=settings.catalog_properties,
    )


def _local_spark_connect(settings: Settings) -> str | None:
    """The local stack's Spark Connect server (`stack up --spark-connect`) when it runs and no
    other Spark is configured."""
    from cdc_assets.settings import DEFAULT_SPARK_MASTER

    if settings.spark_master != DEFAULT_SPARK_MASTER:
        return None
    port = endpoints.spark_connect_port(settings)
    return None if port is None else endpoints.spark_connect_url(port)
