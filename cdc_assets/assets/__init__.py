"""Dagster assets generated from table specs."""
