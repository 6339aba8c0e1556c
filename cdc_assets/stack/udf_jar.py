"""The project's own JVM code (`cdc_assets/jvm/udf`: the Debezium envelope decoder and the local
driver's file system) as a jar in the jar cache, next to the Spark jars Maven fetches.

It is compiled with the JDK's ``javac`` against the jars of the installed pyspark, so it needs no
download and always matches the Spark it runs in. A stamp holding the digest of the sources and
of the Spark version makes a repeated call a no-op that runs no process.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import zipfile
from pathlib import Path

from cdc_assets.errors import JarSetupError
from cdc_assets.resources.config import UDF_JAR_NAME
from cdc_assets.settings import Settings
from cdc_assets.stack.jars import (
    JVM_DIR,
    STAMP_NAME,
    locked,
    require_tool,
    run_quietly,
    swap_in,
)

SOURCE_DIR = JVM_DIR / "udf" / "src"
JAR_NAME = UDF_JAR_NAME
JAVA_RELEASE = "17"


def udf_dir(settings: Settings) -> Path:
    return settings.jars_dir / "udf"


def _sources() -> list[Path]:
    return sorted(SOURCE_DIR.rglob("*.java"))


def _pyspark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def _digest(sources: list[Path]) -> str:
    import pyspark

    h = hashlib.sha256(f"spark {pyspark.__version__} java {JAVA_RELEASE}\n".encode())
    for path in sources:
        h.update(path.relative_to(SOURCE_DIR).as_posix().encode() + b"\n")
        h.update(path.read_bytes())
    return h.hexdigest()


def _current(target: Path, digest: str) -> Path | None:
    jar = target / JAR_NAME
    try:
        stamp = (target / STAMP_NAME).read_text(encoding="utf-8").strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return jar if stamp == digest and jar.is_file() else None


def ensure_udf_jar(settings: Settings, *, quiet: bool = False) -> Path:
    """Compile the jar if the cache lacks it or holds one of other sources; return its path."""
    sources = _sources()
    if not sources:
        raise JarSetupError(f"no Java sources under {SOURCE_DIR}")
    digest = _digest(sources)
    target = udf_dir(settings)
    jar = _current(target, digest)
    if jar is not None:
        return jar
    settings.jars_dir.mkdir(parents=True, exist_ok=True)
    with locked(settings.jars_dir / ".udf.lock"):
        jar = _current(target, digest)
        if jar is not None:
            return jar
        javac = require_tool("javac")
        scratch = Path(tempfile.mkdtemp(prefix=".udf-", dir=settings.jars_dir))
        try:
            if not quiet:
                print(f"compiling the project's Spark functions into {target} ...", flush=True)
            classes = scratch / "classes"
            _compile(javac, sources, classes)
            _package(classes, scratch / JAR_NAME)
            shutil.rmtree(classes)
            (scratch / STAMP_NAME).write_text(digest + "\n", encoding="utf-8")
            scratch.chmod(0o755)  # mkdtemp's 0700 would hide the cache from other users
            swap_in(scratch, target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return target / JAR_NAME


def _compile(javac: str, sources: list[Path], classes: Path) -> None:
    command = [
        javac,
        "--release",
        JAVA_RELEASE,
        "-encoding",
        "UTF-8",
        "-nowarn",
        "-cp",
        str(_pyspark_jars() / "*"),
        "-d",
        str(classes),
        *(str(s) for s in sources),
    ]
    returncode, tail = run_quietly(command, f"javac ({javac})")
    if returncode != 0:
        raise JarSetupError(f"javac failed (exit {returncode}) on {SOURCE_DIR}:\n{tail}")


def _package(classes: Path, jar: Path) -> None:
    """A jar is a zip of the class files (no manifest needed on a classpath)."""
    with zipfile.ZipFile(jar, "w", zipfile.ZIP_DEFLATED) as out:
        for path in sorted(classes.rglob("*.class")):
            out.write(path, path.relative_to(classes).as_posix())
