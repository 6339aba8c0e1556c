"""Build a schema package with the standard build tooling (``build``) and publish it to
a file-based package index laid out as PEP 503 describes (``<root>/simple/<project>/``), so
``pip install --index-url file://<root>/simple '<package>==<version>'`` installs it.

A version is published once. Publishing it again with the same schema is a no-op; with another
schema it is an `ArtifactError` and the published files stay as they are. What counts is the
schema (the Avro and JSON schemas), not the generated code around it, so a newer cdc-assets can
still publish the next versions next to older ones.

Publishing rewrites two index pages, the root's and the package's, each replaced whole under a
lock on the index: pip never reads a half-written page, and two publishers (threads of
``publish_tables``, or two runs) never drop each other's package from the root page. A fleet's
onboarding builds its packages a few at a time (``publish_tables``): each build runs the build
backend in a process of its own for about a third of a second, the bulk of onboarding a table.
"""

from __future__ import annotations

import fcntl
import html
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cdc_assets.schema.artifacts import Artifact, ArtifactError, render_artifact
from cdc_assets.schema.views import RelationSchema, table_schema
from cdc_assets.spec.models import TableSpec

MANIFEST_SUFFIX = ".schema-sha256"
LOCK_FILE = ".index.lock"
# Package builds at once in ``publish_tables``: each is a process of its own, mostly CPU.
BUILDS_AT_ONCE = max(1, min(4, os.cpu_count() or 1))


@dataclass(frozen=True)
class Published:
    distribution: str
    version: str
    wheel: Path
    created: bool  # False: this version was already published with the same schema


def normalized(distribution: str) -> str:
    """PEP 503's normalized project name."""
    return re.sub(r"[-_.]+", "-", distribution).lower()


def schema_digest(artifact: Artifact) -> str:
    import hashlib

    h = hashlib.sha256()
    for path in sorted(p for p in artifact.files if p.endswith((".avsc", ".json"))):
        # The version is in the schema docs; the content that must not change is the rest.
        text = artifact.files[path].replace(artifact.version, "<version>")
        h.update(path.encode() + b"\0" + text.encode() + b"\0")
    return h.hexdigest()


def published_versions(index_root: Path, distribution: str) -> dict[str, str]:
    """Version -> schema digest of every published version of a package."""
    project = index_root / "simple" / normalized(distribution)
    if not project.is_dir():
        return {}
    return {
        p.name.removesuffix(MANIFEST_SUFFIX): p.read_text(encoding="utf-8").strip()
        for p in project.glob(f"*{MANIFEST_SUFFIX}")
    }


def view_version(index_root: Path, artifact: Artifact) -> str:
    """A view's version: the published one with this schema, else one past the newest."""
    digest = schema_digest(artifact)
    versions = published_versions(index_root, artifact.distribution)
    for version, known in versions.items():
        if known == digest:
            return version
    newest = max((int(v.split(".")[0]) for v in versions), default=0)
    return f"{newest + 1}.0.0"


def write_sources(artifact: Artifact, source: Path) -> None:
    """The rendered package's files under ``source``, ready for a build."""
    for path, text in artifact.files.items():
        target = source / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


def build_wheel(artifact: Artifact, out_dir: Path) -> Path:
    """A wheel of the rendered package, built by ``build``'s own API in this environment
    (``python -m build --wheel --no-isolation`` without its process: half the time) and the
    backend's hook process, whose output only surfaces in the error of a failed build."""
    from build import BuildBackendException, BuildException, ProjectBuilder
    from pyproject_hooks import quiet_subprocess_runner

    with tempfile.TemporaryDirectory(prefix="cdc-artifact-") as tmp:
        source = Path(tmp) / "src"
        write_sources(artifact, source)
        try:
            built = ProjectBuilder(source, runner=quiet_subprocess_runner).build("wheel", tmp)
        except BuildBackendException as exc:
            output = getattr(exc.exception, "output", None) or b""
            detail = output.decode(errors="replace") if isinstance(output, bytes) else str(output)
            raise ArtifactError(
                f"building {artifact.distribution} {artifact.version} failed: {exc}\n"
                + detail[-3000:]
            ) from None
        except BuildException as exc:
            raise ArtifactError(
                f"building {artifact.distribution} {artifact.version} failed: {exc}"
            ) from None
        out_dir.mkdir(parents=True, exist_ok=True)
        target = out_dir / Path(built).name
        shutil.copy2(built, target)
        return target


def publish(artifact: Artifact, index_root: Path) -> Published:
    """Build and publish one version into the index (see the module docstring)."""
    project = index_root / "simple" / normalized(artifact.distribution)
    digest = schema_digest(artifact)
    known = published_versions(index_root, artifact.distribution).get(artifact.version)
    if known is not None:
        if known != digest:
            raise ArtifactError(
                f"{artifact.distribution} {artifact.version} is already published with another "
                f"schema ({project}): a published version never changes; publish a new version"
            )
        wheel = next(project.glob(f"{artifact.module}-{artifact.version}-*.whl"))
        return Published(artifact.distribution, artifact.version, wheel, created=False)
    with tempfile.TemporaryDirectory(prefix="cdc-publish-") as tmp:
        built = build_wheel(artifact, Path(tmp))
        project.mkdir(parents=True, exist_ok=True)
        wheel = project / built.name
        shutil.copy2(built, wheel)
    (project / f"{artifact.version}{MANIFEST_SUFFIX}").write_text(digest + "\n", encoding="utf-8")
    write_index(index_root, project)
    return Published(artifact.distribution, artifact.version, wheel, created=True)


def publish_tables(specs: Sequence[TableSpec], index_root: Path) -> list[Published]:
    """``publish_table`` of each spec, ``BUILDS_AT_ONCE`` builds at a time; in spec order. The
    first failure is raised once the others are done (their packages stay published)."""
    if len(specs) <= 1:
        return [publish_table(spec, index_root) for spec in specs]
    with ThreadPoolExecutor(max_workers=BUILDS_AT_ONCE, thread_name_prefix="publish") as pool:
        futures = [pool.submit(publish_table, spec, index_root) for spec in specs]
    return [f.result() for f in futures]


@contextmanager
def _index_lock(index_root: Path) -> Iterator[None]:
    """Exclusive hold of the index's pages, across threads and processes."""
    index_root.mkdir(parents=True, exist_ok=True)
    with open(index_root / LOCK_FILE, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _replace_text(path: Path, text: str) -> None:
    """Write ``path`` whole: a reader sees the old page or the new one, never part of one."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


def write_index(index_root: Path, project: Path | None = None) -> None:
    """The PEP 503 pages: one link per project on the root page, one link per file on a
    project's page. Only ``project``'s page is rewritten when given (a publish touches one
    package; rewriting all of them made a fleet's onboarding quadratic), else every one."""
    simple = index_root / "simple"
    with _index_lock(index_root):
        projects = sorted(p for p in simple.iterdir() if p.is_dir()) if simple.is_dir() else []
        links = "\n".join(
            f'<a href="{html.escape(p.name)}/">{html.escape(p.name)}</a><br/>' for p in projects
        )
        _replace_text(simple / "index.html", _page("Simple index", links))
        for page in [project] if project is not None else projects:
            files = "\n".join(
                f'<a href="{html.escape(w.name)}">{html.escape(w.name)}</a><br/>'
                for w in sorted(page.glob("*.whl"))
            )
            _replace_text(page / "index.html", _page(page.name, files))


def _page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html><head><meta name="pypi:repository-version" content="1.0">'
        f"<title>{html.escape(title)}</title></head>\n<body>\n{body}\n</body></html>\n"
    )


def publish_table(spec: TableSpec, index_root: Path) -> Published:
    """The table's package at its spec version (``<spec_version>.0.0``)."""
    return publish(
        render_artifact(table_schema(spec, pipeline_columns=False), f"{spec.spec_version}.0.0"),
        index_root,
    )


def publish_view(schema: RelationSchema, index_root: Path) -> Published:
    """The view's package: the version that has this schema, or the next one."""
    draft = render_artifact(schema, "0.0.0")
    return publish(render_artifact(schema, view_version(index_root, draft)), index_root)
