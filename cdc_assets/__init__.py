"""cdc-assets: Debezium CDC streams from Kafka into Apache Iceberg, as Dagster assets on Spark."""

__version__ = "0.1.0"
