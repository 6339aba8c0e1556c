"""The strict pydantic base of every spec model and the name types they share."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, StringConstraints

Identifier = Annotated[str, StringConstraints(pattern=r"^[a-z_][a-z0-9_]*$", max_length=63)]
SourceName = Annotated[str, StringConstraints(min_length=1, max_length=128)]
Connector = Literal["mysql", "mariadb", "postgresql", "tidb"]
SourceOrder = Literal["binlog", "gtid"]


class StrictModel(BaseModel):
    """Unknown keys are errors; a loaded model never changes."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)
