"""Has the source changed shape? One decision for push detection (the `schema_changes` sensor)
and pull detection (the `check_schema_drift` job), so the two can never disagree (pure).

The source's shape arrives as a CREATE TABLE (from Debezium's schema-change records, the schema
embedded in row events, or information_schema) with the DDLs that led there as the audit trail
(renames are told from drop + add by them). It asks for an evolution when the plan from the spec
to it has changes, or has rejections: an evolution run then records and reports them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cdc_assets.errors import CdcAssetsError
from cdc_assets.schema.changes import DropColumn, EvolutionPlan, SoftDropColumn
from cdc_assets.spec.ddl_import import plan_from_ddl
from cdc_assets.spec.models import TableSpec


@dataclass(frozen=True)
class ShapeVerdict:
    changed: bool  # start an evolution
    plan: EvolutionPlan | None  # None when the shape could not be read
    error: str | None = None

    @property
    def applicable(self) -> bool:
        """Whether an evolution would change something: a supported change, or one that can be
        applied beside the refused ones (`EvolutionPlan.applicable`). A shape that could not be
        read is left to the run, which reports it."""
        return self.plan is None or bool(self.plan.applicable.changes)

    def describe(self) -> str:
        if self.plan is None:
            return f"cannot read the source's shape: {self.error}"
        return self.plan.describe()


def shape_verdict(
    current: TableSpec,
    source_ddl: str,
    audit_ddl: Sequence[str] = (),
    *,
    types_only: bool = False,
) -> ShapeVerdict:
    """Whether ``source_ddl`` asks for an evolution of ``current``.

    ``types_only``: the shape comes from row events whose column names equal the spec's, so only
    types differ. Such events may be older than the spec (pull detection evolved it before a row
    of the new shape arrived) and then look like a narrowing: only a supported change counts, and
    a shape that cannot be read is not a change to start.
    """
    sensitive = [c.name for c in current.columns if c.sensitive]
    try:
        _, plan = plan_from_ddl(current, source_ddl, audit_ddl, sensitive=sensitive)
    except CdcAssetsError as err:
        return ShapeVerdict(not types_only, None, str(err))
    if types_only:
        return ShapeVerdict(plan.supported and bool(plan.changes), plan)
    return ShapeVerdict(bool(plan.changes) or not plan.supported, plan)


def leading_server(current: TableSpec, shapes: Mapping[str, str]) -> str | None:
    """Of several servers' CREATE TABLEs of one table (shards), the one pull detection reports:
    a shape evolution would refuse first (the evolution then fails naming that server), else the
    first that changed, else the first unchanged one. None when every server that differs only
    lacks columns and they do not all lack the same ones.

    A shard that only lacks columns another shard has is behind (its ALTER has not run yet),
    not a drop: the table evolves when the first shard shows an addition, as push does."""
    verdicts = {server: shape_verdict(current, ddl) for server, ddl in sorted(shapes.items())}
    refused = [s for s, v in verdicts.items() if v.plan is None or not v.plan.supported]
    changed = [s for s, v in verdicts.items() if v.changed]
    unchanged = [s for s, v in verdicts.items() if not v.changed]
    behind = {s for s in changed if _drops_only(verdicts[s].plan)}
    dropped_everywhere = (
        behind == set(verdicts) and len({_dropped(verdicts[s].plan) for s in behind}) == 1
    )
    if not dropped_everywhere:
        changed = [s for s in changed if s not in behind]
    return next(iter(refused or changed or unchanged), None)


def _drops_only(plan: EvolutionPlan | None) -> bool:
    return (
        plan is not None
        and bool(plan.changes)
        and all(isinstance(c, DropColumn | SoftDropColumn) for c in plan.changes)
    )


def _dropped(plan: EvolutionPlan | None) -> frozenset[str]:
    return frozenset(getattr(c, "name", "") for c in (plan.changes if plan else ()))
