"""verifiers (PrimeIntellect's ``verifiers`` 0.4, its ``verifiers.v1`` stack): Interlock's admitted
tasks as a taskset, the workspace episode as the agent's harness, the agent judge as the reward.

verifiers 0.4 composes an environment from plugins it imports by id: a :class:`InterlockTaskset`
(the run's admitted tasks), the :class:`InterlockHarness` that plays one (verifiers' own rollout
hands it the rollout's interception endpoint; every model turn goes through it, so the trace is
verifiers' record) and the :class:`InterlockEnv` that seats it (one agent, on the local
``subprocess`` runtime: the episode's workspace is a folder of this process, not a sandbox box).
vf-eval finds the three by the id :data:`ENV_ID` through the top-level module
``interlock_verifiers`` (verifiers imports a plugin id as a top-level module and cannot import a
dotted one); :func:`load_environment` builds the same environment in Python.

Each rollout opens a fresh :class:`~interlock.frameworks.episodes.HostedEpisode` (its own
workspace folder) in :meth:`InterlockTask.setup`; the harness sends the model the episode's
conversation (the rollout engine's record, with its tools) and hands each reply to
:meth:`~interlock.frameworks.episodes.HostedEpisode.reply` until the episode ends. Where the engine
kept a turn as the model sent it (its text as is, its structured calls one for one) the history
carries the model's own call ids, so verifiers records the episode as one branch; a turn the engine
recorded otherwise (markup read out of the text, text trimmed, calls cut or added, ids missing or
repeated) is shown as the engine recorded it, with the engine's ids, and verifiers starts a new
branch at the next turn. Scoring then
judges the episode in this process: the reward is the verdict's, the metrics its ``passed``, the
number of criteria passed and each criterion's result. The verdict reaches no message, tool or file
of the episode.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import verifiers.v1 as vf
from verifiers.v1.errors import HarnessError, TaskError
from verifiers.v1.runtimes import ProgramResult

from interlock.frameworks.episodes import EpisodeHost, HostedEpisode, Verdict, attach, shared_host
from interlock.rl.environment import TaskPool

#: the id vf-eval knows the environment by (the module ``interlock_verifiers``); also the harness's
ENV_ID = "interlock-verifiers"

#: trace id -> the episode its rollout plays (opened in setup, dropped in the harness's cleanup);
#: only this process's event loop touches it
_LIVE: dict[str, HostedEpisode] = {}


class InterlockTasksetConfig(vf.TasksetConfig):
    """``--env.taskset.*``: which run's admitted tasks."""

    params: str = "params.yaml"
    """The finished run's params.yaml (or a name :func:`~interlock.frameworks.episodes.attach` gave)."""
    pool: str = "rft"
    """The admitted pool: rft, benchmark or indist."""
    seed: int = 0
    """Every episode's seed: its workspace and sampling seeds."""


class InterlockTaskData(vf.TaskData):
    """An admitted task as verifiers records it on each trace: which run and task, which seed."""

    task_id: str
    params: str
    pool: str
    seed: int = 0


class InterlockTask(vf.Task[InterlockTaskData, vf.State, vf.TaskConfig]):
    """One admitted task: a fresh episode per rollout (:meth:`setup`); its verdict as reward and
    metrics, judged once the harness has played it."""

    @property
    def key(self) -> str:
        return f"{self.data.pool}/{self.data.task_id}"  # the data names a local path: not the key

    async def setup(self, trace: vf.Trace) -> None:
        harness = trace.agent.config.harness if trace.agent is not None else None
        if harness is None or harness.id != ENV_ID:
            raise TaskError(f"an Interlock episode is played by the {ENV_ID!r} harness, not "
                            f"{getattr(harness, 'id', None)!r}: its tools are the episode's own")
        host = shared_host(self.data.params, self.data.pool)
        episode = await asyncio.to_thread(host.open, self.data.task_id, self.data.seed)
        _LIVE[trace.id] = episode
        trace.info["interlock"] = {"task_id": episode.task_id, "episode_id": episode.episode_id}

    async def _verdict(self, trace: vf.Trace) -> Verdict:
        episode = _LIVE.get(trace.id)
        if episode is None:  # a re-scoring elsewhere: the episode was judged where it was played
            raise TaskError("no live Interlock episode for this trace: an episode is judged once, "
                            "in the process that played it")
        verdict = await asyncio.to_thread(episode.verdict)
        ending = episode.trajectory.finish_reason if episode.trajectory is not None else None
        trace.info["interlock"] = {**trace.info.get("interlock", {}), "finish_reason": ending,
                                   "problem": verdict.problem}
        return verdict

    @vf.metric
    async def judged(self, trace: vf.Trace) -> dict[str, float]:
        """``passed`` (every mandatory criterion: what the ``accept`` stage keeps), how many
        criteria passed, and each criterion's result (``criterion/<id>``)."""
        verdict = await self._verdict(trace)
        return {"passed": float(verdict.passed),
                "criteria_passed": float(sum(verdict.criteria.values())),
                **{f"criterion/{name}": float(ok) for name, ok in sorted(verdict.criteria.items())}}

    @vf.reward
    async def judge(self, trace: vf.Trace) -> float:
        """The agent judge's reward of the episode (its replay verdict, under the run's rules)."""
        return (await self._verdict(trace)).reward


class InterlockTaskset(vf.Taskset[InterlockTask, InterlockTasksetConfig]):
    """The run's admitted ``pool``, one task per admitted task, in the pool's order."""

    def __init__(self, config: InterlockTasksetConfig) -> None:
        super().__init__(config)
        self.host = shared_host(config.params, config.pool)

    def load(self) -> list[InterlockTask]:
        tasks = []
        for context in self.host.pool.tasks:
            opening = {m["role"]: m["content"] for m in TaskPool.prompt(context)}
            data = InterlockTaskData(id=context.task_id, name=context.task_id, task_id=context.task_id,
                                     params=self.config.params, pool=self.config.pool,
                                     seed=self.config.seed, prompt=opening.get("user"),
                                     system_prompt=opening.get("system"))
            tasks.append(InterlockTask(data, self.config.task))
        return tasks


class InterlockHarnessConfig(vf.HarnessConfig):
    id: str = ENV_ID


class InterlockHarness(vf.Harness[InterlockHarnessConfig]):
    """The episode's own loop, in process: send the model the episode's conversation (with the
    model's own call ids where the engine kept its calls as sent) and tools through the rollout's
    interception endpoint, hand the reply to the episode (one turn, one engine step), until the
    episode ends (no call, or out of turns) or verifiers stops the rollout."""

    APPENDS_SYSTEM_PROMPT = True  # the opening's system message is the episode's, sent as is
    EXECUTES_CODE = False  # the tools act on the workspace folder, through the rollout engine
    NEEDS_CONTAINER = False

    async def launch(self, ctx: vf.ModelContext, trace: vf.Trace, runtime: vf.Runtime, endpoint: str,
                     secret: str, mcp_urls: dict[str, str], data: vf.TaskData,
                     tool_interception_url: str | None = None) -> ProgramResult:
        episode = _LIVE.get(trace.id)
        if episode is None:
            raise HarnessError("no Interlock episode was opened for this rollout (InterlockTask.setup)")
        limits, seed, turns = episode.host.limits, getattr(data, "seed", 0), 0
        own: dict[str, str] = {}  # the engine's call id -> the model's, where it kept the model's calls
        async with httpx.AsyncClient(base_url=endpoint.rstrip("/"), timeout=None,
                                     headers={"Authorization": f"Bearer {secret}"}) as client:
            while not episode.done:
                history = _with_ids(episode.conversation, own)
                body = {"model": ctx.model, "messages": history, "tools": list(episode.tools),
                        "max_tokens": limits.max_new_tokens, "temperature": limits.temperature,
                        "seed": seed + turns}  # as the rollout engine samples: the episode's seed + turn
                response = await client.post("/chat/completions", json=body)
                if response.status_code != 200:
                    if trace.stop_condition is not None:  # verifiers' own limits or stops ended it
                        break
                    raise HarnessError(f"model call failed ({response.status_code}): {response.text[:500]}")
                message = _message_of(response)
                await asyncio.to_thread(episode.reply, message)
                recorded = episode.conversation
                if len(recorded) > len(history):
                    own.update(_own_ids(message, recorded[len(history)], history))
                turns += 1
        return ProgramResult(exit_code=0, stdout="", stderr="")

    async def cleanup(self, trace: vf.Trace, runtime: vf.Runtime) -> None:
        episode = _LIVE.pop(trace.id, None)
        if episode is not None:
            await asyncio.to_thread(episode.close)


def _message_of(response: httpx.Response) -> object:
    """The reply's assistant message; a reply without one is the model's empty turn."""
    try:
        return response.json()["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def _arguments(arguments: object) -> str | None:
    """Call arguments as JSON text, canonical (verifiers compares calls so); None: no JSON object."""
    try:
        value = json.loads(arguments) if isinstance(arguments, str) else None
    except (ValueError, RecursionError):
        return None
    return json.dumps(value, sort_keys=True, separators=(",", ":")) if isinstance(value, dict) else None


def _own_ids(message: object, recorded: dict, history: list[dict]) -> dict[str, str]:
    """The engine's ids of the turn it ``recorded`` -> the model's own, where the engine kept the
    model's ``message`` as sent: its text (no markup taken out of it, nothing added) and its
    structured calls one for one (names, arguments), each with an id of its own that the history
    does not already hold. Anything else keeps the engine's ids: {}."""
    if not isinstance(message, dict) or recorded.get("role") != "assistant":
        return {}
    calls, kept = message.get("tool_calls"), recorded.get("tool_calls") or []
    content = message.get("content")
    if (not isinstance(calls, list) or not calls or len(calls) != len(kept)
            or not isinstance(content, str | None) or (content or "") != (recorded.get("content") or "")):
        return {}
    taken = {call.get("id") for m in history for call in m.get("tool_calls") or ()}
    taken |= {m.get("tool_call_id") for m in history if m.get("role") == "tool"}
    ids = {}
    for call, ours in zip(calls, kept, strict=True):
        function = call.get("function") if isinstance(call, dict) else None
        identifier = call.get("id") if isinstance(call, dict) else None
        if (not isinstance(function, dict) or call.get("type", "function") != "function"
                or function.get("name") != ours["function"]["name"]
                or _arguments(function.get("arguments")) != _arguments(ours["function"]["arguments"])
                or not isinstance(identifier, str) or not identifier or identifier in taken
                or identifier in ids.values()):
            return {}
        ids[ours["id"]] = identifier
    return ids


def _with_ids(conversation: list[dict], own: dict[str, str]) -> list[dict]:
    """The engine's record with the model's own call ids where :func:`_own_ids` found them (each
    tool result with its call's)."""
    if not own:
        return conversation
    renamed = []
    for message in conversation:
        if message.get("tool_calls"):
            message = {**message, "tool_calls": [{**call, "id": own.get(call["id"], call["id"])}
                                                  for call in message["tool_calls"]]}
        elif message.get("role") == "tool" and message.get("tool_call_id") in own:
            message = {**message, "tool_call_id": own[message["tool_call_id"]]}
        renamed.append(message)
    return renamed


class InterlockEnvConfig(vf.EnvConfig):
    """The single ``agent`` seat, on the local runtime (the episode's folder is in this process)."""

    agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())


class InterlockEnv(vf.Env[InterlockEnvConfig]):
    """One agent plays each task (verifiers' single-agent case, with the local runtime)."""

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        await agents.agent.run(task)


def load_environment(params: str | Path = "params.yaml", pool: str = "rft", *, seed: int = 0,
                     host: EpisodeHost | None = None, **env: Any) -> InterlockEnv:
    """The environment of a finished run's admitted ``pool`` (or of ``host``, built in this
    process), through verifiers' own loader; ``env``: more of its config (``agent``, ``retries``)."""
    taskset = InterlockTasksetConfig(id=ENV_ID, params=attach(host) if host is not None else str(params),
                                     pool=pool, seed=seed)
    return vf.load_environment(vf.resolve_env_config({**env, "taskset": taskset.model_dump()}))


__all__ = ["ENV_ID", "InterlockEnv", "InterlockEnvConfig", "InterlockHarness", "InterlockHarnessConfig",
           "InterlockTask", "InterlockTaskData", "InterlockTaskset", "InterlockTasksetConfig",
           "load_environment"]
