"""The ``scripted`` backend: deterministic solvers that write the same tool-call text a model would.

- ``oracle`` follows the graph (the reference solution);
- ``noisy`` drops realization effects and ignores coupling constraints at configured rates: a
  controllable completion gap, with known ground truth (:func:`noisy_gap`), for measuring judges.

Only what the stages run lives here; the adversaries that try to game the judge are in
:mod:`interlock.testing.adversaries` (no stage's dependency) and play through :class:`ScriptedBackend`
given their ``plans``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from interlock.core.backend import ChatRequest, Completion
from interlock.core.chat import ToolCall, render_turn
from interlock.core.registry import DECISION_KINDS
from interlock.core.seeds import stable_seed
from interlock.synthesis.graph import RULE_CLAUSE, Node
from interlock.synthesis.kinds.decisions import Outcome
from interlock.synthesis.kinds.effects import REGISTER_PATH, Realization, realizations, register_entry
from interlock.synthesis.oracle import reading_calls, reference_writes
from interlock.synthesis.tasks import TaskContext

Turn = tuple[str, list[ToolCall]]
Plan = Callable[[TaskContext, random.Random, dict], list[Turn]]
SUBMIT = ToolCall("submit")
DONE = "All decisions are recorded and carried through to every record; submitting."


def look_turn(task: TaskContext) -> Turn:
    """The first turn every scripted solver takes: look at the workspace and read the evidence."""
    return "Let me read the records and the policy.", reading_calls(task.domain)


def decision_turns(task: TaskContext, calls: list[ToolCall]) -> list[Turn]:
    """Writes grouped one decision per turn: its register entry, then its effects."""
    turns: list[Turn] = []
    for call in calls:
        if call.arguments.get("path") == REGISTER_PATH or not turns:
            turns.append((f"Recording {call.arguments.get('record', {}).get('case_id', '')}.", []))
        turns[-1][1].append(call)
    return turns


def oracle_writes(task: TaskContext) -> list[ToolCall]:
    """The oracle's work: its reference solution without the reads and the submit."""
    return [r.tool_call() for group in reference_writes(task.graph) for r in group]


def work_plan(task: TaskContext, writes: list[ToolCall], extra: Sequence[Turn] = (),
              ending: Sequence[Turn] = ((DONE, [SUBMIT]),)) -> list[Turn]:
    """The one shape of every scripted plan that works (the oracle's, the noisy solver's, an
    adversary's): look, ``writes`` one decision a turn, the ``extra`` turns, the ``ending``."""
    return [look_turn(task), *decision_turns(task, writes), *extra, *ending]


def oracle_plan(task: TaskContext, rng: random.Random, rates: dict) -> list[Turn]:
    """The reference solution: the oracle's work, nothing added."""
    return work_plan(task, oracle_writes(task))


def case_of(task: TaskContext, decision: Node) -> tuple[dict, list[Outcome]]:
    """A decision's case record and the outcomes its rule admits, in order of preference (the
    fallback last)."""
    evidence = task.graph.sources(decision.node_id, "grounding")
    row = next(n.attrs["row"] for n in evidence if n.subkind == "record")
    options = [n.attrs["row"] for n in evidence if n.subkind == "option"]
    rule = task.graph.clause(RULE_CLAUSE).attrs["rule"]
    return row, DECISION_KINDS[task.domain.decision.kind].alternatives(row, rule, options)


@dataclass(frozen=True)
class Gap:
    """The completion gap the noisy solver plans for one rollout, known from its plan, never from
    a judge: ``ignored``, the cases of the couplings it ignored (decided by the rule alone), and
    ``skipped``, the effects it never writes; ``writes`` is what it does write."""

    writes: list[ToolCall]
    ignored: list[str]
    skipped: list[Realization]

    @property
    def complete(self) -> bool:
        """Correct by construction: no coupling ignored, no effect skipped."""
        return not self.ignored and not self.skipped


def noisy_gap(task: TaskContext, rng: random.Random, rates: dict) -> Gap:
    """The oracle's decisions with a completion gap: the members of some couplings decided by the
    rule alone, some effects never written."""
    graph = task.graph
    ignoring = {m for h in graph.hyperedges if rng.random() < rates["ignore_coupling"] for m in h.members}
    writes, ignored, skipped = [], [], []
    for decision in graph.of_kind("decision"):
        row, alternatives = case_of(task, decision)
        outcome, basis = graph.outcome(decision), decision.attrs["basis"]
        if decision.node_id in ignoring:
            outcome, basis = alternatives[0], RULE_CLAUSE
            ignored.append(str(row["id"]))
        writes.append(register_entry(row["id"], outcome.value, basis).tool_call())
        for _, effect in realizations(task.domain, graph.effects_per_decision, row, outcome, basis):
            if rng.random() >= rates["skip_effect"]:
                writes.append(effect.tool_call())
            else:
                skipped.append(effect)
    return Gap(writes, ignored, skipped)


def noisy_plan(task: TaskContext, rng: random.Random, rates: dict) -> list[Turn]:
    """The oracle with a completion gap (:func:`noisy_gap`)."""
    return work_plan(task, noisy_gap(task, rng, rates).writes)


#: the scripted solvers the stages run (an adversary's backend is given its own ``plans``)
PLANS: dict[str, Plan] = {"oracle": oracle_plan, "noisy": noisy_plan}


class ScriptedBackend:
    """Plays a scripted solver through the chat interface: one planned turn per request."""

    name = "scripted"

    def __init__(self, policy: str, seed: int = 0, skip_effect: float = 0.3,
                 ignore_coupling: float = 0.5, plans: Mapping[str, Plan] = PLANS) -> None:
        """``plans``: the solvers ``policy`` names one of (the pipeline's own by default)."""
        if policy not in plans:
            raise ValueError(f"unknown scripted policy {policy!r}; choose from {', '.join(plans)}")
        self.policy, self.seed, self.planner = policy, seed, plans[policy]
        self.rates = {"skip_effect": skip_effect, "ignore_coupling": ignore_coupling}
        self.plans: dict[str, list[Turn]] = {}  # episode key -> its planned turns

    def rng(self, key: str) -> random.Random:
        """The random draws of the episode ``key``: its plan (and a noisy solver's :class:`Gap`)
        can be made again from them."""
        return random.Random(stable_seed(self.seed, self.policy, key))

    def begin(self, key: str, task: TaskContext) -> None:
        self.plans[key] = self.planner(task, self.rng(key), self.rates)

    def complete(self, requests: list[ChatRequest]) -> list[Completion]:
        completions = []
        for request in requests:
            turn = sum(m.role == "assistant" for m in request.messages)
            plan = self.plans[request.key]
            content, calls = plan[turn] if turn < len(plan) else ("", [])
            completions.append(Completion(render_turn(content, calls), finish_reason="stop"))
        return completions

    def end(self, key: str) -> None:
        self.plans.pop(key, None)
