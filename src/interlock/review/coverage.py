"""Source-coverage review: the graph must survive, whole, into workspace, contract and rubric."""

from __future__ import annotations

from interlock.core.io import loads
from interlock.synthesis.graph import CompletionGraph
from interlock.synthesis.packs import CLAUSE_LINE, TaskPack
from interlock.synthesis.workspace import parse_csv


def coverage_problems(graph: CompletionGraph, pack: TaskPack) -> list[dict]:
    """One row per missing piece: which relation or node, and what exactly is missing."""
    problems: list[dict] = []

    def missing(relation: str, ref: str, problem: str) -> None:
        problems.append({"relation": relation, "ref": ref, "problem": problem})

    index = {row["node_id"]: row for row in pack.evidence_index}
    for node in graph.of_kind("evidence"):
        what = f"evidence {node.node_id} ({node.subkind} {node.ref})"
        row = index.get(node.node_id)
        if row is None:
            missing("evidence", node.node_id, f"{what} has no entry in the evidence index")
            continue
        text = pack.files.get(row["path"])
        if text is None:
            missing("evidence", node.node_id, f"{what}: {row['path']} is not in the workspace")
        elif not _located(text, row):
            missing("evidence", node.node_id,
                    f"{what} is not found in {row['path']} at {row['locator']} {row['ref']}")

    delivered = [set(item["node_ids"]) for item in pack.contract]
    criteria = {c.criterion_id: c for c in pack.rubric}

    def in_rubric(kinds: set[str], nodes: set[str]) -> bool:
        return any(c.kind in kinds and nodes <= set(c.node_ids) for c in pack.rubric)

    for decision in graph.of_kind("decision"):
        if {decision.node_id} not in delivered:
            missing("decision", decision.node_id, f"decision {decision.node_id} is not in the contract")
        if not in_rubric({"primary"}, {decision.node_id}):
            missing("decision", decision.node_id, f"decision {decision.node_id} has no primary criterion")
    for edge in graph.edges:
        relation = f"{edge.kind} {edge.edge_id} ({edge.source} -> {edge.target})"
        pair = {edge.source, edge.target}
        if edge.kind == "grounding" and not in_rubric({"primary", "grounding"}, pair):
            missing("grounding", edge.edge_id, f"{relation} is tied to no criterion")
        if edge.kind == "realization":
            if not any(pair <= item for item in delivered):
                missing("realization", edge.edge_id,
                        f"{relation}: effect {edge.target} is not in the contract")
            if not in_rubric({"realization"}, pair):
                missing("realization", edge.edge_id, f"{relation}: effect {edge.target} has no criterion")
    for hyper in graph.hyperedges:
        if not in_rubric({"coupling"}, {hyper.hyperedge_id, *hyper.members}):
            missing("coupling", hyper.hyperedge_id,
                    f"coupling {hyper.hyperedge_id} ({hyper.kind} over {', '.join(hyper.members)}) "
                    "has no criterion")
    for criterion_id in criteria:
        if criterion_id not in pack.checks:
            missing("check", criterion_id, f"criterion {criterion_id} has no executable check")
    return problems


def _located(text: str, row: dict) -> bool:
    expected = loads(row["expected"], file="evidence_index", item=row["node_id"], field="expected")
    if row["locator"] == "clause":
        return CLAUSE_LINE.render(ref=row["ref"], text=expected) in text.splitlines()
    _, rows = parse_csv(text)
    found = [r for r in rows if r.get("id") == row["ref"]]
    return len(found) == 1 and all(found[0].get(k) == str(v) for k, v in expected.items())
