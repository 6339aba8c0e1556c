"""I/O boundary: Dagster resources (Spark, Iceberg catalog, Kafka) and the local stack."""

from __future__ import annotations

from typing import Any

from cdc_assets.resources.iceberg import IcebergCatalogResource
from cdc_assets.resources.kafka import KafkaResource
from cdc_assets.resources.spark import SparkResource
from cdc_assets.settings import Settings

__all__ = ["IcebergCatalogResource", "KafkaResource", "SparkResource", "build_resources"]


def build_resources(settings: Settings) -> dict[str, Any]:
    """The resources every job uses, configured from settings; unset values mean local stack."""
    catalog = IcebergCatalogResource(
        name=settings.catalog_name,
        type="rest" if settings.catalog_type == "rest" else "jdbc",
        uri=settings.catalog_uri or f"jdbc:sqlite:{settings.local_catalog_file}",
        warehouse=settings.warehouse or settings.local_warehouse.as_uri(),
    )
    return {
        "iceberg": catalog,
        "spark": SparkResource(
            catalog=catalog,
            master=settings.spark_master,
            remote=settings.spark_remote or _local_spark_connect(settings),
            home=str(settings.home),
        ),
        "kafka": KafkaResource(bootstrap_servers=settings.kafka_bootstrap, home=str(settings.home)),
    }


def _local_spark_connect(settings: Settings) -> str | None:
    """The local stack's Spark Connect server (`stack up --spark-connect`) when it runs and no
    other Spark is configured."""
    from cdc_assets.settings import DEFAULT_SPARK_MASTER
    from cdc_assets.stack import spark_connect

    if settings.spark_master != DEFAULT_SPARK_MASTER:
        return None
    port = spark_connect.running_port(settings)
    return None if port is None else spark_connect.remote_url(port)
