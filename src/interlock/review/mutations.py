"""Mutation controls: every mandatory check must be able to fail for its own nodes.

For each mandatory criterion, minimal corruptions of the reference final workspace aimed at the
criterion's nodes are derived from the graph (never from the check under test): a decision
recorded with another outcome or not at all; an effect record dropped or one of its fields
altered; a coupling broken by the smallest step (one member moved to another outcome it may
have, its effects rewritten to match, where the constraint then no longer holds); a record for
a case no decision covers. A check that passes on one of its own mutants makes the pack unsound.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from interlock.synthesis.catalog import Domain
from interlock.synthesis.checks import View, run_check
from interlock.synthesis.graph import RULE_CLAUSE, CompletionGraph, Node
from interlock.synthesis.kinds.couplings import breaking_moves
from interlock.synthesis.kinds.effects import Realization, realizations, register_entry
from interlock.synthesis.packs import TaskPack, admitted_outcomes
from interlock.synthesis.workspace import MemoryStore, execute, format_csv, parse_csv, parse_jsonl

#: a mandatory criterion no single decision change can fail: a coupling of the graph that never
#: binds (the graph asks nothing of it). Counted in the kill rates, not refused: its check is not
#: at fault, and a loosened check of a binding coupling is caught by the coupling's mutants.
NEVER_BINDS = "(none: no single decision change breaks it)"
#: the case id of the record the guard's mutant adds where the task has no distractor case
UNCOVERED_CASE = "UNCOVERED-0"


@dataclass(frozen=True)
class Mutant:
    name: str  # what was corrupted, in words
    files: dict[str, str]


def mutation_controls(graph: CompletionGraph, pack: TaskPack, domain: Domain,
                      final: dict[str, str]) -> tuple[list[dict], list[dict]]:
    """(one row per mutant: criterion, kind, mutant, killed, evidence; the problems: each mutant
    its criterion's check passes on)."""
    rows, problems = [], []
    for criterion in pack.rubric:
        if not criterion.mandatory:
            continue
        mutants = list(_mutants(criterion.kind, criterion.node_ids, graph, pack, domain, final))
        if not mutants:  # reported (killed None), not refused: the task, not its check, is slack
            rows.append({"task_id": pack.task_id, "criterion_id": criterion.criterion_id,
                         "kind": criterion.kind, "mutant": NEVER_BINDS, "killed": None, "evidence": ""})
        for mutant in mutants:
            passed, evidence = run_check(pack.checks[criterion.criterion_id], View(MemoryStore(mutant.files)))
            rows.append({"task_id": pack.task_id, "criterion_id": criterion.criterion_id,
                         "kind": criterion.kind, "mutant": mutant.name, "killed": not passed,
                         "evidence": evidence})
            if passed:
                problems.append({"criterion_id": criterion.criterion_id,
                                 "problem": f"{criterion.criterion_id} ({criterion.kind}) passes on its "
                                            f"mutant '{mutant.name}'"})
    return rows, problems


def _mutants(kind: str, node_ids: tuple[str, ...], graph: CompletionGraph, pack: TaskPack, domain: Domain,
             final: dict[str, str]) -> Iterator[Mutant]:
    if kind == "primary":
        decision = graph.by_id[node_ids[0]]
        entry = _entry(decision)
        yield Mutant(f"no decision recorded for {entry.key}",
                     _without(final, pack.files, entry))
        outcome = _other_outcome(graph, decision)
        flipped = register_entry(entry.key, outcome, decision.attrs["basis"])
        yield Mutant(f"{entry.key} recorded as {outcome!r}",
                     _with(_without(final, pack.files, entry), flipped))
    elif kind == "realization":
        realization = Realization.from_dict(graph.by_id[node_ids[1]].attrs["realization"])
        yield Mutant(f"{realization.path} {realization.key} not written",
                     _without(final, pack.files, realization))
        field, value = _altered(realization)
        altered = Realization(realization.op, realization.path, realization.key,
                              {**realization.fields, field: value})
        yield Mutant(f"{realization.path} {realization.key} with {field}={value!r}",
                     _with(_without(final, pack.files, realization), altered))
    elif kind == "coupling":
        hyper = next(h for h in graph.hyperedges if h.hyperedge_id == node_ids[0])
        yield from _coupling_breaks(hyper, graph, pack, domain, final)
    elif kind == "no_collateral":
        case_id = next((n.attrs["row"]["id"] for n in graph.of_kind("evidence")
                        if n.distractor and n.subkind == "record"), UNCOVERED_CASE)
        fallback = domain.decision.fallback
        yield Mutant(f"a decision recorded for {case_id}, which no decision covers",
                     _with(final, register_entry(case_id, fallback, RULE_CLAUSE)))


def _entry(decision: Node) -> Realization:
    a = decision.attrs
    return register_entry(a["case_id"], a["outcome"], a["basis"])


def _other_outcome(graph: CompletionGraph, decision: Node) -> str:
    """The outcome this case is likeliest to be mistaken for: another its rule admits, else one
    another case of the task received, else its own negation."""
    _, alternatives = admitted_outcomes(graph, decision)
    seen = [o.value for o in alternatives] + [d.attrs["outcome"] for d in graph.of_kind("decision")]
    intended = decision.attrs["outcome"]
    return next((value for value in seen if value != intended), f"not {intended}")


def _coupling_breaks(hyper, graph: CompletionGraph, pack: TaskPack, domain: Domain,
                     final: dict[str, str]) -> Iterator[Mutant]:
    """Each single member moved to another admissible outcome where the constraint then fails,
    its register row and effects rewritten to match (so only the constraint is wrong)."""
    members = [graph.by_id[m] for m in hyper.members]
    cases = [admitted_outcomes(graph, d) for d in members]
    moves = breaking_moves(hyper.kind, hyper.params, [alternatives for _, alternatives in cases],
                           [graph.outcome(d) for d in members])
    for position, outcome in moves:
        decision, (row, _) = members[position], cases[position]
        files = final
        for effect in [_entry(decision)] + [Realization.from_dict(e.attrs["realization"])
                                            for e in graph.targets(decision.node_id, "realization")]:
            files = _without(files, pack.files, effect)
        basis = decision.attrs["basis"]
        moved = [register_entry(row["id"], outcome.value, basis)]
        moved += [r for _, r in realizations(domain, graph.effects_per_decision, row, outcome, basis)]
        for effect in moved:
            files = _with(files, effect)
        yield Mutant(f"{row['id']} moved to {outcome.value!r}, breaking {hyper.hyperedge_id}",
                     files)


def _altered(realization: Realization) -> tuple[str, str]:
    """One expected field (not the record's key) with a value one step away."""
    key_field = "id" if realization.op == "update_csv" else "case_id"
    field = next((f for f in sorted(realization.fields) if f != key_field), key_field)
    value = str(realization.fields[field])
    return field, str(int(value) + 1) if value.isdigit() else f"{value}-altered"


def _with(files: dict[str, str], realization: Realization) -> dict[str, str]:
    """``files`` after the tool call that carries ``realization`` out."""
    store = MemoryStore(files)
    execute(store, realization.tool_call())
    return store.contents


def _without(files: dict[str, str], initial: dict[str, str], realization: Realization) -> dict[str, str]:
    """``files`` with ``realization`` undone: its record removed, its updated fields back to their
    initial values, its document deleted."""
    out = dict(files)
    text = out.get(realization.path)
    if text is None:
        return out
    if realization.op == "write_file":
        del out[realization.path]
    elif realization.op == "append_jsonl":
        key = realization.key
        out[realization.path] = "".join(line for line in text.splitlines(keepends=True)
                                        if all(r.get("case_id") != key for r in parse_jsonl(line)))
    else:
        header, rows = parse_csv(text)
        if realization.op == "update_csv":
            initial_rows = {r.get("id"): r for r in parse_csv(initial[realization.path])[1]}
            rows = [initial_rows.get(r.get("id"), r) if r.get("id") == realization.key else r for r in rows]
        else:
            rows = [r for r in rows if r.get("case_id") != realization.key]
        out[realization.path] = format_csv(header, rows)
    return out
