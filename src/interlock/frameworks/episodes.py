"""What every framework adapter stands on: episodes of admitted tasks opened on request, each in a
fresh workspace folder of its own, rewarded by the agent judge outside anything the episode
reaches.

The frameworks reset, step and score in their own orders, from several threads or coroutines at
once; an :class:`EpisodeHost` gives each episode a folder nobody else writes, judges an ended
episode once (one at a time: the judge's sandbox workers are shared) and keeps the verdict in this
process's memory. The policy's only reach is the workspace tools (:meth:`HostedEpisode.step`, the
rollout engine's own parsing, tools, clipping and turn limit), which act inside the episode's
workspace; the judge replays on a copy of it, so nothing the policy writes, calls or asks for
moves its reward.
"""

from __future__ import annotations

import contextlib
import itertools
import numbers
import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from interlock.analysis.artifacts import params_paths
from interlock.core.config import RewardKind, load_params
from interlock.core.errors import InterlockError
from interlock.judging.judges import Judge
from interlock.rl.environment import TaskEpisode, TaskPool, score
from interlock.rollout.engine import RolloutLimits
from interlock.rollout.trajectory import Trajectory


@dataclass(frozen=True)
class Verdict:
    """An ended episode's reward and what it rests on."""

    reward: float
    passed: bool  # every mandatory criterion passed: what the ``accept`` stage keeps
    criteria: dict[str, bool] = field(default_factory=dict)  # each criterion's verdict
    problem: str | None = None  # why the judge could not grade it (then reward 0)


class HostedEpisode:
    """One episode: its opening :attr:`messages`, :meth:`step` on each assistant turn's text,
    :meth:`verdict` once it is :attr:`done` (or the framework stops it: out of turns)."""

    def __init__(self, host: EpisodeHost, task_id: str, folder: Path, seed: int, episode_id: str) -> None:
        self.host, self.task_id, self.folder, self.episode_id = host, task_id, folder, episode_id
        self.task = host.pool.task(task_id)
        self._episode = TaskEpisode(self.task, host.limits, folder, rollout_id=episode_id, seed=seed)
        self.opening = self._episode.messages
        self._verdict: Verdict | None = None
        self.trajectory: Trajectory | None = None  # the record judged (once judged)
        self._lock = threading.Lock()

    @property
    def messages(self) -> list[dict]:
        return self._episode.messages

    @property
    def done(self) -> bool:
        return self._verdict is not None or self._episode.done

    @property
    def tools(self) -> tuple[dict, ...]:
        """The tools the episode offers the policy (OpenAI's function format)."""
        return tuple(self._episode.episode.environment.tools)

    @property
    def workspace(self) -> Path:
        """The folder the policy's tools act in (tests compare resets through it)."""
        return self._episode.episode.environment.folder

    def step(self, text: str) -> list[dict]:
        """The tool messages answering one assistant turn (what a malformed, huge or hostile turn
        gets is the engine's error observation, never an exception); [] once the episode ended."""
        with self._lock:
            if self.done:
                return []
            if not isinstance(text, str):
                text = "" if text is None else str(text)
            return self._episode.step(text)

    def verdict(self) -> Verdict:
        """Judge the episode (ending it if it has not ended: out of turns), once; the same verdict
        on every later call."""
        with self._lock:
            if self._verdict is None:
                self.trajectory = self._episode.finish()
                self._verdict = self.host.judge(self.trajectory, self.task)
                shutil.rmtree(self.folder, ignore_errors=True)
            return self._verdict

    def close(self) -> None:
        """Drop the episode's folder (a verdict already given stays)."""
        shutil.rmtree(self.folder, ignore_errors=True)


class EpisodeHost:
    """Opens :class:`HostedEpisode` s of ``pool``'s tasks under ``root`` (a fresh temporary folder
    when None) and judges them with ``judge`` under ``reward``."""

    def __init__(self, pool: TaskPool, judge: Judge, limits: RolloutLimits, reward: RewardKind,
                 root: Path | None = None) -> None:
        self.pool, self.agent_judge, self.limits, self.reward = pool, judge, limits, reward
        self._own_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="interlock-episodes-")) if root is None else Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._count = itertools.count()
        self._judging = threading.Lock()

    def task_ids(self) -> list[str]:
        return [task.task_id for task in self.pool.tasks]

    def open(self, task_id: str, seed: int = 0) -> HostedEpisode:
        """A fresh episode of ``task_id`` (raises :class:`InterlockError` naming it if the pool has
        no such task) in a folder of its own."""
        if not isinstance(seed, numbers.Integral) or isinstance(seed, bool):
            raise InterlockError(f"a seed is an integer, not {type(seed).__name__}", field="seed")
        seed = int(seed)
        number = next(self._count)
        episode_id = f"{task_id}.{number}"
        return HostedEpisode(self, task_id, self.root / f"episode-{number}", seed, episode_id)

    def judge(self, trajectory: Trajectory, task) -> Verdict:
        with self._judging:
            [scored] = score([trajectory], [task], self.agent_judge, self.reward)
        return Verdict(scored.reward, scored.passed, dict(scored.criteria), scored.problem)

    def close(self) -> None:
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def host_of_run(params_file: Path | str, pool: str = "rft", *,
                root: Path | None = None) -> Iterator[EpisodeHost]:
    """The episodes of a finished run's admitted ``pool`` (``rft``, ``benchmark``, ``indist``),
    under the run's RL rules (``train.rl``: turns, reward; the backbone's sampling limits) and its
    agent judge's sandbox."""
    from interlock.judging.agent import AgentJudge
    from interlock.rl.stage import rl_limits
    from interlock.synthesis.tasks import admitted_tasks, load_domains

    params, paths = load_params(params_file), params_paths(params_file)
    limits = rl_limits(params)
    tasks = admitted_tasks(paths, load_domains(paths.domains), pool)
    with AgentJudge(episode=limits.episode, sandbox=params.sandbox.provider) as judge:
        host = EpisodeHost(TaskPool(tasks), judge, limits, params.train.rl.reward, root)
        try:
            yield host
        finally:
            host.close()
