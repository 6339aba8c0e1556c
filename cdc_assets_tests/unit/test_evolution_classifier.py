"""The schema-evolution classifier as an explicit table of (old spec, new spec, expected plan).

Expected entries are ``Kind:column`` for a supported change (in plan order) and
``reject:column:text`` for a rejection whose reason contains ``text`` (column empty for
table-level reasons).
"""

from __future__ import annotations

from typing import Any

import pytest

from cdc_assets.schema.evolution import EvolutionPlan, apply_plan, classify
from cdc_assets.spec.models import TableSpec


def col(cid: int, name: str, type_: str = "int", **kw: Any) -> dict[str, Any]:
    return {"id": cid, "name": name, "type": type_, **kw}


ID = col(1, "id", "bigint", nullable=False)


def spec(*columns: dict[str, Any], version: int = 1, **top: Any) -> TableSpec:
    """A MySQL spec keyed by ``id`` with the given columns after it (unless id 1 is given)."""
    cols = list(columns) if any(c["id"] == 1 for c in columns) else [ID, *columns]
    connector = top.pop("connector", "mysql")
    data: dict[str, Any] = {
        "spec_version": version,
        "name": "t",
        "source": {"connector": connector, "database": "db", "table": "t", "topic": "db.db.t"},
        "columns": cols,
        "primary_key": top.pop("primary_key", ["id"]),
        "sink": {"namespace": "ns"},
    }
    data.update(top)
    return TableSpec.model_validate(data)


def evolve(*old: dict[str, Any], new: tuple[dict[str, Any], ...], **kw: Any) -> Any:
    """(old spec, new spec at version 2, renames); keyword args prefixed new_ go to new only."""
    renames = kw.pop("renames", None)
    both = {k: v for k, v in kw.items() if not k.startswith(("old_", "new_"))}
    old_kw = {k[4:]: v for k, v in kw.items() if k.startswith("old_")}
    new_kw = {k[4:]: v for k, v in kw.items() if k.startswith("new_")}
    new_version = new_kw.pop("version", 2)
    return (
        spec(*old, **both, **old_kw),
        spec(*new, version=new_version, **both, **new_kw),
        renames,
    )


def doc(struct: str) -> dict[str, Any]:
    return col(5, "doc", "json", sink={"type": struct})


DOC = doc("struct<color:string,size:int>")
A = col(2, "a")
B = col(3, "b", "varchar(10)")
AMOUNT = col(4, "amount", "decimal(12,2)")
SENSITIVE = {"pipeline": {"sensitive": True}}

ROWS: list[tuple[str, Any, tuple[str, ...]]] = [
    # --- supported ---------------------------------------------------------------------------
    ("no change", evolve(A, new=(A,), new_version=1), ()),
    ("add nullable at the end", evolve(A, new=(A, B)), ("AddColumn:b",)),
    ("add nullable first", evolve(A, new=(B, ID, A)), ("AddColumn:b",)),
    ("add nullable in the middle", evolve(A, AMOUNT, new=(A, B, AMOUNT)), ("AddColumn:b",)),
    (
        "add two columns",
        evolve(A, new=(A, B, col(4, "c", "date"))),
        ("AddColumn:b", "AddColumn:c"),
    ),
    ("int -> bigint", evolve(A, new=(col(2, "a", "bigint"),)), ("WidenType:a",)),
    (
        "int -> bigint on the key",
        evolve(col(1, "id", "int", nullable=False), new=(col(1, "id", "bigint", nullable=False),)),
        ("WidenType:id",),
    ),
    (
        "float -> double",
        evolve(col(2, "f", "float"), new=(col(2, "f", "double"),)),
        ("WidenType:f",),
    ),
    (
        "mysql float -> float(30) is a double",
        evolve(col(2, "f", "float"), new=(col(2, "f", "float(30)"),)),
        ("WidenType:f",),
    ),
    (
        "decimal precision up, same scale",
        evolve(AMOUNT, new=(col(4, "amount", "decimal(14,2)"),)),
        ("WidenType:amount",),
    ),
    (
        "postgres numeric precision up",
        evolve(
            col(2, "n", "numeric(12,2)"),
            new=(col(2, "n", "numeric(18,2)"),),
            connector="postgresql",
        ),
        ("WidenType:n",),
    ),
    (
        "sink override widened",
        evolve(
            col(2, "r", "decimal(5,4)", sink={"type": "decimal(9,4)"}),
            new=(col(2, "r", "decimal(5,4)", sink={"type": "decimal(12,4)"}),),
        ),
        ("WidenType:r",),
    ),
    ("required -> optional", evolve(col(2, "a", nullable=False), new=(A,)), ("MakeOptional:a",)),
    (
        "widen and make optional",
        evolve(col(2, "a", nullable=False), new=(col(2, "a", "bigint"),)),
        ("WidenType:a", "MakeOptional:a"),
    ),
    ("varchar longer", evolve(B, new=(col(3, "b", "varchar(40)"),)), ("ChangeSourceType:b",)),
    (
        "varchar shorter: still a string",
        evolve(B, new=(col(3, "b", "char(2)"),)),
        ("ChangeSourceType:b",),
    ),
    (
        "datetime(3) -> datetime(6)",
        evolve(col(2, "ts", "datetime(3)"), new=(col(2, "ts", "datetime(6)"),)),
        ("ChangeSourceType:ts",),
    ),
    (
        "int -> varchar when stored as string",
        evolve(
            col(2, "a", sink={"type": "string"}),
            new=(col(2, "a", "varchar(9)", sink={"type": "string"}),),
        ),
        ("ChangeSourceType:a",),
    ),
    ("dropped column is soft-dropped", evolve(A, B, new=(A,)), ("SoftDropColumn:b",)),
    (
        "required dropped column is soft-dropped",
        evolve(A, col(3, "b", nullable=False), new=(A,)),
        ("SoftDropColumn:b",),
    ),
    (
        "explicit dropped: true",
        evolve(A, B, new=(A, {**B, "dropped": True})),
        ("SoftDropColumn:b",),
    ),
    (
        "hard drop when the spec opts in",
        evolve(A, B, new=(A,), evolution={"drop_columns": "hard"}),
        ("DropColumn:b",),
    ),
    (
        "already soft-dropped stays",
        evolve(A, {**B, "dropped": True}, new=(A,), new_version=1),
        (),
    ),
    (
        "already soft-dropped goes with hard drops",
        evolve(A, {**B, "dropped": True}, new=(A,), evolution={"drop_columns": "hard"}),
        ("DropColumn:b",),
    ),
    (
        "rename proved by the audit trail",
        evolve(A, B, new=(A, col(3, "c", "varchar(10)", sink={"name": "b"})), renames={"b": "c"}),
        ("RenameColumn:c",),
    ),
    (
        "rename of a key column proved",
        evolve(
            A,
            new=(col(1, "pk", "bigint", nullable=False, sink={"name": "id"}), A),
            new_primary_key=["pk"],
            renames={"id": "pk"},
        ),
        ("RenameColumn:pk",),
    ),
    (
        "comment changes",
        evolve(A, new=(col(2, "a", comment="counter"),)),
        ("SetColumnAttribute:a",),
    ),
    (
        "default of an existing column changes",
        evolve(A, new=(col(2, "a", default="0"),)),
        ("SetColumnAttribute:a",),
    ),
    (
        "column marked sensitive in a sensitive pipeline",
        evolve(A, new=(col(2, "a", sensitive=True),), **SENSITIVE),
        ("SetColumnAttribute:a",),
    ),
    (
        "add a sensitive column to a sensitive pipeline",
        evolve(A, new=(A, col(3, "ssn", "char(9)", sensitive=True)), **SENSITIVE),
        ("AddColumn:ssn",),
    ),
    (
        "settings are not schema changes",
        evolve(A, new=(A,), new_owners=["team:x"], new_freshness={"sla_minutes": 5}),
        ("SetTableSetting:owners", "SetTableSetting:freshness"),
    ),
    (
        "drop one column, add another with a new id",
        evolve(A, B, new=(A, col(4, "c", "date"))),
        ("AddColumn:c", "SoftDropColumn:b"),
    ),
    # --- rejected ----------------------------------------------------------------------------
    (
        "bigint -> int narrows",
        evolve(col(2, "a", "bigint"), new=(A,)),
        ("reject:a:long -> int narrows the type",),
    ),
    (
        "double -> float narrows",
        evolve(col(2, "f", "double"), new=(col(2, "f", "float"),)),
        ("reject:f:double -> float narrows",),
    ),
    (
        "decimal precision down",
        evolve(AMOUNT, new=(col(4, "amount", "decimal(10,2)"),)),
        ("reject:amount:lowers the precision",),
    ),
    (
        "decimal scale up",
        evolve(AMOUNT, new=(col(4, "amount", "decimal(12,3)"),)),
        (
            "reject:amount:decimal(12,2) -> decimal(12,3) changes the scale; "
            "history would be re-scaled",
        ),
    ),
    (
        "decimal precision and scale up",
        evolve(AMOUNT, new=(col(4, "amount", "decimal(14,3)"),)),
        ("reject:amount:changes the scale",),
    ),
    (
        "string -> int",
        evolve(B, new=(col(3, "b", "int"),)),
        ("reject:b:varchar(10) -> int turns a string into a number",),
    ),
    (
        "string -> decimal",
        evolve(B, new=(col(3, "b", "decimal(10,2)"),)),
        ("reject:b:turns a string into a number",),
    ),
    (
        "int -> varchar",
        evolve(A, new=(col(2, "a", "varchar(11)"),)),
        ("reject:a:changes the type category (integer -> string)",),
    ),
    (
        "int -> double",
        evolve(A, new=(col(2, "a", "double"),)),
        ("reject:a:(integer -> floating point)",),
    ),
    (
        "unsigned int -> unsigned bigint (long -> decimal)",
        evolve(col(2, "u", "int unsigned"), new=(col(2, "u", "bigint unsigned"),)),
        ("reject:u:long -> decimal(20,0) changes the type category",),
    ),
    (
        "date -> datetime",
        evolve(col(2, "d", "date"), new=(col(2, "d", "datetime"),)),
        ("reject:d:date -> timestamp changes the type category",),
    ),
    (
        "timestamp -> timestamptz",
        evolve(col(2, "t", "timestamp"), new=(col(2, "t", "timestamptz"),), connector="postgresql"),
        ("reject:t:(timestamp without zone -> timestamp with zone)",),
    ),
    (
        "boolean -> int",
        evolve(col(2, "flag", "boolean"), new=(col(2, "flag", "int"),)),
        ("reject:flag:boolean -> int changes the type category",),
    ),
    (
        "transform changes",
        evolve(
            col(2, "ts", "bigint", sink={"transform": "epoch_millis_to_timestamp"}),
            new=(col(2, "ts", "bigint", sink={"transform": "epoch_micros_to_timestamp"}),),
        ),
        ("reject:ts:sink transform epoch_millis_to_timestamp -> epoch_micros_to_timestamp",),
    ),
    (
        "optional -> required",
        evolve(A, new=(col(2, "a", nullable=False),)),
        ("reject:a:optional -> required",),
    ),
    (
        "add a required column",
        evolve(A, new=(A, col(3, "b", nullable=False))),
        ("reject:b:a new column must be nullable",),
    ),
    (
        "add a column with a default",
        evolve(A, new=(A, col(3, "b", default="0"))),
        ("reject:b:added with default '0'",),
    ),
    (
        "add a sensitive column to a non-sensitive pipeline",
        evolve(
            A, new=(A, col(3, "ssn", "char(9)", sensitive=True)), new_pipeline={"sensitive": True}
        ),
        ("SetTableSetting:pipeline", "reject:ssn:sensitive column in a non-sensitive pipeline"),
    ),
    (
        "mark a column sensitive in a non-sensitive pipeline",
        evolve(A, new=(col(2, "a", sensitive=True),), new_pipeline={"sensitive": True}),
        ("SetTableSetting:pipeline", "reject:a:sensitive column in a non-sensitive pipeline"),
    ),
    (
        "unmark a sensitive column",
        evolve(col(2, "a", sensitive=True), new=(A,), **SENSITIVE),
        ("reject:a:sensitive -> not sensitive",),
    ),
    (
        "pipeline no longer sensitive",
        evolve(A, new=(A,), old_pipeline={"sensitive": True}),
        ("reject::pipeline.sensitive: true -> false",),
    ),
    (
        "key gains a column",
        evolve(
            col(2, "a", nullable=False),
            new=(col(2, "a", nullable=False),),
            new_primary_key=["id", "a"],
        ),
        ("reject::primary key (id) -> (id, a)",),
    ),
    (
        "key moves to another column",
        evolve(
            col(2, "a", nullable=False), new=(col(2, "a", nullable=False),), new_primary_key=["a"]
        ),
        ("reject::primary key (id) -> (a)",),
    ),
    (
        "key column dropped",
        evolve(
            col(2, "a", nullable=False),
            new=(col(2, "a", nullable=False),),
            old_primary_key=["id", "a"],
            new_primary_key=["id"],
            evolution={"drop_columns": "hard"},
        ),
        ("reject::primary key (id, a) -> (id)",),
    ),
    (
        "rename without proof",
        evolve(A, B, new=(A, col(3, "c", "varchar(10)", sink={"name": "b"}))),
        ("reject:b:renamed to c (id 3) without proof",),
    ),
    (
        "rename that also renames the Iceberg column",
        evolve(A, B, new=(A, col(3, "c", "varchar(10)")), renames={"b": "c"}),
        ("RenameColumn:c", "reject:c:Iceberg name b -> c"),
    ),
    (
        "name now carries another column's id",
        evolve(A, B, new=(col(3, "a"), col(2, "b", "varchar(10)"))),
        (
            "reject:a:has id 3, which belongs to column b",
            "reject:b:has id 2, which belongs to column a",
        ),
    ),
    (
        "same column under a new id",
        evolve(A, B, new=(A, col(7, "b", "varchar(10)"))),
        ("reject:b:id 3 -> 7: column ids are stable",),
    ),
    (
        "a soft-dropped column reappears",
        evolve(A, {**B, "dropped": True}, new=(A, B)),
        ("reject:b:reappears",),
    ),
    (
        "new column takes a soft-dropped column's Iceberg name",
        evolve(A, {**B, "dropped": True}, new=(A, col(4, "c", sink={"name": "b"}))),
        ("reject:c:its Iceberg name b is held by column b, which stays in Iceberg",),
    ),
    (
        "new column takes the Iceberg name of a column dropped now",
        evolve(A, B, new=(A, col(4, "c", sink={"name": "b"}))),
        ("SoftDropColumn:b", "reject:c:its Iceberg name b is held by column b"),
    ),
    (
        "with hard drops the Iceberg name is free again",
        evolve(A, B, new=(A, col(4, "c", sink={"name": "b"})), evolution={"drop_columns": "hard"}),
        ("AddColumn:c", "DropColumn:b"),
    ),
    (
        "Iceberg name changes",
        evolve(A, new=(col(2, "a", sink={"name": "a2"}),)),
        ("reject:a:Iceberg name a -> a2",),
    ),
    (
        "existing columns reordered",
        evolve(A, B, AMOUNT, new=(AMOUNT, A, B)),
        ("reject:amount:moved among the existing columns",),
    ),
    (
        "version not bumped",
        evolve(A, new=(A, B), new_version=1),
        ("AddColumn:b", "reject::a changed spec must be version 2"),
    ),
    (
        "another topic",
        evolve(
            A,
            new=(A,),
            new_version=1,
            new_source={"connector": "mysql", "database": "db", "table": "t", "topic": "db.db.t2"},
        ),
        ("reject::source.topic: 'db.db.t' -> 'db.db.t2' points the spec at another Kafka topic",),
    ),
    (
        "buckets change",
        evolve(A, new=(A,), new_base={"buckets": 32}),
        ("SetTableSetting:base", "reject::base partitioning bucket(16, id) -> bucket(32, id)"),
    ),
    # Nested types: a JSON column read as a struct (schema on read), a PostgreSQL array.
    (
        "nested field added",
        evolve(DOC, new=(doc("struct<color:string,size:int,gift:boolean>"),)),
        ("WidenType:doc",),
    ),
    (
        "nested field widened",
        evolve(DOC, new=(doc("struct<color:string,size:long>"),)),
        ("WidenType:doc",),
    ),
    (
        "nested field removed",
        evolve(DOC, new=(doc("struct<color:string>"),)),
        ("reject:doc:doc.size: a nested field cannot be removed",),
    ),
    (
        "nested field narrowed",
        evolve(doc("struct<color:string,size:long>"), new=(DOC,)),
        ("reject:doc:doc.size: long -> int is not a widening",),
    ),
    (
        "nested field changes category",
        evolve(DOC, new=(doc("struct<color:list<string>,size:int>"),)),
        ("reject:doc:doc.color: string -> list<string> changes the type category",),
    ),
    (
        "enum label added",
        evolve(col(2, "e", "enum('a','b')"), new=(col(2, "e", "enum('a','b','c')"),)),
        ("ChangeSourceType:e",),
    ),
    (
        "array element widened",
        evolve(col(2, "n", "integer[]"), new=(col(2, "n", "bigint[]"),), connector="postgresql"),
        ("WidenType:n",),
    ),
    (
        "array element narrowed",
        evolve(col(2, "n", "bigint[]"), new=(col(2, "n", "integer[]"),), connector="postgresql"),
        ("reject:n:n.element: long -> int is not a widening",),
    ),
]


def summary(plan: EvolutionPlan) -> list[str]:
    changes = [f"{type(c).__name__}:{c.name}" for c in plan.changes]
    return changes + [f"reject:{r.column or ''}:{r.reason}" for r in plan.rejections]


def matches(expected: tuple[str, ...], actual: list[str]) -> bool:
    if len(expected) != len(actual):
        return False
    for want, got in zip(expected, actual, strict=True):
        if want.startswith("reject:"):
            if not got.startswith("reject:"):
                return False
            _, column, text = want.split(":", 2)
            _, got_column, reason = got.split(":", 2)
            if got_column != column or text not in reason:
                return False
        elif want != got:
            return False
    return True


def test_the_table_covers_enough_cases() -> None:
    assert len(ROWS) >= 40
    kinds = {e.split(":")[0] for _, _, expected in ROWS for e in expected}
    assert kinds >= {
        "AddColumn",
        "WidenType",
        "ChangeSourceType",
        "MakeOptional",
        "SoftDropColumn",
        "DropColumn",
        "RenameColumn",
        "SetColumnAttribute",
        "SetTableSetting",
        "reject",
    }


@pytest.mark.parametrize(("case", "specs", "expected"), ROWS, ids=[r[0] for r in ROWS])
def test_classify(case: str, specs: Any, expected: tuple[str, ...]) -> None:
    old, new, renames = specs
    plan = classify(old, new, renames)
    actual = summary(plan)
    assert matches(expected, actual), f"{case}:\n{plan.describe()}"
    assert plan.supported == (not any(e.startswith("reject") for e in expected))


@pytest.mark.parametrize(
    ("case", "specs", "expected"),
    [r for r in ROWS if r[2] and not any(e.startswith("reject") for e in r[2])],
    ids=[r[0] for r in ROWS if r[2] and not any(e.startswith("reject") for e in r[2])],
)
def test_supported_plans_apply_to_the_proposed_spec(
    case: str, specs: Any, expected: tuple[str, ...]
) -> None:
    old, new, renames = specs
    evolved = apply_plan(old, classify(old, new, renames))
    assert evolved.spec_version == 2
    # Omitted columns stay soft-dropped, so the evolved spec may hold more than the proposed.
    kept = [c for c in evolved.columns if c.id in {n.id for n in new.columns}]
    assert [c.name for c in kept] == [c.name for c in new.columns if c.id in {k.id for k in kept}]
    assert classify(evolved, evolved).changes == ()


def test_apply_assigns_the_next_ids_and_keeps_drops_in_place() -> None:
    old = spec(A, B, AMOUNT, evolution={"drop_columns": "soft"})
    new = spec(col(9, "first"), ID, A, col(12, "c"), AMOUNT, version=2)
    evolved = apply_plan(old, classify(old, new))
    assert [(c.id, c.name, c.dropped) for c in evolved.columns] == [
        (5, "first", False),
        (1, "id", False),
        (2, "a", False),
        (6, "c", False),
        (3, "b", True),
        (4, "amount", False),
    ]


def test_apply_refuses_a_rejected_plan() -> None:
    from cdc_assets.errors import SpecError

    old = spec(AMOUNT)
    plan = classify(old, spec(col(4, "amount", "decimal(12,3)"), version=2))
    with pytest.raises(SpecError, match="rejected changes"):
        apply_plan(old, plan)


def test_describe_reads_as_a_review() -> None:
    old = spec(A, AMOUNT)
    plan = classify(old, spec(col(2, "a", "bigint"), col(4, "amount", "decimal(12,3)"), version=2))
    assert plan.describe().splitlines() == [
        "t: version 1 -> 2: REJECTED, no table is changed",
        "  ~ widen column a: int -> long (source type bigint)",
        "  ! column amount: decimal(12,2) -> decimal(12,3) changes the scale; "
        "history would be re-scaled",
    ]
    assert classify(old, old).describe() == "t: no changes (version 1)"


def test_applicable_changes_beside_a_refused_column_are_re_anchored() -> None:
    # An ambiguous rename blocks its candidate; other additions still apply, placed where the
    # blocked column would have gone (issue 53: decide per column).
    from cdc_assets.schema.changes import AddColumn, EvolutionPlan, Rejection
    from cdc_assets.spec.models import ColumnSpec

    first = AddColumn(ColumnSpec(id=9, name="nick", type="text"), "email")
    second = AddColumn(ColumnSpec(id=10, name="tier", type="text"), "nick")
    plan = EvolutionPlan(
        "users",
        1,
        (first, second),
        (Rejection("email", "disappears while nick is new", ("nick",)),),
    )
    applicable = plan.applicable
    assert applicable.supported
    assert applicable.changes == (AddColumn(second.column, "email"),)
    table_level = EvolutionPlan("users", 1, (first,), (Rejection(None, "key changed"),))
    assert table_level.applicable.changes == ()
