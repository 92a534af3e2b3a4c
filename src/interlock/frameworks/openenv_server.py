"""OpenEnv (Meta / Hugging Face ``openenv-core``): Interlock's admitted tasks as an environment
server, its episodes judged inside the server process.

OpenEnv's app (``create_fastapi_app``) makes one :class:`InterlockEnvironment` per websocket
session (``/ws``: reset, step, state, close), each opening its episodes on the run's shared
:class:`~interlock.frameworks.episodes.EpisodeHost` in a workspace of its own, each session's
calls on a thread of its own. Its stateless HTTP routes (``/reset``, ``/step``, ``/state``) make a
fresh environment per request and close it after: a ``/step`` there has no episode and answers
so. ``/mcp`` answers that the environment has no MCP tools; ``/schema``, ``/metadata``,
``/health`` describe. No route grades on demand: the reward is the judge's verdict of an episode
that has ended, given once on the step that ends it (0 before), computed here from the episode's
record, which the policy only reaches through the workspace tools.

``python -m interlock.frameworks.openenv_server --params params.yaml --pool rft --port 8001``
serves a finished run's pool on 127.0.0.1 (:mod:`interlock.frameworks.openenv_client` plays it).
"""

from __future__ import annotations

import argparse
import functools
import threading
import time
from typing import Any

import uvicorn
from fastapi import FastAPI
from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata

from interlock.core.errors import InterlockError
from interlock.frameworks.episodes import EpisodeHost, HostedEpisode, add_run_arguments, host_of_run, loggable
from interlock.frameworks.openenv_client import InterlockAction, InterlockObservation, InterlockState

#: websocket sessions one server hosts at once unless told otherwise (each an episode in flight)
MAX_SESSIONS = 64


class InterlockEnvironment(Environment[InterlockAction, InterlockObservation, InterlockState]):
    """One session's environment: each reset opens a fresh episode of ``host`` (closing the one
    before), each step hands one assistant turn to :meth:`HostedEpisode.reply`. Bad requests (an
    unknown task, a seed that is no integer, a step without an episode) are answered by an
    observation with ``error`` and ``done``, never an exception: over HTTP an exception is a 500."""

    # each episode has its own workspace folder; the host judges one episode at a time
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, host: EpisodeHost) -> None:
        super().__init__()
        self.host = host
        self.episode: HostedEpisode | None = None
        self._state = InterlockState()

    def reset(self, seed: int | None = None, episode_id: str | None = None, task_id: Any = None,
              **kwargs: Any) -> InterlockObservation:
        """A fresh episode of ``task_id``, else of the task ``seed`` picks (the pool's tasks in
        order, ``seed`` modulo their number), its workspace laid down from ``seed`` (0 if None)."""
        self.close()
        self.episode = None
        self._state = InterlockState(episode_id=episode_id if isinstance(episode_id, str) else None)
        seed = 0 if seed is None else seed
        if kwargs:
            return self._refused(f"reset takes seed, episode_id and task_id, not {', '.join(sorted(kwargs))}")
        if task_id is None and (tasks := self.host.task_ids()):  # a seed that is no integer: the host says so
            task_id = tasks[seed % len(tasks) if isinstance(seed, int) else 0]
        if not isinstance(task_id, str):
            return self._refused(f"a task_id is a string, not {type(task_id).__name__}")
        try:
            self.episode = self.host.open(task_id, seed)
        except InterlockError as exc:
            return self._refused(str(exc))
        self._state = InterlockState(episode_id=self._state.episode_id or self.episode.episode_id,
                                     task_id=task_id, seed=seed)
        return InterlockObservation(task_id=task_id, messages=self.episode.conversation,
                                    tools=list(self.episode.tools), reward=0.0)

    def step(self, action: InterlockAction, timeout_s: float | None = None,
             **kwargs: Any) -> InterlockObservation:
        """The tool messages answering ``action``'s turn; on the turn that ends the episode, its
        verdict (the same one on any step after)."""
        episode = self.episode
        if episode is None:
            return self._refused("no episode: reset first (the HTTP /step route opens a fresh environment "
                                 "per request; play an episode over the /ws session)")
        answers, recorded = [], []
        if not episode.done:
            before = len(episode.conversation)
            answers = episode.reply(action.message)
            recorded = episode.conversation[before:before + 1]
            self._state.step_count += 1
        turn = loggable({"task_id": episode.task_id, "messages": answers,
                         "assistant": recorded[0] if recorded else None})
        if not episode.done:
            return InterlockObservation(**turn, reward=0.0)
        verdict = episode.verdict()
        self._state.done = True
        return InterlockObservation(**turn, done=True, reward=verdict.reward, passed=verdict.passed,
                                    criteria=dict(verdict.criteria), problem=verdict.problem)

    @property
    def state(self) -> InterlockState:
        return self._state.model_copy()

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name="interlock", version="1.0.0",
                                   description=f"{len(self.host.task_ids())} admitted Interlock tasks: "
                                               "workspace tools, a judged reward at the end")

    def close(self) -> None:
        if self.episode is not None:
            self.episode.close()

    def _refused(self, reason: str) -> InterlockObservation:
        self._state.done = True
        return InterlockObservation(error=reason, done=True, reward=None)


def create_interlock_app(host: EpisodeHost, *, max_sessions: int = MAX_SESSIONS,
                         environment: type[InterlockEnvironment] = InterlockEnvironment) -> FastAPI:
    """OpenEnv's FastAPI app over ``host``'s tasks, up to ``max_sessions`` websocket sessions at
    once. ``create_fastapi_app``, not ``create_app``: the latter mounts a Gradio UI when the
    environment says ``ENABLE_WEB_INTERFACE``, and the routes served should not depend on that."""
    return create_fastapi_app(functools.partial(environment, host), InterlockAction, InterlockObservation,
                              max_concurrent_envs=max_sessions)


class EnvServer:
    """``app`` served by uvicorn on 127.0.0.1 (``port``, or one the system picks) in a thread of this
    process; a context manager, ``url`` its address."""

    def __init__(self, app: FastAPI, port: int = 0) -> None:
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                                     ws_max_size=64 * 2**20))
        self._thread = threading.Thread(target=self._server.run, daemon=True, name="openenv-server")
        self.url = ""

    def __enter__(self) -> EnvServer:
        self._thread.start()
        deadline = time.monotonic() + 60
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise InterlockError("the OpenEnv server did not start", field="port")
            time.sleep(0.02)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)


def serve(params_file: str, pool: str = "rft", port: int = 8001, max_sessions: int = MAX_SESSIONS) -> None:
    """Serve a finished run's admitted ``pool`` until interrupted."""
    with host_of_run(params_file, pool) as host:
        app = create_interlock_app(host, max_sessions=max_sessions)
        print(f"interlock OpenEnv server: {len(host.task_ids())} {pool} tasks at http://127.0.0.1:{port} "
              f"(up to {max_sessions} sessions)", flush=True)
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", ws_max_size=64 * 2**20)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m interlock.frameworks.openenv_server",
        description="Serve a finished run's admitted tasks as an OpenEnv environment on 127.0.0.1.")
    add_run_arguments(parser)
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--max-sessions", type=int, default=MAX_SESSIONS, help="websocket sessions at once")
    args = parser.parse_args(argv)
    serve(args.params, args.pool, args.port, args.max_sessions)


if __name__ == "__main__":
    main()
