"""Inspect AI (UK AISI's ``inspect-ai``): Interlock's admitted tasks as an Inspect ``@task``, so
``inspect eval`` runs them on any model Inspect supports.

One sample per admitted task (its input: the task's opening, the public request as the first user
message), the episode's workspace tools offered to the model as Inspect tools, and the agent judge
as the scorer. Each sample (and each epoch of it) plays a fresh episode of its own
(:mod:`interlock.frameworks.episodes`): the solver asks the model for one turn at a time without
letting Inspect run any tool, hands the turn to :meth:`HostedEpisode.reply` (the rollout engine's
parsing, call cap, clipping and turn limit) and makes the episode's conversation the sample's.
The scorer judges the ended episode in the eval's process: value the reward, metadata whether
every mandatory criterion passed, each criterion's verdict, the judge's problem and how the
episode ended. Nothing of the verdict is in ``state.messages``, ``state.store`` or
``state.metadata`` while the sample runs (none of them reaches the model or its tools anyway);
it exists only once the scorer runs.

``inspect eval src/interlock/frameworks/inspect_tasks.py@interlock -T params=params.yaml`` runs a
finished run's ``rft`` pool (docs/exports.md) on the process's :func:`shared_host` of it (``params``
may name a host built in-process, :func:`~interlock.frameworks.episodes.attach`);
:func:`interlock_task` builds the task over a host of one's own.
"""

from __future__ import annotations

import threading
from typing import Any

import anyio
from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageUser,
    GenerateConfig,
    messages_from_openai,
)
from inspect_ai.scorer import Score, Scorer, Target, mean, scorer, stderr
from inspect_ai.solver import Generate, Solver, TaskState, solver
from inspect_ai.tool import ToolDef, ToolParams

from interlock.core.errors import InterlockError
from interlock.frameworks.episodes import EpisodeHost, HostedEpisode, loggable, shared_host
from interlock.rl.environment import TaskPool

#: the task's name in Inspect (``inspect eval <this file>@interlock``)
TASK_NAME = "interlock"


class Episodes:
    """The episodes of one task's samples that are running, by sample (``TaskState.uuid``: one per
    sample and epoch): what the solver opens and the scorer judges, held here rather than in the
    sample's state so that nothing the sample carries leads to a verdict."""

    def __init__(self, host: EpisodeHost) -> None:
        self.host = host
        self._open: dict[str, HostedEpisode] = {}
        self._lock = threading.Lock()

    def open(self, sample: str, task_id: str, seed: int) -> HostedEpisode:
        episode = self.host.open(task_id, seed)
        with self._lock:
            self._open[sample] = episode
        return episode

    def get(self, sample: str) -> HostedEpisode:
        with self._lock:
            episode = self._open.get(sample)
        if episode is None:
            raise InterlockError("the sample played no episode", item=sample, field="episode")
        return episode

    def close(self, sample: str) -> None:
        """Forget the sample's episode and drop its folder (a verdict given stays with it)."""
        with self._lock:
            episode = self._open.pop(sample, None)
        if episode is not None:
            episode.close()

    def __len__(self) -> int:
        with self._lock:
            return len(self._open)


def _refusal() -> Any:
    """A tool body of its own for each tool (Inspect registers a tool by its callable)."""

    async def refuse(**arguments: Any) -> str:
        return "error: the episode runs its tools itself; Inspect runs none"

    return refuse


def tool_defs(specs: tuple[dict, ...] | list[dict]) -> list[ToolDef]:
    """The episode's tools (OpenAI function specs) as Inspect tools: what the model is offered.
    Inspect never executes them (the solver generates with ``tool_calls="none"``); a scaffold that
    did would get an error, never a workspace."""
    defs = []
    for spec in specs:
        function = spec.get("function", spec)
        parameters = ToolParams.model_validate(function.get("parameters") or {})
        for name, parameter in parameters.properties.items():  # Inspect wants each described
            parameter.description = parameter.description or name
        defs.append(ToolDef(_refusal(), name=function["name"], description=function.get("description", ""),
                            parameters=parameters))
    return defs


_OPENING: dict[str, type[ChatMessageSystem] | type[ChatMessageUser]] = {
    "system": ChatMessageSystem, "user": ChatMessageUser}


def samples(pool: TaskPool, *, seed: int = 0) -> list[Sample]:
    """One sample per task of ``pool``: the task's opening as input (the public request its first
    user message, unchanged), its id as the sample's, ``task_id`` and ``seed`` in the metadata."""
    return [Sample(input=[_OPENING[m["role"]](content=m["content"]) for m in TaskPool.prompt(t)],
                   id=t.task_id, metadata={"task_id": t.task_id, "seed": seed})
            for t in pool.tasks]


async def chat_messages(conversation: list[dict], model: str | None = None) -> list[ChatMessage]:
    """An episode's conversation (OpenAI's chat format, as :attr:`HostedEpisode.conversation` gives
    it: the engine's own records) as Inspect's messages, by Inspect's own ``messages_from_openai``
    (its assistant turns tagged with ``model``); each text made loggable first (:func:`loggable`)."""
    return await messages_from_openai(
        [{**m, "content": loggable(m.get("content") or "")} for m in conversation], model)


def assistant_turn(message: ChatMessageAssistant) -> dict:
    """The model's turn in OpenAI's chat format, for :meth:`HostedEpisode.reply`: its text (no
    reasoning parts) and its calls as Inspect read them; a call whose arguments Inspect could not
    read goes over as arguments that are no JSON object, so the engine answers it as the
    malformed call it is."""
    calls = [_call(call.function, call.arguments) if call.parse_error is None
             else _call(call.function, f"<unreadable arguments: {call.parse_error[:200]}>")
             for call in message.tool_calls or ()]
    return {"role": "assistant", "content": message.text, "tool_calls": calls}


def unreadable_turn(error: BaseException) -> dict:
    """A model turn Inspect's provider could not read at all (its ``json.loads`` of a structured
    call's arguments nested deeper than Python's recursion limit raises, where a parse error would
    be caught): for the engine, one call whose arguments are no JSON object, the malformed call
    it is."""
    return {"role": "assistant", "content": "",
            "tool_calls": [_call("", f"<unreadable turn: {type(error).__name__}>")]}


def _call(name: str, arguments: object) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


@solver
def play_episode(episodes: Episodes) -> Solver:
    """Open the sample's episode, then until it ends: one generation (Inspect runs no tool), the
    turn to the episode, the episode's conversation as the sample's messages."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        metadata = state.metadata or {}
        episode = await anyio.to_thread.run_sync(
            episodes.open, state.uuid, metadata.get("task_id"), metadata.get("seed", 0))
        model = str(state.model)
        state.messages = await chat_messages(episode.conversation, model)
        state.tools = tool_defs(episode.tools)
        for _ in range(episodes.host.limits.max_turns + 1):  # the engine's turn limit ends it first
            if episode.done:
                break
            kept, known = len(state.messages), len(episode.conversation)
            try:
                state = await generate(state, tool_calls="none")
            except RecursionError as error:  # the reply, too deep for the provider to read
                turn = unreadable_turn(error)
            else:
                if state.completed:  # one of Inspect's limits: the judge sees the episode so far
                    break
                turn = assistant_turn(state.output.message)
            await anyio.to_thread.run_sync(episode.reply, turn)
            # the turn as the engine read it (its calls' ids), then its results
            state.messages = [*state.messages[:kept],
                              *await chat_messages(episode.conversation[known:], model)]
        return state

    return solve


@scorer(metrics=[mean(), stderr()])
def agent_judge(episodes: Episodes) -> Scorer:
    """The agent judge's verdict on the sample's ended episode (judged once, here)."""

    async def score(state: TaskState, target: Target) -> Score:
        episode = episodes.get(state.uuid)
        verdict = await anyio.to_thread.run_sync(episode.verdict)
        trajectory = episode.trajectory
        ending = trajectory.finish_reason if trajectory is not None else None
        return Score(value=verdict.reward,
                     explanation=f"episode ended: {ending}; "
                                 f"{'passed' if verdict.passed else 'not passed'}"
                                 + (f"; judge: {verdict.problem}" if verdict.problem else ""),
                     metadata={"passed": verdict.passed, "criteria": dict(verdict.criteria),
                               "problem": verdict.problem, "finish_reason": ending,
                               "invalid_calls": trajectory.invalid_calls if trajectory else None,
                               "episode": episode.episode_id})

    return score


def interlock_task(host: EpisodeHost, *, seed: int = 0, task_ids: list[str] | None = None,
                   epochs: int | None = None) -> Task:
    """The Inspect task of ``host``'s pool (or of ``task_ids`` in it): a sample per task, each
    sample's episode opened with ``seed``, sampled under the host's limits (tokens, temperature:
    the run's ``train.rl``) unless the eval says otherwise."""
    pool = host.pool if task_ids is None else TaskPool([host.pool.task(t) for t in task_ids])
    episodes = Episodes(host)

    async def cleanup(state: TaskState) -> None:  # after scoring, or after an error
        await anyio.to_thread.run_sync(episodes.close, state.uuid)

    return Task(dataset=MemoryDataset(samples(pool, seed=seed), name=TASK_NAME),
                solver=play_episode(episodes), scorer=agent_judge(episodes), cleanup=cleanup,
                config=GenerateConfig(max_tokens=host.limits.max_new_tokens,
                                      temperature=host.limits.temperature),
                epochs=epochs, name=TASK_NAME)


@task(name=TASK_NAME)
def interlock(params: str = "params.yaml", pool: str = "rft", seed: int = 0) -> Task:
    """A finished run's admitted ``pool`` (``rft``, ``benchmark``, ``indist``), judged by its
    agent judge under its RL rules: ``-T params=... -T pool=... -T seed=...``."""
    return interlock_task(shared_host(params, pool), seed=int(seed))


__all__ = ["TASK_NAME", "Episodes", "agent_judge", "assistant_turn", "chat_messages", "interlock",
           "interlock_task", "play_episode", "samples", "tool_defs", "unreadable_turn"]
