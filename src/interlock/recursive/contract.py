"""Transformation contracts: what a rewrite of a task declares it changes, the actual difference
between a parent task and its child, and the check that the two agree (conformance).

Graph elements are named by stable keys rather than node ids, which are renumbered whenever a
graph is rebuilt: a case's record is ``record:CLM-1042``, its decision ``decision:CLM-1042``, an
effect ``effect:<kind>:CLM-1042``, an option ``option:OPT-311``, the decision rule's clause
``clause:rule`` and a coupling or distractor clause ``clause:<group>`` (its P-number is an
attribute, so a renumbering shows as a change of ``ref``), a hyperedge ``coupling:<group>`` and an
edge ``<kind>:<source>><target>``.

A difference is a :class:`Delta` per facet: keys added, removed and changed, a changed node or
hyperedge named down to its attribute (``decision:CLM-1042/outcome``). An operator declares the
graph facets, the request lines and the workspace files; what the three generators must then
compile differently (criteria, deliverables, reference solution) follows from that declaration
by :func:`expected_pack_changes`, so conformance compares the compiled child with the
declaration, never with itself.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from interlock.core.errors import InterlockError
from interlock.core.io import dumps, loads
from interlock.synthesis.checks import sha
from interlock.synthesis.graph import RULE_CLAUSE, CompletionGraph, Hyperedge, Node
from interlock.synthesis.kinds.effects import Realization, register_entry
from interlock.synthesis.packs import TaskPack
from interlock.synthesis.workspace import is_malformed, parse_csv

GRAPH_FACETS = ("nodes", "edges", "hyperedges")
DECLARED_FACETS = (*GRAPH_FACETS, "files", "request")
DERIVED_FACETS = ("criteria", "deliverables", "reference")
FACETS = (*DECLARED_FACETS, *DERIVED_FACETS)
#: decision attributes a register entry carries (a change of either changes the entry)
REGISTERED = ("outcome", "basis")
#: decision attributes the primary criterion reads
PRIMARY = ("outcome", "amount", "fallback")


@dataclass(frozen=True)
class Delta:
    """Keys added, removed and changed in one facet, each sorted."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()

    @classmethod
    def of(cls, added: Iterable[str] = (), removed: Iterable[str] = (), changed: Iterable[str] = ()) -> Delta:
        return cls(tuple(sorted(set(added))), tuple(sorted(set(removed))), tuple(sorted(set(changed))))

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)

    def changed_keys(self) -> set[str]:
        """The changed items without their attribute (``decision:X/outcome`` -> ``decision:X``;
        attributes never hold a ``/``, keys such as file paths may)."""
        return {key.rsplit("/", 1)[0] for key in self.changed}

    def changed_fields(self, key: str) -> set[str]:
        return {c.rsplit("/", 1)[1] for c in self.changed if c.rsplit("/", 1)[0] == key}

    def to_dict(self) -> dict:
        return {"added": list(self.added), "removed": list(self.removed), "changed": list(self.changed)}

    @classmethod
    def from_dict(cls, data: Mapping) -> Delta:
        return cls.of(data.get("added", ()), data.get("removed", ()), data.get("changed", ()))


# ----------------------------------------------------------------------------- stable keys

def node_key(node: Node) -> str:
    if node.kind == "decision":
        return f"decision:{node.attrs['case_id']}"
    if node.kind == "effect":
        return f"effect:{node.subkind}:{node.ref}"
    if node.subkind == "clause":
        return "clause:rule" if node.ref == RULE_CLAUSE else f"clause:{node.attrs['rule']['group']}"
    return f"{node.subkind}:{node.ref}"


def hyperedge_key(graph: CompletionGraph, hyper: Hyperedge) -> str:
    return f"coupling:{graph.by_id[hyper.clause].attrs['rule']['group']}"


def edge_key(kind: str, source: str, target: str) -> str:
    return f"{kind}:{source}>{target}"


def element_keys(graph: CompletionGraph) -> dict[str, str]:
    """Node and hyperedge id -> stable key."""
    return {**{n.node_id: node_key(n) for n in graph.nodes},
            **{h.hyperedge_id: hyperedge_key(graph, h) for h in graph.hyperedges}}


def flatten(value: object, prefix: str = "") -> dict[str, str]:
    """Nested mappings as dotted paths to canonical JSON leaves (lists are leaves)."""
    if isinstance(value, Mapping) and value:
        out: dict[str, str] = {}
        for name in sorted(value):
            out.update(flatten(value[name], f"{prefix}.{name}" if prefix else str(name)))
        return out
    return {prefix: _leaf(value)}


def _leaf(value: object) -> str:
    """A value as comparable text: text as itself (tagged, so "1" and 1 differ), the rest as JSON."""
    return f"'{value}" if value.__class__ is str else dumps(value)


# ----------------------------------------------------------------------------- facts and differences

Facts = dict[str, dict[str, str]]  # key -> attribute -> canonical value


def graph_facts(graph: CompletionGraph) -> dict[str, Facts]:
    keys = element_keys(graph)
    return {
        "nodes": {node_key(n): {"ref": _leaf(n.ref), "label": _leaf(n.label),
                                "distractor": _leaf(n.distractor),
                                **flatten(n.attrs)} for n in graph.nodes},
        "edges": {edge_key(e.kind, keys[e.source], keys[e.target]): {} for e in graph.edges},
        "hyperedges": {keys[h.hyperedge_id]: {"kind": _leaf(h.kind),
                                              "members": dumps([keys[m] for m in h.members]),
                                              **flatten(h.params, "params")} for h in graph.hyperedges},
    }


def pack_facts(graph: CompletionGraph, pack: TaskPack) -> dict[str, Facts]:
    keys = element_keys(graph)
    criteria: Facts = {}
    for c in pack.rubric:
        criteria[_unique(criterion_key(c.kind, [keys.get(i, i) for i in c.node_ids]), criteria)] = {
            "nodes": dumps([keys.get(i, i) for i in c.node_ids]), "mandatory": dumps(c.mandatory),
            "weight": dumps(c.weight), "description": dumps(c.description),
            "check": dumps(pack.checks.get(c.criterion_id))}
    deliverables: Facts = {}
    for d in pack.contract:
        deliverables[_unique(keys.get(d["node_ids"][-1], d["node_ids"][-1]), deliverables)] = {
            "kind": dumps(d["kind"]), "path": dumps(d["path"]), "key": dumps(d["key"]),
            "realization": d["realization"]}
    carried = _carried_by(graph)
    reference: Facts = {}
    for step in pack.reference:
        arguments = loads(step["arguments"], file="reference_solutions", item=pack.task_id,
                          field=f"step {step['step']}")
        call = dumps([step["tool"], arguments])
        key = carried.get(call) or _reading_key(step["tool"], arguments) or f"step:{call}"
        reference[_unique(key, reference)] = {"call": call}
    request = Counter(pack.request.splitlines())
    return {
        "files": {key: {"sha": digest} for path, text in pack.files.items()
                  for key, digest in file_facts(path, text).items()},
        "request": {line: {"count": str(n)} for line, n in request.items()},
        "criteria": criteria, "deliverables": deliverables, "reference": reference,
    }


def file_facts(path: str, text: str) -> dict[str, str]:
    """A workspace file as facts: a table of records with ids row by row (``path#<id>``, and
    ``path#header``), so a change is pinned to the record it touches; any other file whole."""
    if not path.endswith(".csv"):
        return {path: sha(text)}
    header, rows = parse_csv(text)
    ids = {r.get("id") for r in rows}
    if not rows or "id" not in header or any(map(is_malformed, rows)) or len(ids) != len(rows):
        return {path: sha(text)}
    return {f"{path}#header": sha(dumps(header)), **{f"{path}#{r['id']}": sha(dumps(r)) for r in rows}}


def criterion_key(kind: str, node_keys: list[str]) -> str:
    """A criterion by what it is about: a decision's primary and grounding criteria by the
    decision, a realization criterion by its effect, a coupling criterion by its hyperedge; the
    guard and the submit criterion, which are about the whole episode, by their kind."""
    if kind in ("no_collateral", "submit") or not node_keys:
        return kind
    return f"{kind}@{node_keys[1] if kind == 'realization' else node_keys[0]}"


def _carried_by(graph: CompletionGraph) -> dict[str, str]:
    """Each reference write's call -> the element it carries out (register entries: the decision)."""
    out = {}
    for decision in graph.of_kind("decision"):
        a = decision.attrs
        call = register_entry(a["case_id"], a["outcome"], a["basis"]).tool_call()
        out[dumps([call.name, call.arguments])] = node_key(decision)
        for effect in graph.targets(decision.node_id, "realization"):
            call = Realization.from_dict(effect.attrs["realization"]).tool_call()
            out[dumps([call.name, call.arguments])] = node_key(effect)
    return out


def _reading_key(tool: str, arguments: object) -> str | None:
    if tool in {"list_files", "submit"}:
        return tool
    if tool == "read_file" and isinstance(arguments, dict):
        return f"read_file:{arguments.get('path')}"
    return None


def _unique(key: str, taken: Mapping[str, object]) -> str:
    number, candidate = 1, key
    while candidate in taken:
        number += 1
        candidate = f"{key}#{number}"
    return candidate


def diff_facts(before: Facts, after: Facts) -> Delta:
    changed = [f"{key}/{name}" for key in before.keys() & after.keys()
               for name in before[key].keys() | after[key].keys()
               if before[key].get(name) != after[key].get(name)]
    return Delta.of(after.keys() - before.keys(), before.keys() - after.keys(), changed)


def task_facts(graph: CompletionGraph, pack: TaskPack) -> dict[str, Facts]:
    """Every facet's facts of one compiled task (kept for a parent drawn many times)."""
    return {**graph_facts(graph), **pack_facts(graph, pack)}


def task_diff(parent: tuple[CompletionGraph, TaskPack],
              child: tuple[CompletionGraph, TaskPack]) -> dict[str, Delta]:
    """The actual difference between two compiled tasks, facet by facet."""
    return facts_diff(task_facts(*parent), task_facts(*child))


def facts_diff(before: Mapping[str, Facts], after: Mapping[str, Facts]) -> dict[str, Delta]:
    """:func:`task_diff` from the two tasks' :func:`task_facts`."""
    diff = {facet: diff_facts(before[facet], after[facet]) for facet in FACETS}
    files = diff["files"]  # a file the child creates counts as changed (it was empty before)
    diff["files"] = Delta.of((), files.removed, [*files.changed, *(f"{path}/sha" for path in files.added)])
    return diff


def changed_nodes(parent: CompletionGraph, child: CompletionGraph) -> dict[str, str]:
    """The child's node ids that differ from its parent's: "added" or "changed" (for drawing)."""
    nodes = diff_facts(graph_facts(parent)["nodes"], graph_facts(child)["nodes"])
    changed = nodes.changed_keys()
    return {n.node_id: "added" if node_key(n) in nodes.added else "changed"
            for n in child.nodes if node_key(n) in nodes.added or node_key(n) in changed}


# ----------------------------------------------------------------------------- what the generators must do

def expected_pack_changes(parent: CompletionGraph, declared: Mapping[str, Delta]) -> dict[str, Delta]:
    """What compiling the child must change, given the declared graph, file and request changes:
    exactly which criteria, deliverables and reference steps appear and disappear, which
    deliverables and reference steps change, and which criteria *may* change (a criterion that
    reads a changed element; whether its text changes depends on the element's attribute)."""
    nodes, edges, hypers = declared["nodes"], declared["edges"], declared["hyperedges"]

    def of(prefix: str, keys: Iterable[str]) -> list[str]:
        return [k for k in keys if k.startswith(prefix)]

    def anchored(keys: Iterable[str], hyper_keys: Iterable[str]) -> list[str]:
        decisions, effects = of("decision:", keys), of("effect:", keys)
        return ([f"{kind}@{d}" for d in decisions for kind in ("primary", "grounding")]
                + [f"realization@{f}" for f in effects] + [f"coupling@{h}" for h in hyper_keys])

    changed = nodes.changed_keys()
    written = ([d for d in of("decision:", changed) if nodes.changed_fields(d) & set(REGISTERED)]
               + of("effect:", changed))
    added = of("decision:", nodes.added) + of("effect:", nodes.added)
    removed = of("decision:", nodes.removed) + of("effect:", nodes.removed)

    keys = element_keys(parent)
    members = {keys[h.hyperedge_id]: {keys[m] for m in h.members} for h in parent.hyperedges}
    touched = changed | set(nodes.added) | set(nodes.removed)
    regrounded = {edge.split(">", 1)[1] for edge in [*edges.added, *edges.removed]
                  if edge.startswith("grounding:")}
    renumbered = any(k.startswith("clause:") and "ref" in nodes.changed_fields(k) for k in changed)
    may_change = [f"primary@{d}" for d in of("decision:", changed) if nodes.changed_fields(d) & set(PRIMARY)]
    may_change += [f"primary@{d}" for d in regrounded]
    may_change += [f"grounding@{d}" for d in of("decision:", changed) if "basis" in nodes.changed_fields(d)]
    if renumbered:
        may_change += [f"grounding@{d}" for d in of("decision:", keys.values())]
    may_change += [f"realization@{f}" for f in of("effect:", changed)]
    for hyper, member_keys in members.items():
        cases = {m.split(":", 1)[1] for m in member_keys}
        reads = {k for k in touched if k.rsplit(":", 1)[-1] in cases} | {"clause:rule"} & touched
        if hyper in hypers.changed_keys() or reads or renumbered or declared["request"]:
            may_change.append(f"coupling@{hyper}")
    if any(declared[f] for f in DECLARED_FACETS):
        may_change.append("no_collateral")
    criteria = Delta.of(anchored(nodes.added, hypers.added), anchored(nodes.removed, hypers.removed),
                        may_change)
    return {"criteria": criteria,
            "deliverables": Delta.of(added, removed, [f"{key}/realization" for key in written]),
            "reference": Delta.of(added, removed, [f"{key}/call" for key in written])}


# ----------------------------------------------------------------------------- the contract

@dataclass(frozen=True)
class TransformationContract:
    """One rewrite's declaration, as data: the operator and parents, what the child demands of an
    agent that the parent did not (``demands``; ``adds_requirement`` False for a rewrite that only
    distracts), every facet's expected change (``changes``, with the derived facets filled in by
    :meth:`complete`) and where new or changed evidence lives (``evidence``: key, path, ref,
    change)."""

    operator: str
    parents: tuple[str, ...]
    child: str
    demands: str
    adds_requirement: bool
    changes: dict[str, Delta]
    evidence: tuple[dict, ...] = field(default_factory=tuple)

    def complete(self, parent: CompletionGraph) -> TransformationContract:
        """The contract with the generators' expected changes derived from the declared ones."""
        return TransformationContract(self.operator, self.parents, self.child, self.demands,
                                      self.adds_requirement,
                                      {**self.changes, **expected_pack_changes(parent, self.changes)},
                                      self.evidence)

    def to_json(self) -> str:
        return dumps({"operator": self.operator, "parents": list(self.parents), "child": self.child,
                      "demands": self.demands, "adds_requirement": self.adds_requirement,
                      "changes": {facet: delta.to_dict() for facet, delta in sorted(self.changes.items())},
                      "evidence": list(self.evidence)})

    @classmethod
    def from_json(cls, text: str, *, source: str = "contract",
                  item: str = "contract") -> TransformationContract:
        """A contract read back (a lineage row's); anything missing or malformed is an error naming
        ``source``, ``item`` and the field."""
        data = loads(text, file=source, item=item, field="contract")
        try:
            return cls(data["operator"], tuple(data["parents"]), data["child"], data["demands"],
                       data["adds_requirement"], {f: Delta.from_dict(d) for f, d in data["changes"].items()},
                       tuple(data["evidence"]))
        except (KeyError, TypeError, AttributeError) as exc:
            raise InterlockError(f"not a transformation contract ({exc!r} missing or malformed)", file=source,
                                 item=item, field="contract") from None


def conformance_problems(contract: TransformationContract, actual: Mapping[str, Delta]) -> list[str]:
    """Where the actual difference between parent and child is not what the completed contract
    declares: every undeclared change, every declared change that did not happen. Criteria the
    contract says may change are allowed to stay as they were."""
    problems = []
    for facet in FACETS:
        want, got = contract.changes.get(facet, Delta()), actual.get(facet, Delta())
        for part in ("added", "removed", "changed"):
            declared, happened = set(getattr(want, part)), set(getattr(got, part))
            if facet == "criteria" and part == "changed":
                happened = {key.rsplit("/", 1)[0] for key in happened}
                problems += [f"{facet}: {key} changed, but the contract does not say it may"
                             for key in sorted(happened - declared)]
                continue
            problems += [f"{facet}: {key} {part}, but the contract does not declare it"
                         for key in sorted(happened - declared)]
            problems += [f"{facet}: the contract declares {key} {part}, but it is not"
                         for key in sorted(declared - happened)]
    return problems
