"""Source-coverage review: the graph must survive, whole, into workspace, contract and rubric, and
the workspace must claim nothing the graph does not.

Coverage is checked by execution: every evidence node is read back from the file at the locator
the evidence index gives (a table row by its id, a policy clause by its id, a line span) and
compared with the graph's values, whoever wrote the file. Fidelity is the other direction: a table
of the graph's evidence holds no row the graph does not have, a policy names no clause and no
number the graph's clauses do not, and no other file names a clause at all (a document that
restates the policy is one that can contradict it).
"""

from __future__ import annotations

import re

from interlock.core.io import loads
from interlock.synthesis.catalog import Domain
from interlock.synthesis.graph import CompletionGraph
from interlock.synthesis.packs import CLAUSE_LINE, REQUEST_PATH, TaskPack, clause_values, scripted_request
from interlock.synthesis.workspace import is_malformed, parse_csv

#: a clause id as any text names it (P-1, P-12), not inside a longer code (XP-1, P-1a)
CLAUSE_ID = re.compile(r"(?<![A-Za-z0-9_-])P-([1-9][0-9]*)(?![A-Za-z0-9_])")
_NUMBER = re.compile(r"[0-9]+")


def coverage_problems(graph: CompletionGraph, pack: TaskPack, domain: Domain | None = None) -> list[dict]:
    """One row per missing piece: which relation or node, and what exactly is missing (given the
    task's ``domain``, the request's own fidelity too: :func:`fidelity_problems`)."""
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
        problem = located_problem(pack.files, row)
        if problem is not None:
            missing("evidence", node.node_id, f"{what}: {problem}")

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
    for relation, ref, problem in fidelity_problems(graph, pack, domain):
        missing(relation, ref, problem)
    return problems


# ----------------------------------------------------------------------------- reading at a locator

def located_problem(files: dict[str, str], row: dict) -> str | None:
    """Why the evidence an index row places is not there with its values (None: it is). The
    row's ``expected`` is compiled from the graph: a record's row (every value must be in the
    table's row of that id, or, for a line span, in those lines), a clause's text as the
    templates render it (that exact line) or the values it must state (each in the clause)."""
    path, locator, ref = row["path"], row["locator"], row["ref"]
    text = files.get(path)
    if text is None:
        return f"{path} is not in the workspace"
    expected = loads(row["expected"], file="evidence_index", item=row["node_id"], field="expected")
    if locator == "row":
        _, rows = parse_csv(text)
        found = [r for r in rows if not is_malformed(r) and r.get("id") == ref]
        if len(found) != 1:
            return f"{path} has {len(found)} rows with id {ref}, not one"
        wrong = sorted(k for k, v in expected.items() if found[0].get(k) != str(v))
        if wrong:
            return f"row {ref} of {path} has " + ", ".join(
                f"{k} {found[0].get(k)!r}, not {str(expected[k])!r}" for k in wrong[:4])
        return None
    if locator == "clause":
        block = clause_text(text, ref)
        if block is None:
            return f"{path} states no clause {ref}"
        if isinstance(expected, str):
            return None if CLAUSE_LINE.render(ref=ref, text=expected) in text.splitlines() else (
                f"clause {ref} of {path} is not the clause the graph states")
        unstated = [v for v in expected.values() if not states(block, v)]
        return f"clause {ref} of {path} does not state {', '.join(unstated[:4])}" if unstated else None
    if locator == "lines":
        first, last = (int(n) for n in ref.split("-"))
        lines = text.splitlines()
        if last > len(lines):
            return f"{path} has {len(lines)} lines, not lines {ref}"
        block = "\n".join(lines[first - 1:last])
        values = [str(v) for v in expected.values()] if isinstance(expected, dict) else [expected]
        unstated = [v for v in values if not states(block, v)]
        return f"lines {ref} of {path} do not hold {', '.join(unstated[:4])}" if unstated else None
    return f"unknown locator {locator!r}"


def clause_text(text: str, ref: str) -> str | None:
    """The text of clause ``ref`` (``P-2``) in a policy: from the first line that names it to the
    line before the next blank line or the next line that names another clause."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if ref in _clause_ids(line)), None)
    if start is None:
        return None
    end = start + 1
    while end < len(lines) and lines[end].strip() and not _clause_ids(lines[end]) - {ref}:
        end += 1
    return "\n".join(lines[start:end])


def states(text: str, value: str) -> bool:
    """Whether ``text`` states ``value`` exactly, as a whole (1965 is not in 19650, CC-200 not in
    CC-2001, approved not in unapproved)."""
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(value)}(?![A-Za-z0-9_])", text) is not None


def _int(digits: str) -> str:
    return digits.lstrip("0") or "0"


def _clause_ids(text: str) -> set[str]:
    return {f"P-{n}" for n in CLAUSE_ID.findall(text)}


# ----------------------------------------------------------------------------- fidelity

def fidelity_problems(graph: CompletionGraph, pack: TaskPack,
                      domain: Domain | None = None) -> list[tuple[str, str, str]]:
    """What the workspace claims beyond the graph, as (relation, ref, problem): a row in a table
    of evidence that no evidence node is; in a policy, a clause id the graph does not have or a
    number none of its clauses states; any other file (the request aside, which cites a clause as
    an example) naming a clause. Given the ``domain``, the request too: it may name no clause the
    graph lacks and state no number that neither a clause nor the templates' request for the same
    graph states (a rule slipped into the request is one the policy does not have)."""
    problems = []
    rows_at: dict[str, set[str]] = {}
    clause_paths: set[str] = set()
    numbers: set[str] = set()
    for node in graph.of_kind("evidence"):
        if node.subkind == "clause":
            clause_paths.add(node.attrs["path"])
            for value in [*clause_values(node).values(), node.ref]:
                numbers |= {_int(n) for n in _NUMBER.findall(value)}
        else:
            rows_at.setdefault(node.attrs["path"], set()).add(node.ref)
    clauses = {n.ref for n in graph.of_kind("evidence") if n.subkind == "clause"}
    for path, ids in sorted(rows_at.items()):
        _, rows = parse_csv(pack.files.get(path, ""))
        if any(is_malformed(r) for r in rows):
            problems.append(("evidence", path, f"{path} is not a well-formed table"))
            continue
        extra = sorted({r.get("id") or "(no id)" for r in rows} - ids)
        if extra:
            problems.append(("evidence", path, f"{path} holds rows the graph has no evidence for: "
                                               f"{', '.join(extra[:4])}"))
    for path in sorted(clause_paths):
        text = pack.files.get(path, "")
        unknown = sorted(_clause_ids(text) - clauses)
        if unknown:
            problems.append(("evidence", path, f"{path} names clauses the graph does not have: "
                                               f"{', '.join(unknown[:4])}"))
        stray = sorted({_int(n) for n in _NUMBER.findall(text)} - numbers, key=int)
        if stray:
            problems.append(("evidence", path, f"{path} states numbers no clause of the graph has: "
                                               f"{', '.join(stray[:4])}"))
    if domain is not None:
        request = pack.files.get(REQUEST_PATH, "")
        allowed = numbers | {_int(n) for n in _NUMBER.findall(scripted_request(graph, domain)[0])}
        unknown = sorted(_clause_ids(request) - clauses)
        stray = sorted({_int(n) for n in _NUMBER.findall(request)} - allowed, key=int)
        if unknown or stray:
            said = [f"clauses the graph does not have: {', '.join(unknown[:4])}"] if unknown else []
            said += [f"numbers no clause of the graph has: {', '.join(stray[:4])}"] if stray else []
            problems.append(("request", REQUEST_PATH, f"the request names {'; '.join(said)}"))
    for path, text in sorted(pack.files.items()):
        if path in clause_paths or path == REQUEST_PATH:
            continue
        named = sorted(_clause_ids(text))
        if named:
            problems.append(("evidence", path,
                             f"{path} names clause {', '.join(named[:4])} outside the policy"))
    return problems
