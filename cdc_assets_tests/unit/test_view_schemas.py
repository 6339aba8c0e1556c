"""View schemas derived from their base tables through the view's plan: what projections, renames,
joins, filters and functions keep or change, views over views in any order, and the errors."""

from __future__ import annotations

import pytest

from cdc_assets.schema.views import (
    RelationSchema,
    SchemaColumn,
    ViewDefinition,
    ViewError,
    derive_all,
    enum_values,
    table_schema,
)
from cdc_assets.spec import load_spec_text

pytestmark = pytest.mark.unit

USERS = load_spec_text(
    """
spec_version: 1
name: users
source: {connector: mysql, database: app, table: users, topic: app.app.users}
columns:
  - {id: 1, name: id, type: bigint, nullable: false}
  - {id: 2, name: Email, type: varchar(255), nullable: false, comment: login address,
     sink: {name: email}}
  - {id: 3, name: status, type: "enum('active','banned')"}
  - {id: 4, name: score, type: int}
primary_key: [id]
sink: {namespace: app}
""",
    "users.yaml",
)
ORDERS = RelationSchema(
    "shop.orders",
    (
        SchemaColumn("order_id", "bigint", nullable=False),
        SchemaColumn("user_id", "bigint", nullable=False),
        SchemaColumn("amount", "decimal(12,2)"),
    ),
)


def view(name: str, sql: str) -> ViewDefinition:
    return ViewDefinition(name, sql, f"views/{name}.sql")


def derive(
    *views: ViewDefinition, tables: tuple[RelationSchema, ...] = ()
) -> dict[str, RelationSchema]:
    return derive_all([table_schema(USERS), ORDERS, *tables], list(views))


def test_a_base_table_keeps_source_casing_enums_docs_and_nullability() -> None:
    users = table_schema(USERS)
    email = users.column("email")
    assert email == SchemaColumn("email", "string", False, "Email", "login address", None)
    assert users.column("status") is not None
    assert users.column("status").enum == ("active", "banned")  # type: ignore[union-attr]
    assert users.column("id").nullable is False  # type: ignore[union-attr]
    assert enum_values("ENUM('a','it''s')") == ("a", "it's")


def test_projection_and_rename_keep_everything_but_the_name() -> None:
    out = derive(view("app.v", "SELECT id, Email AS Login, status FROM app.users WHERE score > 1"))
    cols = {c.name: c for c in out["app.v"].columns}
    assert list(cols) == ["id", "login", "status"]
    assert cols["login"].display == "Login"
    assert (cols["login"].type, cols["login"].nullable, cols["login"].doc) == (
        "string",
        False,
        "login address",
    )
    assert cols["status"].enum == ("active", "banned")
    assert out["app.v"].reads == ("app.users",)


def test_joins_concatenate_and_the_outer_side_becomes_nullable() -> None:
    out = derive(
        view(
            "app.user_orders",
            "SELECT u.id, u.Email, o.* FROM app.users u "
            "LEFT JOIN shop.orders o ON o.user_id = u.id",
        )
    )
    cols = {c.name: c for c in out["app.user_orders"].columns}
    assert list(cols) == ["id", "email", "order_id", "user_id", "amount"]
    assert cols["id"].nullable is False
    assert cols["email"].display == "Email"
    assert cols["order_id"].nullable is True  # the outer side
    inner = derive(
        view("app.j", "SELECT o.order_id FROM app.users u JOIN shop.orders o ON o.user_id = u.id")
    )
    assert inner["app.j"].columns[0].nullable is False


def test_functions_infer_types_and_prove_what_they_can() -> None:
    sql = (
        "SELECT coalesce(score, 0) AS score0, score + 1 AS next, CAST(id AS STRING) AS id_text, "
        "CASE WHEN score > 5 THEN 'high' ELSE 'low' END AS band, "
        "coalesce(status, 'active') AS state, upper(Email) AS shout FROM app.users"
    )
    cols = {c.name: c for c in derive(view("app.f", sql))["app.f"].columns}
    assert cols["score0"].type in ("int", "bigint")  # sqlglot's inference of COALESCE(int, 0)
    assert cols["score0"].nullable is False
    assert (cols["next"].type, cols["next"].nullable) == ("int", True)
    assert (cols["id_text"].type, cols["id_text"].nullable) == ("string", False)
    assert (cols["band"].enum, cols["band"].nullable) == (("high", "low"), False)
    assert (cols["state"].enum, cols["state"].nullable) == (("active", "banned"), False)
    assert (cols["shout"].type, cols["shout"].nullable, cols["shout"].enum) == (
        "string",
        False,
        None,
    )
    counted = derive(view("app.c", "SELECT status, count(*) AS n FROM app.users GROUP BY status"))
    assert counted["app.c"].columns[1].nullable is False


def test_views_over_views_in_any_order_follow_the_current_table() -> None:
    """The seed's E1..E4: T, V1 = SELECT * FROM T, V2 = SELECT * FROM V1, then ALTER TABLE T;
    seen in the order E1, E3, E4, E2, both views end on T's new schema."""
    v2 = view("app.v2", "SELECT * FROM app.v1")
    v1 = view("app.v1", "SELECT * FROM app.users")
    before = derive(v2, v1)
    data = ["id", "email", "status", "score"]
    # SELECT * of base returns its change columns too (_op, the source position, ...)
    change = [c.name for c in before["app.users"].columns[len(data) :]]
    assert change[0] == "_op"
    assert [c.name for c in before["app.v2"].columns] == [*data, *change]
    altered = USERS.model_copy(
        update={
            "spec_version": 2,
            "columns": [
                *USERS.columns,
                USERS.columns[3].model_copy(update={"id": 5, "name": "tier"}),
            ],
        }
    )
    after = derive_all([table_schema(altered), ORDERS], [v2, v1])
    assert [c.name for c in after["app.v2"].columns] == [*data, "tier", *change]
    assert after["app.v2"].reads == ("app.v1",)


@pytest.mark.parametrize(
    ("views", "message"),
    [
        ([view("app.b", "SELEC id FROM app.users")], "does not parse"),
        ([view("app.b", "SELECT id FROM app.nope")], "unknown table or view app.nope"),
        ([view("app.b", "SELECT nope FROM app.users")], "nope"),
        ([view("app.b", "SELECT id FROM users")], "needs its namespace"),
        (
            [view("app.a", "SELECT * FROM app.b"), view("app.b", "SELECT * FROM app.a")],
            "cycle: app.a, app.b",
        ),
        ([view("app.b", "SELECT id, id FROM app.users")], "appears twice"),
        ([view("app.users", "SELECT id FROM shop.orders")], "named like tables"),
    ],
)
def test_bad_views_name_the_file(views: list[ViewDefinition], message: str) -> None:
    with pytest.raises(ViewError, match=message):
        derive(*views)
