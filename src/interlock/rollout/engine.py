"""The rollout engine: many episodes at once, under one of two schedules.

- ``lockstep`` (local models, which compute a batch at once): the live episodes step together,
  one batched generation per turn;
- ``async`` (servers, a :class:`~interlock.core.backend.ConcurrentBackend`): each episode's next
  request goes out as soon as its own reply came and its tools ran, at most
  ``max_in_flight`` at a time, so no episode waits for the slowest reply of a batch; the tools
  run on the engine's thread while other requests wait.

Both share everything an episode does (:func:`start_episode`, :func:`_request`,
:func:`advance_episode`, :func:`finish_episode`: public, so a trainer that owns the generation
loop drives an episode turn by turn with them) and differ only in when requests go out, so for a
deterministic backend they write the same trajectories. Each episode acts in its own
:class:`Environment`: by default a fresh copy of its task's workspace on disk with the file tools
(:class:`WorkspaceEnvironment`); an external benchmark brings its own (BFCL's simulated APIs),
with its own :class:`EpisodeLimits` (steps, calls a turn, clipping). Every assistant turn may carry
several tool calls; malformed calls, unknown tools and bad arguments come back as error
observations; a turn without calls ends the episode, or hands the agent the environment's next
user message; every episode records why it ended.

An episode can be played again from its record alone (:func:`reenact`): an assistant message
keeps, as its text, all the model wrote but the calls that ran, so the engine's answer to every
turn (:func:`respond`) is given again by a fresh environment. That is how the agent judge checks
that a record is what its environment produced (:func:`record_problem`), how ``accept`` writes
what may be trained on (:func:`reenacted_trajectory`), and how a correction continues a prefix.
"""

from __future__ import annotations

import dataclasses
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
    SampledTokens,
)
from interlock.core.chat import Message, ParsedTurn, ToolCall, ToolResult, parse_turn, render_call
from interlock.core.errors import InterlockError
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

    @classmethod
    def of(cls, rollouts) -> EpisodeLimits:
        """The workspace tasks' rules as the config sets them (``scale.rollouts``): every stage that
        rolls out or judges a workspace episode plays it by these."""
        return RolloutLimits(max_turns=rollouts.max_turns,
                             max_observation_chars=rollouts.max_observation_chars).episode


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


def workspace_opening(pack: TaskPack) -> list[Message]:
    """What a workspace episode opens with: the system prompt and the task's public request."""
    return [Message("system", SYSTEM_PROMPT), Message("user", pack.request)]


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

    def opening(self) -> list[Message]:
        return workspace_opening(self.pack)

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
    #: per assistant message, what its backend sampled (None for the prefix's turns: another record's)
    sampled: list[SampledTokens | None] = field(default_factory=list)
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
            live.append(start_episode(episode, backend, workdir, limits))
        if not live:
            return
        for episode, completion in zip(live, backend.complete([_request(e, limits) for e in live]),
                                       strict=True):
            advance_episode(episode, completion, limits)
        for episode in [e for e in live if e.finish_reason is not None]:
            live.remove(episode)
            yield finish_episode(episode, backend)


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
                send(start_episode(episode, backend, workdir, limits))
            if not in_flight:
                return
            done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            for future in [f for f in in_flight if f in done]:  # in the order they were sent
                episode = in_flight.pop(future)
                advance_episode(episode, future.result(), limits)
                if episode.finish_reason is None:
                    send(episode)
                else:
                    yield finish_episode(episode, backend)
    finally:  # a caller that stops early does not wait for the requests still out
        pool.shutdown(wait=False, cancel_futures=True)


def start_episode(episode: Episode, backend: ChatBackend, workdir: Path, limits: RolloutLimits) -> Episode:
    episode.started = time.perf_counter()
    episode.environment = episode.open_environment(episode, workdir / episode.rollout_id)
    if episode.prefix:  # its turns answered again by this environment: what the record goes on from
        enacted = reenact(episode.environment, episode.prefix, episode.limits or limits.episode)
        if enacted.finish_reason is not None:
            raise InterlockError(f"the prefix to continue has already ended ({enacted.finish_reason})",
                                 item=episode.rollout_id, field="prefix")
        episode.messages = enacted.messages
        episode.sampled = [None] * sum(m.role == "assistant" for m in enacted.messages)
        episode.turns, episode.steps = enacted.turns, enacted.steps
        episode.tool_calls, episode.invalid_calls = enacted.tool_calls, enacted.invalid_calls
    else:
        episode.messages = episode.environment.opening()
    backend.begin(episode.rollout_id, episode.task)
    return episode


def _request(episode: Episode, limits: RolloutLimits) -> ChatRequest:
    """The episode's next generation: its conversation so far, sampled with a seed of its own turn."""
    return ChatRequest(episode.rollout_id, tuple(episode.messages), episode.environment.tools,
                       limits.max_new_tokens, limits.temperature, episode.seed + episode.turns)


def advance_episode(episode: Episode, completion: Completion, limits: RolloutLimits) -> None:
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
    episode.sampled.append(completion.sampled)
    if episode.finish_reason is None and episode.steps >= rules.max_turns:
        episode.finish_reason = "max_turns"


def _act(episode: Episode, text: str, limits: EpisodeLimits) -> None:
    """Parse one assistant turn, run its calls, record it (as far as it ran) and the observations."""
    response = respond(episode.environment, assistant_message(text, limits.max_calls_per_turn), limits)
    episode.messages += [response.turn, *response.messages]
    episode.tool_calls += response.tool_calls
    episode.invalid_calls += response.invalid_calls
    if response.user:
        episode.steps = 0
    episode.finish_reason = response.finish_reason


# ----------------------------------------------------------------------------- one turn, and again

def assistant_message(text: str, max_calls: int | None) -> Message:
    """An assistant turn as the conversation records it: the calls the engine runs (the first
    ``max_calls``), and as its text everything else the model wrote, a malformed call's markup and
    the calls past the cap included, so that the engine's answer to the turn can be given again
    from the record alone (:func:`respond`)."""
    parsed = parse_turn(text)
    run = parsed.calls[:max_calls]
    return Message("assistant", parsed.remainder(len(run)), run)


def ended_turn(turn: Message, ran: int) -> Message:
    """A turn whose ``ran``-th call ended the episode, as the record keeps it: only the calls that
    ran (those after it, and any past the cap, never ran, so nothing may learn them); the rest of
    its text as the model wrote it."""
    return Message("assistant", parse_turn(turn.content).remainder(), turn.tool_calls[:ran])


@dataclass(frozen=True)
class Response:
    """What the engine appends after one assistant turn, and what the turn did."""

    turn: Message  # the turn as the record keeps it (:func:`ended_turn` where it ended the episode)
    messages: tuple[Message, ...]
    tool_calls: int  # calls run
    invalid_calls: int  # malformed calls and calls that came back as errors
    finish_reason: FinishReason | None  # ``submitted`` or ``no_tool_call`` where the turn ended the episode
    user: bool = False  # the environment answered with its next user message
    unrun: int = 0  # calls the turn held that never ran, the episode having ended before them


def _refusals(left: ParsedTurn, limits: EpisodeLimits) -> list[Message]:
    """The engine's errors for what a turn's text holds besides the calls it runs (``left``: that
    text parsed): one per malformed call, and one for the calls past the cap."""
    messages = [Message("tool", f"error: {problem}", name="invalid") for problem in left.problems]
    if left.calls:
        messages.append(Message("tool", f"error: at most {limits.max_calls_per_turn} tool calls per turn; "
                                        "the rest were not run", name="invalid"))
    return messages


def respond(environment: Environment, turn: Message, limits: EpisodeLimits,
            on_call: Callable[[ToolCall, ToolResult], None] | None = None) -> Response:
    """The engine's answer to a recorded assistant turn: an error for each malformed call and for
    calls past the cap (both read from the turn's text), then each call run in the environment
    up to the one that submits (``on_call`` sees each call and its result), or, for a turn without
    calls, the environment's next user message or the end. A turn that submits before all its
    calls ran is answered, and recorded, as :func:`ended_turn` keeps it."""
    left = parse_turn(turn.content)
    refusals = _refusals(left, limits)
    if not turn.tool_calls and not refusals:
        message = environment.next_user_message()
        if message is None:
            return Response(turn, (), 0, 0, "no_tool_call")
        return Response(turn, (message,), 0, 0, None, user=True)
    results: list[Message] = []
    invalid = len(left.problems)
    for call in turn.tool_calls:
        result = environment.execute(call)
        if on_call is not None:
            on_call(call, result)
        invalid += not result.ok
        results.append(Message("tool", _clip(result.output, limits.max_observation_chars), name=call.name))
        if result.submitted:
            unrun = len(turn.tool_calls) - len(results) + len(left.calls)
            if unrun:
                turn = ended_turn(turn, len(results))
                refusals = _refusals(parse_turn(turn.content), limits)
            return Response(turn, (*refusals, *results), len(results), invalid, "submitted", unrun=unrun)
    return Response(turn, (*refusals, *results), len(results), invalid, None)


@dataclass(frozen=True)
class Reenactment:
    """A conversation as the engine records it, given only its assistant turns: the opening and
    every observation come from the environment, none from the record."""

    messages: list[Message]
    finish_reason: FinishReason | None  # how the turns end the episode; None: they had not ended it
    turns: int
    steps: int  # assistant turns since the last user message
    tool_calls: int
    invalid_calls: int
    unplayed: int  # recorded assistant turns after the episode had ended
    unrun: int = 0  # calls of the turn that ended the episode recorded after the one that ended it
    ended_at: int | None = None  # where that turn is among the messages (None: it held none)

    @property
    def counted_turns(self) -> int:
        """The turns a trajectory records: an episode its backend ended (the turns had not) also
        counts the turn that produced nothing."""
        return self.turns + (self.finish_reason is None)


def reenact(environment: Environment, recorded: Iterable[Message], limits: EpisodeLimits,
            on_call: Callable[[ToolCall, ToolResult], None] | None = None) -> Reenactment:
    """Play a record's assistant turns again in a fresh ``environment`` under the episode's rules:
    what the policy wrote is all that is taken from the record."""
    messages = list(environment.opening())
    turns = steps = calls = invalid = unplayed = unrun = 0
    finish: FinishReason | None = None
    ended_at: int | None = None
    for turn in (m for m in recorded if m.role == "assistant"):
        if finish is not None:
            unplayed += 1
            continue
        turns += 1
        steps += 1
        response = respond(environment, turn, limits, on_call)
        if response.unrun:
            unrun, ended_at = response.unrun, len(messages)
        messages += [response.turn, *response.messages]
        calls += response.tool_calls
        invalid += response.invalid_calls
        steps = 0 if response.user else steps
        finish = response.finish_reason or ("max_turns" if steps >= limits.max_turns else None)
    return Reenactment(messages, finish, turns, steps, calls, invalid, unplayed, unrun, ended_at)


def record_problem(trajectory: Trajectory, enacted: Reenactment, limits: EpisodeLimits) -> str | None:
    """Where a recorded episode is not what the engine records for its own assistant turns (None:
    it is): a message the environment did not give (a system prompt or request swapped, a tool
    result edited, added or removed, a user turn inserted), an assistant turn the engine never
    records, turns after the end, or an ending or count the turns do not make."""
    for index, message in enumerate(trajectory.messages):
        if message.role == "assistant" and (problem := _turn_problem(message, limits)):
            return f"message {index} (assistant) is not a turn the engine records: {problem}"
    if enacted.unrun:
        return (f"message {enacted.ended_at} (assistant) holds {enacted.unrun} call(s) after the one that "
                "ended the episode, which never ran")
    recorded, expected = trajectory.messages, enacted.messages
    for index in range(max(len(recorded), len(expected))):
        mine = recorded[index] if index < len(recorded) else None
        theirs = expected[index] if index < len(expected) else None
        if mine != theirs:
            return _difference(index, mine, theirs)
    ending = trajectory.finish_reason
    if enacted.finish_reason is not None and ending != enacted.finish_reason:
        return f"it is recorded as ending by {ending!r}, but its turns end it by {enacted.finish_reason!r}"
    if enacted.finish_reason is None and ending not in ENDINGS.values():
        return f"it is recorded as ending by {ending!r}, but its turns had not ended it"
    counts = {"turns": (trajectory.turns, enacted.counted_turns),
              "tool_calls": (trajectory.tool_calls, enacted.tool_calls),
              "invalid_calls": (trajectory.invalid_calls, enacted.invalid_calls)}
    wrong = [f"{name} {mine} (its turns make {theirs})" for name, (mine, theirs) in counts.items()
             if mine != theirs]
    return f"it records {', '.join(wrong)}" if wrong else None


def reenacted_trajectory(trajectory: Trajectory, environment: Environment,
                         limits: EpisodeLimits) -> Trajectory:
    """The trajectory as the environment makes it from the record's assistant turns alone (every
    other message, the counts and the final state replayed; the environment is released): what
    may be trained on, whatever else the record held."""
    enacted = reenact(environment, trajectory.messages, limits)
    final_files, diff = environment.close()
    played = sum(m.role == "assistant" for m in enacted.messages)
    return dataclasses.replace(
        trajectory, messages=enacted.messages, sampled=trajectory.sampled[:played],
        turns=enacted.counted_turns, tool_calls=enacted.tool_calls, invalid_calls=enacted.invalid_calls,
        finish_reason=enacted.finish_reason or trajectory.finish_reason, final_files=final_files, diff=diff)


def _turn_problem(turn: Message, limits: EpisodeLimits) -> str | None:
    """Why a recorded assistant turn is not one :func:`assistant_message` makes, or None."""
    cap = limits.max_calls_per_turn
    if turn.name is not None or turn.content != turn.content.strip():
        return "its name or the space around its text"
    if cap is not None and len(turn.tool_calls) > cap:
        return f"{len(turn.tool_calls)} calls, where a turn runs at most {cap}"
    for number, call in enumerate(turn.tool_calls, start=1):
        if parse_turn(render_call(call)).calls != (call,):
            return f"call {number} is not one the tool-call protocol reads back"
    if parse_turn(turn.content).calls and len(turn.tool_calls) != cap:
        return "its text holds a call the engine would have run"
    return None


def _difference(index: int, recorded: Message | None, expected: Message | None) -> str:
    if expected is None:
        return f"message {index} ({_label(recorded)}) comes after the episode ended"
    if recorded is None:
        return f"message {index} ({_label(expected)}) is missing from the record"
    if recorded.role != expected.role or recorded.name != expected.name:
        return f"message {index} is {_label(recorded)} where the episode has {_label(expected)}"
    source = {"system": "the rollouts' system prompt", "user": "what the task asks",
              "tool": f"what {expected.name} returns on replay"}.get(expected.role, "the recorded turn")
    return f"message {index} ({_label(expected)}) is not {source}"


def _label(message: Message) -> str:
    return f"{message.role}, {message.name}" if message.role == "tool" else message.role


def _clip(text: str, limit: int | None) -> str:
    if limit is None or len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters not shown]"


def finish_episode(episode: Episode, backend: ChatBackend) -> Trajectory:
    backend.end(episode.rollout_id)
    final_files, diff = episode.environment.close()
    return Trajectory(
        episode.rollout_id, episode.task.task_id, episode.domain_id, episode.pool, episode.policy,
        episode.attempt, episode.seed, episode.messages, episode.turns, episode.tool_calls,
        episode.invalid_calls, episode.prompt_tokens, episode.generated_tokens, episode.finish_reason,
        final_files, diff, episode.sampled if any(episode.sampled) else [],
        seconds=time.perf_counter() - episode.started)
