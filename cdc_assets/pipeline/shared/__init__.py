"""What every stage shares: the table's state in Iceberg (consumed offsets, the upsert's watermark,
a table's pause, the cdc_meta tables), table creation, and Spark helpers for small batches,
caching and progress. It imports no stage."""
