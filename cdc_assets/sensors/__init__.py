"""Dagster sensors generated from table specs (filled by later issues)."""
