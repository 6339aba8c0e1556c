"""Test tiers follow the directory: unit/ (pure), defs/ (Dagster wiring), integration/ (real
Kafka, Spark and Iceberg). `pytest -m unit` and friends select one tier."""

from __future__ import annotations

from pathlib import Path

import pytest

TIERS = ("unit", "defs", "integration")
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).parts
        for tier in TIERS:
            if tier in parts:
                item.add_marker(getattr(pytest.mark, tier))
