"""Admitted tasks as RL environments, for any trainer: reset lays down a fresh copy of the task's
workspace, the tools are the agent's own file tools, and the reward comes from the agent judge
when the episode ends.

A group of episodes is played by the rollout engine (:func:`play`: the same engine, limits and
environment as the ``rollouts`` stage), judged by the agent judge (:func:`score`: the ``judge``
stage's replay and compiled checks), and turned into the token ids a policy-gradient trainer takes
(:func:`policy_tokens`). TRL's GRPO adapter (:mod:`interlock.rl.grpo`) is one user; verl's agent
loop or a ``verifiers`` environment would be others (docs/pipeline.md).

Everything the policy writes is hostile input: a backend that fails ends the batch's episodes as
``server_error`` (no reward) instead of the trainer's step, and a judge that cannot grade an
episode scores that episode 0 with the reason.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from interlock.core.backend import ChatBackend, ChatRequest, Completion, EpisodeTask
from interlock.core.config import RewardKind
from interlock.core.errors import InterlockError
from interlock.judging.judges import Judge
from interlock.judging.verdicts import Judgement
from interlock.rl.reward import episode_reward
from interlock.rollout.engine import (
    Episode,
    RolloutLimits,
    advance_episode,
    finish_episode,
    run_episodes,
    start_episode,
    workspace_opening,
)
from interlock.rollout.trajectory import Trajectory
from interlock.synthesis.tasks import TaskContext
from interlock.training.examples import marked_spans, sampled_turn_ids, trajectory_tokens

log = logging.getLogger(__name__)


class TaskPool:
    """The RL pool's tasks, each found again from the prompt its episodes open with: a trainer that
    hands the rollout only prompts (TRL's ``rollout_func``) still reaches the task's workspace.

    Two tasks may open with the same request (their workspaces differ), so each prompt message
    carries its task's id in a field chat templates do not render (``task_id``)."""

    def __init__(self, tasks: Iterable[TaskContext]) -> None:
        self.tasks = list(tasks)
        if not self.tasks:
            raise InterlockError("no admitted task to train on", field="tasks")
        self._by_id = {task.task_id: task for task in self.tasks}
        if len(self._by_id) != len(self.tasks):
            raise InterlockError("a task appears twice in the pool", field="task_id")

    @staticmethod
    def prompt(task: TaskContext) -> list[dict]:
        """The conversation an episode of ``task`` opens with, as chat messages marked with its id."""
        return [{**m.to_dict(), "task_id": task.task_id} for m in workspace_opening(task.pack)]

    def prompts(self) -> list[list[dict]]:
        return [self.prompt(task) for task in self.tasks]

    def task(self, task_id: str) -> TaskContext:
        """The pool's task ``task_id``; an :class:`InterlockError` naming it where there is none."""
        if not isinstance(task_id, str) or task_id not in self._by_id:
            raise InterlockError(f"no task {str(task_id)[:80]!r} in the pool", field="task_id")
        return self._by_id[task_id]

    def task_for(self, prompt: Sequence[dict]) -> TaskContext:
        task_id = prompt[-1].get("task_id") if prompt and isinstance(prompt[-1], dict) else None
        if not isinstance(task_id, str) or task_id not in self._by_id:
            raise InterlockError(f"a prompt that opens no task of the pool (task_id {task_id!r})",
                                 field="prompt")
        return self._by_id[task_id]


class FailSafeBackend:
    """A backend whose failure ends the episodes it was asked for (``server_error``: no reward)
    instead of the training step that asked."""

    def __init__(self, backend: ChatBackend) -> None:
        self.backend = backend
        self.name = backend.name

    def begin(self, key: str, task: EpisodeTask) -> None:
        self.backend.begin(key, task)

    def complete(self, requests: list[ChatRequest]) -> list[Completion]:
        try:
            return self.backend.complete(requests)
        except Exception as error:  # noqa: BLE001 - the policy's side failing is its episodes', not the trainer's
            detail = f"{type(error).__name__}: {error}"[:500]
            log.warning("the policy's backend failed on %d episodes: %s", len(requests), detail)
            return [Completion("", finish_reason="server_error", detail=detail) for _ in requests]

    def end(self, key: str) -> None:
        self.backend.end(key)


class _ExternalGeneration:
    """The backend of an episode whose turns a trainer generates itself: told of the episode,
    asked for nothing."""

    name = "external"

    def begin(self, key: str, task: EpisodeTask) -> None:
        pass

    def complete(self, requests: list[ChatRequest]) -> list[Completion]:
        raise TypeError("a TaskEpisode's turns come from its trainer (TaskEpisode.step)")

    def end(self, key: str) -> None:
        pass


class TaskEpisode:
    """One episode of a task driven turn by turn, for a trainer that owns the generation loop
    (verl's agent loop, a ``verifiers`` multi-turn environment): construction is the reset (a fresh
    copy of the workspace, the opening messages), :meth:`step` answers one assistant turn exactly
    as the rollout engine does (same parsing, tools, clipping, turn limit), :meth:`finish` gives the
    trajectory the agent judge grades (:func:`score`)."""

    def __init__(self, task: TaskContext, limits: RolloutLimits, workdir: Path, *,
                 rollout_id: str = "episode", seed: int = 0) -> None:
        self.limits = limits
        self.episode = start_episode(Episode(rollout_id, task, task.domain.id, task.pack.pool, "rl", 0, seed),
                                     _ExternalGeneration(), workdir, limits)

    @property
    def messages(self) -> list[dict]:
        """The conversation so far, as chat messages."""
        return [m.to_dict() for m in self.episode.messages]

    @property
    def done(self) -> bool:
        return self.episode.finish_reason is not None

    def step(self, text: str) -> list[dict]:
        """The environment's answer to one assistant turn (tool results; none when it ended the
        episode without calls), as chat messages; :attr:`done` says whether the episode ended."""
        if self.done:
            raise InterlockError(f"the episode ended ({self.episode.finish_reason})",
                                 item=self.episode.rollout_id, field="step")
        before = len(self.episode.messages)
        advance_episode(self.episode, Completion(text), self.limits)
        return [m.to_dict() for m in self.episode.messages[before + 1:]]

    def finish(self) -> Trajectory:
        """The episode's record (its workspace folder removed); one the trainer stopped before it
        ended is recorded as out of turns."""
        if self.episode.finish_reason is None:
            self.episode.finish_reason = "max_turns"
        return finish_episode(self.episode, _ExternalGeneration())


@dataclass(frozen=True)
class ScoredEpisode:
    trajectory: Trajectory
    reward: float
    passed: bool  # every mandatory criterion passed: what ``accept`` would keep
    problem: str | None = None  # why the judge could not grade it (then reward 0)
    criteria: dict[str, bool] = field(default_factory=dict)  # each criterion's verdict (none: not graded)


def play(tasks: Sequence[TaskContext], seeds: Sequence[int], backend: ChatBackend, limits: RolloutLimits,
         workdir: Path, *, prefix: str) -> list[Trajectory]:
    """One episode per task (a task repeated is a group), each with its seed, all live at once;
    trajectories in the order of ``tasks``. Rollout ids are ``{prefix}.{index}``."""
    episodes = [Episode(f"{prefix}.{index}", task, task.domain.id, task.pack.pool, "rl", index, seed)
                for index, (task, seed) in enumerate(zip(tasks, seeds, strict=True))]
    order = {e.rollout_id: i for i, e in enumerate(episodes)}
    finished = run_episodes(episodes, FailSafeBackend(backend), limits, workdir, batch_size=len(episodes))
    return sorted(finished, key=lambda t: order[t.rollout_id])


def score(trajectories: Sequence[Trajectory], tasks: Sequence[TaskContext], judge: Judge,
          kind: RewardKind) -> list[ScoredEpisode]:
    """Each episode's reward from the agent judge's verdicts (:func:`episode_reward`). A judge
    that fails on the batch grades its episodes one by one; one it cannot grade earns 0."""
    items = list(zip(trajectories, [task.pack for task in tasks], strict=True))
    try:
        judged: list[Judgement | str] = list(judge.judge(items))
    except Exception:  # noqa: BLE001 - find the episode that broke it; the others keep their verdicts
        judged = [_judge_one(judge, item) for item in items]
    scored = []
    for (trajectory, pack), judgement in zip(items, judged, strict=True):
        if isinstance(judgement, str):
            scored.append(ScoredEpisode(trajectory, 0.0, False, judgement))
            continue
        scored.append(ScoredEpisode(trajectory, episode_reward(trajectory, judgement, pack.rubric, kind),
                                    episode_reward(trajectory, judgement, pack.rubric, "pass") == 1.0,
                                    criteria=judgement.passed))
    return scored


def _judge_one(judge: Judge, item) -> Judgement | str:
    try:
        return judge.judge([item])[0]
    except Exception as error:  # noqa: BLE001 - an episode the judge cannot grade earns nothing
        log.warning("could not judge %s: %s", item[0].rollout_id, error)
        return f"judge failed: {type(error).__name__}: {error}"[:500]


@dataclass(frozen=True)
class PolicyTokens:
    prompt_ids: list[int]
    completion_ids: list[int]
    env_mask: list[int]  # 1 on the policy's own tokens (they carry loss), 0 elsewhere
    problem: str | None = None  # why no token carries loss (then only its reward counts, in its group)


def policy_tokens(trajectory: Trajectory, tokenizer, max_length: int) -> PolicyTokens:
    """An episode's tokens as RFT would train on them (:func:`trajectory_tokens`: each turn the ids
    its backend sampled, the chat template's tokens around them): the prompt runs up to the first
    token the policy wrote, the completion from there to the last (its end-of-turn token), and
    ``env_mask`` is 1 on the policy's own tokens and 0 on what the
    environment wrote between its turns (tool results), which carry no loss.

    Three kinds of episode train nothing and keep their place in their group's statistics with
    the reward they earned: one in which the policy wrote nothing (its backend failed: the opening
    and one end-of-text token), one the trainer could not take whole (over ``max_length`` tokens:
    a server that ignored its token limit, say; cut to fit), and one the chat template cannot
    render or whose policy tokens it does not mark (the opening and one end-of-text token)."""
    try:
        ids, mask = trajectory_tokens(tokenizer, trajectory)
    except Exception as error:  # noqa: BLE001 - what the policy wrote must not stop the step
        problem = f"not renderable: {type(error).__name__}: {error}"[:300]
        return _nothing_trained(trajectory, tokenizer, problem)
    if not any(m.role == "assistant" for m in trajectory.messages):
        return _nothing_trained(trajectory, tokenizer, "the policy wrote nothing")
    if not any(mask):
        return _nothing_trained(trajectory, tokenizer, "the chat template marks none of the policy's tokens")
    first, last = mask.index(True), len(mask) - mask[::-1].index(True)  # the policy's last token ends it
    prompt, completion = ids[:first], ids[first:last]
    if len(prompt) + len(completion) > max_length:
        kept = completion[:max(1, max_length - len(prompt))]
        return PolicyTokens(prompt, kept, [0] * len(kept), f"too long: {len(prompt + completion)} tokens")
    return PolicyTokens(prompt, completion, [int(m) for m in mask[first:last]])


def _nothing_trained(trajectory: Trajectory, tokenizer, problem: str) -> PolicyTokens:
    """The episode's opening and one end-of-text token, under mask 0 (its plain text where the
    chat template fails: no token of it is trained)."""
    opening = [m.to_dict() for m in trajectory.messages[:2]]
    try:
        prompt = list(tokenizer.apply_chat_template(opening, add_generation_prompt=True, tokenize=True,
                                                    return_dict=True)["input_ids"])
    except Exception:  # noqa: BLE001 - a template that cannot render even the opening
        text = "\n".join(m["content"] for m in opening)
        prompt = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return PolicyTokens(prompt, [tokenizer.eos_token_id], [0], problem)


def sampling_logprobs(trajectory: Trajectory, tokenizer, tokens: PolicyTokens) -> list[float]:
    """Per completion token of ``tokens`` (:func:`policy_tokens`), the log-probability it was
    sampled with, where the backend reported it (TRL's importance-sampling correction compares it
    with the trained weights' own); NaN, TRL's mark for "not scored", everywhere else: what the
    environment wrote, a turn rendered from its text, the template's end of a turn that did not
    stop on that token, an episode that trains nothing."""
    logprobs = [math.nan] * len(tokens.completion_ids)
    if tokens.problem is not None:
        return logprobs
    used = sampled_turn_ids(tokenizer, trajectory)
    sampled_turns = trajectory.sampled or [None] * len(used)
    for (start, _), ids, sampled in zip(marked_spans(tokens.env_mask), used, sampled_turns, strict=True):
        if ids is None or sampled is None or sampled.logprobs is None:
            continue
        end_token = tokens.completion_ids[start + len(ids)]
        logprobs[start:start + len(ids)] = sampled.logprobs[:len(ids)]
        if sampled.stopped and sampled.ids[-1] == end_token:
            logprobs[start + len(ids)] = sampled.logprobs[-1]
    return logprobs
