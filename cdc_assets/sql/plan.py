"""Read Spark physical plans (the text of ``EXPLAIN``) without a Spark session.

Used to prove that the MERGE into base is a storage-partitioned join: the scan of base reaches
the join without an Exchange (shuffle) in between.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NODE_RE = re.compile(r"[A-Za-z(*]")
_JOIN_RE = re.compile(r"\b\w*Join\b")


@dataclass(frozen=True)
class PlanNode:
    depth: int
    text: str
    parent: int | None


def physical_plan(explain: str) -> str:
    """The physical plan section of EXPLAIN (EXTENDED) output, or the whole text."""
    marker = "== Physical Plan =="
    if marker in explain:
        return explain.split(marker, 1)[1].strip("\n")
    return explain


def parse_tree(plan: str) -> list[PlanNode]:
    """Lines of a plan tree with their depth (column of the operator name) and parent line."""
    nodes: list[PlanNode] = []
    stack: list[int] = []
    for line in plan.splitlines():
        match = _NODE_RE.search(line)
        if match is None or not line.strip():
            continue
        depth = match.start()
        continued = nodes and depth <= nodes[-1].depth and depth > 0
        if continued and not line.lstrip().startswith(("+-", ":-")):
            continue  # a wrapped continuation of the previous node's text
        while stack and nodes[stack[-1]].depth >= depth:
            stack.pop()
        parent = stack[-1] if stack else None
        nodes.append(PlanNode(depth, line.strip(" :+-"), parent))
        stack.append(len(nodes) - 1)
    return nodes


def shuffles_between_scan_and_join(explain: str, table: str) -> list[bool] | None:
    """For each scan of ``table`` that feeds a join: whether an Exchange sits between them.

    ``table`` is matched as a whole dotted name (``lake.app.users`` does not match
    ``lake.app.users_bucketed``). None when no scan of the table feeds a join.
    """
    nodes = parse_tree(physical_plan(explain))
    name = re.compile(rf"(?<![\w.]){re.escape(table)}(?![\w])")
    found: list[bool] = []
    for node in nodes:
        if "Scan" not in node.text or not name.search(node.text):
            continue
        shuffled = False
        parent = node.parent
        while parent is not None:
            text = nodes[parent].text
            if _JOIN_RE.search(text.split(" ", 1)[0]):
                found.append(shuffled)
                break
            if text.startswith("Exchange") or text.startswith("ShuffleExchange"):
                shuffled = True
            parent = nodes[parent].parent
    return found or None
