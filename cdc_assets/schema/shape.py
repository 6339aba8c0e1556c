"""Has the source changed shape? One decision for push detection (the `schema_changes` sensor)
and pull detection (the `check_schema_drift` job), so the two can never disagree (pure).

The source's shape arrives as a CREATE TABLE (from Debezium's schema-change records, the schema
embedded in row events, or information_schema) with the DDLs that led there as the audit trail
(renames are told from drop + add by them). It asks for an evolution when the plan from the spec
to it has changes, or has rejections: an evolution run then records and reports them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cdc_assets.errors import CdcAssetsError
from cdc_assets.schema.changes import EvolutionPlan
from cdc_assets.spec.ddl_import import plan_from_ddl
from cdc_assets.spec.models import TableSpec


@dataclass(frozen=True)
class ShapeVerdict:
    changed: bool  # start an evolution
    plan: EvolutionPlan | None  # None when the shape could not be read
    error: str | None = None

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
