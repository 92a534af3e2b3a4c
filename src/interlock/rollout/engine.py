"""The rollout engine: many episodes at once, under one of two schedules.

- ``lockstep`` (local models, which compute a batch at once): the live episodes step together,
  one batched generation per turn;
- ``async`` (servers, a :class:`~interlock.core.backend.ConcurrentBackend`): each episode's next
  request goes out as soon as its own reply came and its tools ran, at most
  ``max_in_flight`` at a time, so no episode waits for the slowest reply of a batch; the tools
  run on the engine's thread while other requests wait.

Both share everything an episode does (:func:`_start`, :func:`_request`, :func:`_advance`,
:func:`_finish`) and differ only in when requests go out, so for a deterministic backend they
write the same trajectories. Each episode acts in its own :class:`Environment`: by default a
fresh copy of its task's workspace on disk with the file tools (:class:`WorkspaceEnvironment`);
an external benchmark brings its own (BFCL's simulated APIs), with its own
:class:`EpisodeLimits` (steps, calls a turn, clipping). Every assistant turn may carry
several tool calls; malformed calls, unknown tools and bad arguments come back as error
observations; a turn without calls ends the episode, or hands the agent the environment's next
user message; every episode records why it ended.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from interlock.core.backend import (
    ChatBackend,
    ChatRequest,
    Completion,
    CompletionEnd,
    ConcurrentBackend,
    EpisodeTask,
)
from interlock.core.chat import Message, ToolCall, ToolResult, parse_turn
from interlock.rollout.trajectory import FinishReason, Trajectory
from interlock.synthesis.packs import TaskPack
from interlock.synthesis.tasks import TaskContext
from interlock.synthesis.workspace import TOOL_SPECS, changed_files, execute, materialize, workspace_diff

SYSTEM_PROMPT = (
    "You are an operations agent. You work only through the tools on the files of a workspace. "
    "Read the records and the policy, decide every case the request names, record each decision "
    "and carry it through to every record the request lists, then call submit. Write each tool "
    "call as <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>; several calls may "
    "follow each other in one turn."
)
TOOLS = tuple({"type": "function", "function": spec} for spec in TOOL_SPECS)
#: when requests go out: a batched turn for every live episode, or each episode on its own
Schedule = Literal["lockstep", "async"]
#: completions that end their episode, and the finish reason each records
ENDINGS: dict[CompletionEnd, FinishReason] = {"context": "context", "server_error": "server_error",
                                              "bad_reply": "bad_reply"}
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EpisodeLimits:
    """What an environment lets one episode do: its rules, not the model's sampling. The workspace
    tasks take theirs from the run's :class:`RolloutLimits`; an external benchmark brings its own
    (BFCL's step limit, no call cap, no clipping), carried by its episodes (``Episode.limits``)."""

    max_turns: int  # assistant turns per user message (per episode where there is one request)
    max_calls_per_turn: int | None = None  # None: every call a turn writes runs
    max_observation_chars: int | None = None  # longer tool outputs are clipped; None: never


@dataclass(frozen=True)
class RolloutLimits:
    """A run's limits: how the model samples, and the workspace tasks' :class:`EpisodeLimits`."""

    #: assistant turns per episode for a workspace task (one request)
    max_turns: int = 24
    max_new_tokens: int = 256  # per assistant turn
    max_calls_per_turn: int = 16
    max_observation_chars: int = 4000  # longer tool outputs are clipped (flooding cannot blow the context)
    temperature: float = 0.7

    @classmethod
    def of(cls, rollouts, generation) -> RolloutLimits:
        """The limits the config sets (``scale.rollouts`` and ``backbone.generation``): the
        rollouts stage and the evaluation roll out under the same ones."""
        return cls(max_turns=rollouts.max_turns, max_new_tokens=generation.max_new_tokens,
                   max_observation_chars=rollouts.max_observation_chars, temperature=generation.temperature)

    @property
    def episode(self) -> EpisodeLimits:
        """The limits of an episode that brings none of its own (the workspace tasks')."""
        return EpisodeLimits(self.max_turns, self.max_calls_per_turn, self.max_observation_chars)


class Environment(Protocol):
    """What one episode acts in: the engine owns the conversation, the environment its world."""

    tools: tuple[dict, ...]  # OpenAI-style tool dicts, sent with every request

    def opening(self) -> list[Message]:
        """The first messages: the system prompt and the first user message."""

    def execute(self, call: ToolCall) -> ToolResult:
        """Run one parsed call; a bad call is an error observation, never an exception."""

    def next_user_message(self) -> Message | None:
        """The assistant replied without a call: the next user message, or None (the end)."""

    def close(self) -> tuple[dict[str, str | None], list[dict]]:
        """The episode's final state as the trajectory records it (``final_files``, ``diff``);
        the environment is released."""

    def replay(self, messages: list[Message]) -> None:
        """Run a conversation's tool calls again (an episode that continues from a prefix)."""


class WorkspaceEnvironment:
    """A task's workspace on disk and the file tools: the synthesized tasks' environment."""

    tools = TOOLS

    def __init__(self, pack: TaskPack, folder: Path) -> None:
        self.pack, self.folder = pack, folder
        self.store = materialize(pack.files, folder)

    @classmethod
    def of(cls, episode: Episode, folder: Path) -> WorkspaceEnvironment:
        """The environment of a workspace episode (an episode's ``open_environment``)."""
        if not isinstance(episode.task, TaskContext):
            raise TypeError(f"a workspace episode needs a compiled task, not {type(episode.task).__name__}")
        return cls(episode.task.pack, folder)

    def replay(self, messages: list[Message]) -> None:
        """Run a finished episode's tool calls again, as the engine ran them: every call of every
        assistant turn, in order, up to the one that submitted."""
        for message in messages:
            for call in message.tool_calls if message.role == "assistant" else ():
                if self.execute(call).submitted:
                    return

    def opening(self) -> list[Message]:
        return [Message("system", SYSTEM_PROMPT), Message("user", self.pack.request)]

    def execute(self, call: ToolCall) -> ToolResult:
        return execute(self.store, call)

    def next_user_message(self) -> None:
        return None  # one request: a turn without calls means the agent stopped acting

    def close(self) -> tuple[dict[str, str | None], list[dict]]:
        final = {path: self.store.read(path) for path in self.store.files()}
        shutil.rmtree(self.folder, ignore_errors=True)
        return changed_files(self.pack.files, final), workspace_diff(self.pack.files, final)


@dataclass
class Episode:
    rollout_id: str
    task: EpisodeTask  # a compiled task (TaskContext) for the workspace; its own for other environments
    domain_id: str
    pool: str
    policy: str
    attempt: int
    seed: int
    messages: list[Message] = field(default_factory=list)
    #: opens the episode's environment in its own scratch folder (a class or any callable)
    open_environment: Callable[[Episode, Path], Environment] = WorkspaceEnvironment.of
    #: a conversation to continue instead of the environment's opening: its calls are run again
    #: first and its turns count towards the trajectory's (a correction continues a rollout)
    prefix: tuple[Message, ...] = ()
    #: the environment's own limits; None: the run's (``RolloutLimits.episode``, the workspace tasks')
    limits: EpisodeLimits | None = None
    environment: Environment | None = None
    turns: int = 0
    steps: int = 0  # assistant turns since the last user message
    tool_calls: int = 0
    invalid_calls: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    finish_reason: FinishReason | None = None
    started: float = 0.0


def run_episodes(episodes: Iterable[Episode], backend: ChatBackend, limits: RolloutLimits, workdir: Path,
                 batch_size: int = 16, schedule: Schedule | None = None) -> Iterator[Trajectory]:
    """Every episode to its end; each trajectory comes back as its episode ends. ``schedule``
    None: ``async`` for a :class:`ConcurrentBackend` (at most its ``max_in_flight`` episodes
    live), else ``lockstep`` (at most ``batch_size``)."""
    workdir.mkdir(parents=True, exist_ok=True)
    if schedule is None:
        schedule = "async" if isinstance(backend, ConcurrentBackend) else "lockstep"
    if schedule == "lockstep":
        return _lockstep(iter(episodes), backend, limits, workdir, batch_size)
    if not isinstance(backend, ConcurrentBackend):
        raise TypeError(f"the async schedule needs a backend that takes single requests, not {backend.name}")
    return _async(iter(episodes), backend, limits, workdir)


def _lockstep(waiting: Iterator[Episode], backend: ChatBackend, limits: RolloutLimits, workdir: Path,
              batch_size: int) -> Iterator[Trajectory]:
    """Continuous batching: finished episodes leave the batch and waiting ones take their place."""
    live: list[Episode] = []
    while True:
        while len(live) < batch_size:
            episode = next(waiting, None)
            if episode is None:
                break
            live.append(_start(episode, backend, workdir))
        if not live:
            return
        for episode, completion in zip(live, backend.complete([_request(e, limits) for e in live]),
                                       strict=True):
            _advance(episode, completion, limits)
        for episode in [e for e in live if e.finish_reason is not None]:
            live.remove(episode)
            yield _finish(episode, backend)


def _async(waiting: Iterator[Episode], backend: ConcurrentBackend, limits: RolloutLimits,
           workdir: Path) -> Iterator[Trajectory]:
    """Each live episode has one request in flight, or is acting on its reply here while the
    others' requests wait in the pool's threads; an ended episode's place goes to a waiting one."""
    pool = ThreadPoolExecutor(max_workers=backend.max_in_flight, thread_name_prefix="interlock-rollout")
    in_flight: dict[Future, Episode] = {}

    def send(episode: Episode) -> None:
        in_flight[pool.submit(backend.complete_one, _request(episode, limits))] = episode

    try:
        while True:
            while len(in_flight) < backend.max_in_flight:
                episode = next(waiting, None)
                if episode is None:
                    break
                send(_start(episode, backend, workdir))
            if not in_flight:
                return
            done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            for future in [f for f in in_flight if f in done]:  # in the order they were sent
                episode = in_flight.pop(future)
                _advance(episode, future.result(), limits)
                if episode.finish_reason is None:
                    send(episode)
                else:
                    yield _finish(episode, backend)
    finally:  # a caller that stops early does not wait for the requests still out
        pool.shutdown(wait=False, cancel_futures=True)


def _start(episode: Episode, backend: ChatBackend, workdir: Path) -> Episode:
    episode.started = time.perf_counter()
    episode.environment = episode.open_environment(episode, workdir / episode.rollout_id)
    if episode.prefix:
        episode.messages = list(episode.prefix)
        episode.environment.replay(episode.messages)
        episode.turns, episode.tool_calls, episode.invalid_calls = conversation_counts(episode.messages)
    else:
        episode.messages = episode.environment.opening()
    backend.begin(episode.rollout_id, episode.task)
    return episode


def _request(episode: Episode, limits: RolloutLimits) -> ChatRequest:
    """The episode's next generation: its conversation so far, sampled with a seed of its own turn."""
    return ChatRequest(episode.rollout_id, tuple(episode.messages), episode.environment.tools,
                       limits.max_new_tokens, limits.temperature, episode.seed + episode.turns)


def _advance(episode: Episode, completion: Completion, limits: RolloutLimits) -> None:
    """One reply: count it, act on it, and record whether it ended the episode."""
    episode.turns += 1
    episode.steps += 1
    episode.prompt_tokens = max(episode.prompt_tokens, completion.prompt_tokens)
    episode.generated_tokens += completion.completion_tokens
    ending = ENDINGS.get(completion.finish_reason)
    if ending is not None:
        episode.finish_reason = ending
        if completion.detail:
            log.warning("episode %s ended (%s): %s", episode.rollout_id, ending, completion.detail)
        return
    rules = episode.limits or limits.episode
    _act(episode, completion.text, rules)
    if episode.finish_reason is None and episode.steps >= rules.max_turns:
        episode.finish_reason = "max_turns"


def conversation_counts(messages: list[Message]) -> tuple[int, int, int]:
    """Assistant turns, tool calls and invalid calls (error observations) of a conversation."""
    return (sum(m.role == "assistant" for m in messages),
            sum(len(m.tool_calls) for m in messages if m.role == "assistant"),
            sum(m.role == "tool" and m.content.startswith("error") for m in messages))


def _act(episode: Episode, text: str, limits: EpisodeLimits) -> None:
    """Parse one assistant turn, run its calls, append the observations."""
    parsed = parse_turn(text)
    calls = parsed.calls[:limits.max_calls_per_turn]  # a None bound slices nothing off
    episode.messages.append(Message("assistant", parsed.content, calls))
    for problem in parsed.problems:
        episode.invalid_calls += 1
        episode.messages.append(Message("tool", f"error: {problem}", name="invalid"))
    if len(calls) < len(parsed.calls):
        episode.messages.append(Message("tool", f"error: at most {limits.max_calls_per_turn} tool calls "
                                                "per turn; the rest were not run", name="invalid"))
    if not calls and not parsed.problems:
        message = episode.environment.next_user_message()
        if message is None:
            episode.finish_reason = "no_tool_call"
        else:
            episode.messages.append(message)
            episode.steps = 0
        return
    for call in calls:
        result = episode.environment.execute(call)
        episode.tool_calls += 1
        episode.invalid_calls += not result.ok
        episode.messages.append(Message("tool", _clip(result.output, limits.max_observation_chars),
                                        name=call.name))
        if result.submitted:
            episode.finish_reason = "submitted"
            return


def _clip(text: str, limit: int | None) -> str:
    if limit is None or len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters not shown]"


def _finish(episode: Episode, backend: ChatBackend) -> Trajectory:
    backend.end(episode.rollout_id)
    final_files, diff = episode.environment.close()
    return Trajectory(
        episode.rollout_id, episode.task.task_id, episode.domain_id, episode.pool, episode.policy,
        episode.attempt, episode.seed, episode.messages, episode.turns, episode.tool_calls,
        episode.invalid_calls, episode.prompt_tokens, episode.generated_tokens, episode.finish_reason,
        final_files, diff, seconds=time.perf_counter() - episode.started)
