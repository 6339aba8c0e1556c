"""The project's own JVM code, compiled with the JDK's ``javac`` into the jar cache next to the
jars Maven fetches:

- ``udf``: the Debezium envelope decoder and the local driver's file system (`java/udf`), compiled
  against the jars of the installed pyspark, so it needs no download and always matches the Spark
  it runs in;
- ``connect-ext``: the Debezium connectors whose offsets cover whole source events (`java/connect`),
  compiled against the Connect and Debezium jars of the ``connect`` pom;
- ``rest``: the local stack's Iceberg REST catalog server (`java/rest`), compiled against the
  ``rest-catalog`` pom's jars.

A stamp holding the digest of the sources and of what they are compiled against makes a repeated
call a no-op that runs no process.

The Java sources live in the repository's ``java/`` directory, beside the package, not in it: a
checkout (the editable install ``make setup`` makes) compiles them, and the wheel holds no Java.
Installed from a wheel, the Spark functions are not built and sessions decode Kafka values with
Spark's own functions (``spark_jars`` says so once); the other two serve only the local stack.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cdc_assets.errors import JarSetupError, ToolMissingError
from cdc_assets.jars.maven import (
    JVM_DIR,
    STAMP_NAME,
    ensure_jars,
    locked,
    require_tool,
    run_quietly,
    swap_in,
)
from cdc_assets.resources.config import UDF_JAR_NAME
from cdc_assets.settings import Settings

log = logging.getLogger(__name__)

JAVA_RELEASE = "17"
# <repository>/java in a checkout; absent where the package was installed from a wheel.
JAVA_DIR = Path(__file__).resolve().parents[2] / "java"


@dataclass(frozen=True)
class OwnJar:
    """One jar of the project's own Java sources."""

    kind: str  # its directory in the jar cache
    source_dir: Path
    jar_name: str
    what: str  # for the progress line
    # (classpath to compile against, what it is: part of the digest), given the settings
    compile_against: Callable[[Settings], tuple[str, str]]
    # META-INF/services files: interface -> implementations (Kafka Connect finds plugins so)
    services: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def sources(self) -> list[Path]:
        return sorted(self.source_dir.rglob("*.java"))

    def directory(self, settings: Settings) -> Path:
        return settings.jars_dir / self.kind


def _pyspark_jars(_settings: Settings) -> tuple[str, str]:
    import pyspark

    return str(Path(pyspark.__file__).parent / "jars" / "*"), f"spark {pyspark.__version__}"


def _connect_jars(settings: Settings) -> tuple[str, str]:
    jars = ensure_jars("connect", settings, quiet=True)
    pom = hashlib.sha256((JVM_DIR / "connect" / "pom.xml").read_bytes()).hexdigest()
    return str(jars[0].parent / "*"), f"connect pom {pom}"


UDF = OwnJar("udf", JAVA_DIR / "udf", UDF_JAR_NAME, "Spark functions", _pyspark_jars)
CONNECT_EXT = OwnJar(
    "connect-ext",
    JAVA_DIR / "connect",
    "cdc-assets-connect.jar",
    "Debezium connectors",
    _connect_jars,
    {
        "org.apache.kafka.connect.source.SourceConnector": (
            "io.cdcassets.connect.MariaDbWholeEventConnector",
            "io.cdcassets.connect.PostgresWholeEventConnector",
        )
    },
)


def _rest_catalog_jars(settings: Settings) -> tuple[str, str]:
    jars = ensure_jars("rest-catalog", settings, quiet=True)
    pom = hashlib.sha256((JVM_DIR / "rest-catalog" / "pom.xml").read_bytes()).hexdigest()
    return f"{jars[0].parent / '*'}{os.pathsep}{_pyspark_jars(settings)[0]}", f"rest pom {pom}"


REST = OwnJar(
    "rest",
    JAVA_DIR / "rest",
    "cdc-assets-rest.jar",
    "REST catalog server",
    _rest_catalog_jars,
)


def digest(jar: OwnJar, sources: list[Path], against: str) -> str:
    h = hashlib.sha256(f"{against} java {JAVA_RELEASE}\n".encode())
    for path in sources:
        h.update(path.relative_to(jar.source_dir).as_posix().encode() + b"\n")
        h.update(path.read_bytes())
    return h.hexdigest()


def _current(target: Path, jar_name: str, stamp: str) -> Path | None:
    jar = target / jar_name
    try:
        found = (target / STAMP_NAME).read_text(encoding="utf-8").strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return jar if found == stamp and jar.is_file() else None


def ensure_jar(jar: OwnJar, settings: Settings, *, quiet: bool = False) -> Path:
    """Compile ``jar`` if the cache lacks it or holds one of other sources; return its path."""
    sources = jar.sources()
    if not sources:
        raise JarSetupError(
            f"no Java sources under {jar.source_dir}: they come with a checkout of the "
            "repository (make setup), not with the wheel"
        )
    classpath, against = jar.compile_against(settings)
    stamp = digest(jar, sources, against)
    target = jar.directory(settings)
    found = _current(target, jar.jar_name, stamp)
    if found is not None:
        return found
    settings.jars_dir.mkdir(parents=True, exist_ok=True)
    with locked(settings.jars_dir / f".{jar.kind}.lock"):
        found = _current(target, jar.jar_name, stamp)
        if found is not None:
            return found
        javac = require_tool("javac")
        scratch = Path(tempfile.mkdtemp(prefix=f".{jar.kind}-", dir=settings.jars_dir))
        try:
            if not quiet:
                print(f"compiling the project's {jar.what} into {target} ...", flush=True)
            classes = scratch / "classes"
            _compile(javac, jar, sources, classpath, classes)
            _package(classes, jar.services, scratch / jar.jar_name)
            shutil.rmtree(classes)
            (scratch / STAMP_NAME).write_text(stamp + "\n", encoding="utf-8")
            scratch.chmod(0o755)  # mkdtemp's 0700 would hide the cache from other users
            swap_in(scratch, target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return target / jar.jar_name


def ensure_udf_jar(settings: Settings, *, quiet: bool = False) -> Path:
    return ensure_jar(UDF, settings, quiet=quiet)


def ensure_connect_jar(settings: Settings, *, quiet: bool = False) -> Path:
    return ensure_jar(CONNECT_EXT, settings, quiet=quiet)


def ensure_rest_jar(settings: Settings, *, quiet: bool = False) -> Path:
    return ensure_jar(REST, settings, quiet=quiet)


def _compile(javac: str, jar: OwnJar, sources: list[Path], classpath: str, classes: Path) -> None:
    command = [
        javac,
        "--release",
        JAVA_RELEASE,
        "-encoding",
        "UTF-8",
        "-nowarn",
        "-cp",
        classpath,
        "-d",
        str(classes),
        *(str(s) for s in sources),
    ]
    returncode, tail = run_quietly(command, f"javac ({javac})")
    if returncode != 0:
        raise JarSetupError(f"javac failed (exit {returncode}) on {jar.source_dir}:\n{tail}")


def _package(classes: Path, services: Mapping[str, tuple[str, ...]], jar: Path) -> None:
    """A jar is a zip of the class files (no manifest needed on a classpath), with the
    ServiceLoader files that name its plugins."""
    with zipfile.ZipFile(jar, "w", zipfile.ZIP_DEFLATED) as out:
        for path in sorted(classes.rglob("*.class")):
            out.write(path, path.relative_to(classes).as_posix())
        for interface, implementations in sorted(services.items()):
            out.writestr(f"META-INF/services/{interface}", "\n".join(implementations) + "\n")


def spark_jars(settings: Settings) -> list[Path]:
    """Jars to put on Spark's classpath next to the pyspark wheel's own: the Maven-fetched ones and
    the project's own functions, fetched or compiled first when missing.

    The project's functions are a speed-up: when they cannot be compiled (a JRE without
    ``javac``, say), a warning says so and sessions read Kafka values with Spark's own functions
    (`pipeline.ingest.envelope_reader`)."""
    jars = ensure_jars("spark", settings)
    try:
        return [*jars, ensure_udf_jar(settings)]
    except (JarSetupError, ToolMissingError) as exc:
        log.warning(
            "the project's Spark functions (%s) were not built: %s; Kafka values will be "
            "decoded with Spark's own from_json, which is slower",
            UDF_JAR_NAME,
            str(exc).splitlines()[0],
        )
        return jars
