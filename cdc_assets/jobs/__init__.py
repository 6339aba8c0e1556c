"""Dagster jobs shared by all tables; a job targets a table by config, never one job per table."""
