"""Public-input critic: sees only what the solver sees (the request and the workspace).

Two readings of the public material:

- :func:`support_problems`, for every pack, whoever wrote it: each criterion's needs must be
  stated in public text, by name: the request names the records to process (their table, the
  status that marks them) and the policy, every deliverable's file and fields, and submit; every
  value a deliverable holds is either the decision's, the case's record's, or stated in a public
  file (an account code only a private file knows is a hidden condition);
- :func:`critic_problems`, for template packs: it solves the task from public material alone,
  by parsing the request and the policy with the same templates that wrote them, and runs every
  criterion's check on its own result. A criterion that fails there depends on something the
  public material does not say: a hidden condition, a value only the private index holds, a
  deliverable the request never asks for.

Beside them, :func:`interlock.review.scope.scope_problems` reads the request for the other
direction, for every pack: it may ask for no more than the contract (no effect the task does not
request, no change to a file the guard keeps), or an agent that does what it says fails the guard.
"""

from __future__ import annotations

from collections import defaultdict

from interlock.core.chat import ToolCall
from interlock.core.registry import COUPLING_KINDS, DECISION_KINDS, EFFECT_KINDS
from interlock.review.controls import ReferenceRun, submitted
from interlock.review.coverage import states
from interlock.synthesis.checks import View, run_check
from interlock.synthesis.graph import CompletionGraph
from interlock.synthesis.kinds.couplings import Constraint, resolve
from interlock.synthesis.kinds.effects import REGISTER_COLUMNS, REGISTER_PATH, register_entry
from interlock.synthesis.oracle import replay
from interlock.synthesis.packs import CLAUSE_LINE, OPTIONS_LINE, REGISTER_LINE, REQUEST_PATH, SCOPE, TaskPack
from interlock.synthesis.workspace import parse_csv


class NotDerivable(Exception):
    """Public material does not say enough to solve the task at all."""


def public_calls(files: dict[str, str]) -> list[ToolCall]:
    """The tool calls that solve the task from the public request and workspace only."""
    request = files.get(REQUEST_PATH)
    if request is None:
        raise NotDerivable("the workspace has no request")
    lines = [line.strip() for line in request.splitlines()]
    scope = _first(SCOPE.parse(line) for line in lines)
    if scope is None:
        raise NotDerivable("the request does not say which records to process under which policy")
    options_line = _first(OPTIONS_LINE.parse(line) for line in lines)
    deliverables = []
    for line in lines:
        text = line.removeprefix("- ")
        for kind in EFFECT_KINDS.values():
            words = kind.parse(text)
            if words is not None:
                deliverables.append((kind, words))
    register = _first(REGISTER_LINE.parse(line.removeprefix("- ")) for line in lines)

    table = files.get(scope["table"])
    policy = files.get(scope["policy"])
    if table is None or policy is None:
        raise NotDerivable(f"{scope['table'] if table is None else scope['policy']} is not in the workspace")
    header, rows = parse_csv(table)
    pending = [r for r in rows if r.get("status") == "pending"]
    rule = rule_kind = rule_ref = None
    couplings = []
    for line in policy.splitlines():
        clause = CLAUSE_LINE.parse(line)
        if clause is None:
            continue
        for kind in DECISION_KINDS.values():
            parsed = kind.parse(clause["text"])
            if parsed is not None and rule is None:
                rule, rule_kind, rule_ref = parsed, kind, clause["ref"]
        for name, coupling in COUPLING_KINDS.items():
            parsed = coupling.parse(clause["text"])
            if parsed is not None:
                couplings.append((name, parsed, clause["ref"]))
    if rule is None:
        raise NotDerivable(f"{scope['policy']} states no decision rule")
    options_by_case = defaultdict(list)
    if options_line is not None:
        _, option_rows = parse_csv(files.get(options_line["options_table"], ""))
        for option in option_rows:
            options_by_case[option.get("case_id")].append(option)

    date_column = next((c[1]["date"] for c in couplings if "date" in c[1]), None)
    order = sorted(pending, key=lambda r: (r.get(date_column, "") if date_column else "", r["id"]))
    by_id = {r["id"]: r for r in order}
    constraints = []
    for name, parsed, ref in couplings:
        members = tuple(r["id"] for r in order if r.get(parsed["group_column"]) == parsed["group"])
        if members:
            constraints.append(Constraint(name, parsed, ref, members))
    alternatives = {case_id: rule_kind.alternatives(row, rule, options_by_case[case_id])
                    for case_id, row in by_id.items()}
    decided = resolve(list(by_id), alternatives, rule_ref, constraints)

    calls = [ToolCall("list_files", {})]
    for case_id, choice in decided.items():
        if register is not None:
            calls.append(register_entry(case_id, choice.outcome.value, choice.basis,
                                        register["file"]).tool_call())
        for kind, words in deliverables:
            if kind.every_outcome or not choice.outcome.fallback:
                calls.append(kind.realize(words, by_id[case_id], choice.outcome, choice.basis).tool_call())
    calls.append(ToolCall("submit", {}))
    return calls


def critic_problems(pack: TaskPack, reference: ReferenceRun | None = None) -> list[dict]:
    """The criteria a solver with only public material cannot satisfy, and why. Where the public
    solution ends in the reference solution's final state (``reference``, already run), the
    checks' results there are the reference's, so they are not computed twice."""
    files = pack.public_files()
    try:
        calls = public_calls(files)
    except (NotDerivable, KeyError, ValueError) as exc:
        reason = f"cannot be solved from public material: {exc}"
        return [{"criterion_id": c.criterion_id, "problem": reason} for c in pack.rubric]
    steps, final = replay(files, calls)
    if reference is not None and final.contents == reference.final.contents:
        results = reference.results
    else:
        view = View(final, submitted=submitted(steps))
        results = {c.criterion_id: run_check(pack.checks[c.criterion_id], view) for c in pack.rubric}
    problems = []
    for criterion in pack.rubric:
        passed, evidence = results[criterion.criterion_id]
        if not passed:
            problems.append({"criterion_id": criterion.criterion_id,
                             "problem": f"not derivable from public material ({criterion.kind}): {evidence}"})
    return problems


def _first(items):
    return next((item for item in items if item is not None), None)


# ----------------------------------------------------------------------------- stated support

#: the status a case to process has, which the request must name
PENDING = "pending"


def support_problems(graph: CompletionGraph, pack: TaskPack) -> list[dict]:
    """The criteria whose needs the public material does not state, and what is missing: what
    :func:`critic_problems` finds by solving, found here by reading, so it holds for any author."""
    request = pack.files.get(REQUEST_PATH, "")
    public = "\n".join(text for _, text in sorted(pack.files.items()))
    evidence = graph.of_kind("evidence")
    policies = sorted({n.attrs["path"] for n in evidence if n.subkind == "clause"})
    tables = sorted({n.attrs["path"] for n in evidence if n.subkind != "clause"})
    cases = {n.ref: n.attrs["row"] for n in evidence if n.subkind == "record"}
    problems = []

    def unnamed(names: list[str]) -> list[str]:
        return [name for name in names if not states(request, name)]

    def lacks(criterion, missing: list[str]) -> None:
        if missing:
            problems.append({"criterion_id": criterion.criterion_id,
                             "problem": f"not derivable from public material ({criterion.kind}): the "
                                        f"request does not name {', '.join(missing[:5])}"})

    for criterion in pack.rubric:
        if criterion.kind in ("primary", "grounding"):
            lacks(criterion, unnamed([*tables, *policies, PENDING, REGISTER_PATH, *REGISTER_COLUMNS]))
        elif criterion.kind == "coupling":
            lacks(criterion, unnamed(policies))
        elif criterion.kind == "submit":
            lacks(criterion, unnamed(["submit"]))
        elif criterion.kind == "realization":
            decision, effect = (graph.by_id[n] for n in criterion.node_ids[:2])
            made = effect.attrs["realization"]
            target = made["path"].rsplit("/", 1)[0] if made["op"] == "write_file" else made["path"]
            lacks(criterion, unnamed([target, *made["fields"]]))
            own = {decision.attrs["outcome"], decision.attrs["basis"], str(decision.attrs["amount"]),
                   *map(str, cases.get(decision.attrs["case_id"], {}).values())}
            hidden = [f"{name} {value}" for name, value in made["fields"].items()
                      if str(value) not in own and not states(public, str(value))]
            if hidden:
                problems.append({"criterion_id": criterion.criterion_id,
                                 "problem": "not derivable from public material (realization): no public "
                                            f"file states {', '.join(hidden[:3])}"})
    return problems
