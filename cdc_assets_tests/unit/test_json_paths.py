"""Paths into a JSON document (`spec.json_paths`): their syntax, the tree they form together,
and where a nested type can hold a protected value."""

from __future__ import annotations

import pytest

from cdc_assets.schema.types import parse_sink_type
from cdc_assets.spec.json_paths import Each, path_tree, segments, typed_reason


def test_segments_count_the_array_levels() -> None:
    assert segments("a.b") == [("a", 0), ("b", 0)]
    assert segments("items[].secret") == [("items", 1), ("secret", 0)]
    assert segments("grid[][]") == [("grid", 2)]
    with pytest.raises(ValueError, match="not a path"):
        segments("a[0]")


def test_paths_share_one_tree() -> None:
    tree = path_tree(
        [("a.b", 1), ("a.c", 2), ("tags[]", 3), ("items[].s", 4), ("items[].t.u", 5), ("g[][]", 6)]
    )
    assert tree == {
        "a": {"b": 1, "c": 2},
        "tags": Each(3),
        "items": Each({"s": 4, "t": {"u": 5}}),
        "g": Each(Each(6)),
    }


@pytest.mark.parametrize(
    ("paths", "message"),
    [
        (["a", "a.b"], "'a.b' lies inside another path, 'a'"),
        (["a.b", "a"], "'a' overlaps another path at 'a'"),
        (["a[]", "a[].b"], "'a[].b' lies inside another path, 'a[]'"),
        (["a[]", "a.b"], "'a.b': 'a' is an array in another path"),
        (["a.b", "a[].b"], "'a[].b': 'a' is an object in another path"),
        (["a[]", "a[][]"], "'a[][]' lies inside another path, 'a[]'"),
    ],
)
def test_conflicting_paths_are_refused(paths: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        path_tree([(p, "hash") for p in paths])


TYPE = parse_sink_type(
    "struct<a:struct<b:string,c:int>,l:list<struct<s:string,n:long>>,m:map<string,string>,d:string>"
)


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("a.b", None),
        ("l[].s", None),
        ("m.anything", None),  # a map's values
        ("d.x.y", None),  # protected inside the text of a string member
        ("undeclared.x", None),  # in the row image only
        ("a.c", "'a.c' is declared int in sink.type"),
        ("a", "'a' is declared struct<b:string,c:int> in sink.type"),
        ("l[].n", "'l[].n' is declared long in sink.type"),
        ("l.s", "'l' is declared list<struct<s:string,n:long>> in sink.type, not an object"),
        ("a[]", "'a' is declared struct<b:string,c:int> in sink.type, not a list"),
    ],
)
def test_a_nested_type_must_hold_a_string_where_a_path_ends(path: str, reason: str | None) -> None:
    got = typed_reason(TYPE, path)
    if reason is None:
        assert got is None
    else:
        assert got is not None
        assert got.startswith(reason)
