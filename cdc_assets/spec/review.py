"""Review a change to table specs (two files, two directories or two git revisions): the evolution
plan of every table, for the CI of a repository of specs.

A changed spec file is the next version as written, so besides being a supported evolution it
must equal what ``apply_plan`` makes of the old version: a soft-dropped column stays in the file
with ``dropped: true``, and new columns take the next ids.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from cdc_assets.errors import CdcAssetsError, SpecError
from cdc_assets.schema.evolution import EvolutionPlan, Rejection, apply_plan, classify
from cdc_assets.spec.ddl_import import read_audit
from cdc_assets.spec.load import load_spec_text
from cdc_assets.spec.models import TableSpec


@dataclass(frozen=True)
class SpecText:
    """One spec file's text and where it came from (a path, or ``rev:path``)."""

    label: str
    text: str


@dataclass(frozen=True)
class TableReview:
    """The verdict on one table: its plan, or a note for added, removed or unreadable specs."""

    name: str
    plan: EvolutionPlan | None = None
    note: str | None = None
    ok: bool = True

    def describe(self) -> str:
        if self.plan is not None:
            return self.plan.describe()
        return f"{self.name}: {self.note}"


def review_pair(old: SpecText, new: SpecText, audit_ddl: Sequence[str] = ()) -> TableReview:
    """The plan from one spec version to the next."""
    try:
        current = load_spec_text(old.text, old.label)
    except SpecError as err:
        return TableReview(old.label, note=f"the old version is invalid: {err}", ok=False)
    try:
        proposed = load_spec_text(new.text, new.label)
    except SpecError as err:
        return TableReview(current.name, note=f"the new version is invalid: {err}", ok=False)
    renames = read_audit(audit_ddl, current).renames if audit_ddl else {}
    plan = classify(current, proposed, renames)
    if plan.supported and plan.changes:
        extra = _not_as_evolved(apply_plan(current, plan), proposed)
        plan = replace(plan, rejections=plan.rejections + tuple(extra))
    return TableReview(current.name, plan, ok=plan.supported)


def review_sets(
    old: Mapping[str, SpecText], new: Mapping[str, SpecText], audit_ddl: Sequence[str] = ()
) -> list[TableReview]:
    """Every table of two sets of spec files keyed by file name (without ``.yaml``)."""
    out = []
    for name in sorted(old.keys() | new.keys()):
        if name not in new:
            out.append(TableReview(name, note="spec removed; its Iceberg tables are left as is"))
        elif name not in old:
            out.append(_review_added(name, new[name]))
        else:
            out.append(review_pair(old[name], new[name], audit_ddl))
    return out


def directory_specs(directory: Path) -> dict[str, SpecText]:
    """The spec files of a directory."""
    if not directory.is_dir():
        raise CdcAssetsError(f"{directory}: not a directory")
    return {
        p.stem: SpecText(str(p), p.read_text(encoding="utf-8"))
        for p in sorted(directory.glob("*.yaml"))
    }


def git_specs(rev: str, directory: str, cwd: Path | None = None) -> dict[str, SpecText]:
    """The spec files of a directory at a git revision (none if it has no such directory)."""
    listing = git(["ls-tree", "--name-only", "--full-name", rev, "--", f"{directory}/"], cwd)
    out = {}
    for path in listing.splitlines():
        if path.endswith(".yaml"):
            out[Path(path).stem] = SpecText(f"{rev}:{path}", git(["show", f"{rev}:{path}"], cwd))
    return out


def git(args: list[str], cwd: Path | None, *, check: bool = True, stdin: str | None = None) -> str:
    """The output of ``git args`` run in ``cwd``; CdcAssetsError with git's message when it
    fails (unless not ``check``: then what it printed, possibly nothing)."""
    try:
        done = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, check=False, input=stdin
        )
    except FileNotFoundError:
        raise CdcAssetsError("git is not installed") from None
    if done.returncode != 0 and check:
        raise CdcAssetsError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def _review_added(name: str, new: SpecText) -> TableReview:
    try:
        spec = load_spec_text(new.text, new.label)
    except SpecError as err:
        return TableReview(name, note=f"new spec is invalid: {err}", ok=False)
    return TableReview(name, note=f"new table, onboarded at version {spec.spec_version}")


def _not_as_evolved(evolved: TableSpec, proposed: TableSpec) -> list[Rejection]:
    """Why a spec file differs from the evolved spec it should be."""
    if evolved == proposed:
        return []
    written = {c.id: c for c in proposed.columns}
    by_name = {c.name: c for c in proposed.columns}
    out = []
    for c in evolved.columns:
        mine = written.get(c.id)
        if mine == c:
            continue
        if c.dropped and mine is None:
            reason = "is soft-dropped: keep it in the spec with `dropped: true` (Iceberg keeps it)"
        elif mine is None and c.name in by_name:
            reason = f"new columns take the next ids: give it id {c.id}"
        else:
            want = c.model_dump(mode="json", exclude_defaults=True)
            reason = f"the evolved spec has {want}"
        out.append(Rejection(c.name, reason))
    if not out:
        order = ", ".join(c.name for c in evolved.columns)
        out.append(Rejection(None, f"the evolved spec differs: columns in order {order}"))
    return out
