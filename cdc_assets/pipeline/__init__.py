"""Pipeline steps that do I/O with Spark, Iceberg and Kafka; no Dagster imports here."""
