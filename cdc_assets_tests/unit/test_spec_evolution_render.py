"""A table evolved v1 -> v2 -> v3 renders exactly what a table onboarded fresh at v3 renders:
Iceberg layouts of every layer, the Spark DDL, the pandera schema and the spec YAML."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from cdc_assets.schema.evolution import apply_plan, classify
from cdc_assets.schema.layers import all_layouts
from cdc_assets.schema.pandera_schema import render_pandera_schema
from cdc_assets.spec import load_spec_text, load_specs
from cdc_assets.spec.ddl_import import plan_from_ddl
from cdc_assets.spec.models import TableSpec
from cdc_assets.spec.versions import render_spec_yaml
from cdc_assets.sql.ddl import render_create_table, render_identifier_fields
from cdc_assets_tests.conftest import PROJECT_ROOT

V1 = """
spec_version: 1
name: payments
description: Card payments.
owners: ["team:billing"]
source:
  connector: postgresql
  database: pay
  schema: public
  table: payments
  topic: pay.public.payments
columns:
  - {id: 1, name: payment_id, type: bigint, nullable: false}
  - {id: 2, name: account_id, type: integer, nullable: false}
  - {id: 3, name: amount, type: "numeric(10,2)", nullable: false}
  - {id: 4, name: fee, type: real}
  - {id: 5, name: memo, type: text}
  - {id: 6, name: created_at, type: timestamptz, nullable: false}
primary_key: [payment_id]
sink:
  namespace: pay
base:
  buckets: 4
"""

# v2: the source widened three columns, dropped memo, added channel and relaxed created_at.
DDL_V2 = """CREATE TABLE public.payments (
    payment_id bigint NOT NULL,
    account_id bigint NOT NULL,
    amount numeric(14,2) NOT NULL,
    fee double precision,
    created_at timestamp with time zone,
    channel character varying(10),
    CONSTRAINT payments_pkey PRIMARY KEY (payment_id)
);"""

# v3: account_id renamed (proved by the audit trail), a column added at the end, a comment.
DDL_V3 = (
    DDL_V2.replace("account_id bigint", "customer_id bigint").replace(
        "channel character varying(10),",
        "channel character varying(10),\n    refunded_at timestamp with time zone,",
    )
    + "\nCOMMENT ON COLUMN public.payments.amount IS 'gross amount';"
)
# A column that disappears while another appears needs the audit trail to tell its drop.
AUDIT_V2 = [
    "ALTER TABLE public.payments ALTER COLUMN amount TYPE numeric(14,2);",
    "ALTER TABLE public.payments DROP COLUMN memo;",
    "ALTER TABLE public.payments ADD COLUMN channel varchar(10);",
]
AUDIT_V3 = [
    "ALTER TABLE public.payments RENAME COLUMN account_id TO customer_id;",
    "ALTER TABLE public.payments ADD COLUMN refunded_at timestamptz;",
]

FRESH_V3 = """
spec_version: 3
name: payments
description: Card payments.
owners: ["team:billing"]
source:
  connector: postgresql
  database: pay
  schema: public
  table: payments
  topic: pay.public.payments
columns:
  - {id: 1, name: payment_id, type: bigint, nullable: false}
  - {id: 2, name: customer_id, type: bigint, nullable: false, sink: {name: account_id},
      former_names: [account_id]}
  - {id: 3, name: amount, type: "decimal(14,2)", nullable: false, comment: gross amount}
  - {id: 4, name: fee, type: double precision}
  - {id: 5, name: memo, type: text, dropped: true}
  - {id: 6, name: created_at, type: timestamptz}
  - {id: 7, name: channel, type: varchar(10)}
  - {id: 8, name: refunded_at, type: timestamptz}
primary_key: [payment_id]
sink:
  namespace: pay
base:
  buckets: 4
"""


def evolved_v3() -> tuple[TableSpec, list[str]]:
    v1 = load_spec_text(V1, "v1")
    _, plan2 = plan_from_ddl(v1, DDL_V2, AUDIT_V2)
    assert plan2.supported, plan2.describe()
    v2 = apply_plan(v1, plan2)
    _, plan3 = plan_from_ddl(v2, DDL_V3, AUDIT_V3)
    assert plan3.supported, plan3.describe()
    return apply_plan(v2, plan3), [plan2.describe(), plan3.describe()]


def rendered(spec: TableSpec) -> dict[str, object]:
    layouts = all_layouts(spec)
    return {
        "layouts": layouts,
        "create": [render_create_table("cat", layout) for layout in layouts.values()],
        "identifier_fields": [render_identifier_fields("cat", x) for x in layouts.values()],
        "pandera": {layer: render_pandera_schema(spec, layer) for layer in layouts},
        "yaml": render_spec_yaml(spec),
    }


def test_the_plans_read_as_expected() -> None:
    _, (plan2, plan3) = evolved_v3()
    assert plan2.splitlines() == [
        "payments: version 1 -> 2: supported",
        "  ~ widen column account_id: int -> long (source type bigint)",
        "  ~ widen column amount: decimal(10,2) -> decimal(14,2) (source type decimal(14,2))",
        "  ~ widen column fee: float -> double (source type double precision)",
        "  ~ column created_at: required -> optional",
        "  + add column channel varchar(10) (id 7, after created_at)",
        "  - soft-drop column memo: kept in Iceberg, null for new rows",
    ]
    assert plan3.splitlines() == [
        "payments: version 2 -> 3: supported",
        "  ~ rename column account_id -> customer_id (Iceberg column account_id kept)",
        "  ~ column amount: comment None -> 'gross amount'",
        "  + add column refunded_at timestamptz (id 8, after channel)",
    ]


def test_evolved_equals_fresh_at_the_same_version() -> None:
    evolved, _ = evolved_v3()
    fresh = load_spec_text(FRESH_V3, "fresh v3")
    assert evolved == fresh
    assert rendered(evolved) == rendered(fresh)
    # Nothing is left to change between them.
    assert classify(evolved, fresh).changes == ()


def test_evolved_iceberg_columns_keep_names_types_and_order() -> None:
    evolved, _ = evolved_v3()
    base = all_layouts(evolved)["base"]
    data = [(c.name, str(c.type), c.required, c.spec_id) for c in base.columns if c.spec_id]
    assert data == [
        ("payment_id", "long", True, 1),
        ("account_id", "long", False, 2),
        ("amount", "decimal(14,2)", False, 3),
        ("fee", "double", False, 4),
        ("memo", "string", False, 5),
        ("created_at", "timestamptz", False, 6),
        ("channel", "string", False, 7),
        ("refunded_at", "timestamptz", False, 8),
    ]


def test_yaml_round_trip() -> None:
    evolved, _ = evolved_v3()
    text = render_spec_yaml(evolved, header="payments v3")
    assert text.startswith("# payments v3\nspec_version: 3\n")
    assert "  - {id: 5, name: memo, type: text, dropped: true}\n" in text
    assert load_spec_text(text, "rendered") == evolved
    for spec in load_specs(PROJECT_ROOT / "table_specs"):
        assert load_spec_text(render_spec_yaml(spec), spec.name) == spec


def test_pandera_schema_source() -> None:
    evolved, _ = evolved_v3()
    source = render_pandera_schema(evolved)
    compile(source, "payments_schema.py", "exec")
    assert '"payment_id": pa.Column("Int64", nullable=False),' in source
    assert '"amount": pa.Column(pandas_engine.Decimal(14, 2), nullable=True' in source
    assert '"memo": pa.Column("string", nullable=True),' in source
    assert "SPEC_VERSION = 3" in source


def test_pandera_schema_validates_a_frame() -> None:
    import pandas as pd
    from pandera.errors import SchemaError

    evolved, _ = evolved_v3()
    namespace: dict[str, object] = {}
    exec(render_pandera_schema(evolved), namespace)
    schema: Any = namespace["schema"]
    frame = pd.DataFrame(
        {
            "payment_id": pd.array([1, 2], dtype="Int64"),
            "account_id": pd.array([7, None], dtype="Int64"),
            "amount": [Decimal("1.50"), None],
            "fee": pd.array([0.5, None], dtype="Float64"),
            "memo": pd.array(["a", None], dtype="string"),
            "created_at": pd.to_datetime(["2026-01-01T00:00:00Z", None], utc=True).as_unit("us"),
            "channel": pd.array(["web", "app"], dtype="string"),
            "refunded_at": pd.to_datetime([None, None], utc=True).as_unit("us"),
        }
    )
    assert list(schema.validate(frame).columns) == list(frame.columns)
    with pytest.raises(SchemaError, match="payment_id"):
        schema.validate(frame.assign(payment_id=pd.array([1, None], dtype="Int64")))
