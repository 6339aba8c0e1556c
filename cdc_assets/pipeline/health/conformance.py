"""Does base hold what its schema package promises? A sample of base's rows, validated with the
pandera DataFrameModel of the table's generated package (the same code consumers install:
rendered by `cdc_assets.schema.artifacts` and loaded here without installing it): types,
nullability and enum values."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from typing import Any

from cdc_assets.schema.artifacts import render_artifact
from cdc_assets.schema.views import table_schema
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.ddl import quote

SAMPLE_ROWS = 1000
EXAMPLES = 10


@dataclass
class Conformance:
    rows: int
    failures: list[str] = field(default_factory=list)  # "column: check: value", at most EXAMPLES
    failure_count: int = 0


def frame_model(spec: TableSpec) -> Any:
    """The RecordFrame class of the table's package at its spec version."""
    artifact = render_artifact(
        table_schema(spec, pipeline_columns=False), f"{spec.spec_version}.0.0"
    )
    # Registered like an imported module: pandera resolves the model's annotations through
    # sys.modules[cls.__module__].
    name = f"_cdc_conformance_{artifact.module}_{artifact.digest[:16]}"
    module = sys.modules.get(name) or types.ModuleType(name)
    if name in sys.modules:
        return module.RecordFrame
    sys.modules[name] = module
    exec(
        compile(artifact.files[f"{artifact.module}/__init__.py"], name, "exec"),
        module.__dict__,
    )
    return module.RecordFrame


def check_sample(spark: Any, catalog: str, spec: TableSpec, rows: int = SAMPLE_ROWS) -> Conformance:
    import pandas as pd
    import pandera.errors

    schema = table_schema(spec, pipeline_columns=False)
    identifier = ".".join(quote(p) for p in (catalog, *schema.name.split(".", 1)))
    columns = [c.name for c in schema.columns]
    # Through Arrow, not toPandas(): toPandas() casts timestamps to nanoseconds and fails on
    # values past 2262 (a source's 9999-12-31 "never"), which Iceberg's microseconds hold.
    table = spark.table(identifier).select(*[quote(c) for c in columns]).limit(rows).toArrow()
    frame = table.to_pandas(coerce_temporal_nanoseconds=False)
    for c in schema.columns:
        if c.type == "timestamp" and len(frame):
            values = frame[c.name]
            if not isinstance(values.dtype, pd.DatetimeTZDtype):
                values = pd.to_datetime(values)
            # Spark hands TIMESTAMP (with time zone) over in the session's zone; the package
            # declares UTC.
            utc = values.dt.tz_localize if values.dt.tz is None else values.dt.tz_convert
            frame[c.name] = utc("UTC")
    result = Conformance(len(frame))
    try:
        frame_model(spec).validate(frame, lazy=True)
    except pandera.errors.SchemaErrors as err:
        cases = err.failure_cases
        result.failure_count = len(cases)
        for _, case in cases.head(EXAMPLES).iterrows():
            result.failures.append(f"{case['column']}: {case['check']}: {case['failure_case']}")
    return result
