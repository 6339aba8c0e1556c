"""Kafka -> CDC ledger: read and decode a topic, dead letters, the ledger commit with its offsets,
and the redrive of dead letters."""
