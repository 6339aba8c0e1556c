"""Spark SQL and Iceberg DDL rendering from table layouts (pure strings, no engine)."""
