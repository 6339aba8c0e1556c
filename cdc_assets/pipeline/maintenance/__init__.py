"""Upkeep of a spec's tables (Iceberg's procedures) and the rewrite of values stored before their
protection."""
