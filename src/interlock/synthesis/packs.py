"""Compile a completion graph into its task pack, by three generators that keep each other honest:

1. the workspace generator: initial files plus a private evidence index;
2. the request generator: a public request plus a private deliverable contract;
3. the rubric generator: private binary criteria tied to graph nodes, each with a check.

The generators are behind small protocols so a model-backed generator can replace any of them;
the ones here are deterministic programs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from interlock.core.errors import InterlockError
from interlock.core.io import dumps, loads
from interlock.core.registry import DECISION_KINDS
from interlock.synthesis.catalog import Domain
from interlock.synthesis.checks import keyed, realization_check, row_key, sha
from interlock.synthesis.graph import RULE_CLAUSE, CompletionGraph, Node
from interlock.synthesis.kinds.effects import (
    EFFECT_KINDS,
    FIELD_FORMATS,
    REGISTER_COLUMNS,
    REGISTER_PATH,
    Realization,
    field_format,
    realizations,
    register_entry,
)
from interlock.synthesis.oracle import oracle_calls, replay
from interlock.synthesis.text import Template
from interlock.synthesis.workspace import format_csv, parse_csv, parse_jsonl

REQUEST_PATH = "REQUEST.md"
OPTION_COLUMNS = ("id", "case_id", "cost", "rating")
SCOPE = Template("Process every {noun} in `{table}` whose status is `pending`, following "
                 "`{policy}` ({title}).")
OPTIONS_LINE = Template("The {option_plural} to choose from are in `{options_table}`.")
REGISTER_LINE = Template("Record each decision in `{file}` with case_id, outcome and basis (the "
                         "policy clause that decided it, such as P-1).")
CLAUSE_LINE = Template("- **{ref}.** {text}")
FORMATS_LINE = (f"Write every value as {FIELD_FORMATS['text']}; amounts as {FIELD_FORMATS['amount']}. "
                "Record values are text.")
SUBMIT_LINE = "Call submit when everything is recorded."
#: what bounds the task: an agent that does more than the deliverables fails the guard
ONLY_LINE = "Only the deliverables above are part of this task: every other file stays as it is."


@dataclass(frozen=True)
class Criterion:
    criterion_id: str
    kind: str  # primary, grounding, realization, coupling, no_collateral, submit
    node_ids: tuple[str, ...]
    mandatory: bool
    weight: float
    description: str

    @property
    def guard(self) -> bool:
        """A guard holds before any work (nothing damaged yet) and must keep holding."""
        return self.kind == "no_collateral"


@dataclass
class TaskPack:
    task_id: str
    domain_id: str
    pool: str
    files: dict[str, str]
    evidence_index: list[dict]
    request: str
    contract: list[dict]
    rubric: list[Criterion]
    checks: dict[str, dict]
    reference: list[dict] = field(default_factory=list)

    def public_files(self) -> dict[str, str]:
        """What the solver sees: the workspace, including the request."""
        return self.files

    def guard_check(self) -> dict | None:
        """The guard's ``no_collateral`` check (None where the pack has no guard)."""
        guard = next((c for c in self.rubric if c.guard), None)
        spec = self.checks.get(guard.criterion_id) if guard else None
        return spec if spec and spec.get("op") == "no_collateral" else None


class WorkspaceGenerator(Protocol):
    def __call__(self, graph: CompletionGraph, domain: Domain) -> tuple[dict[str, str], list[dict]]: ...


class RequestGenerator(Protocol):
    def __call__(self, graph: CompletionGraph, domain: Domain) -> tuple[str, list[dict]]: ...


class RubricGenerator(Protocol):
    def __call__(self, graph: CompletionGraph, domain: Domain,
                 files: dict[str, str]) -> tuple[list[Criterion], dict[str, dict]]: ...


def scripted_workspace(graph: CompletionGraph, domain: Domain) -> tuple[dict[str, str], list[dict]]:
    """Generator 1: record tables, the policy, empty deliverable targets; the evidence index."""
    evidence = graph.of_kind("evidence")
    tables: dict[str, list[dict]] = {}
    clauses: list[Node] = []
    index = []
    for node in evidence:
        if node.subkind == "clause":
            clauses.append(node)
            index.append(_index_row(node, "clause", node.attrs["text"]))
        else:
            tables.setdefault(node.attrs["path"], []).append(node.attrs["row"])
            index.append(_index_row(node, "row", node.attrs["row"]))
    files = {}
    for path, rows in tables.items():
        header = domain.case.columns() if path == domain.case.table else list(rows[0])
        files[path] = format_csv(header, sorted(rows, key=lambda r: r["id"]))
    clauses.sort(key=lambda n: int(n.ref.split("-")[1]))
    files[domain.policy.file] = (
        f"# {domain.policy.title}\n\nThese clauses govern the {domain.case.plural} in "
        f"`{domain.case.table}`.\n\n"
        + "".join(CLAUSE_LINE.render(ref=n.ref, text=n.attrs["text"]) + "\n" for n in clauses))
    return {**files, **deliverable_targets(graph, domain)}, index


def deliverable_targets(graph: CompletionGraph, domain: Domain) -> dict[str, str]:
    """The files the agent writes into, as the task starts: the decision register and each
    requested effect's table, with their headers (a document effect has none). Compiled from the
    graph whoever writes the rest of the workspace."""
    targets = {REGISTER_PATH: ",".join(REGISTER_COLUMNS) + "\n"}
    for spec in requested_effects(graph, domain):
        kind = EFFECT_KINDS[spec.kind]
        header = kind.header(kind.words(domain, spec))
        if header is not None:
            targets[spec.file] = header
    return targets


def _index_row(node: Node, locator: str, expected: object) -> dict:
    return {"node_id": node.node_id, "path": node.attrs["path"], "locator": locator, "ref": node.ref,
            "expected": dumps(expected)}


#: a clause's words that prose may put its own way (the case's noun, its plural)
DESCRIPTIVE_RULE_KEYS = frozenset({"noun", "plural", "option_plural"})


def clause_values(node: Node) -> dict[str, str]:
    """What a clause must state, however it is worded: every value of its rule (numbers, outcome
    words, columns, groups, each item of a list), but the words that only describe (the noun);
    keyed by where in the rule each sits (``tiers.0.1``)."""
    values: dict[str, str] = {}

    def walk(key: str, value: object) -> None:
        if isinstance(value, (list, tuple)):
            for position, item in enumerate(value):
                walk(f"{key}.{position}", item)
        elif isinstance(value, (str, int)) and not isinstance(value, bool):
            values[key] = str(value)

    for key, value in sorted(node.attrs["rule"].items()):
        if key not in DESCRIPTIVE_RULE_KEYS:
            walk(key, value)
    return values


def authored_index_row(node: Node, path: str, locator: str, ref: str) -> dict:
    """An evidence index row where an author put the node (``path``, ``locator``, ``ref``), with
    what must be found there compiled from the graph: a record's row, or the values a clause
    states (:func:`clause_values`)."""
    expected = clause_values(node) if node.subkind == "clause" else node.attrs["row"]
    return {"node_id": node.node_id, "path": path, "locator": locator, "ref": ref,
            "expected": dumps(expected)}


def scripted_request(graph: CompletionGraph, domain: Domain) -> tuple[str, list[dict]]:
    """Generator 2: the public request, and the private contract of required outputs. The request
    states exactly the task's obligations: of the domain's description only its workflow (which
    names no effect), then each requested deliverable, and that nothing else is to change."""
    lines = [f"# {domain.name}", "", domain.workflow, "",
             SCOPE.render(noun=domain.case.noun, table=domain.case.table, policy=domain.policy.file,
                          title=domain.policy.title)]
    if domain.decision.options:
        lines.append(OPTIONS_LINE.render(option_plural=domain.decision.options.plural,
                                         options_table=domain.decision.options.table))
    lines += ["", "Deliverables:", "- " + REGISTER_LINE.render(file=REGISTER_PATH)]
    for spec in requested_effects(graph, domain):
        kind = EFFECT_KINDS[spec.kind]
        lines.append("- " + kind.render(kind.words(domain, spec)))
    lines += ["", ONLY_LINE, "", FORMATS_LINE, "", SUBMIT_LINE]
    return "\n".join(lines) + "\n", compiled_contract(graph)


def compiled_contract(graph: CompletionGraph) -> list[dict]:
    """The private deliverable contract: one row per decision (its register entry) and per
    realization edge (the effect's record), with what it holds, compiled from the graph."""
    contract: list[dict] = []
    for decision in graph.of_kind("decision"):
        a = decision.attrs
        contract.append(_deliverable(len(contract), "register", [decision.node_id],
                                     register_entry(a["case_id"], a["outcome"], a["basis"])))
        for effect in graph.targets(decision.node_id, "realization"):
            contract.append(_deliverable(len(contract), effect.subkind,
                                         [decision.node_id, effect.node_id],
                                         Realization.from_dict(effect.attrs["realization"])))
    return contract


def requested_effects(graph: CompletionGraph, domain: Domain) -> list:
    """The effect targets the task asks for (a target only fallback outcomes skip included)."""
    return domain.effects[:graph.effects_per_decision]


def _deliverable(position: int, kind: str, node_ids: list[str], realization: Realization) -> dict:
    """One contract row: where the deliverable goes, what it holds, and each field's declared
    format (:data:`~interlock.synthesis.kinds.effects.FIELD_FORMATS`)."""
    return {"deliverable_id": f"K{position + 1}", "kind": kind, "node_ids": node_ids,
            "path": realization.path, "key": realization.key, "realization": dumps(realization.to_dict()),
            "formats": dumps({name: field_format(name) for name in realization.fields})}


def scripted_rubric(graph: CompletionGraph, domain: Domain,
                    files: dict[str, str]) -> tuple[list[Criterion], dict[str, dict]]:
    """Generator 3: binary criteria tied to graph nodes, each with an executable check."""
    rubric: list[Criterion] = []
    checks: dict[str, dict] = {}

    def add(kind: str, node_ids: list[str], mandatory: bool, weight: float, description: str,
            check: dict) -> None:
        criterion_id = f"C{len(rubric) + 1}"
        rubric.append(Criterion(criterion_id, kind, tuple(node_ids), mandatory, weight, description))
        checks[criterion_id] = check

    for decision in graph.of_kind("decision"):
        a = decision.attrs
        grounds = [n.node_id for n in graph.sources(decision.node_id, "grounding")]
        entry = register_entry(a["case_id"], a["outcome"], a["basis"])
        add("primary", [decision.node_id, *grounds], True, 2.0,
            f"{REGISTER_PATH} records outcome {a['outcome']} for {a['case_id']}",
            realization_check(Realization(entry.op, entry.path, entry.key, {"outcome": a["outcome"]})))
        add("grounding", [decision.node_id, graph.clause(a["basis"]).node_id], False, 1.0,
            f"the decision on {a['case_id']} cites clause {a['basis']}",
            realization_check(Realization(entry.op, entry.path, entry.key, {"basis": a["basis"]})))
        for effect in graph.targets(decision.node_id, "realization"):
            add("realization", [decision.node_id, effect.node_id], True, 1.0,
                f"{effect.attrs['label']} reflects the decision on {a['case_id']}",
                realization_check(Realization.from_dict(effect.attrs["realization"])))
    for hyper in graph.hyperedges:
        add("coupling", [hyper.hyperedge_id, hyper.clause, *hyper.members], True, 2.0,
            f"{hyper.kind} of clause {graph.by_id[hyper.clause].ref} holds over "
            f"{len(hyper.members)} decisions", coupling_check(graph, domain, hyper))
    add("no_collateral", [n.node_id for n in graph.of_kind("evidence")], True, 1.0,
        "no record, policy or file changed that no decision required, at any point of the episode",
        no_collateral_check(graph, domain, files))
    add("submit", [], True, 1.0,  # about the episode as a whole, not a node
        "the agent called submit, as the request asks, when the work was done", {"op": "submitted"})
    return rubric, checks


def admitted_outcomes(graph: CompletionGraph, decision: Node) -> tuple[dict, list]:
    """A decision's case row and the outcomes its rule admits (couplings aside), best first."""
    sources = graph.sources(decision.node_id, "grounding")
    row = next(n.attrs["row"] for n in sources if n.subkind == "record")
    options = [n.attrs["row"] for n in sources if n.subkind == "option"]
    rule = graph.clause(RULE_CLAUSE).attrs["rule"]
    return row, DECISION_KINDS[decision.subkind].alternatives(row, rule, options)


def coupling_check(graph: CompletionGraph, domain: Domain, hyper) -> dict:
    """A joint constraint over the outcomes the register records, and over what was realized: for
    each member and each outcome it may have, what its effects write (``effects``: file -> outcome
    -> the fields that carry the outcome, or None where that outcome writes no record there), so a
    register that says "deferred" beside a payment that was made anyway fails."""
    members, effects = {}, {}
    for member in hyper.members:
        decision = graph.by_id[member]
        case_id = decision.attrs["case_id"]
        row, alternatives = admitted_outcomes(graph, decision)
        members[case_id] = {o.value: o.amount for o in alternatives if not o.fallback}
        effects[case_id] = realized_by_outcome(domain, graph.effects_per_decision, row, alternatives,
                                               decision.attrs["basis"])
    return {"op": "coupling", "path": REGISTER_PATH, "kind": hyper.kind, "rule": hyper.params,
            "fallback": domain.decision.fallback, "members": members, "effects": effects}


def realized_by_outcome(domain: Domain, effects_per_decision: int, row: dict, alternatives: list,
                        basis: str) -> dict:
    """For one case: each record file its effects write -> each outcome -> the fields that carry
    the outcome there (its value or its amount; None: that outcome writes no record there).
    Documents are left to their own criteria."""
    effects: dict = {}
    for outcome in alternatives:
        carried = {str(outcome.value), str(outcome.amount)}
        for _, r in realizations(domain, effects_per_decision, row, outcome, basis):
            if r.op == "write_file":
                continue
            effect = effects.setdefault(r.path, {
                "format": "jsonl" if r.op == "append_jsonl" else "csv",
                "key_field": "id" if r.op == "update_csv" else "case_id", "key": r.key,
                "by_outcome": dict.fromkeys((o.value for o in alternatives), None),
                # a row edited in place asserts nothing while it still holds its initial values
                "initial": {f: str(row[f]) for f in r.fields} if r.op == "update_csv" else None})
            effect["by_outcome"][outcome.value] = {f: v for f, v in r.fields.items() if str(v) in carried}
    return effects


def no_collateral_check(graph: CompletionGraph, domain: Domain, files: dict[str, str]) -> dict:
    """Everything must stay as it was except what some decision requires to change: the initial
    files (by digest, and the rows of every table, so a change is named by its record), and every
    required change, file by file (see :func:`interlock.synthesis.checks.unrequired_changes`, the
    one definition of a required change that the guard and the agent judge's collateral list
    share)."""
    required = [register_entry(d.attrs["case_id"], d.attrs["outcome"], d.attrs["basis"])
                for d in graph.of_kind("decision")]
    required += [Realization.from_dict(e.attrs["realization"]) for e in graph.of_kind("effect")]
    spec: dict = {"op": "no_collateral", "files": {path: sha(text) for path, text in sorted(files.items())},
                  "appends": {}, "tables": {},
                  "documents": sorted(r.path for r in required if r.op == "write_file")}
    for r in required:
        if r.op in {"append_csv", "append_jsonl"} and r.path not in spec["appends"]:
            text, fmt = files.get(r.path, ""), "jsonl" if r.op == "append_jsonl" else "csv"
            initial = len(parse_jsonl(text) if fmt == "jsonl" else parse_csv(text)[1])
            spec["appends"][r.path] = {"format": fmt, "prefix": text, "initial_records": initial,
                                       "records": {}}
    for path, text in sorted(files.items()):
        if path.endswith(".csv") and path not in spec["appends"]:
            header, rows = parse_csv(text)
            key = row_key(header, rows)
            spec["tables"][path] = {"key": key, "rows": {keyed(row, number, key): row
                                                         for number, row in enumerate(rows, start=2)},
                                    "mutable": {}}
    for r in required:
        if r.path in spec["appends"]:
            spec["appends"][r.path]["records"][r.key] = sorted(r.fields)
        elif r.op == "update_csv":
            table = spec["tables"][r.path]
            row = next((k for k, row in table["rows"].items() if row.get("id") == r.key), None)
            if row is None:
                raise InterlockError(f"an effect updates row id={r.key!r}, which the table does not hold",
                                     file=r.path, item=graph.task_id, field="realization")
            table["mutable"][row] = sorted(r.fields)
    return spec


def compile_pack(graph: CompletionGraph, domain: Domain,
                 workspace: WorkspaceGenerator = scripted_workspace,
                 request: RequestGenerator = scripted_request,
                 rubric: RubricGenerator = scripted_rubric, *, made_by_domain: bool = False) -> TaskPack:
    """The task pack of a graph, reference solution included: the one way to compile a task,
    generated or built by hand. A graph its domain cannot make (see
    :meth:`CompletionGraph.validate`), or one whose reference cannot be carried out, is refused
    here with one error naming the task and what is wrong, rather than compiled into a pack the
    reviews reject for reasons that never say why. ``made_by_domain``: the graph was built from
    its domain by :func:`~interlock.synthesis.graph.build_graph` (the packs stage's graphs), so
    only its structure is checked (a quarter of compiling, at 10k tasks four seconds)."""
    graph.validate(domain=None if made_by_domain else domain)
    files, index = workspace(graph, domain)
    request_text, contract = request(graph, domain)
    files = {**files, REQUEST_PATH: request_text}
    criteria, checks = rubric(graph, domain, files)
    return TaskPack(graph.task_id, graph.domain_id, graph.pool, files, index, request_text, contract,
                    criteria, checks, reference_solution(graph, domain, files))


def reference_solution(graph: CompletionGraph, domain: Domain, files: dict[str, str]) -> list[dict]:
    """The oracle's trajectory through the agent's own tools on the workspace, as reference rows.
    Every step must succeed: a reference that fails proves nothing about the checks it feeds."""
    steps, _ = replay(files, oracle_calls(graph, domain))
    for step in steps:
        if not step["ok"]:
            raise InterlockError(
                f"the reference solution fails at step {step['step']}, {step['tool']} "
                f"{dumps(step['arguments'])}: {step['observation']}",
                item=graph.task_id, field=f"reference step {step['step']}")
    return [{"step": s["step"], "tool": s["tool"], "arguments": dumps(s["arguments"], sort_keys=False),
             "observation": s["observation"]} for s in steps]


def pack_rows(pack: TaskPack) -> dict[str, list[dict]]:
    t = pack.task_id
    return {
        "tasks": [{"task_id": t, "domain_id": pack.domain_id, "pool": pack.pool}],
        "workspace_files": [{"task_id": t, "path": p, "content": c} for p, c in sorted(pack.files.items())],
        "evidence_index": [{"task_id": t, **row} for row in pack.evidence_index],
        "requests": [{"task_id": t, "request": pack.request}],
        "contracts": [{"task_id": t, **row} for row in pack.contract],
        "rubrics": [{"task_id": t, "criterion_id": c.criterion_id, "kind": c.kind,
                     "node_ids": list(c.node_ids), "mandatory": c.mandatory, "weight": c.weight,
                     "description": c.description} for c in pack.rubric],
        "checks": [{"task_id": t, "criterion_id": cid, "spec": dumps(spec)}
                   for cid, spec in pack.checks.items()],
        "reference_solutions": [{"task_id": t, **step} for step in pack.reference],
    }


def packs_from_rows(tables: dict[str, list[dict]], source: str) -> list[TaskPack]:
    """Rebuild the packs of one aligned row group of the pack tables."""
    grouped: dict[str, dict[str, list[dict]]] = {}
    for name, rows in tables.items():
        for row in rows:
            grouped.setdefault(row["task_id"], {}).setdefault(name, []).append(row)
    packs = []
    for task_id, rows in grouped.items():
        task = rows["tasks"][0]
        packs.append(TaskPack(
            task_id, task["domain_id"], task["pool"],
            {r["path"]: r["content"] for r in rows.get("workspace_files", [])},
            [{k: v for k, v in r.items() if k != "task_id"} for r in rows.get("evidence_index", [])],
            rows["requests"][0]["request"],
            [{k: v for k, v in r.items() if k != "task_id"} for r in rows.get("contracts", [])],
            [Criterion(r["criterion_id"], r["kind"], tuple(r["node_ids"]), r["mandatory"], r["weight"],
                       r["description"]) for r in rows.get("rubrics", [])],
            {r["criterion_id"]: loads(r["spec"], file=source, item=task_id,
                                      field=f"checks[{r['criterion_id']}]")
             for r in rows.get("checks", [])},
            [{k: v for k, v in r.items() if k != "task_id"} for r in rows.get("reference_solutions", [])],
        ))
    return packs
