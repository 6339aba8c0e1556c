"""The source databases through Spark's JDBC source: load base from a dump, the source's position,
its table definitions, and the row-for-row comparison with base."""
