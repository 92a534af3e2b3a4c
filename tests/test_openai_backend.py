"""The ``openai`` backend against a real OpenAI-compatible server on loopback
(``transformers serve`` with the tiny test checkpoint), through the rollout engine."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from interlock.core.backend import ChatRequest
from interlock.core.chat import Message
from interlock.models.openai_backend import OpenAIBackend
from interlock.models.serving import free_port
from interlock.testing.loopback_server import client_limits

from helpers.servers import check_rollouts_through, serving

SERVE = Path(sys.executable).with_name("transformers")


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    pytest.importorskip("fastapi", reason="the serving extra of transformers is not installed")
    port = free_port()
    with serving([str(SERVE), "serve", str(tiny_checkpoint), "--host", "127.0.0.1", "--port", str(port)],
                 port) as url:
        yield url


def test_rollouts_run_through_a_real_server(server, tiny_checkpoint, tasks, tmp_path):
    check_rollouts_through(server, tiny_checkpoint, tasks, tmp_path)


def test_a_dead_server_ends_the_episode_not_the_run():
    backend = OpenAIBackend(f"http://127.0.0.1:{free_port()}/v1", "none",
                            **client_limits(timeout_s=5, max_retries=1), backoff_s=0.01)
    (completion,) = backend.complete([ChatRequest("k", (Message("user", "hi"),))])
    assert completion.finish_reason == "server_error"
    assert "cannot reach the server" in completion.detail and "tried 2 times" in completion.detail
