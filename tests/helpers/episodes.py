"""Episodes written by hand: a backend that plays fixed turns per episode, and the oracle's own
turns to edit, so a test writes exactly what a policy under reward pressure would."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

from interlock.core.backend import ChatRequest, Completion
from interlock.core.chat import ToolCall, render_turn
from interlock.rollout.engine import Episode, RolloutLimits, run_episodes
from interlock.rollout.scripted import oracle_plan
from interlock.rollout.trajectory import Trajectory
from interlock.synthesis.tasks import TaskContext

#: one assistant turn: its text, and the calls written after it; or the turn's whole text
Turn = tuple[str, list[ToolCall]] | str


class Played:
    """A backend that plays fixed turns per episode (``plans``: episode key -> turns); with
    ``sample`` (a turn's text -> the completion a model backend would return for it: its text
    decoded from the ids it reports), each turn as that completion."""

    name = "played"

    def __init__(self, plans: dict[str, list[Turn]],
                 sample: Callable[[str], Completion] = Completion) -> None:
        self.plans, self.sample = plans, sample

    def begin(self, key, task) -> None:
        pass

    def complete(self, requests: list[ChatRequest]) -> list[Completion]:
        out = []
        for request in requests:
            turn = sum(m.role == "assistant" for m in request.messages)
            plan = self.plans[request.key]
            written = plan[turn] if turn < len(plan) else ("", [])
            out.append(self.sample(written if isinstance(written, str) else render_turn(*written)))
        return out

    def end(self, key) -> None:
        pass


def oracle_turns(context: TaskContext) -> list[Turn]:
    """The oracle's turns: a look, one turn per decision, and the submit (its plan draws nothing)."""
    return oracle_plan(context, random.Random(0), {})


def play_turns(plans: dict[str, tuple[TaskContext, list[Turn]]], workdir: Path,
               limits: RolloutLimits | None = None, *, policy: str = "played") -> list[Trajectory]:
    """Each plan (episode key -> its task and turns) played through the rollout engine, in order."""
    episodes = [Episode(key, context, context.pack.domain_id, context.pack.pool, policy, 0, 0)
                for key, (context, _) in plans.items()]
    order = {key: index for index, key in enumerate(plans)}
    played = run_episodes(episodes, Played({k: turns for k, (_, turns) in plans.items()}),
                          limits or RolloutLimits(), workdir)
    return sorted(played, key=lambda t: order[t.rollout_id])
