"""The ``openai`` backend against a real OpenAI-compatible server on loopback
(``transformers serve`` with the tiny test checkpoint), through the rollout engine."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from interlock.core.backend import ChatRequest
from interlock.core.chat import Message
from interlock.models.openai_backend import OpenAIBackend
from interlock.rollout.engine import RolloutLimits, run_episodes
from interlock.rollout.runs import plan_episodes
from interlock.rollout.trajectory import FINISH_REASONS
from interlock.synthesis.tasks import TaskContext

from helpers.repo import command_timeout

SERVE = Path(sys.executable).with_name("transformers")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    pytest.importorskip("fastapi", reason="the serving extra of transformers is not installed")
    port = _free_port()
    process = subprocess.Popen([str(SERVE), "serve", str(tiny_checkpoint), "--host", "127.0.0.1",
                                "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + command_timeout()
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"transformers serve exited: {process.stderr.read().decode()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                if answer.status == 200:
                    break
        except OSError:
            time.sleep(0.5)
    else:
        process.kill()
        pytest.fail(f"transformers serve did not come up within {command_timeout():g} s")
    yield f"{url}/v1"
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()


def test_rollouts_run_through_a_real_server(server, tiny_checkpoint, tasks, tmp_path):
    """Both schedules of the engine; greedy, so the server is deterministic and they agree."""
    contexts = [TaskContext(p.task_id, p, g, d) for d, _, g, p in tasks[:2]]
    rows = {}
    for schedule in ("lockstep", "async"):
        backend = OpenAIBackend(server, str(tiny_checkpoint), max_in_flight=4)
        episodes = plan_episodes(iter(contexts), policy="tiny/openai", attempts=2, seed=3)
        trajectories = list(run_episodes(episodes, backend, RolloutLimits(max_turns=2, max_new_tokens=12,
                                                                          temperature=0.0),
                                         tmp_path / schedule, schedule=schedule))
        assert len(trajectories) == 4
        for t in trajectories:
            assert t.finish_reason in FINISH_REASONS and t.finish_reason not in ("server_error", "bad_reply")
            assert t.generated_tokens > 0 and t.prompt_tokens > 0, "token counts come from the server"
            assert [m.role for m in t.messages[:3]] == ["system", "user", "assistant"]
        rows[schedule] = sorted((t.to_row() for t in trajectories), key=lambda row: row["rollout_id"])
    assert rows["async"] == rows["lockstep"]


def test_a_dead_server_ends_the_episode_not_the_run():
    backend = OpenAIBackend(f"http://127.0.0.1:{_free_port()}/v1", "none", timeout_s=5, max_retries=1,
                            backoff_s=0.01)
    (completion,) = backend.complete([ChatRequest("k", (Message("user", "hi"),))])
    assert completion.finish_reason == "server_error"
    assert "cannot reach the server" in completion.detail and "tried 2 times" in completion.detail
