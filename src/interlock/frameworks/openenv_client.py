"""OpenEnv (Meta / Hugging Face ``openenv-core``): the wire types of Interlock's environment server
(:mod:`interlock.frameworks.openenv_server`), its typed client, and :func:`play`, which drives
episodes with any OpenAI-compatible chat-completions model.

The types live here, not in the server module, so that a trainer's process imports the client
without the judge: the server is the only place a reward is computed. An observation carries the
verdict's fields (``passed``, ``criteria``, ``problem``) only on the step that ends the episode;
before it they are None and the reward 0.

``python -m interlock.frameworks.openenv_client --env http://127.0.0.1:8001 --model-url
http://127.0.0.1:8000/v1 --model oracle --episodes 3`` prints each episode's reward.
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass
from typing import Any

import httpx
from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

from interlock.core.config import declared_server


class InterlockAction(Action):
    """One assistant turn: an OpenAI-format assistant message (``content``, ``tool_calls``) or its
    text. Whatever the episode cannot read as a call is the policy's malformed call."""

    message: dict[str, Any] | str | None = Field(default=None, description="the assistant turn")



class InterlockObservation(Observation):
    """What reset and step return. Reset: the opening ``messages`` and the ``tools``; step: the
    ``assistant`` turn as the episode read it (calls with ids) and the tool ``messages`` answering
    it, both in OpenAI's chat format, ready to append to the model's history."""

    task_id: str | None = None
    messages: list[dict[str, Any]] = Field(default_factory=list)
    assistant: dict[str, Any] | None = None
    tools: list[dict[str, Any]] = Field(default_factory=list)
    error: str | None = Field(default=None, description="why no episode runs (bad reset, no reset)")
    passed: bool | None = Field(default=None, description="the judge's verdict: set at the end only")
    criteria: dict[str, bool] | None = Field(default=None, description="each criterion: at the end only")
    problem: str | None = Field(default=None, description="why the judge could not grade: at the end only")


class InterlockState(State):
    """The episode's bookkeeping (``episode_id``, ``step_count``): nothing of its verdict."""

    task_id: str | None = None
    seed: int | None = None
    done: bool = False


class InterlockEnv(EnvClient[InterlockAction, InterlockObservation, InterlockState]):
    """The environment server's client (OpenEnv's websocket session: one episode per connection at
    a time). ``await env.reset(seed=3, task_id=...)``; ``await env.step(InterlockAction(message=...))``."""

    def _step_payload(self, action: InterlockAction) -> dict[str, Any]:
        return action.model_dump()

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[InterlockObservation]:
        observation = InterlockObservation(**payload.get("observation", {}), reward=payload.get("reward"),
                                           done=bool(payload.get("done", False)))
        return StepResult(observation=observation, reward=observation.reward, done=observation.done)

    def _parse_state(self, payload: dict[str, Any]) -> InterlockState:
        return InterlockState(**payload)


class ChatModel:
    """An OpenAI-compatible ``/chat/completions`` endpoint at ``base_url`` serving ``model``: the
    assistant message it answers a history (and the tools) with, within ``timeout_s`` a request
    (None: conf's ``backbone.server.timeout_s``)."""

    def __init__(self, base_url: str, model: str, *, api_key: str = "none",
                 timeout_s: float | None = None) -> None:
        self.url, self.model = base_url.rstrip("/") + "/chat/completions", model
        self.timeout_s = declared_server().timeout_s if timeout_s is None else timeout_s
        self._client = httpx.AsyncClient(timeout=self.timeout_s, trust_env=False,
                                         headers={"Authorization": f"Bearer {api_key}"})

    async def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        body = {"model": self.model, "messages": messages, **({"tools": tools} if tools else {})}
        answer = await self._client.post(self.url, json=body)
        if answer.status_code != 200:
            raise RuntimeError(f"the model at {self.url} answered {answer.status_code}: {answer.text[:300]}")
        return answer.json()["choices"][0]["message"]

    async def aclose(self) -> None:
        await self._client.aclose()


@dataclass(frozen=True)
class Played:
    """One episode as the client saw it."""

    episode_id: str | None
    task_id: str | None
    reward: float | None
    steps: int
    final: InterlockObservation  # the last observation (the verdict's fields set)
    seen: tuple[InterlockObservation, ...]  # every observation before it, for tests to read


async def play(env: InterlockEnv, model: ChatModel, *, seed: int = 0, task_id: str | None = None,
               max_steps: int = 10_000) -> Played:
    """One episode: reset (``seed``; ``task_id``, else the seed picks the task), then the model's
    turns until the server says done. The history the model sees is the episode's own record."""
    result = await env.reset(seed=seed, **({"task_id": task_id} if task_id is not None else {}))
    seen = [result.observation]
    history, tools = list(result.observation.messages), result.observation.tools
    steps = 0
    while not result.done and steps < max_steps:
        message = await model(history, tools)
        result = await env.step(InterlockAction(message=message))
        steps += 1
        history += ([result.observation.assistant] if result.observation.assistant else [])
        history += result.observation.messages
        seen.append(result.observation)
    state = await env.state()
    return Played(state.episode_id, state.task_id, result.reward, steps, result.observation, tuple(seen[:-1]))


async def play_many(env_url: str, model_url: str, model: str, episodes: int, *, seed: int = 0,
                    task_id: str | None = None, timeout_s: float | None = None) -> list[Played]:
    """``episodes`` episodes one after another, episode ``i`` with seed ``seed + i``; each answer
    awaited ``timeout_s`` at most (:class:`ChatModel`'s default)."""
    chat, played = ChatModel(model_url, model, timeout_s=timeout_s), []
    try:
        for index in range(episodes):
            async with InterlockEnv(base_url=env_url, message_timeout_s=chat.timeout_s) as env:
                played.append(await play(env, chat, seed=seed + index, task_id=task_id))
    finally:
        await chat.aclose()
    return played


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m interlock.frameworks.openenv_client",
        description="Play episodes of an Interlock OpenEnv server with an OpenAI-compatible model; "
                    "print each episode's reward (the server's judge's).")
    parser.add_argument("--env", default="http://127.0.0.1:8001", help="the environment server")
    parser.add_argument("--model-url", default="http://127.0.0.1:8000/v1", help="the model's /v1 address")
    parser.add_argument("--model", required=True, help="the model name the endpoint serves")
    parser.add_argument("--episodes", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0, help="episode i resets with seed + i")
    parser.add_argument("--task", default=None, help="a task id (default: the seed picks one)")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds to wait for one answer (default: conf's backbone.server.timeout_s)")
    args = parser.parse_args(argv)
    played = asyncio.run(play_many(args.env, args.model_url, args.model, args.episodes, seed=args.seed,
                                   task_id=args.task, timeout_s=args.timeout))
    for index, episode in enumerate(played):
        problem = episode.final.error or episode.final.problem
        print(f"episode {index}: task {episode.task_id} ({episode.episode_id}), {episode.steps} steps, "
              f"reward {episode.reward}" + (f" ({problem})" if problem else ""), flush=True)


if __name__ == "__main__":
    main()
