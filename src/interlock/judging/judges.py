"""The judge protocol, and the judges by name (``judge.name``: whose verdicts ``accept`` uses;
``judge.graders``: who grades the rollout pool in the ``judge`` stage).

A judge turns ``(trajectory, pack)`` pairs into :class:`~interlock.judging.verdicts.Judgement`\\ s,
one verdict row per rubric criterion, without raising for anything a rollout holds. A judge is
a factory that builds it from a :class:`JudgeContext`, registered by one line in the entry-point
group ``interlock.judges`` (:mod:`interlock.core.registry`; ``mine = "mylab.judge:build"``)::

    def build(context: JudgeContext) -> Judge:
        return MyJudge(context.backend)

The agent judge's compiled verdicts on the real final workspace are the ground truth every
grader's error rates are measured against (:data:`TRUTH`), so it grades every pool.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from interlock.core.backend import ChatBackend
from interlock.judging.sandbox import DEFAULT_LIMITS, Limits
from interlock.judging.verdicts import Judgement
from interlock.rollout.engine import EpisodeLimits, RolloutLimits
from interlock.rollout.trajectory import Trajectory
from interlock.synthesis.packs import TaskPack

#: the grader whose compiled verdicts are the ground truth
TRUTH = "agent"
#: the rules judged episodes were played under unless told otherwise: the rollout engine's defaults
DEFAULT_EPISODE = RolloutLimits().episode


class Judge(Protocol):
    name: str

    def judge(self, items: Sequence[tuple[Trajectory, TaskPack]]) -> list[Judgement]:
        """One judgement per item, in order; a rollout's defects are failed verdicts, never errors."""

    def report(self) -> dict:
        """What the judge stage's metrics record about this judge beyond its verdicts (its sandbox,
        its backend); ``{}`` if nothing."""

    def close(self) -> None:
        """Release what judging held (sandbox workers, scratch folders)."""


@dataclass(frozen=True)
class JudgeContext:
    """What a judge may be built with: the model backing it (None: scripted), sandbox workers and
    limits, the provider model-written checks run behind (``sandbox.provider``), and the rules the
    judged episodes were played under."""

    backend: ChatBackend | None = None
    workers: int | None = None
    limits: Limits = DEFAULT_LIMITS
    sandbox: str = "auto"
    episode: EpisodeLimits = DEFAULT_EPISODE


class JudgeFactory(Protocol):
    def __call__(self, context: JudgeContext) -> Judge: ...
