"""Mutation controls: every check must be able to fail for its own nodes, and every field the
contract names must be read by some check.

For each criterion, minimal corruptions of the reference final workspace aimed at the criterion's
nodes are derived from the graph (never from the check under test): a decision recorded with
another outcome, under another case, or not at all; an effect record dropped, or written with any
one of the fields the graph says it holds altered by one step (its key included: the record written
under another case, or a row edit made to another row; a document's every line); the basis a
decision cites altered; a coupling broken by the smallest step (one member moved to another outcome
it may have, its effects rewritten to match, where the constraint then no longer holds); a record
for a case no decision covers; the whole work, never submitted. Every other mutant is a submitted
episode, wrong in its one place. A check that passes on one of its own mutants makes the pack
unsound.

Then the contract: for each deliverable and each field it names, the mutant with that field altered
must fail at least one criterion's check, or the field is asked for and never verified (a rollout
that pays the wrong person would be accepted).

Optional criteria (``grounding``) are held to their own mutants too: their checks feed every
weighted score, and a check that cannot fail gives its weight away. The mutation rows, and so the
kill rates, stay the gating criteria's (a row per mandatory criterion's mutant, as the review
reports them); an optional criterion's survivor is a problem like any other. Criterion kinds these
controls do not know are left to their own code: no mutants, no rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from interlock.core.io import loads
from interlock.synthesis.catalog import Domain
from interlock.synthesis.checks import View, run_check
from interlock.synthesis.graph import RULE_CLAUSE, CompletionGraph, Node
from interlock.synthesis.kinds.couplings import breaking_moves
from interlock.synthesis.kinds.effects import REGISTER_PATH, Realization, realizations, register_entry
from interlock.synthesis.packs import Criterion, TaskPack, admitted_outcomes
from interlock.synthesis.workspace import MemoryStore, execute, format_csv, parse_csv, parse_jsonl

#: a mandatory criterion no single decision change can fail: a coupling of the graph that never
#: binds (the graph asks nothing of it). Counted in the kill rates, not refused: its check is not
#: at fault, and a loosened check of a binding coupling is caught by the coupling's mutants.
NEVER_BINDS = "(none: no single decision change breaks it)"
#: the case id of the record the guard's mutant adds where the task has no distractor case
UNCOVERED_CASE = "UNCOVERED-0"
#: the criterion kinds these controls derive mutants for (others are left to their own code)
KINDS = ("primary", "grounding", "realization", "coupling", "no_collateral", "submit")


@dataclass(frozen=True)
class Mutant:
    name: str  # what was corrupted, in words
    files: dict[str, str]
    submitted: bool = True  # the episode ended with submit (all but the submit criterion's mutant)


def mutation_controls(graph: CompletionGraph, pack: TaskPack, domain: Domain,
                      final: dict[str, str]) -> tuple[list[dict], list[dict]]:
    """(one row per mandatory criterion's mutant: criterion, kind, mutant, killed, evidence; the
    problems: each mutant its criterion's check passes on, and each contract field no check
    fails on when it is altered, ``criterion_id`` empty)."""
    mutants = _Mutants(graph, pack, final)
    results: dict[tuple[str, tuple], tuple[bool, str]] = {}
    owners: dict[tuple, list[str]] = {}  # mutant -> the criteria it is aimed at

    def result(criterion: Criterion, key: tuple, mutant: Mutant) -> tuple[bool, str]:
        if (criterion.criterion_id, key) not in results:
            results[criterion.criterion_id, key] = run_check(pack.checks[criterion.criterion_id],
                                                             View(MemoryStore(mutant.files),
                                                                  submitted=mutant.submitted))
        return results[criterion.criterion_id, key]

    rows, problems = [], []
    known = [c for c in pack.rubric if c.kind in KINDS and c.criterion_id in pack.checks]
    for criterion in known:
        own = list(_own(criterion, graph, pack, domain, final, mutants))
        if not own and criterion.mandatory:  # reported (killed None), not refused: the task is slack
            rows.append({"task_id": pack.task_id, "criterion_id": criterion.criterion_id,
                         "kind": criterion.kind, "mutant": NEVER_BINDS, "killed": None, "evidence": ""})
        for key, mutant in own:
            owners.setdefault(key, []).append(criterion.criterion_id)
            passed, evidence = result(criterion, key, mutant)
            if criterion.mandatory:
                rows.append({"task_id": pack.task_id, "criterion_id": criterion.criterion_id,
                             "kind": criterion.kind, "mutant": mutant.name, "killed": not passed,
                             "evidence": evidence})
            if passed:
                problems.append({"criterion_id": criterion.criterion_id,
                                 "problem": f"{criterion.criterion_id} ({criterion.kind}) passes on its "
                                            f"mutant '{mutant.name}'"})
    for deliverable in pack.contract:
        if "realization" not in deliverable:
            continue
        realization = Realization.from_dict(loads(
            deliverable["realization"], file="contracts", item=pack.task_id,
            field=f"{deliverable['deliverable_id']}.realization"))
        decision = (deliverable.get("node_ids") or [None])[0]
        for field in sorted(realization.fields):
            key, mutant = mutants.field(realization, field)
            aimed = owners.get(key, [])
            candidates = sorted(known, key=lambda c: (c.criterion_id not in aimed,
                                                      not c.node_ids or c.node_ids[0] != decision))
            if all(result(c, key, mutant)[0] for c in candidates):
                problems.append({"criterion_id": "", "problem": (
                    f"contract {deliverable['deliverable_id']} ({deliverable.get('kind')}) names "
                    f"{field!r} of {realization.path} {realization.key}, which no check reads: every "
                    f"criterion passes its mutant '{mutant.name}'")})
    return rows, problems


class _Mutants:
    """The mutants of one task's deliverables, each built once (a criterion's own mutant of a field
    is the contract's mutant of it), keyed so each check runs once on each."""

    def __init__(self, graph: CompletionGraph, pack: TaskPack, final: dict[str, str]) -> None:
        self.graph, self.pack, self.final = graph, pack, final
        self._undone: dict[tuple, dict[str, str]] = {}
        self._built: dict[tuple, Mutant] = {}

    def undone(self, realization: Realization) -> dict[str, str]:
        """The final files with ``realization`` undone (shared by all its mutants)."""
        key = (realization.op, realization.path, realization.key)
        if key not in self._undone:
            self._undone[key] = _without(self.final, self.pack.files, realization)
        return self._undone[key]

    def not_written(self, realization: Realization, name: str) -> tuple[tuple, Mutant]:
        key = ("not written", realization.op, realization.path, realization.key)
        if key not in self._built:
            self._built[key] = Mutant(name, self.undone(realization))
        return key, self._built[key]

    def field(self, realization: Realization, field: str) -> tuple[tuple, Mutant]:
        """``realization`` carried out with ``field`` one step away (its key field: the record
        written under another case); the register's outcome: another the case may be given."""
        key = ("field", realization.op, realization.path, realization.key,
               tuple(sorted(realization.fields.items())), field)
        if key not in self._built:
            value = realization.fields[field]
            register = realization.op == "append_csv" and realization.path == REGISTER_PATH
            decision = self._decision(realization.key) if register and field == "outcome" else None
            altered = _other_outcome(self.graph, decision) if decision is not None else _step(value)
            moved = _key_field(realization) == field
            effect = Realization(realization.op, realization.path, altered if moved else realization.key,
                                 {**realization.fields, field: altered})
            name = (f"{realization.key} recorded as {altered!r}" if decision is not None
                    else f"{realization.path} {realization.key} with {field}={altered!r}")
            self._built[key] = Mutant(name, _with(self.undone(realization), effect))
        return key, self._built[key]

    def other_row(self, realization: Realization) -> tuple[tuple, Mutant] | None:
        """A row edit (``update_csv``) made to another row of the table than its own."""
        initial = self.pack.files.get(realization.path)
        other = next((str(r.get("id")) for r in parse_csv(initial)[1] if r.get("id") != realization.key),
                     None) if initial is not None else None
        if other is None:
            return None
        key = ("other row", realization.op, realization.path, realization.key, other)
        if key not in self._built:
            effect = Realization(realization.op, realization.path, other, dict(realization.fields))
            self._built[key] = Mutant(f"{realization.path} {realization.key} update written to row "
                                      f"id={other!r}", _with(self.undone(realization), effect))
        return key, self._built[key]

    def _decision(self, case_id: str) -> Node | None:
        return next((d for d in self.graph.of_kind("decision") if d.attrs["case_id"] == case_id), None)


def _own(criterion: Criterion, graph: CompletionGraph, pack: TaskPack, domain: Domain,
         final: dict[str, str], mutants: _Mutants) -> Iterator[tuple[tuple, Mutant]]:
    """A criterion's own mutants, from the graph: one per field its deliverable holds."""
    kind, node_ids = criterion.kind, criterion.node_ids
    if kind in ("primary", "grounding"):
        entry = _entry(graph.by_id[node_ids[0]])
        if kind == "primary":
            yield mutants.not_written(entry, f"no decision recorded for {entry.key}")
            yield mutants.field(entry, "outcome")
            yield mutants.field(entry, "case_id")
        else:
            yield mutants.field(entry, "basis")
    elif kind == "realization":
        realization = Realization.from_dict(graph.by_id[node_ids[1]].attrs["realization"])
        yield mutants.not_written(realization, f"{realization.path} {realization.key} not written")
        for field in sorted(realization.fields):
            yield mutants.field(realization, field)
        if realization.op == "update_csv" and (moved := mutants.other_row(realization)) is not None:
            yield moved
    elif kind == "coupling":
        hyper = next(h for h in graph.hyperedges if h.hyperedge_id == node_ids[0])
        for number, mutant in enumerate(_coupling_breaks(hyper, graph, pack, domain, final)):
            yield ("coupling", hyper.hyperedge_id, number), mutant
    elif kind == "no_collateral":
        case_id = next((n.attrs["row"]["id"] for n in graph.of_kind("evidence")
                        if n.distractor and n.subkind == "record"), UNCOVERED_CASE)
        fallback = domain.decision.fallback
        yield ("uncovered", case_id), Mutant(f"a decision recorded for {case_id}, which no decision covers",
                                            _with(final, register_entry(case_id, fallback, RULE_CLAUSE)))
    elif kind == "submit":
        yield ("unsubmitted",), Mutant("the whole work, never submitted", final, submitted=False)


def _entry(decision: Node) -> Realization:
    a = decision.attrs
    return register_entry(a["case_id"], a["outcome"], a["basis"])


def _key_field(realization: Realization) -> str | None:
    """The field that names a record (None: a document, named by its path)."""
    if realization.op == "write_file":
        return None
    return "id" if realization.op == "update_csv" else "case_id"


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


def _step(value: object) -> str:
    """A value one step away: a number, or a value ending in one (a case id, a clause, a date), with
    that number one higher, its width kept; any other word with a suffix."""
    text = str(value)
    digits = len(text) - len(text.rstrip("0123456789"))
    if digits:
        number = str(int(text[-digits:]) + 1).zfill(digits)
        return text[:-digits] + number
    return f"{text}-altered"


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
