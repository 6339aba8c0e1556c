"""Which envelope reader a Spark session decodes Kafka values with.

The project's JVM function (`sql.decode.ENVELOPE_FUNCTION`, from ``cdc-assets-udf.jar``) reads a
value in one pass; Spark's own functions (`sql.decode.sql_envelope_stages`) give the same
columns with two ``from_json`` parses. The Spark setting ``spark.cdcassets.envelopeReader``
chooses: ``auto`` (the default) uses the function when the session can call it and falls back
to Spark's functions otherwise (the jar absent, a Connect server without it, or a jar built for
another Spark version, which the probe below finds), with a warning once per session; ``jvm``
requires the function; ``sql`` never uses it.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any

from cdc_assets.errors import CdcAssetsError
from cdc_assets.pipeline.shared.session_kind import is_connect
from cdc_assets.sql.batch_decode import JVM_READER, SQL_READER
from cdc_assets.sql.decode import ENVELOPE_EXTENSIONS, ENVELOPE_FUNCTION

log = logging.getLogger(__name__)

READER_CONF = "spark.cdcassets.envelopeReader"
AUTO = "auto"
CHOICES = (AUTO, JVM_READER, SQL_READER)

# One probe per session: the answer does not change while the session lives.
_chosen: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


class EnvelopeFunctionMissingError(CdcAssetsError):
    """The session cannot call the project's envelope reader (its jar or extension is missing)."""


def register_envelope_function(spark: Any) -> None:
    """Make sure the project's envelope reader (compiled into the jar cache, on ``spark.jars``)
    is callable from SQL in this session.

    Sessions configured by `SparkResource` (and the Connect server it starts) have it from the
    ``spark.sql.extensions`` entry; a session started otherwise, with the jar on its classpath,
    gets it registered here.
    """
    if spark.catalog.functionExists(ENVELOPE_FUNCTION):
        return
    if not is_connect(spark):
        try:
            spark._jvm.io.cdcassets.spark.CdcExtensions.register(spark._jsparkSession)
            return
        except Exception as exc:  # py4j: the class is not on the driver's classpath
            raise EnvelopeFunctionMissingError(_missing_function(str(exc))) from exc
    raise EnvelopeFunctionMissingError(_missing_function("a Connect server without it"))


def _missing_function(detail: str) -> str:
    return (
        f"Spark SQL function {ENVELOPE_FUNCTION} is not available ({detail.splitlines()[0]}): put "
        "the project's cdc-assets-udf.jar (`cdc-assets jars`) on spark.jars and add "
        f"{ENVELOPE_EXTENSIONS} to spark.sql.extensions, or set {READER_CONF}=sql"
    )


# A record the function must read as Spark's functions do; a function built against another
# Spark's internal classes fails on it (or reads it wrong) instead of on the first batch.
_PROBE = (
    f'SELECT {ENVELOPE_FUNCTION}(CAST(\'{{"op":"c","after":{{"a":1,"b":"x"}}}}\' '
    "AS BINARY), array('b', 'a')) AS e"
)


def _probe(spark: Any) -> None:
    row = spark.sql(_PROBE).collect()[0]["e"]
    got = (row["json_ok"], row["op"], list(row["vals"]), list(row["unknown"]))
    if got != (True, "c", ["x", "1"], []):
        raise EnvelopeFunctionMissingError(f"{ENVELOPE_FUNCTION} read a probe record as {got}")


def envelope_reader(spark: Any) -> str:
    """`JVM_READER` or `SQL_READER` for this session, as `READER_CONF` asks (see the module
    docstring). Raises EnvelopeFunctionMissingError when ``jvm`` is asked for and cannot be
    had, CdcAssetsError for a value that is not one of `CHOICES`."""
    wanted = (spark.conf.get(READER_CONF, AUTO) or AUTO).strip().lower()
    if wanted not in CHOICES:
        raise CdcAssetsError(f"{READER_CONF} is {wanted!r}; use one of {', '.join(CHOICES)}")
    if wanted == SQL_READER:
        return SQL_READER
    with _lock:
        chosen = _chosen.get(spark)
    if chosen is None:
        try:
            register_envelope_function(spark)
            _probe(spark)
            chosen = JVM_READER
        except Exception as exc:  # missing, or built for another Spark: Spark's own functions
            if wanted == JVM_READER:
                if isinstance(exc, EnvelopeFunctionMissingError):
                    raise
                raise EnvelopeFunctionMissingError(_missing_function(str(exc))) from exc
            log.warning(
                "decoding Kafka values with Spark's from_json (slower) because %s; "
                "set %s=sql to choose it without this warning",
                str(exc).splitlines()[0],
                READER_CONF,
            )
            chosen = SQL_READER
        with _lock:
            _chosen[spark] = chosen
    if chosen == SQL_READER and wanted == JVM_READER:
        raise EnvelopeFunctionMissingError(_missing_function("this session fell back before"))
    return chosen
