"""Rewrite operators: each turns a verified task's blueprint into a child that asks more of an
agent (or, for the distractors, asks the same amid more to ignore), and declares exactly what it
changes as a transformation contract.

Every operator works in its domain's own terms (decision rule, coupling kinds, effect kinds), so
the child is compiled by the same three generators as any task and the public-input critic can
still solve it from the request and workspace alone. An operator that cannot apply to a parent
raises :class:`NotApplicable` with the reason, which the rounds record like any rejection.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from typing import ClassVar

from interlock.core.registry import COUPLING_KINDS, DECISION_KINDS, EFFECT_KINDS
from interlock.recursive.contract import TransformationContract
from interlock.recursive.declaration import Declaration, derive
from interlock.synthesis.blueprints import PERIOD_START, Blueprint, sample_subject
from interlock.synthesis.catalog import Domain
from interlock.synthesis.graph import Resolution, resolve_blueprint

#: the most pending cases a task may have (one per day of the period)
MAX_CASES = 28
#: draws of a new coupling before an operator gives up on a parent
ATTEMPTS = 4


class NotApplicable(Exception):
    """The operator cannot rewrite this parent (the reason says why)."""


@dataclass(frozen=True)
class Rewrite:
    child: Blueprint
    contract: TransformationContract


class Operator:
    """One typed rewrite. ``arity``: how many parents it takes (all of one domain);
    ``adds_requirement``: whether the child must ask for more than the parent (the parent's
    reference solution must then fail it), or only distracts."""

    name: ClassVar[str]
    arity: ClassVar[int] = 1
    adds_requirement: ClassVar[bool] = True
    demands: ClassVar[str]

    def rewrite(self, parents: Sequence[Blueprint], domain: Domain, task_id: str, seed: int) -> Rewrite:
        if len(parents) != self.arity or any(p.domain_id != domain.id for p in parents):
            raise NotApplicable(f"{self.name} takes {self.arity} parent(s) of domain {domain.id}")
        return self._rewrite(parents, domain, task_id, seed, random.Random(seed))

    def _rewrite(self, parents: Sequence[Blueprint], domain: Domain, task_id: str, seed: int,
                 rng: random.Random) -> Rewrite:
        raise NotImplementedError

    def _done(self, declared: Declaration, parents: Sequence[Blueprint]) -> Rewrite:
        return Rewrite(declared.child, declared.contract(self.name, tuple(p.task_id for p in parents),
                                                         self.demands, self.adds_requirement))


# ----------------------------------------------------------------------------- helpers

def _taken_ids(blueprints: Sequence[Blueprint]) -> set[str]:
    return {r["id"] for b in blueprints for r in [*b.cases, *b.distractor_rows, *b.options]}


def _fresh_number(rng: random.Random, prefix: str, taken: set[str], low: int, high: int) -> str:
    """An id ``prefix-<n>`` with ``low <= n < high`` that no row holds yet."""
    for _ in range(32):  # ids are sparse: a few draws nearly always find one
        candidate = f"{prefix}-{rng.randrange(low, high)}"
        if candidate not in taken:
            return candidate
    free = [n for n in range(low, high) if f"{prefix}-{n}" not in taken]
    if not free:
        raise NotApplicable(f"no free {prefix} id left")
    return f"{prefix}-{rng.choice(free)}"


def _spare_groups(parent: Blueprint, domain: Domain) -> list[str]:
    """Group names no clause of the parent uses, in sorted order."""
    used = {g["group"] for g in [*parent.groups, *parent.distractor_clauses]}
    return sorted(g for g in domain.case.group_values if g not in used)


def _preferred(resolution: Resolution, domain: Domain, rows: list[dict]) -> list:
    kind = DECISION_KINDS[domain.decision.kind]
    return [kind.alternatives(r, resolution.rule, resolution.options_by_case.get(r["id"], []))[0]
            for r in rows]


def _new_options(rng: random.Random, domain: Domain, case_id: str, taken: set[str]) -> list[dict]:
    spec = domain.decision.options
    if spec is None:
        return []
    options = []
    for provider in rng.sample(spec.providers, 3):
        option_id = _fresh_number(rng, "OPT", taken, 100, 1000)
        taken.add(option_id)
        options.append({"id": option_id, "case_id": case_id, spec.provider: provider,
                        "cost": rng.randrange(20, 400) * 5, "rating": rng.randint(1, 5)})
    return options


# ----------------------------------------------------------------------------- the operators

class AddEffect(Operator):
    """Add a realization effect to every decision: the domain's next effect kind joins the
    deliverables, so each decision that reaches it must be carried through one more system."""

    name = "add_effect"
    demands = "carry each decision through one more system (a new realization effect per decision)"

    def _rewrite(self, parents, domain, task_id, seed, rng):
        parent = parents[0]
        count = parent.size.effects_per_decision
        if count >= len(domain.effects):
            raise NotApplicable(f"the task already asks for all {len(domain.effects)} effects of {domain.id}")
        spec = domain.effects[count]
        kind = EFFECT_KINDS[spec.kind]
        child = derive(parent, domain, task_id, seed, effects_per_decision=count + 1)
        declared = Declaration(parent, child, domain)
        reached = [c for c, d in declared.after.decided.items()
                   if kind.every_outcome or not d.outcome.fallback]
        if not reached:
            raise NotApplicable(f"every decision falls back, so none reaches {spec.kind}")
        declared.decisions(declared.after.decided)
        declared.request_line("- " + kind.render(kind.words(domain, spec)))
        if kind.header(kind.words(domain, spec)) is not None:
            declared.file(spec.file)
        return self._done(declared, parents)


class AddCase(Operator):
    """Add a decision to a coupling: a new pending case joins one of the task's groups, so the
    agent decides one more case and the group's joint constraint now spans it too."""

    name = "add_case"
    demands = "decide one more case, inside an existing coupling constraint"

    def _rewrite(self, parents, domain, task_id, seed, rng):
        parent = parents[0]
        case = domain.case
        if len(parent.cases) >= MAX_CASES:
            raise NotApplicable(f"the task already has {MAX_CASES} cases")
        used_days = {date.fromisoformat(r[case.date]) for r in parent.cases}
        days = [d for d in range(MAX_CASES) if PERIOD_START + timedelta(days=d) not in used_days]
        if not days:
            raise NotApplicable("no free day in the period")
        taken = _taken_ids([parent])
        group = rng.choice(parent.groups)["group"]
        case_id = _fresh_number(rng, case.id_prefix, taken, 1000, 10000)
        row = {"id": case_id, case.subject: sample_subject(rng, domain), case.group: group,
               case.date: (PERIOD_START + timedelta(days=rng.choice(days))).isoformat(),
               **DECISION_KINDS[domain.decision.kind].sample_case(rng, domain), "status": "pending"}
        options = _new_options(rng, domain, case_id, taken)
        child = derive(parent, domain, task_id, seed, cases=[*parent.cases, row],
                       options=[*parent.options, *options])
        declared = Declaration(parent, child, domain)
        declared.new_case(case_id)
        declared.changed("hyperedges", f"coupling:{group}", "members")
        declared.decisions(c for c in declared.members(group) if c != case_id)
        return self._done(declared, parents)


class AddCoupling(Operator):
    """Add a coupling constraint over existing decisions: two or more cases of a large group move
    to a group of their own whose new policy clause binds them, so the agent must find the new
    clause, see which cases it governs and resolve them jointly under it."""

    name = "add_coupling"
    demands = "resolve existing decisions under a new joint constraint stated by a new clause"

    def _rewrite(self, parents, domain, task_id, seed, rng):
        parent = parents[0]
        case = domain.case
        large = [g for g in parent.groups if len(g["members"]) >= 4]
        spare = _spare_groups(parent, domain)
        if not large or not spare:
            raise NotApplicable("no group of four or more cases" if not large else "no spare group name")
        source = rng.choice(large)
        target = rng.choice(spare)
        before = resolve_blueprint(parent, domain)
        for _ in range(ATTEMPTS):
            moved = sorted(rng.sample(source["members"], rng.randint(2, len(source["members"]) - 2)))
            rows = [r for r in before.order if r["id"] in moved]
            coupling = rng.choice(domain.couplings)
            params = COUPLING_KINDS[coupling].sample_params(rng, _preferred(before, domain, rows))
            cases = [{**r, case.group: target} if r["id"] in moved else r for r in parent.cases]
            child = derive(parent, domain, task_id, seed, cases=cases, groups=[
                *parent.groups, {"group": target, "kind": coupling, "members": [], "params": params}])
            declared = Declaration(parent, child, domain)
            if declared.observable(moved):
                break
        else:
            raise NotApplicable(f"no new coupling over cases of {case.group} {source['group']} binds any "
                                f"of them ({ATTEMPTS} draws)")
        for row in rows:
            declared.record(row, "changed", [case.group])
        declared.clause(target, "added")
        declared.added("hyperedges", f"coupling:{target}")
        declared.changed("hyperedges", f"coupling:{source['group']}", "members")
        declared.decisions([*declared.members(source["group"]), *declared.renumbered()])
        return self._done(declared, parents)


class AddClosedRecord(Operator):
    """Add distractor evidence: a closed case in the case table, which the agent must leave
    alone (nothing new to do; more to read past)."""

    name = "add_closed_record"
    adds_requirement = False
    demands = "ignore one more closed record that looks like a case"

    def _rewrite(self, parents, domain, task_id, seed, rng):
        parent = parents[0]
        case = domain.case
        row = {"id": _fresh_number(rng, case.id_prefix, _taken_ids([parent]), 1000, 10000),
               case.subject: sample_subject(rng, domain), case.group: rng.choice(case.group_values),
               case.date: (PERIOD_START - timedelta(days=rng.randint(1, 60))).isoformat(),
               **DECISION_KINDS[domain.decision.kind].sample_case(rng, domain), "status": "closed"}
        child = derive(parent, domain, task_id, seed, distractor_rows=[*parent.distractor_rows, row])
        declared = Declaration(parent, child, domain)
        declared.record(row, "added")
        return self._done(declared, parents)


class AddIdleClause(Operator):
    """Add distractor evidence to the policy: a coupling clause over a group no pending case
    belongs to, which the agent must recognise as binding nothing."""

    name = "add_idle_clause"
    adds_requirement = False
    demands = "recognise one more policy clause that binds none of the cases"

    def _rewrite(self, parents, domain, task_id, seed, rng):
        parent = parents[0]
        pending = {r[domain.case.group] for r in parent.cases}
        spare = [g for g in _spare_groups(parent, domain) if g not in pending]
        if not spare:
            raise NotApplicable("no spare group without pending cases")
        group = rng.choice(spare)
        before = resolve_blueprint(parent, domain)
        coupling = rng.choice(domain.couplings)
        params = COUPLING_KINDS[coupling].sample_params(rng, _preferred(before, domain, before.order))
        child = derive(parent, domain, task_id, seed, distractor_clauses=[
            *parent.distractor_clauses, {"group": group, "kind": coupling, "params": params}])
        declared = Declaration(parent, child, domain)
        declared.clause(group, "added")
        declared.decisions(declared.renumbered())
        return self._done(declared, parents)


class TightenCoupling(Operator):
    """Override the rule under a condition: a coupling's cap or count is lowered until it binds
    one more case, so the clause now overrides the decision rule for a case it used to let
    through, and the agent must apply the override (and every effect that follows from it)."""

    name = "tighten_coupling"
    demands = "apply a coupling clause that now overrides the decision rule for one more case"

    def _rewrite(self, parents, domain, task_id, seed, rng):
        parent = parents[0]
        before = resolve_blueprint(parent, domain)
        for group in rng.sample(parent.groups, len(parent.groups)):
            kept = [before.decided[m].outcome for m in group["members"]
                    if not before.decided[m].outcome.fallback]
            params = COUPLING_KINDS[group["kind"]].tighten(group["params"], kept)
            if params is None:
                continue
            groups = [{**g, "params": params} if g is group else g for g in parent.groups]
            child = derive(parent, domain, task_id, seed, groups=groups)
            declared = Declaration(parent, child, domain)
            if not declared.observable(group["members"]):
                continue
            changed = sorted(name for name in params if params[name] != group["params"].get(name))
            declared.clause(group["group"], "changed", ["text", *(f"rule.{name}" for name in changed)])
            declared.changed("hyperedges", f"coupling:{group['group']}",
                             *(f"params.{name}" for name in changed))
            declared.decisions(group["members"])
            return self._done(declared, parents)
        raise NotApplicable("no coupling can be tightened to bind one more case (of its kinds, only caps "
                            "and counts tighten)")


class ShiftRule(Operator):
    """Change a parameter of the decision rule so that at least one decision flips: the agent
    must read the rule's new value rather than decide as before (the parent's outcomes are now
    wrong for some case)."""

    name = "shift_rule"
    demands = "decide by a changed rule parameter under which some case's outcome flips"

    def _rewrite(self, parents, domain, task_id, seed, rng):
        parent = parents[0]
        before = resolve_blueprint(parent, domain)
        proposals = DECISION_KINDS[domain.decision.kind].shifts(parent.params, _kept_cases(before), domain)
        for params in rng.sample(proposals, len(proposals)):
            child = derive(parent, domain, task_id, seed, params=params)
            declared = Declaration(parent, child, domain)
            if not declared.observable(declared.after.decided):
                continue
            changed = sorted(name for name in params if params[name] != parent.params.get(name))
            declared.clause("rule", "changed", ["text", *(f"rule.{name}" for name in changed)])
            declared.decisions(declared.after.decided)
            return self._done(declared, parents)
        raise NotApplicable(f"no shift of the {domain.decision.kind} rule flips a decision")


def _kept_cases(resolution: Resolution) -> list[tuple[dict, object]]:
    return [(r, resolution.decided[r["id"]].outcome) for r in resolution.order
            if not resolution.decided[r["id"]].outcome.fallback]


class JoinTasks(Operator):
    """Join two tasks of one domain under a shared constraint: the second parent's cases, options
    and closed records move into the first's workspace, its cases into one of the first's
    coupling groups, all decided by the first's rule, so the agent handles both case loads and
    their interaction in the shared constraint."""

    name = "join"
    arity = 2
    demands = "decide a second task's cases too, jointly with the first's under one constraint"

    def _rewrite(self, parents, domain, task_id, seed, rng):
        first, second = parents
        if first.task_id == second.task_id:
            raise NotApplicable("a task cannot be joined with itself")
        ours, theirs = _taken_ids([first]), _taken_ids([second])
        if ours & theirs:
            raise NotApplicable(f"the tasks share ids: {', '.join(sorted(ours & theirs)[:3])}")
        if len(first.cases) + len(second.cases) > MAX_CASES:
            raise NotApplicable(f"together they have more than {MAX_CASES} cases")
        group = rng.choice(first.groups)["group"]
        moved = [{**r, domain.case.group: group} for r in second.cases]
        child = derive(first, domain, task_id, seed, cases=[*first.cases, *moved],
                       options=[*first.options, *second.options],
                       distractor_rows=[*first.distractor_rows, *second.distractor_rows])
        declared = Declaration(first, child, domain)
        for row in moved:
            declared.new_case(row["id"])
        for row in second.distractor_rows:
            declared.record(row, "added")
        declared.changed("hyperedges", f"coupling:{group}", "members")
        declared.decisions(c for c in declared.members(group) if c in declared.before.decided)
        return self._done(declared, parents)

