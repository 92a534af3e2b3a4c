"""The typed completion graph: evidence, decisions, effects; grounding and realization edges;
coupling hyperedges over two or more decisions.

The intended solution lives on the graph (each decision's outcome and basis, each effect's
realization), so every later artifact is compiled from it and every criterion can be traced
back to node ids. Invariants are checked when a graph is built and when it is loaded.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

from interlock.core.errors import InterlockError
from interlock.core.io import canonical, dumps, loads
from interlock.synthesis.blueprints import Blueprint
from interlock.synthesis.catalog import Domain
from interlock.synthesis.kinds.couplings import COUPLING_KINDS, Constraint, resolve
from interlock.synthesis.kinds.decisions import DECISION_KINDS, Outcome
from interlock.synthesis.kinds.effects import realizations

NODE_KINDS = ("evidence", "decision", "effect")
RULE_CLAUSE = "P-1"


@dataclass(frozen=True)
class Node:
    node_id: str
    kind: str
    subkind: str
    ref: str
    label: str
    attrs: dict
    distractor: bool = False


@dataclass(frozen=True)
class Edge:
    edge_id: str
    kind: str  # grounding (evidence -> decision) or realization (decision -> effect)
    source: str
    target: str


@dataclass(frozen=True)
class Hyperedge:
    hyperedge_id: str
    kind: str
    clause: str  # the evidence node of the policy clause that states the constraint
    params: dict
    members: tuple[str, ...]  # decision node ids, in priority order


@dataclass
class CompletionGraph:
    task_id: str
    domain_id: str
    pool: str
    effects_per_decision: int
    nodes: list[Node]
    edges: list[Edge] = field(default_factory=list)
    hyperedges: list[Hyperedge] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.by_id = {n.node_id: n for n in self.nodes}

    def of_kind(self, kind: str) -> list[Node]:
        return [n for n in self.nodes if n.kind == kind]

    def clause(self, ref: str) -> Node:
        """The policy clause evidence node with a given clause id (P-1, P-2, ...)."""
        return next(n for n in self.nodes if n.subkind == "clause" and n.ref == ref)

    def sources(self, target: str, kind: str) -> list[Node]:
        return [self.by_id[e.source] for e in self.edges if e.target == target and e.kind == kind]

    def targets(self, source: str, kind: str) -> list[Node]:
        return [self.by_id[e.target] for e in self.edges if e.source == source and e.kind == kind]

    @staticmethod
    def outcome(decision: Node) -> Outcome:
        a = decision.attrs
        return Outcome(a["outcome"], a["amount"], a["fallback"])

    def validate(self, source: str | None = None) -> CompletionGraph:
        """Unique ids, references resolve, every decision grounded and realized, every
        hyperedge over two or more decisions and satisfied by the intended solution."""
        def fail(message: str, field_name: str) -> None:
            raise InterlockError(message, file=source, item=self.task_id, field=field_name)

        ids = [n.node_id for n in self.nodes] + [e.edge_id for e in self.edges] + [
            h.hyperedge_id for h in self.hyperedges]
        if len(set(ids)) != len(ids):
            duplicate = next(i for i in ids if ids.count(i) > 1)
            fail(f"duplicate id {duplicate!r}", "node_id")
        for node in self.nodes:
            if node.kind not in NODE_KINDS:
                fail(f"node {node.node_id} has unknown kind {node.kind!r}", "kind")
        expected = {"grounding": ("evidence", "decision"), "realization": ("decision", "effect")}
        for edge in self.edges:
            if edge.kind not in expected:
                fail(f"edge {edge.edge_id} has unknown kind {edge.kind!r}", "kind")
            for end, want, end_field in zip((edge.source, edge.target), expected[edge.kind],
                                            ("source", "target"), strict=True):
                if end not in self.by_id:
                    fail(f"edge {edge.edge_id} refers to missing node {end!r}", end_field)
                if self.by_id[end].kind != want:
                    fail(f"{edge.kind} edge {edge.edge_id} must join {expected[edge.kind][0]} -> "
                         f"{expected[edge.kind][1]}", "kind")
        for decision in self.of_kind("decision"):
            if not self.sources(decision.node_id, "grounding"):
                fail(f"decision {decision.node_id} is grounded by no evidence", "edges")
            if not self.targets(decision.node_id, "realization"):
                fail(f"decision {decision.node_id} is realized in no effect", "edges")
        for effect in self.of_kind("effect"):
            if len(self.sources(effect.node_id, "realization")) != 1:
                fail(f"effect {effect.node_id} must realize exactly one decision", "edges")
        for hyper in self.hyperedges:
            if len(set(hyper.members)) < 2:
                fail(f"hyperedge {hyper.hyperedge_id} spans fewer than two decisions", "members")
            if hyper.kind not in COUPLING_KINDS:
                fail(f"hyperedge {hyper.hyperedge_id} has unknown kind {hyper.kind!r}", "kind")
            for member in hyper.members:
                if member not in self.by_id or self.by_id[member].kind != "decision":
                    fail(f"hyperedge {hyper.hyperedge_id} member {member!r} is not a decision", "members")
            clause = self.by_id.get(hyper.clause)
            if clause is None or clause.subkind != "clause":
                fail(f"hyperedge {hyper.hyperedge_id} clause {hyper.clause!r} is not a clause", "clause")
            outcomes = [self.outcome(self.by_id[m]) for m in hyper.members]
            if not COUPLING_KINDS[hyper.kind].holds(outcomes, hyper.params):
                fail(f"hyperedge {hyper.hyperedge_id} ({hyper.kind}) is violated by the intended "
                     "solution", "params")
        return self


def coupling_words(domain: Domain) -> dict:
    case = domain.case
    return {"group_column": case.group, "plural": case.plural, "fallback": domain.decision.fallback,
            "date": case.date}


def build_graph(blueprint: Blueprint, domain: Domain) -> CompletionGraph:
    """The completion graph of one blueprint, with its intended solution."""
    kind = DECISION_KINDS[domain.decision.kind]
    case = domain.case
    rule = kind.rule(domain, blueprint.params)
    nodes: list[Node] = []
    edges: list[Edge] = []
    counter = defaultdict(int)

    def new_id(prefix: str) -> str:
        counter[prefix] += 1
        return f"{prefix}{counter[prefix]}"

    def add_node(kind_: str, subkind: str, ref: str, label: str, attrs: dict, distractor=False) -> str:
        # attrs in canonical order: the graph built here is the graph read back from its rows
        node_id = new_id({"evidence": "E", "decision": "D", "effect": "F"}[kind_])
        nodes.append(Node(node_id, kind_, subkind, ref, label, canonical(attrs), distractor))
        return node_id

    def add_edge(kind_: str, source: str, target: str) -> None:
        edges.append(Edge(new_id({"grounding": "G", "realization": "R"}[kind_]), kind_, source, target))

    # clauses: the decision rule first, then coupling and distractor clauses by group name
    words = coupling_words(domain)
    clause_specs = sorted(
        [(g["group"], "coupling", g) for g in blueprint.groups]
        + [(g["group"], "distractor", g) for g in blueprint.distractor_clauses])
    clause_node: dict[str, str] = {}
    clause_ref: dict[str, str] = {}
    rule_node = add_node("evidence", "clause", RULE_CLAUSE, f"{domain.policy.title}: decision rule",
                         {"path": domain.policy.file, "text": kind.render(rule), "rule": rule})
    for number, (group, role, spec) in enumerate(clause_specs, start=2):
        clause_ref[group] = f"P-{number}"
        coupling = COUPLING_KINDS[spec["kind"]]
        clause_rule = coupling.rule(spec["params"], {**words, "group": group})
        clause_node[group] = add_node(
            "evidence", "clause", f"P-{number}", f"{spec['kind']} for {case.group} {group}",
            {"path": domain.policy.file, "text": coupling.render(clause_rule), "rule": clause_rule,
             "coupling": spec["kind"]}, distractor=role == "distractor")

    order = sorted(blueprint.cases, key=lambda r: (r[case.date], r["id"]))
    record_node = {
        r["id"]: add_node("evidence", "record", r["id"], f"{case.noun} {r['id']}",
                          {"path": case.table, "row": r})
        for r in order}
    options_by_case: dict[str, list[dict]] = defaultdict(list)
    option_node: dict[str, str] = {}
    for option in blueprint.options:
        options_by_case[option["case_id"]].append(option)
        option_node[option["id"]] = add_node(
            "evidence", "option", option["id"], f"{domain.decision.options.noun} {option['id']}",
            {"path": domain.decision.options.table, "row": option})
    for row in blueprint.distractor_rows:
        add_node("evidence", "record", row["id"], f"{case.noun} {row['id']} (closed)",
                 {"path": case.table, "row": row}, distractor=True)

    alternatives = {r["id"]: kind.alternatives(r, rule, options_by_case[r["id"]]) for r in order}
    constraints = [
        Constraint(g["kind"], COUPLING_KINDS[g["kind"]].rule(g["params"], {**words, "group": g["group"]}),
                   clause_ref[g["group"]], tuple(g["members"]))
                   for g in blueprint.groups]
    decided = resolve([r["id"] for r in order], alternatives, RULE_CLAUSE, constraints)

    decision_node: dict[str, str] = {}
    for row in order:
        choice = decided[row["id"]]
        outcome = choice.outcome
        decision_id = add_node("decision", domain.decision.kind, row["id"],
                               f"decide {case.noun} {row['id']}",
                               {"case_id": row["id"], "outcome": outcome.value, "amount": outcome.amount,
                                "fallback": outcome.fallback, "basis": choice.basis})
        decision_node[row["id"]] = decision_id
        add_edge("grounding", record_node[row["id"]], decision_id)
        add_edge("grounding", rule_node, decision_id)
        for option in options_by_case[row["id"]]:
            add_edge("grounding", option_node[option["id"]], decision_id)
        add_edge("grounding", clause_node[row[case.group]], decision_id)
        for spec, realization in realizations(domain, blueprint.size.effects_per_decision, row, outcome,
                                              choice.basis):
            effect_id = add_node("effect", spec.kind, row["id"], f"{spec.label} for {row['id']}",
                                 {"label": spec.label, "realization": realization.to_dict()})
            add_edge("realization", decision_id, effect_id)

    hyperedges = [
        Hyperedge(f"H{i}", c.kind, clause_node[g["group"]], canonical(c.rule),
                  tuple(decision_node[m] for m in c.members))
        for i, (g, c) in enumerate(zip(blueprint.groups, constraints, strict=True), start=1)]
    return CompletionGraph(blueprint.task_id, blueprint.domain_id, blueprint.pool,
                           blueprint.size.effects_per_decision, nodes, edges, hyperedges).validate()


def graph_rows(graph: CompletionGraph) -> dict[str, list[dict]]:
    """The graph as rows of the four graph tables."""
    t = graph.task_id
    return {
        "tasks": [{"task_id": t, "domain_id": graph.domain_id, "pool": graph.pool,
                   "effects_per_decision": graph.effects_per_decision}],
        "nodes": [{"task_id": t, "node_id": n.node_id, "kind": n.kind, "subkind": n.subkind,
                   "ref": n.ref, "label": n.label, "distractor": n.distractor, "attrs": dumps(n.attrs)}
                  for n in graph.nodes],
        "edges": [{"task_id": t, "edge_id": e.edge_id, "kind": e.kind, "source": e.source,
                   "target": e.target} for e in graph.edges],
        "hyperedges": [{"task_id": t, "hyperedge_id": h.hyperedge_id, "kind": h.kind,
                        "clause": h.clause, "params": dumps(h.params)} for h in graph.hyperedges],
        "hyperedge_members": [{"task_id": t, "hyperedge_id": h.hyperedge_id, "node_id": m,
                               "position": p} for h in graph.hyperedges for p, m in enumerate(h.members)],
    }


def graphs_from_rows(tables: dict[str, list[dict]], source: str) -> Iterator[CompletionGraph]:
    """Rebuild and re-validate graphs from one aligned row group of the graph tables."""
    by_task: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    order: list[str] = []
    for name, rows in tables.items():
        for row in rows:
            if row["task_id"] not in by_task:
                order.append(row["task_id"])
            by_task[row["task_id"]][name].append(row)
    for task_id in order:
        rows = by_task[task_id]
        if len(rows["tasks"]) != 1:
            raise InterlockError("expected exactly one row in the tasks table", file=source,
                                 item=task_id, field="tasks")
        task = rows["tasks"][0]
        nodes = [Node(r["node_id"], r["kind"], r["subkind"], r["ref"], r["label"],
                      loads(r["attrs"], file=source, item=task_id, field=f"nodes[{r['node_id']}].attrs"),
                      r["distractor"]) for r in rows["nodes"]]
        edges = [Edge(r["edge_id"], r["kind"], r["source"], r["target"]) for r in rows["edges"]]
        members: dict[str, list[tuple[int, str]]] = defaultdict(list)
        for r in rows["hyperedge_members"]:
            members[r["hyperedge_id"]].append((r["position"], r["node_id"]))
        hyperedges = [
            Hyperedge(r["hyperedge_id"], r["kind"], r["clause"],
                      loads(r["params"], file=source, item=task_id, field="hyperedges.params"),
                      tuple(node for _, node in sorted(members[r["hyperedge_id"]])))
            for r in rows["hyperedges"]]
        yield CompletionGraph(task_id, task["domain_id"], task["pool"], task["effects_per_decision"],
                              nodes, edges, hyperedges).validate(source)
