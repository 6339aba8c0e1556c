"""A change's numeric source position, the order the upsert applies changes in (pure).

What the three parts hold depends on the source and the spec's ``source.order``: binlog (file
number, position, row), GTID (sequence number, position, row), or PostgreSQL (LSN, 0, 0).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Position:
    """A numeric source position: binlog (file number, position, row) or (LSN, 0, 0)."""

    major: int
    minor: int = 0
    row: int = 0

    def text(self) -> str:
        return f"{self.major}:{self.minor}:{self.row}"

    @classmethod
    def parse(cls, text: str) -> Position:
        """``major[:minor[:row]]`` as written by ``text()``."""
        parts = text.strip().split(":")
        if not 1 <= len(parts) <= 3 or not all(p.strip().lstrip("-").isdigit() for p in parts):
            raise ValueError(f"{text!r} is not a source position 'major[:minor[:row]]'")
        numbers = [int(p) for p in parts] + [0] * (3 - len(parts))
        return cls(numbers[0], numbers[1], numbers[2])
