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

import argparse
import atexit
import contextlib
import itertools
import json
import numbers
import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from interlock.analysis.artifacts import params_paths
from interlock.core.chat import call_markup, render_turn, storable
from interlock.core.config import RewardKind, load_params
from interlock.core.errors import InterlockError
from interlock.judging.judges import Judge
from interlock.models.openai_backend import openai_messages
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


def assistant_text(message: object) -> str:
    """An assistant turn handed over in OpenAI's chat format (``content`` as text or as parts,
    structured ``tool_calls``) as the text the rollout engine reads: the calls' markup after the
    text, each call's arguments as sent (JSON text or an object), so a call the engine cannot read
    is a malformed call of the policy's, answered by an error observation. Whatever is no such
    message counts as text."""
    if not isinstance(message, dict):
        return "" if message is None else str(message)
    content = message.get("content")
    if isinstance(content, list):  # content parts: their text
        content = "".join(part.get("text", "") for part in content
                          if isinstance(part, dict) and isinstance(part.get("text"), str))
    content = content if isinstance(content, str) else "" if content is None else str(content)
    calls = message.get("tool_calls")
    written = []
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        function = function if isinstance(function, dict) else {}
        name, arguments = function.get("name"), function.get("arguments")
        written.append(call_markup(name if isinstance(name, str) else "",
                                   {} if arguments is None or arguments == "" else arguments))
    return render_turn(content, written)


def loggable(value: object) -> object:
    """``value`` (a JSON value) as UTF-8 can carry it, for a framework that logs or sends what an
    episode recorded: a lone surrogate (JSON's ``"\\udcff"``, which the engine records as the
    model wrote it) becomes U+FFFD; anything else stays as it is."""
    if storable(value):
        return value
    text = json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return json.loads(text)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that name a finished run's admitted pool, as every adapter's command line takes
    them (``--params``, ``--pool``)."""
    parser.add_argument("--params", default="params.yaml", help="the finished run's params.yaml")
    parser.add_argument("--pool", default="rft", help="rft, benchmark or indist")


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

    def reply(self, message: object) -> list[dict]:
        """:meth:`step` for a framework that speaks OpenAI's chat format: ``message`` is the
        assistant's (:func:`assistant_text`), the answer the tool messages, in OpenAI's format
        with the ids of :attr:`conversation`."""
        before = len(self._episode.episode.messages)
        self.step(assistant_text(message))
        return self.conversation[before + 1:]

    @property
    def conversation(self) -> list[dict]:
        """The episode so far in OpenAI's chat format as the engine recorded it (each assistant
        turn as the engine read it; calls with ids, each result with its call's): the history a
        framework sends its model, the same the ``openai`` backend sends a server."""
        return openai_messages(self._episode.episode.messages)

    def verdict(self) -> Verdict:
        """Judge the episode (ending it if it has not ended: out of turns), once; the same verdict
        on every later call."""
        with self._lock:
            if self._verdict is None:
                self.trajectory = self._episode.finish()
                self._verdict = self.host.judge(self.trajectory, self.task)
                self.close()
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


_HOSTS: dict[tuple[str, str], EpisodeHost] = {}
_HOSTS_LOCK = threading.Lock()
_EXITS = contextlib.ExitStack()
atexit.register(_EXITS.close)
_ATTACHED = itertools.count()
ATTACHED = "attached:"  # the prefix of the names :func:`attach` gives


def attach(host: EpisodeHost) -> str:
    """A name :func:`shared_host` serves ``host`` under, in this process (a host built here: a
    test's, a notebook's), where an adapter's configuration takes a run's params file."""
    name = f"{ATTACHED}{next(_ATTACHED)}"
    with _HOSTS_LOCK:
        _HOSTS[(name, "")] = host
    return name


def shared_host(params: str | Path, pool: str = "rft") -> EpisodeHost:
    """This process's host of the finished run ``params`` (its params.yaml) and ``pool``, built on
    first use and closed at exit: one host, one judge, however many environments a framework makes
    of it. ``params`` may instead be a name :func:`attach` gave."""
    if str(params).startswith(ATTACHED):
        with _HOSTS_LOCK:
            if (str(params), "") in _HOSTS:
                return _HOSTS[(str(params), "")]
        raise InterlockError(f"no host attached as {str(params)!r} in this process", field="params")
    path = Path(params).resolve()
    if not path.is_file():
        raise InterlockError(f"no params file {str(params)!r} (a finished run's params.yaml)", field="params")
    key = (str(path), str(pool))
    with _HOSTS_LOCK:
        if key not in _HOSTS:
            _HOSTS[key] = _EXITS.enter_context(host_of_run(path, str(pool)))
        return _HOSTS[key]
