"""Coupling kinds: joint constraints over the decisions of one group (a hyperedge).

Resolution is one documented procedure that the policy text states: cases are taken in order
of their date (ties by id); each takes its first admissible outcome that every cap and
capacity of its groups still admits; then each bundle whose member fell back drags every
member to the fallback. The intended solution satisfies every constraint by construction.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import ClassVar

from interlock.core.registry import COUPLING_KINDS
from interlock.synthesis.kinds.decisions import DecisionKind, Outcome
from interlock.synthesis.text import Template


@dataclass(frozen=True)
class Decided:
    """A case's chosen outcome and the clause that decided it."""

    outcome: Outcome
    basis: str


class CouplingKind:
    name: ClassVar[str]
    template: ClassVar[Template]
    #: applied after the greedy pass (a bundle), not during it (a cap)
    after_greedy: ClassVar[bool] = False
    #: parameters that are whole numbers (parsed back from the clause as int)
    numbers: ClassVar[tuple[str, ...]] = ()

    def binds(self, decision: DecisionKind) -> bool:
        """Whether it can constrain decisions of this kind (a domain may pair them)."""
        return True

    def tighten(self, params: dict, kept: list[Outcome]) -> dict | None:
        """Parameters one step tighter than the group's kept (not fallback) outcomes use, for
        recursive synthesis's ``tighten_coupling``; None: this kind has no such step."""
        return None

    def sample_params(self, rng: random.Random, preferred: list[Outcome]) -> dict:
        """Parameters that make the constraint bind on the members' preferred outcomes."""
        return {}

    def rule(self, params: dict, words: dict) -> dict:
        return {**words, **params}

    def render(self, rule: dict) -> str:
        return self.template.render(**rule)

    def parse(self, text: str) -> dict | None:
        """The clause's rule, or None where the text is not a clause of this kind (a number slot
        holding anything but a whole number: another kind's words in the same frame)."""
        fields = self.template.parse(text)
        if fields is None or not all(fields[name].isdigit() for name in self.numbers if name in fields):
            return None
        return {k: int(v) if k in self.numbers else v for k, v in fields.items()}

    def admits(self, chosen: list[Outcome], candidate: Outcome, rule: dict) -> bool:
        return True

    def holds(self, outcomes: list[Outcome], rule: dict) -> bool:
        """Whether a complete assignment of the group satisfies the constraint."""
        return all(self.admits(outcomes[:i], outcomes[i], rule) for i in range(len(outcomes)))


_ORDER = "in order of {date}, earliest first, one that would go over gets its next outcome."


class TotalCap(CouplingKind):
    name, numbers = "total_cap", ("cap",)
    template = Template(
        "{group_column} {group}: the {plural} that are not {fallback} may total at most {cap}; " + _ORDER
    )

    def sample_params(self, rng, preferred):
        amounts = [o.amount for o in preferred if not o.fallback]
        if len(amounts) < 2:
            return {"cap": sum(amounts) + rng.randint(0, 500)}
        cut = rng.randint(1, len(amounts) - 1)
        return {"cap": sum(amounts[:cut]) + rng.randint(0, amounts[cut] - 1)}

    def admits(self, chosen, candidate, rule):
        if candidate.fallback:
            return True
        return sum(o.amount for o in chosen if not o.fallback) + candidate.amount <= rule["cap"]

    def binds(self, decision):
        return decision.carries_amount

    def tighten(self, params, kept):
        return {**params, "cap": sum(o.amount for o in kept) - 1} if kept else None


class CountCap(CouplingKind):
    name, numbers = "count_cap", ("k",)
    template = Template(
        "{group_column} {group}: at most {k} {plural} may be other than {fallback}; " + _ORDER
    )

    def sample_params(self, rng, preferred):
        return {"k": max(1, sum(not o.fallback for o in preferred) - 1)}

    def admits(self, chosen, candidate, rule):
        return candidate.fallback or sum(not o.fallback for o in chosen) + 1 <= rule["k"]

    def tighten(self, params, kept):
        return {**params, "k": len(kept) - 1} if len(kept) >= 2 else None


class ValueCapacity(CouplingKind):
    name, numbers = "value_capacity", ("k",)
    template = Template(
        "{group_column} {group}: at most {k} {plural} may share any one outcome other than "
        "{fallback}; " + _ORDER
    )

    def sample_params(self, rng, preferred):
        return {"k": 1}

    def admits(self, chosen, candidate, rule):
        if candidate.fallback:
            return True
        return Counter(o.value for o in chosen)[candidate.value] + 1 <= rule["k"]

    def binds(self, decision):
        return decision.multi_valued


class AllOrNone(CouplingKind):
    name = "all_or_none"
    after_greedy = True
    template = Template(
        "{group_column} {group}: its {plural} form one bundle; if any of them is {fallback}, all "
        "of them are {fallback}."
    )

    def rule(self, params, words):
        """A bundle has no order, so its clause names no date."""
        return {k: v for k, v in super().rule(params, words).items() if k != "date"}

    def holds(self, outcomes, rule):
        return len({o.fallback for o in outcomes}) <= 1

    def binds(self, decision):
        return decision.carries_amount


def breaking_moves(kind: str, rule: dict, alternatives: list[list[Outcome]],
                   intended: list[Outcome]) -> list[tuple[int, Outcome]]:
    """Each (member position, outcome) such that moving that one member from its intended outcome
    to another it admits breaks the constraint. None means the constraint never binds: no
    decision could get it wrong, so a check of it could never fail."""
    coupling = COUPLING_KINDS[kind]
    return [(position, outcome)
            for position, admitted in enumerate(alternatives) for outcome in admitted
            if outcome != intended[position]
            and not coupling.holds([*intended[:position], outcome, *intended[position + 1:]], rule)]


@dataclass(frozen=True)
class Constraint:
    """A coupling instance: its kind, rule, clause id and member case ids (in priority order)."""

    kind: str
    rule: dict
    clause: str
    members: tuple[str, ...]


def resolve(
    order: list[str],
    alternatives: dict[str, list[Outcome]],
    rule_clause: str,
    constraints: list[Constraint],
) -> dict[str, Decided]:
    """The intended outcome of every case, following the procedure the policy states."""
    chosen: dict[str, Decided] = {}
    by_case: dict[str, list[Constraint]] = {case: [] for case in order}
    for constraint in constraints:
        for case in constraint.members:
            by_case[case].append(constraint)
    for case in order:
        options = alternatives[case]
        blocked_by = None
        for option in options:
            blocking = next((
                c for c in by_case[case]
                if not COUPLING_KINDS[c.kind].after_greedy and not COUPLING_KINDS[c.kind].admits(
                    [chosen[m].outcome for m in c.members if m in chosen], option, c.rule)
            ), None)
            if blocking is None:
                basis = rule_clause if option is options[0] else blocked_by
                chosen[case] = Decided(option, basis)
                break
            blocked_by = blocked_by or blocking.clause
    for constraint in constraints:
        if not COUPLING_KINDS[constraint.kind].after_greedy:
            continue
        if any(chosen[m].outcome.fallback for m in constraint.members):
            for member in constraint.members:
                if not chosen[member].outcome.fallback:
                    chosen[member] = Decided(alternatives[member][-1], constraint.clause)
    return chosen
