"""The execution gate of the review: a judged validation rollout per statically admitted task.

A task is admitted when the agent judge ran cleanly on every criterion of its validation
rollout, whether or not the validation solver passed: admission is not acceptance.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from interlock.core.backend import ChatBackend
from interlock.judging.agent import AgentJudge
from interlock.judging.verdicts import Judgement, accepted, judging_problems
from interlock.rollout.engine import RolloutLimits, run_episodes
from interlock.rollout.runs import plan_episodes
from interlock.rollout.trajectory import Trajectory
from interlock.synthesis.tasks import TaskContext


@dataclass(frozen=True)
class Validation:
    trajectory: Trajectory
    judgement: Judgement
    problems: list[str]  # why judging did not run cleanly (empty: the task may be admitted)
    passed: bool  # whether the validation solver's rollout would be accepted


class ExecutionGate:
    def __init__(self, backend: ChatBackend, judge: AgentJudge, *, policy: str, seed: int,
                 limits: RolloutLimits | None = None) -> None:
        self.backend, self.judge, self.policy, self.seed = backend, judge, policy, seed
        self.limits = limits or RolloutLimits()

    def validate(self, tasks: list[TaskContext]) -> dict[str, Validation]:
        workdir = Path(tempfile.mkdtemp(prefix="interlock-validation-"))
        try:
            episodes = list(plan_episodes(iter(tasks), policy=self.policy, attempts=1, seed=self.seed))
            for episode in episodes:
                episode.rollout_id = f"validation.{episode.rollout_id}"
            trajectories = {t.task_id: t for t in run_episodes(episodes, self.backend, self.limits, workdir,
                                                               batch_size=len(episodes) or 1)}
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        packs = {task.task_id: task.pack for task in tasks}
        order = [task.task_id for task in tasks]
        judgements = self.judge.judge([(trajectories[t], packs[t]) for t in order])
        return {t: Validation(trajectories[t], j, judging_problems(j, packs[t].rubric),
                              accepted(j.passed, packs[t].rubric))
                for t, j in zip(order, judgements, strict=True)}
