"""The local stack: servers the project starts on loopback for development, tests and the demo
(a Kafka broker, the Iceberg catalog and warehouse, a Spark Connect server, MariaDB and
PostgreSQL, Kafka Connect with Debezium), the jar cache they run from, and their state. None of
it is needed on a deployment that points the resources (`cdc_assets.resources`) at its own
servers; the resources only ask it for defaults when nothing else is configured."""
