"""The reward of an RL episode, from the agent judge's verdicts on its transcript.

The judge replays the episode's tool calls in a fresh copy of the task's workspace and runs the
checks compiled from the graph on what the replay leaves (:mod:`interlock.judging.agent`); the
reward reads those verdicts, never the transcript's words or the files the episode says it left.
So a reward is exactly what the pipeline's own stages make of the same transcript: ``pass`` is the
``accept`` stage's rule, ``score`` the weighted score ``evaluate`` reports. Three choices:

- ``pass``: 1 when every mandatory criterion passes, else 0 (the acceptance rule);
- ``score``: the rubric's weighted score (:func:`interlock.evaluation.metrics.weighted_score`:
  the guard and the submit earn only beside work, so doing nothing earns 0);
- ``gated_score``: the weighted score where the no-collateral guard holds, else 0 (damage
  anywhere costs everything).

An episode the backend or the model's reply ended (``server_error``, ``bad_reply``) earns 0
whatever its workspace holds, and the step goes on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import get_args

from interlock.core.config import RewardKind
from interlock.evaluation.metrics import grade_episode
from interlock.judging.verdicts import Judgement
from interlock.rollout.trajectory import Trajectory
from interlock.synthesis.packs import Criterion

REWARD_KINDS: tuple[RewardKind, ...] = get_args(RewardKind)
#: how an episode ends when it was cut short by the machinery or by an unreadable reply: no reward
FAILED_ENDS = frozenset({"server_error", "bad_reply"})


def episode_reward(trajectory: Trajectory, judgement: Judgement, rubric: Sequence[Criterion],
                   kind: RewardKind) -> float:
    """The reward of one judged episode, in [0, 1]: graded as ``evaluate`` grades it."""
    if kind not in REWARD_KINDS:
        raise ValueError(f"unknown reward {kind!r}; one of {', '.join(REWARD_KINDS)}")
    if trajectory.finish_reason in FAILED_ENDS:
        return 0.0
    graded = grade_episode(trajectory, rubric, judgement.passed)
    if kind == "pass":
        return float(graded.passed)
    guarded = all(judgement.passed.get(c.criterion_id, False) for c in rubric if c.guard)
    if kind == "gated_score" and not guarded:
        return 0.0
    return graded.score
