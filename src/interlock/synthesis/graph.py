"""The typed completion graph: evidence, decisions, effects; grounding and realization edges;
coupling hyperedges over two or more decisions.

The intended solution lives on the graph (each decision's outcome and basis, each effect's
realization), so every later artifact is compiled from it and every criterion can be traced
back to node ids. Invariants are checked when a graph is built and when it is loaded, and
against its domain when it is compiled (a graph may be built by hand: docs/authoring.md).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import NoReturn

from interlock.core.errors import InterlockError
from interlock.core.io import canonical, dumps, loads
from interlock.core.registry import COUPLING_KINDS, DECISION_KINDS, EFFECT_KINDS
from interlock.synthesis.blueprints import Blueprint
from interlock.synthesis.catalog import Domain
from interlock.synthesis.kinds.couplings import Constraint, Decided, resolve
from interlock.synthesis.kinds.decisions import Outcome
from interlock.synthesis.kinds.effects import realizations

NODE_KINDS = ("evidence", "decision", "effect")
RULE_CLAUSE = "P-1"
_CLAUSE_REF = re.compile(r"^P-[1-9][0-9]*$")
#: the attributes every node must carry, by its subkind (decisions and effects: by kind), and
#: the types each may have; what the generators, the oracle and the reviews read
ATTRIBUTES: dict[str, dict[str, tuple[type, ...]]] = {
    "clause": {"path": (str,), "text": (str,), "rule": (dict,)},
    "record": {"path": (str,), "row": (dict,)},
    "option": {"path": (str,), "row": (dict,)},
    "decision": {"case_id": (str,), "outcome": (str,), "amount": (int, type(None)), "fallback": (bool,),
                 "basis": (str,)},
    "effect": {"label": (str,), "realization": (dict,)},
}
#: what an effect's ``realization`` holds (see :class:`~interlock.synthesis.kinds.effects.Realization`)
REALIZATION_ATTRIBUTES: dict[str, tuple[type, ...]] = {"op": (str,), "path": (str,), "key": (str,),
                                                       "fields": (dict,)}
REALIZATION_OPS = ("append_csv", "update_csv", "append_jsonl", "write_file")
#: the subkinds of each node kind (decisions and effects: the registered kinds)
SUBKINDS = {"evidence": ("clause", "record", "option"), "decision": DECISION_KINDS, "effect": EFFECT_KINDS}
Fail = Callable[[str, str], NoReturn]


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

    def validate(self, source: str | None = None, domain: Domain | None = None) -> CompletionGraph:
        """Unique ids, references resolve, every decision well formed, grounded (by its case's
        record and its basis clause) and realized, every hyperedge over two or more decisions and
        satisfied by the intended solution. Given its ``domain``, also every node's attributes and
        that the graph is what that domain makes of its evidence: all that compiling reads, so a
        hand-built graph is refused here, not by the reviews later. Each refusal names the task
        and, as ``field``, the node (or edge) and its attribute."""
        def fail(message: str, field_name: str) -> NoReturn:
            raise InterlockError(message, file=source, item=self.task_id, field=field_name)

        ids = [n.node_id for n in self.nodes] + [e.edge_id for e in self.edges] + [
            h.hyperedge_id for h in self.hyperedges]
        if len(set(ids)) != len(ids):
            duplicate = next(i for i in ids if ids.count(i) > 1)
            fail(f"duplicate id {duplicate!r}", "node_id")
        for node in self.nodes:
            if node.kind not in NODE_KINDS:
                fail(f"node {node.node_id} has unknown kind {node.kind!r}", "kind")
            if node.kind == "decision" or domain is not None:
                _check_attributes(node, fail)
        refs = [n.ref for n in self.nodes if n.subkind == "clause"]
        for node in self.nodes:
            if node.subkind == "clause" and refs.count(node.ref) > 1:
                fail(f"clause {node.ref} is stated by more than one node", f"{node.node_id}.ref")
        if RULE_CLAUSE not in refs:
            fail(f"no clause {RULE_CLAUSE}: every task states its decision rule as {RULE_CLAUSE}", "nodes")
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
        self._check_decisions(fail)
        for effect in self.of_kind("effect"):
            if len(self.sources(effect.node_id, "realization")) != 1:
                fail(f"effect {effect.node_id} must realize exactly one decision", "edges")
        self._check_hyperedges(fail)
        if domain is not None:
            self._check_domain(domain, fail)
        for hyper in self.hyperedges:
            outcomes = [self.outcome(self.by_id[m]) for m in hyper.members]
            if not COUPLING_KINDS[hyper.kind].holds(outcomes, hyper.params):
                fail(f"hyperedge {hyper.hyperedge_id} ({hyper.kind}) is violated by the intended "
                     "solution", "params")
        return self

    def _check_decisions(self, fail: Fail) -> None:
        """One decision per case, grounded by that case's record and the clause it cites."""
        decided: dict[str, str] = {}
        for decision in self.of_kind("decision"):
            d, a = decision.node_id, decision.attrs
            grounds = self.sources(d, "grounding")
            if not grounds:
                fail(f"decision {d} is grounded by no evidence", "edges")
            if not self.targets(d, "realization"):
                fail(f"decision {d} is realized in no effect", "edges")
            if a["case_id"] in decided:
                fail(f"decisions {decided[a['case_id']]} and {d} both decide {a['case_id']}", f"{d}.case_id")
            decided[a["case_id"]] = d
            records = [n.ref for n in grounds if n.subkind == "record"]
            if records != [a["case_id"]]:
                fail(f"decision {d} on {a['case_id']} must be grounded by that case's record and no "
                     f"other (its records: {', '.join(records) or 'none'})", f"{d}.grounding")
            if not any(n.subkind == "clause" and n.ref == a["basis"] for n in grounds):
                fail(f"decision {d}: its basis {a['basis']!r} is not a clause that grounds it", f"{d}.basis")

    def _check_hyperedges(self, fail: Fail) -> None:
        """Each hyperedge states its own clause over two or more decisions of kinds it can bind."""
        stating: dict[str, str] = {}
        for hyper in self.hyperedges:
            h = hyper.hyperedge_id
            if len(set(hyper.members)) < 2:
                fail(f"hyperedge {h} spans fewer than two decisions", "members")
            if hyper.kind not in COUPLING_KINDS:
                fail(f"hyperedge {h} has unknown kind {hyper.kind!r}", "kind")
            for member in hyper.members:
                if member not in self.by_id or self.by_id[member].kind != "decision":
                    fail(f"hyperedge {h} member {member!r} is not a decision", "members")
            clause = self.by_id.get(hyper.clause)
            if clause is None or clause.subkind != "clause":
                fail(f"hyperedge {h} clause {hyper.clause!r} is not a clause", "clause")
            if hyper.clause in stating:
                fail(f"hyperedges {stating[hyper.clause]} and {h} state the same clause {clause.ref}",
                     f"{h}.clause")
            stating[hyper.clause] = h
            for member in hyper.members:
                if not COUPLING_KINDS[hyper.kind].binds(DECISION_KINDS[self.by_id[member].subkind]):
                    fail(f"hyperedge {h}: a {hyper.kind} cannot bind {member}, a "
                         f"{self.by_id[member].subkind} decision", f"{h}.kind")

    def _check_domain(self, domain: Domain, fail: Fail) -> None:
        """The graph is what its domain makes of its evidence, so that the public request and
        policy say exactly what the private contract and rubric expect: evidence where the
        workspace keeps it, each clause its rule's text, every pending case decided, each outcome
        the one the policy's procedure gives, each effect what its kind writes for the case."""
        if self.domain_id != domain.id:
            fail(f"the graph is of domain {self.domain_id!r}, not {domain.id!r}", "domain_id")
        evidence = self.of_kind("evidence")
        for node in evidence:
            _check_evidence(node, domain, fail)
        kind = DECISION_KINDS[domain.decision.kind]
        rule = self.clause(RULE_CLAUSE).attrs["rule"]
        rows: dict[str, dict] = {}
        alternatives: dict[str, list[Outcome]] = {}
        for decision in self.of_kind("decision"):
            d, case_id = decision.node_id, decision.attrs["case_id"]
            grounds = self.sources(d, "grounding")
            record = next(n for n in grounds if n.subkind == "record")
            rows[case_id] = row = record.attrs["row"]
            if decision.subkind != kind.name:
                fail(f"decision {d} is a {decision.subkind}; {domain.id} decides by {kind.name}",
                     f"{d}.subkind")
            if row.get("status") != "pending":
                fail(f"decision {d} decides {case_id}, whose status is {row.get('status')!r}: only "
                     "pending cases are decided", f"{d}.case_id")
            options = [n for n in grounds if n.subkind == "option"]
            offered = [n.node_id for n in evidence
                       if n.subkind == "option" and n.attrs["row"].get("case_id") == case_id]
            if sorted(n.node_id for n in options) != sorted(offered):
                fail(f"decision {d} must be grounded by the option rows of {case_id}: "
                     f"{', '.join(offered) or 'none'}", f"{d}.grounding")
            try:
                alternatives[case_id] = kind.alternatives(row, rule, [n.attrs["row"] for n in options])
            except (KeyError, TypeError, ValueError) as exc:
                fail(f"{kind.name} cannot decide {case_id} from its row: {exc!r}", f"{record.node_id}.row")
        for node in evidence:
            pending = node.subkind == "record" and node.attrs["row"].get("status") == "pending"
            if pending and node.ref not in rows:
                fail(f"{node.ref} ({node.node_id}) is pending, so the request asks for a decision on it, "
                     "but no decision decides it", f"{node.node_id}.row.status")
        order = sorted(self.of_kind("decision"),
                       key=lambda d: (str(rows[d.attrs["case_id"]][domain.case.date]), d.attrs["case_id"]))
        self._check_bindings(order, rows, domain, fail)
        constraints = [Constraint(h.kind, h.params, self.by_id[h.clause].ref,
                                  tuple(self.by_id[m].attrs["case_id"] for m in h.members))
                       for h in self.hyperedges]
        policy = resolve([d.attrs["case_id"] for d in order], alternatives, RULE_CLAUSE, constraints)
        for decision in order:
            d, a = decision.node_id, decision.attrs
            admits = alternatives[a["case_id"]]
            if a["outcome"] not in [o.value for o in admits]:
                fail(f"decision {d}: {a['outcome']!r} is not an outcome {kind.name} admits for "
                     f"{a['case_id']} (it admits: {', '.join(map(_outcome_text, admits))})", f"{d}.outcome")
            want = policy[a["case_id"]]
            intended = {"outcome": want.outcome.value, "amount": want.outcome.amount,
                        "fallback": want.outcome.fallback, "basis": want.basis}
            wrong = next((name for name, value in intended.items() if a[name] != value), None)
            if wrong is not None:
                fail(f"decision {d}: the policy decides {a['case_id']} {_outcome_text(want.outcome)} by "
                     f"{want.basis}, so its {wrong} is {intended[wrong]!r}, not {a[wrong]!r}", f"{d}.{wrong}")
            self._check_effects(decision, rows[a["case_id"]], domain, fail)

    def _check_bindings(self, order: list[Node], rows: dict[str, dict], domain: Domain, fail: Fail) -> None:
        """Each coupling clause binds the pending cases of its group, as the critic reads it from
        the policy: a hyperedge states it, with its kind and rule, over exactly those decisions in
        the clause's order."""
        case = domain.case
        stated = {h.clause: h for h in self.hyperedges}
        for hyper in self.hyperedges:
            clause = self.by_id[hyper.clause]
            if clause.attrs.get("coupling") != hyper.kind:
                fail(f"hyperedge {hyper.hyperedge_id} is a {hyper.kind}, but its clause {clause.ref} "
                     f"states a {clause.attrs.get('coupling')}", f"{hyper.hyperedge_id}.kind")
            if hyper.params != clause.attrs["rule"]:
                fail(f"hyperedge {hyper.hyperedge_id}: its params must be the rule of its clause "
                     f"{clause.ref}, {clause.attrs['rule']}", f"{hyper.hyperedge_id}.params")
        for clause in self.of_kind("evidence"):
            if clause.subkind != "clause" or clause.ref == RULE_CLAUSE:
                continue
            group = clause.attrs["rule"]["group"]
            bound = tuple(d.node_id for d in order if str(rows[d.attrs["case_id"]][case.group]) == group)
            hyper = stated.get(clause.node_id)
            if bound and hyper is None:
                fail(f"clause {clause.ref} ({clause.node_id}) binds {', '.join(bound)} ({case.group} "
                     f"{group}), but no hyperedge states it", f"{clause.node_id}.coupling")
            if hyper is not None and hyper.members != bound:
                fail(f"hyperedge {hyper.hyperedge_id} must span the pending cases of {case.group} {group} "
                     f"in the order its clause takes them (by {case.date}, then id): "
                     f"{', '.join(bound) or 'none'}", f"{hyper.hyperedge_id}.members")

    def _check_effects(self, decision: Node, row: dict, domain: Domain, fail: Fail) -> None:
        """A decision reaches exactly the effects its outcome needs, each writing what its kind
        writes for the case: the targets and records the request asks for."""
        d, a = decision.node_id, decision.attrs
        due = {spec.kind: (spec, r) for spec, r in realizations(
            domain, self.effects_per_decision, row, self.outcome(decision), a["basis"])}
        for effect in self.targets(d, "realization"):
            f, got = effect.node_id, effect.attrs["realization"]
            if effect.subkind not in due:
                fail(f"effect {f} ({effect.subkind}) is not one that decision {d} ({a['outcome']}) "
                     f"must reach; still due: {', '.join(due) or 'none'}", f"{f}.subkind")
            spec, realization = due.pop(effect.subkind)
            want = realization.to_dict()
            wrong = next((name for name in REALIZATION_ATTRIBUTES if got[name] != want[name]), None)
            if wrong is not None:
                fail(f"effect {f} ({spec.kind}, the {spec.label} the request asks for) must have "
                     f"{wrong} {want[wrong]!r}, not {got[wrong]!r}", f"{f}.realization.{wrong}")
        if due:
            missing = ", ".join(f"{kind} ({spec.label})" for kind, (spec, _) in due.items())
            fail(f"decision {d} ({a['outcome']}) must also reach {missing}: no effect of it does",
                 f"{d}.realization")


def _check_attributes(node: Node, fail: Fail) -> None:
    """The attributes a node's subkind needs (:data:`ATTRIBUTES`), each of a type it may have."""
    n = node.node_id
    if node.subkind not in SUBKINDS[node.kind]:
        fail(f"{node.kind} {n} has unknown subkind {node.subkind!r} (one of: "
             f"{', '.join(SUBKINDS[node.kind])})", f"{n}.subkind")
    if not isinstance(node.attrs, dict):
        fail(f"{node.kind} {n}: attrs must be a mapping, not {type(node.attrs).__name__}", f"{n}.attrs")
    _check_types(node.attrs, ATTRIBUTES[node.subkind if node.kind == "evidence" else node.kind],
                 f"{node.kind} {n}", n, fail)
    if node.kind == "decision":
        amounts = DECISION_KINDS[node.subkind].carries_amount
        carried = amounts and not node.attrs["fallback"]
        if carried != (node.attrs["amount"] is not None):
            fail(f"decision {n}: a {node.subkind} outcome carries an amount exactly when "
                 f"{'it is not the fallback' if amounts else 'never'}; "
                 f"amount is {node.attrs['amount']!r}", f"{n}.amount")
    elif node.kind == "effect":
        realization = node.attrs["realization"]
        _check_types(realization, REALIZATION_ATTRIBUTES, f"effect {n}: realization", f"{n}.realization",
                     fail)
        if realization["op"] not in REALIZATION_OPS:
            fail(f"effect {n}: realization op {realization['op']!r} is not one of "
                 f"{', '.join(REALIZATION_OPS)}", f"{n}.realization.op")
        for name, value in realization["fields"].items():
            if not isinstance(value, str):
                fail(f"effect {n}: realization field {name!r} must be text, as it is written",
                     f"{n}.realization.fields.{name}")
    elif node.subkind == "clause":
        if not _CLAUSE_REF.match(node.ref):
            fail(f"clause {n}: ref {node.ref!r} must be P-1, P-2, ...", f"{n}.ref")
        coupling = node.attrs.get("coupling")
        if node.ref == RULE_CLAUSE and coupling is not None:
            fail(f"clause {n} ({RULE_CLAUSE}) states the decision rule, so it names no coupling",
                 f"{n}.coupling")
        if node.ref != RULE_CLAUSE and coupling not in COUPLING_KINDS:
            fail(f"clause {n} ({node.ref}) states a coupling: 'coupling' must name its kind (one of: "
                 f"{', '.join(COUPLING_KINDS)}), not {coupling!r}", f"{n}.coupling")
    elif node.kind == "evidence" and node.attrs["row"].get("id") != node.ref:
        fail(f"{node.subkind} {n}: its row's id {node.attrs['row'].get('id')!r} must be its ref "
             f"{node.ref!r}", f"{n}.row.id")


def _check_types(values: dict, schema: dict[str, tuple[type, ...]], what: str, prefix: str,
                 fail: Fail) -> None:
    for name, types in schema.items():
        if name not in values:
            fail(f"{what} lacks {name!r}", f"{prefix}.{name}")
        value = values[name]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            allowed = " or ".join("None" if t is type(None) else t.__name__ for t in types)
            fail(f"{what}: {name!r} must be {allowed}, not {value!r}", f"{prefix}.{name}")


def _check_evidence(node: Node, domain: Domain, fail: Fail) -> None:
    """Evidence lives where its domain's workspace keeps it: clauses in the policy, rows (with
    exactly the table's columns) in the case or option table."""
    n, options = node.node_id, domain.decision.options
    if node.subkind == "clause":
        path, columns = domain.policy.file, None
    elif node.subkind == "record":
        path, columns = domain.case.table, domain.case.columns()
    elif options is None:
        fail(f"evidence {n} is an option row, but {domain.id} decides without options", f"{n}.subkind")
    else:
        path, columns = options.table, ["id", "case_id", options.provider, "cost", "rating"]
    if node.attrs["path"] != path:
        fail(f"{node.subkind} {node.ref} ({n}) lives in {path!r} in {domain.id}, not in "
             f"{node.attrs['path']!r}", f"{n}.path")
    if columns is not None and sorted(node.attrs["row"]) != sorted(columns):
        fail(f"row {node.ref} ({n}) must have exactly the columns of {path}: {', '.join(columns)}",
             f"{n}.row")
    if node.subkind == "clause":
        if node.ref != RULE_CLAUSE and node.attrs["coupling"] not in domain.couplings:
            fail(f"clause {node.ref} ({n}) states a {node.attrs['coupling']}; {domain.id} couples "
                 f"its cases by {', '.join(domain.couplings)}", f"{n}.coupling")
        _check_clause(node, domain, fail)


def _check_clause(node: Node, domain: Domain, fail: Fail) -> None:
    """A clause's rule carries its domain's words and its text is that rule as written, so the
    critic reads back from the policy exactly the rule the graph decides by."""
    n, rule = node.node_id, node.attrs["rule"]
    if node.ref == RULE_CLAUSE:
        kind = DECISION_KINDS[domain.decision.kind]
        words = kind.rule(domain, {})
    else:
        kind = COUPLING_KINDS[node.attrs["coupling"]]
        words = kind.rule({}, {**coupling_words(domain), "group": rule.get("group")})
    for name, value in sorted(words.items()):
        if rule.get(name) != value:
            fail(f"clause {node.ref} ({n}): its rule's {name!r} must be {value!r} (the word "
                 f"{domain.id} uses), not {rule.get(name)!r}", f"{n}.rule.{name}")
    try:
        text = kind.render(rule)
    except (KeyError, TypeError, ValueError) as exc:
        fail(f"clause {node.ref} ({n}): its rule cannot be written as policy text ({exc!r} is "
             "missing or malformed)", f"{n}.rule")
    if kind.parse(text) != rule:
        fail(f"clause {node.ref} ({n}): its rule does not read back from its own text {text!r} "
             f"(it reads {kind.parse(text)})", f"{n}.rule")
    if node.attrs["text"] != text:
        fail(f"clause {node.ref} ({n}): its text must be its rule as the policy states it: {text!r}",
             f"{n}.text")


def _outcome_text(outcome: Outcome) -> str:
    return outcome.value if outcome.amount is None else f"{outcome.value} ({outcome.amount})"


def coupling_words(domain: Domain) -> dict:
    case = domain.case
    return {"group_column": case.group, "plural": case.plural, "fallback": domain.decision.fallback,
            "date": case.date}


@dataclass(frozen=True)
class Resolution:
    """What a blueprint's policy decides, before any node exists: the decision rule, the pending
    cases in the order the policy takes them, each case's options, each clause's number (by group),
    the coupling constraints and every case's intended outcome and basis. The one computation of
    the intended solution, shared by :func:`build_graph` and the rewrites of recursive synthesis
    (which predict what a change to a blueprint changes)."""

    rule: dict
    order: list[dict]
    options_by_case: dict[str, list[dict]]
    clause_ref: dict[str, str]  # group -> P-n (coupling and distractor clauses; the rule is P-1)
    clause_specs: list[tuple[str, str, dict]]  # (group, "coupling" or "distractor", spec) in P-order
    constraints: list[Constraint]
    decided: dict[str, Decided]


def resolve_blueprint(blueprint: Blueprint, domain: Domain) -> Resolution:
    """The :class:`Resolution` of one blueprint under its domain."""
    kind = DECISION_KINDS[domain.decision.kind]
    case = domain.case
    rule = kind.rule(domain, blueprint.params)
    words = coupling_words(domain)
    # clauses: the decision rule first, then coupling and distractor clauses by group name
    clause_specs = sorted(
        [(g["group"], "coupling", g) for g in blueprint.groups]
        + [(g["group"], "distractor", g) for g in blueprint.distractor_clauses], key=lambda s: s[0])
    clause_ref = {group: f"P-{number}" for number, (group, _, _) in enumerate(clause_specs, start=2)}
    order = sorted(blueprint.cases, key=lambda r: (r[case.date], r["id"]))
    options_by_case: dict[str, list[dict]] = defaultdict(list)
    for option in blueprint.options:
        options_by_case[option["case_id"]].append(option)
    alternatives = {r["id"]: kind.alternatives(r, rule, options_by_case[r["id"]]) for r in order}
    constraints = [
        Constraint(g["kind"], COUPLING_KINDS[g["kind"]].rule(g["params"], {**words, "group": g["group"]}),
                   clause_ref[g["group"]], tuple(g["members"]))
        for g in blueprint.groups]
    decided = resolve([r["id"] for r in order], alternatives, RULE_CLAUSE, constraints)
    return Resolution(rule, order, options_by_case, clause_ref, clause_specs, constraints, decided)


def build_graph(blueprint: Blueprint, domain: Domain) -> CompletionGraph:
    """The completion graph of one blueprint, with its intended solution."""
    kind = DECISION_KINDS[domain.decision.kind]
    case = domain.case
    resolution = resolve_blueprint(blueprint, domain)
    rule, order, decided = resolution.rule, resolution.order, resolution.decided
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

    words = coupling_words(domain)
    clause_node: dict[str, str] = {}
    rule_node = add_node("evidence", "clause", RULE_CLAUSE, f"{domain.policy.title}: decision rule",
                         {"path": domain.policy.file, "text": kind.render(rule), "rule": rule})
    for group, role, spec in resolution.clause_specs:
        coupling = COUPLING_KINDS[spec["kind"]]
        clause_rule = coupling.rule(spec["params"], {**words, "group": group})
        clause_node[group] = add_node(
            "evidence", "clause", resolution.clause_ref[group], f"{spec['kind']} for {case.group} {group}",
            {"path": domain.policy.file, "text": coupling.render(clause_rule), "rule": clause_rule,
             "coupling": spec["kind"]}, distractor=role == "distractor")

    record_node = {
        r["id"]: add_node("evidence", "record", r["id"], f"{case.noun} {r['id']}",
                          {"path": case.table, "row": r})
        for r in order}
    options_by_case = resolution.options_by_case
    option_node: dict[str, str] = {}
    for option in blueprint.options:
        option_node[option["id"]] = add_node(
            "evidence", "option", option["id"], f"{domain.decision.options.noun} {option['id']}",
            {"path": domain.decision.options.table, "row": option})
    for row in blueprint.distractor_rows:
        add_node("evidence", "record", row["id"], f"{case.noun} {row['id']} (closed)",
                 {"path": case.table, "row": row}, distractor=True)
    constraints = resolution.constraints

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
