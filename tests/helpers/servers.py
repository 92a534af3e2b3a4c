"""OpenAI-compatible servers the tests start on the loopback address (``transformers serve``,
vLLM's), and the rollouts every such server must carry."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pytest

from interlock.models.openai_backend import OpenAIBackend
from interlock.rollout.engine import RolloutLimits, run_episodes
from interlock.rollout.runs import plan_episodes
from interlock.rollout.trajectory import FINISH_REASONS
from interlock.synthesis.tasks import TaskContext

from helpers.repo import command_timeout


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def serving(command: Sequence[str], port: int, env: dict | None = None) -> Iterator[str]:
    """Start ``command`` (a server on ``127.0.0.1:port``), wait until ``/health`` answers 200, yield
    its ``/v1`` address; the test fails with the server's last words if it exits or never answers."""
    process = subprocess.Popen(list(command), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + command_timeout()
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                pytest.fail(f"{command[0]} ... exited: {process.stderr.read().decode()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail(f"the server ({' '.join(command[:3])} ...) did not answer within "
                        f"{command_timeout():g} s")
        yield f"{url}/v1"
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def check_rollouts_through(server: str, checkpoint, tasks, work) -> None:
    """Two tasks x two attempts through the server with the agent's tools, on both schedules of the
    engine; greedy, so a deterministic server gives the same records on both."""
    contexts = [TaskContext(p.task_id, p, g, d) for d, _, g, p in tasks[:2]]
    rows = {}
    for schedule in ("lockstep", "async"):
        backend = OpenAIBackend(server, str(checkpoint), max_in_flight=4)
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
