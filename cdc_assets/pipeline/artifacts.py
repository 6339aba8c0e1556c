"""Build a schema package with the standard build tooling (``python -m build``) and publish it to
a file-based package index laid out as PEP 503 describes (``<root>/simple/<project>/``), so
``pip install --index-url file://<root>/simple '<package>==<version>'`` installs it.

A version is published once. Publishing it again with the same schema is a no-op; with another
schema it is an `ArtifactError` and the published files stay as they are. What counts is the
schema (the Avro and JSON schemas), not the generated code around it, so a newer cdc-assets can
still publish the next versions next to older ones.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cdc_assets.schema.artifacts import Artifact, ArtifactError, render_artifact
from cdc_assets.schema.views import RelationSchema, table_schema
from cdc_assets.spec.models import TableSpec

MANIFEST_SUFFIX = ".schema-sha256"


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


def build_wheel(artifact: Artifact, out_dir: Path) -> Path:
    """``python -m build --wheel`` of the rendered package (no network: the build runs in this
    environment, whose setuptools builds it)."""
    with tempfile.TemporaryDirectory(prefix="cdc-artifact-") as tmp:
        source = Path(tmp) / "src"
        for path, text in artifact.files.items():
            target = source / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "build",
                "--wheel",
                "--no-isolation",
                "--outdir",
                tmp,
                str(source),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise ArtifactError(
                f"building {artifact.distribution} {artifact.version} failed:\n"
                + (done.stderr or done.stdout)[-3000:]
            )
        wheels = list(Path(tmp).glob("*.whl"))
        if len(wheels) != 1:
            raise ArtifactError(f"building {artifact.distribution} made {len(wheels)} wheels")
        out_dir.mkdir(parents=True, exist_ok=True)
        target = out_dir / wheels[0].name
        shutil.copy2(wheels[0], target)
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
    write_index(index_root)
    return Published(artifact.distribution, artifact.version, wheel, created=True)


def write_index(index_root: Path) -> None:
    """The PEP 503 pages: one link per project, one link per file of a project."""
    simple = index_root / "simple"
    projects = sorted(p for p in simple.iterdir() if p.is_dir()) if simple.is_dir() else []
    links = "\n".join(
        f'<a href="{html.escape(p.name)}/">{html.escape(p.name)}</a><br/>' for p in projects
    )
    (simple / "index.html").write_text(_page("Simple index", links), encoding="utf-8")
    for project in projects:
        files = "\n".join(
            f'<a href="{html.escape(w.name)}">{html.escape(w.name)}</a><br/>'
            for w in sorted(project.glob("*.whl"))
        )
        (project / "index.html").write_text(_page(project.name, files), encoding="utf-8")


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
