"""Type rules and per-layer table schemas derived from a table spec (pure)."""
