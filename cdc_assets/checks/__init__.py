"""Dagster checks generated from table specs (filled by later issues)."""
