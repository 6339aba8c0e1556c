"""JVM dependencies (Spark extras, the Kafka broker) fetched by Maven into the project's jar cache.

A stamp holding the pom's sha256 makes a repeated call a no-op that runs no process.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cdc_assets.errors import JarSetupError, ToolMissingError
from cdc_assets.settings import Settings

JVM_DIR = Path(__file__).parent.parent / "jvm"
KINDS = ("spark", "kafka", "connect", "rest-catalog")
STAMP_NAME = ".stamp"
_OUTPUT_TAIL_LINES = 40

_INSTALL_HINTS = {
    "java": "install a Java 17 JDK (Debian: apt-get install openjdk-17-jdk-headless)",
    "javac": "install a Java 17 JDK, not just a JRE (Debian: openjdk-17-jdk-headless)",
    "mvn": "install Apache Maven (Debian: apt-get install maven)",
}


def require_tool(name: str) -> str:
    """Full path of executable ``name``; ToolMissingError saying what to install if absent."""
    found = shutil.which(name)
    if found is None:
        hint = _INSTALL_HINTS.get(name, f"install {name}")
        raise ToolMissingError(f"{name} not found on PATH: {hint}")
    return found


def pom_path(kind: str) -> Path:
    """The pom describing the jars of ``kind`` (one of KINDS)."""
    if kind not in KINDS:
        raise ValueError(f"unknown jar kind {kind!r}; expected one of {', '.join(KINDS)}")
    return JVM_DIR / kind / "pom.xml"


def ensure_jars(kind: str, settings: Settings, *, quiet: bool = False) -> list[Path]:
    """Make sure the jars of ``kind`` are in ``settings.jars_dir / kind``; return them sorted."""
    pom = pom_path(kind)
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()
    target = settings.jars_dir / kind

    jars = _current_jars(target, digest)
    if jars:
        return jars

    settings.jars_dir.mkdir(parents=True, exist_ok=True)
    with locked(settings.jars_dir / f".{kind}.lock"):
        # Another process may have filled the cache while this one waited for the lock.
        jars = _current_jars(target, digest)
        if jars:
            return jars
        require_tool("java")
        mvn = require_tool("mvn")
        scratch = Path(tempfile.mkdtemp(prefix=f".{kind}-", dir=settings.jars_dir))
        try:
            if not quiet:
                print(f"fetching {kind} jars with Maven into {target} ...", flush=True)
            _run_maven(mvn, pom, scratch, kind)
            if not _jar_files(scratch):
                raise JarSetupError(f"Maven finished but copied no jars for {kind} from {pom}")
            (scratch / STAMP_NAME).write_text(digest + "\n", encoding="utf-8")
            scratch.chmod(0o755)  # mkdtemp's 0700 would hide the cache from other users
            swap_in(scratch, target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return _jar_files(target)


def cached_spark_jars(settings: Settings) -> list[Path]:
    """The jars of `spark_jars` that the cache holds now, without fetching anything."""
    return sorted(p for kind in ("spark", "udf") for p in (settings.jars_dir / kind).glob("*.jar"))


def kafka_classpath(settings: Settings) -> str:
    """Java ``-cp`` value for the Kafka broker and its tools."""
    ensure_jars("kafka", settings)
    return str(settings.jars_dir / "kafka" / "*")


def jar_cache_size(settings: Settings) -> int:
    """Bytes used by the jar cache (0 when it does not exist)."""
    total = 0
    for root, _dirs, files in os.walk(settings.jars_dir):
        for name in files:
            try:
                total += (Path(root) / name).stat().st_size
            except FileNotFoundError:
                continue  # removed by a concurrent refresh while walking
    return total


def _jar_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.suffix == ".jar" and p.is_file())


def _current_jars(target: Path, digest: str) -> list[Path]:
    """The cached jars if the stamp matches the pom, else an empty list."""
    try:
        stamp = (target / STAMP_NAME).read_text(encoding="utf-8").strip()
    except (FileNotFoundError, NotADirectoryError):
        return []
    return _jar_files(target) if stamp == digest else []


def _run_maven(mvn: str, pom: Path, output_dir: Path, kind: str) -> None:
    command = [
        mvn,
        "-B",
        "-q",
        "-Dstyle.color=never",
        "-f",
        str(pom),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={output_dir}",
    ]
    returncode, tail = run_quietly(command, f"Maven ({mvn}) for the {kind} jars")
    if returncode != 0:
        raise JarSetupError(
            f"Maven failed (exit {returncode}) fetching the {kind} jars from {pom}:\n{tail}"
        )


def run_quietly(command: list[str], what: str) -> tuple[int, str]:
    """Run a build tool with its output captured: its exit code and the tail of its output.
    JarSetupError naming ``what`` when it cannot be started at all."""
    try:
        done = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
    except OSError as exc:
        raise JarSetupError(f"could not run {what}: {exc}") from exc
    return done.returncode, "\n".join(done.stdout.splitlines()[-_OUTPUT_TAIL_LINES:])


def swap_in(new_dir: Path, target: Path) -> None:
    """Put ``new_dir`` at ``target``; readers see either the old or the new complete directory."""
    if not target.exists():
        new_dir.rename(target)
        return
    # A non-empty directory cannot be renamed over, so move the old one aside first.
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}-old-", dir=target.parent))
    old.rmdir()
    target.rename(old)
    try:
        new_dir.rename(target)
    except OSError:
        old.rename(target)
        raise
    shutil.rmtree(old, ignore_errors=True)


@contextmanager
def locked(lock_file: Path) -> Iterator[None]:
    with lock_file.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
