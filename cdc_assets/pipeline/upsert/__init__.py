"""CDC ledger -> bucketed temp -> base, the history table (SCD type 2) and consistency groups."""
