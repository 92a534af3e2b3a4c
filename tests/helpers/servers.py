"""OpenAI-compatible servers the tests start on the loopback address (``transformers serve``,
vLLM's), and the rollouts every such server must carry."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from interlock.core.errors import InterlockError
from interlock.models.openai_backend import OpenAIBackend
from interlock.models.serving import ManagedServer
from interlock.rollout.engine import RolloutLimits, run_episodes
from interlock.rollout.runs import plan_episodes
from interlock.rollout.trajectory import FINISH_REASONS
from interlock.synthesis.tasks import TaskContext
from interlock.testing.loopback_server import client_limits

from helpers.repo import command_timeout


@contextmanager
def serving(command: Sequence[str], port: int, env: dict | None = None) -> Iterator[str]:
    """Start ``command`` (a server on ``127.0.0.1:port``) as the pipeline starts its own servers
    (:class:`~interlock.models.serving.ManagedServer`), wait until ``/health`` answers 200, yield
    its ``/v1`` address; the test fails with the server's last words if it exits or never answers."""
    with tempfile.TemporaryDirectory(prefix="interlock-server-") as logs:
        server = ManagedServer(command, port, Path(logs) / "server.log", env=env, startup_s=command_timeout(),
                               name=f"server ({' '.join(command[:3])} ...)")
        try:
            server.start()
        except InterlockError as exc:
            pytest.fail(str(exc))
        try:
            yield server.base_url
        finally:
            server.stop()


def vllm_processes_in(root: Path) -> list[str]:
    """The pids of processes still running vLLM whose working directory is ``root`` (a stage's
    managed servers run in the stage's directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and Path(os.readlink(entry / "cwd")) == root and \
                    b"vllm" in (entry / "cmdline").read_bytes():
                found.append(entry.name)
        except OSError:
            continue
    return found


def check_rollouts_through(server: str, checkpoint, tasks, work) -> None:
    """Two tasks x two attempts through the server with the agent's tools, on both schedules of the
    engine; greedy, so a deterministic server gives the same records on both."""
    contexts = [TaskContext(p.task_id, p, g, d) for d, _, g, p in tasks[:2]]
    rows = {}
    for schedule in ("lockstep", "async"):
        backend = OpenAIBackend(server, str(checkpoint), **client_limits(max_in_flight=4))
        episodes = plan_episodes(iter(contexts), policy="tiny/openai", attempts=2, seed=3)
        trajectories = list(run_episodes(episodes, backend, RolloutLimits(max_turns=2, max_new_tokens=12,
                                                                          temperature=0.0),
                                         work / schedule, schedule=schedule))
        assert len(trajectories) == 4
        for t in trajectories:
            assert t.finish_reason in set(FINISH_REASONS) - {"server_error", "bad_reply"}, t.finish_reason
            assert t.generated_tokens > 0 and t.prompt_tokens > 0, "token counts come from the server"
            assert [m.role for m in t.messages[:3]] == ["system", "user", "assistant"]
        rows[schedule] = sorted((t.to_row() for t in trajectories), key=lambda row: row["rollout_id"])
    assert rows["async"] == rows["lockstep"]
