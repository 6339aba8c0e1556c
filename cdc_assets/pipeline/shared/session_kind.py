"""Whether a Spark session is a Spark Connect client: such a session has no JVM in this process,
so the few things read from the driver (status tracker, executed plans) come another way."""

from typing import Any


def is_connect(spark: Any) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")
