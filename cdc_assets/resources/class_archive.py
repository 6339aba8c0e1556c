"""The class-data-sharing archive a local Spark driver maps, when the jar cache holds one made
for its JVM, PySpark and jars (`jars.class_archive` makes it; `SparkResource` passes it to
`resources.config.spark_conf`)."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from cdc_assets.settings import Settings

ARCHIVE_DIR = "class-archive"


def _java() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else None
    if found is None or not found.exists():
        which = shutil.which("java")
        found = Path(which) if which else None
    return found.resolve() if found is not None else None


def _digest(jars: Sequence[str]) -> str | None:
    """What an archive is valid for: the JVM binary, PySpark's version and every jar."""
    import pyspark

    java = _java()
    if java is None:
        return None
    parts = [f"{java}:{java.stat().st_size}:{java.stat().st_mtime_ns}", pyspark.__version__]
    for jar in sorted(str(Path(j).resolve()) for j in jars):
        stat = Path(jar).stat()
        parts.append(f"{jar}:{stat.st_size}:{stat.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def archive_path(settings: Settings, jars: Sequence[str]) -> Path | None:
    """Where the archive for these jars is (or would be); None without a JVM to key it by."""
    digest = _digest(jars)
    return None if digest is None else settings.jars_dir / ARCHIVE_DIR / f"driver-{digest}.jsa"


def existing_archive(settings: Settings, jars: Sequence[str]) -> Path | None:
    """The archive a local driver with these jars may map, when `ensure_archive` made it."""
    try:
        path = archive_path(settings, jars)
    except OSError:  # a jar gone since the list was made: no archive for this list
        return None
    return path if path is not None and path.is_file() else None
