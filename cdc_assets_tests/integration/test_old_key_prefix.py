"""The same-key prefix test of the upsert against the JSON parse it spares (real Spark SQL).

``old_key_deletes`` skips parsing an update's before image when the image starts with the
row's own key. That shortcut is safe only if a match always means the parsed old key equals
the new key; it is useful only if ordinary Debezium images match. Both on crafted images:
moved keys, a key that is a prefix of the other, spacing, key not first, strings that need
escaping or try to close the key early, non-ASCII text, composite keys.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from cdc_assets.spec import load_spec_text
from cdc_assets.spec.models import TableSpec
from cdc_assets.sql.upsert import old_key_values, same_key_prefix


def spec_of(columns: str, key: str) -> TableSpec:
    return load_spec_text(
        f"""
spec_version: 1
name: t
source: {{connector: mysql, database: db, table: t, topic: db.db.t}}
columns:
{columns}
primary_key: {key}
sink: {{namespace: t}}
""",
        "t.yaml",
    )


LONG_KEY = spec_of(
    "  - {id: 1, name: id, type: bigint, nullable: false}\n  - {id: 2, name: note, type: text}",
    "[id]",
)
STRING_KEY = spec_of(
    "  - {id: 1, name: code, type: varchar(64), nullable: false}\n"
    "  - {id: 2, name: note, type: text}",
    "[code]",
)
COMPOSITE_KEY = spec_of(
    "  - {id: 1, name: order_id, type: bigint, nullable: false}\n"
    "  - {id: 2, name: line_no, type: smallint, nullable: false}\n"
    "  - {id: 3, name: sku, type: text}",
    "[order_id, line_no]",
)


def dumps(image: dict[str, Any]) -> str:
    """An image as Debezium's JSON converter writes it: no spaces, UTF-8 as is."""
    return json.dumps(image, ensure_ascii=False, separators=(",", ":"))


# (key of the row, before image text, whether the image must match the prefix)
LONG_CASES: list[tuple[dict[str, Any], str, bool]] = [
    ({"id": 5}, dumps({"id": 5, "note": "a"}), True),
    ({"id": -7}, dumps({"id": -7, "note": None}), True),
    ({"id": 9007199254740993}, dumps({"id": 9007199254740993, "note": "x"}), True),
    ({"id": 50}, dumps({"id": 5, "note": "a"}), False),  # the row moved from key 5
    ({"id": 5}, dumps({"id": 50, "note": "a"}), False),  # and from key 50
    ({"id": 5}, '{"id": 5, "note": "a"}', False),  # other spacing: parsed, same key
    ({"id": 5}, dumps({"note": "a", "id": 5}), False),  # key not first
    ({"id": 5}, dumps({"id": 5}), False),  # key is the only field
    ({"id": 5}, dumps({"id": "5", "note": "a"}), False),
    ({"id": 5}, dumps({"id": 5.0, "note": "a"}), False),
    ({"id": 5}, dumps({"note": '{"id":5,', "id": 6}), False),  # the text inside a string
]
STRING_CASES: list[tuple[dict[str, Any], str, bool]] = [
    ({"code": "ab"}, dumps({"code": "ab", "note": "x"}), True),
    ({"code": 'a"b'}, dumps({"code": 'a"b', "note": "x"}), True),
    ({"code": "a\\b\tc"}, dumps({"code": "a\\b\tc", "note": "x"}), True),
    ({"code": "Zürich/東京"}, dumps({"code": "Zürich/東京", "note": "x"}), True),
    ({"code": ""}, dumps({"code": "", "note": "x"}), True),
    # a key whose raw text would close the old key early: the old key here is "a"
    ({"code": 'a",'}, '{"code":"a",",x":1}', False),
    ({"code": "ab"}, dumps({"code": "abc", "note": "x"}), False),
    ({"code": "abc"}, dumps({"code": "ab", "note": "x"}), False),
]
COMPOSITE_CASES: list[tuple[dict[str, Any], str, bool]] = [
    ({"order_id": 1, "line_no": 2}, dumps({"order_id": 1, "line_no": 2, "sku": "s"}), True),
    ({"order_id": 1, "line_no": 3}, dumps({"order_id": 1, "line_no": 2, "sku": "s"}), False),
    ({"order_id": 11, "line_no": 2}, dumps({"order_id": 1, "line_no": 2, "sku": "s"}), False),
    ({"order_id": 1, "line_no": 2}, dumps({"line_no": 2, "order_id": 1, "sku": "s"}), False),
]


@pytest.mark.parametrize(
    ("spec", "cases"),
    [(LONG_KEY, LONG_CASES), (STRING_KEY, STRING_CASES), (COMPOSITE_KEY, COMPOSITE_CASES)],
    ids=["long", "string", "composite"],
)
def test_a_prefix_match_means_the_parsed_key_is_the_same(
    spark: Any, spec: TableSpec, cases: list[tuple[dict[str, Any], str, bool]]
) -> None:
    prefix = same_key_prefix(spec, "l")
    old = old_key_values(spec, "l")
    assert prefix is not None
    assert old is not None
    keys = list(old)
    key_type = "STRING" if spec is STRING_KEY else "BIGINT"
    schema = ", ".join([*(f"`{k}` {key_type}" for k in keys), "_before_json STRING"])
    rows = [(*(key[k] for k in keys), image) for key, image, _ in cases]
    spark.createDataFrame(rows, schema).createOrReplaceTempView("old_key_cases")
    same = " AND ".join(f"({old[k]} <=> l.`{k}`)" for k in keys)
    got = spark.sql(
        f"SELECT coalesce(startswith(l._before_json, {prefix}), false) AS matched, "
        f"{same} AS parsed_same FROM old_key_cases l"
    ).collect()
    for (key, image, want), row in zip(cases, got, strict=True):
        assert row["matched"] == want, f"{key} {image}: prefix matched {row['matched']}"
        if row["matched"]:
            assert row["parsed_same"], f"{key} {image}: matched, but the parsed key differs"
    # the crafted moves are moves by the parse too: the shortcut hid none of them
    assert any(not r["parsed_same"] for r in got)
