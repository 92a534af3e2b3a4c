"""Rollouts against OpenAI-compatible servers: the engine's async schedule against real HTTP servers
on loopback (``interlock.testing.loopback_server``): the same trajectories as lockstep, load spread
over endpoints, retries, failing endpoints and hostile replies that end an episode, never the run,
configuration, and resuming a killed run."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from interlock.core import schemas
from interlock.core.config import GenerationConfig
from interlock.core.errors import InterlockError
from interlock.core.io import read_rows
from interlock.models import openai_backend
from interlock.models.backends import make_backend
from interlock.models.openai_backend import MAX_REPLY_BYTES, OPENAI_URL_ENV, OpenAIBackend
from interlock.rollout.engine import RolloutLimits, run_episodes
from interlock.rollout.runs import plan_episodes, run_rollouts
from interlock.testing.loopback_server import (
    Answer,
    LoopbackServer,
    Request,
    ScriptedAgent,
    client_limits,
    completion_body,
    error_body,
)

from helpers.artifacts import kill_when_parts_are_written
from helpers.config import defaults
from helpers.repo import command_timeout

#: quick replies: the tests time behaviour, not throughput
AGENT = ScriptedAgent(seed=5, median_tokens=8, sigma=1.0, first_token_s=0.002, seconds_per_token=0.0005)


def _backend(server: LoopbackServer, **settings) -> OpenAIBackend:
    return OpenAIBackend(server.urls, "loopback",
                         **{**client_limits(max_in_flight=4), "backoff_s": 0.01, **settings})


def _rollouts(contexts, backend, tmp_path: Path, schedule: str | None = None, attempts: int = 1,
              batch_size: int = 4) -> list:
    episodes = plan_episodes(iter(contexts), policy="loopback", attempts=attempts, seed=3)
    return list(run_episodes(episodes, backend, RolloutLimits(max_turns=12), tmp_path, batch_size=batch_size,
                             schedule=schedule))


def _request_of(request: Request) -> str:
    """Which task a request belongs to: its request text (the first user message)."""
    return request.body["messages"][1]["content"]


def test_async_writes_the_lockstep_trajectories_byte_for_byte(contexts, tmp_path) -> None:
    """A deterministic server (replies drawn from the request; a fifth of tries answered 429 or 500,
    also drawn from the request): both schedules, each on a fresh server, write the same rows."""
    flaky = replace(AGENT, error_rate=0.2)
    rows, retries = {}, {}
    for schedule in ("lockstep", "async"):
        with LoopbackServer(flaky, 2) as server:
            backend = _backend(server)
            trajectories = _rollouts(contexts, backend, tmp_path / schedule, schedule, attempts=2)
        rows[schedule] = sorted((t.to_row() for t in trajectories), key=lambda row: row["rollout_id"])
        retries[schedule] = backend.retries
    assert rows["async"] == rows["lockstep"]
    assert len(rows["async"]) == 2 * len(contexts)
    assert {row["finish_reason"] for row in rows["async"]} == {"submitted"}
    assert len({row["turns"] for row in rows["async"]}) > 1, "episodes of several lengths"
    assert retries["async"] == retries["lockstep"] > 0


class Journal:
    """What a loopback server did, in order: ``(event, task, turn)`` with ``event`` "arrived" (the
    script got the request) or "answered" (the reply is made; recorded before its bytes are sent,
    so before the client can act on it). The script does the reply's delay itself, so "answered"
    is when the reply leaves."""

    def __init__(self, script) -> None:
        self.events: list[tuple[str, str, int]] = []
        self._script, self._lock = script, threading.Lock()

    def _record(self, event: str, request: Request) -> None:
        turn = sum(m["role"] == "assistant" for m in request.body["messages"])
        with self._lock:
            self.events.append((event, _request_of(request), turn))

    def __call__(self, request: Request) -> Answer:
        self._record("arrived", request)
        answer = self._script(request)
        time.sleep(answer.delay_s)
        self._record("answered", request)
        return replace(answer, delay_s=0.0)

    def at(self, event: str, task: str | None = None, turn: int | None = None) -> list[int]:
        """The positions of the matching events."""
        return [i for i, (e, k, t) in enumerate(self.events)
                if e == event and task in (None, k) and turn in (None, t)]

    def peak(self) -> int:
        """The most requests that had arrived and were not yet answered, at any point."""
        out = peak = 0
        for event, _, _ in self.events:
            out += 1 if event == "arrived" else -1
            peak = max(peak, out)
        return peak


def test_each_episode_advances_on_its_own_reply(contexts, tmp_path) -> None:
    """Under async the slow task's first request is held until the other three episodes have come
    back from the engine (whatever the clock says): they run every turn while it waits, and it
    ends last. Under lockstep (its replies a little slower than the others') no request of a turn
    leaves before every reply of the turn before, the slow one's included: every turn waits for
    it. The server's journal says which happened, not the time taken."""
    slow = contexts[0].pack.request
    release = threading.Event()

    def held(request: Request) -> Answer:
        if _request_of(request) == slow:
            release.wait(timeout=command_timeout())  # async: set once the others are back
        return AGENT(request)

    with LoopbackServer(journal := Journal(held), 2) as server:
        episodes = plan_episodes(iter(contexts[:4]), policy="loopback", attempts=1, seed=3)
        trajectories = []
        try:
            for trajectory in run_episodes(episodes, _backend(server), RolloutLimits(max_turns=12),
                                           tmp_path / "async", schedule="async"):
                trajectories.append(trajectory)
                if len(trajectories) == 3:
                    release.set()
        finally:
            release.set()
    assert 2 <= journal.peak() <= 4, "concurrent, and never more out than max_in_flight"
    assert [t.task_id for t in trajectories][-1] == contexts[0].task_id
    (first_reply,) = journal.at("answered", slow, 0)
    for context in contexts[1:4]:
        own = journal.at("arrived", context.pack.request) + journal.at("answered", context.pack.request)
        (turns,) = [t.turns for t in trajectories if t.task_id == context.task_id]
        assert len(own) == 2 * turns and turns >= 3  # listed, read, submitted: all while the slow one waited
        assert max(own) < first_reply

    def slower(request: Request) -> Answer:
        answer = AGENT(request)
        return replace(answer, delay_s=answer.delay_s + 0.05) if _request_of(request) == slow else answer

    with LoopbackServer(journal := Journal(slower), 2) as server:
        trajectories = _rollouts(contexts[:4], _backend(server), tmp_path / "lockstep", "lockstep")
    assert 2 <= journal.peak() <= 4, "a turn's requests out together, never more than max_in_flight"
    (slow_turns,) = [t.turns for t in trajectories if t.task_id == contexts[0].task_id]
    longest = max(t.turns for t in trajectories)
    assert len({t.turns for t in trajectories}) > 1, "episodes of several lengths"
    for turn in range(longest - 1):
        assert max(journal.at("answered", turn=turn)) < min(journal.at("arrived", turn=turn + 1)), turn
        if turn + 1 < slow_turns:
            (reply,) = journal.at("answered", slow, turn)
            assert reply < min(journal.at("arrived", turn=turn + 1))


def test_load_spreads_across_endpoints(contexts, tmp_path) -> None:
    with LoopbackServer(AGENT, 3) as server:
        backend = _backend(server, max_in_flight=6)
        trajectories = _rollouts(contexts, backend, tmp_path, attempts=2)
    assert {t.finish_reason for t in trajectories} == {"submitted"}
    assert [e.requests for e in backend.endpoints] == server.served
    assert min(server.served) >= 0.7 * max(server.served), server.served


class _SleepLog:
    """The backend module's ``time``, recording every wait it sleeps (and sleeping it)."""

    def __init__(self) -> None:
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        time.sleep(seconds)

    def __getattr__(self, name: str):
        return getattr(time, name)


def test_timeouts_429_and_5xx_are_retried_and_retry_after_is_honoured(contexts, tmp_path,
                                                                       monkeypatch) -> None:
    """Every request's first try fails, in turn: a timeout, 429 with Retry-After, 500, 503."""
    failures = [Answer(200, b"", delay_s=2.0),
                Answer(429, error_body(429, "slow down"), headers=(("Retry-After", "0.3"),)),
                Answer(500, error_body(500, "boom")), Answer(503, error_body(503, "busy"))]
    count = iter(range(10**6))

    def script(request: Request) -> Answer:
        return failures[next(count) % len(failures)] if request.attempt == 0 else AGENT(request)

    with LoopbackServer(script, 1) as server:
        backend = _backend(server, timeout_s=0.5)
        trajectories = _rollouts(contexts[:2], backend, tmp_path)
    assert {t.finish_reason for t in trajectories} == {"submitted"}
    assert backend.retries == sum(server.served) // 2 == sum(t.turns for t in trajectories)

    # every first try answered 429 with Retry-After: 0.3: each retry waits exactly what it was told
    monkeypatch.setattr(openai_backend, "time", waits := _SleepLog())
    with LoopbackServer(lambda r: failures[1] if r.attempt == 0 else AGENT(r), 1) as server:
        backend = _backend(server)
        trajectories = _rollouts(contexts[:1], backend, tmp_path / "retry-after")
    assert trajectories[0].finish_reason == "submitted" and backend.retries == trajectories[0].turns
    assert waits.slept == [0.3] * trajectories[0].turns


def test_a_failing_endpoint_is_passed_over(contexts, tmp_path) -> None:
    """One of two endpoints answers 503 to everything: every episode still submits, and the failing
    endpoint is tried only when its backoff has run out."""
    down = Answer(503, error_body(503, "down"))
    with LoopbackServer(lambda r: down if r.endpoint else AGENT(r), 2) as server:
        backend = _backend(server, backoff_s=0.2)
        trajectories = _rollouts(contexts, backend, tmp_path)
    assert {t.finish_reason for t in trajectories} == {"submitted"}
    assert 0 < server.served[1] < server.served[0] / 4, server.served


def test_a_request_that_keeps_failing_ends_its_episode_not_the_run(contexts, tmp_path, caplog) -> None:
    doomed = contexts[1].pack.request

    def script(request: Request) -> Answer:
        return Answer(500, error_body(500, "doomed")) if _request_of(request) == doomed else AGENT(request)

    with caplog.at_level(logging.WARNING), LoopbackServer(script, 2) as server:
        backend = _backend(server, max_retries=3)
        trajectories = _rollouts(contexts[:4], backend, tmp_path)
    ended = {t.task_id: t for t in trajectories}
    assert len(ended) == 4
    failed = ended.pop(contexts[1].task_id)
    assert failed.finish_reason == "server_error" and failed.turns == 1
    assert [m.role for m in failed.messages] == ["system", "user"]
    assert {t.finish_reason for t in ended.values()} == {"submitted"}
    assert "answered 500" in caplog.text and "tried 4 times" in caplog.text
    assert not list(tmp_path.iterdir()), "the failed episode's workspace is removed too"


def _body(answer: object) -> bytes:
    return json.dumps(answer).encode()


def _reply(**message) -> bytes:
    return _body({"choices": [{"message": {"role": "assistant", **message}}]})


HOSTILE = {
    "huge": _reply(content="x" * (MAX_REPLY_BYTES + 10)),
    "not json": b"{'choices': [",
    "not utf-8": b'{"choices": "\xff"}',
    "empty": b"",
    "null": b"null",
    "nested too deeply": b"[" * 100_000 + b"]" * 100_000,
    "choices not a list": _body({"choices": "stop"}),
    "no choices": _body({"choices": []}),
    "message not an object": _body({"choices": [{"message": ["hi"]}]}),
    "content not text": _reply(content=5),
    "a lone surrogate": _reply(content="\ud800"),
    "a lone surrogate in arguments": _reply(tool_calls=[{"function": {"name": "submit",
                                                                      "arguments": {"x": "\udfff"}}}]),
    "tool calls not a list": _reply(content="", tool_calls={"name": "submit"}),
    "tool call without a name": _reply(tool_calls=[{"function": {"arguments": "{}"}}]),
    "token count not a number": _body({"choices": [{"message": {"content": "hi"}}],
                                       "usage": {"prompt_tokens": "many"}}),
    "token count too large": _body({"choices": [{"message": {"content": "hi"}}],
                                    "usage": {"completion_tokens": 10**30}}),
    "finish reason not text": _body({"choices": [{"message": {"content": "hi"}, "finish_reason": 1}]}),
}


@pytest.mark.parametrize("kind", HOSTILE)
def test_hostile_replies_fail_their_episode_with_a_reason(kind, contexts, tmp_path) -> None:
    hostile = contexts[0].pack.request

    def script(request: Request) -> Answer:
        return Answer(200, HOSTILE[kind]) if _request_of(request) == hostile else AGENT(request)

    with LoopbackServer(script, 1) as server:
        trajectories = _rollouts(contexts[:2], _backend(server), tmp_path)
    ended = {t.task_id: t.finish_reason for t in trajectories}
    assert ended == {contexts[0].task_id: "bad_reply", contexts[1].task_id: "submitted"}


def test_bad_arguments_are_the_models_error_not_the_servers(contexts, tmp_path) -> None:
    """Arguments that are not a JSON object are an invalid call the agent sees, as in the text
    protocol; the episode goes on."""
    def script(request: Request) -> Answer:
        messages = request.body["messages"]
        if len(messages) == 2:
            calls = [{"function": {"name": "read_file", "arguments": "{not json"}},
                     {"function": {"name": "list_files", "arguments": "[" * 5000 + "]" * 5000}}]
            return Answer(200, _reply(content="", tool_calls=calls))
        return AGENT(replace(request, body={**request.body, "messages": messages[:2] + messages[5:]}))

    with LoopbackServer(script, 1) as server:
        (trajectory,) = _rollouts(contexts[:1], _backend(server), tmp_path)
    assert trajectory.invalid_calls == 2 and trajectory.finish_reason == "submitted"
    assert [m.content[:6] for m in trajectory.messages[3:5]] == ["error:", "error:"]
    # read as malformed calls by the one reader of calls, never as calls with a made-up argument
    assert all("malformed tool call" in m.content for m in trajectory.messages[3:5])
    assert "__unparsed__" not in trajectory.to_row()["messages"] and not trajectory.messages[2].tool_calls


def test_a_server_that_answers_byte_by_byte_is_cut_at_the_timeout(tmp_path) -> None:
    """Each byte comes well within the socket's timeout, the whole answer (about 12 s of them) far
    beyond ``timeout_s``: both tries are cut by the watchdog, so the completion is the timeout's
    error, not the answer the server would have finished sending."""
    from interlock.core.backend import ChatRequest
    from interlock.core.chat import Message

    body = completion_body("hi")
    assert len(body) * 0.05 > 10 * 0.4
    with LoopbackServer(lambda r: Answer(200, body, drip_s=0.05), 1) as server:
        backend = _backend(server, timeout_s=0.4, max_retries=1)
        completion = backend.complete_one(ChatRequest("k", (Message("user", "hi"),)))
    assert completion.finish_reason == "server_error" and completion.text == ""
    assert "no answer within 0.4 s" in completion.detail and "(tried 2 times)" in completion.detail
    assert server.served == [2] and backend.retries == 1


def test_a_server_that_sends_its_headers_byte_by_byte_is_cut_at_the_timeout() -> None:
    """The status line and headers trickle in, each byte well within a read's timeout: the
    watchdog cuts each try's connection at ``timeout_s``, long before the headers end (the server
    finds its connection gone), and the try fails as a timeout."""
    from interlock.core.backend import ChatRequest
    from interlock.core.chat import Message

    listener = socket.create_server(("127.0.0.1", 0))
    head = b"HTTP/1.1 200 OK\r\n" + b"X-Slow: " + b"y" * 400 + b"\r\n"
    sent: list[int] = []  # per try, the bytes the server got out before the client cut it

    def trickle() -> None:
        for _ in range(2):  # both tries
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                sent.append(0)
                with contextlib.suppress(OSError):  # cut by the client
                    for byte in head:
                        conn.sendall(bytes([byte]))
                        sent[-1] += 1
                        time.sleep(0.05)

    server = threading.Thread(target=trickle, daemon=True)
    server.start()
    backend = OpenAIBackend(f"http://127.0.0.1:{listener.getsockname()[1]}/v1", "m",
                            **client_limits(timeout_s=0.4, max_retries=1), backoff_s=0.01)
    completion = backend.complete_one(ChatRequest("k", (Message("user", "hi"),)))
    server.join(timeout=60)
    listener.close()
    assert completion.finish_reason == "server_error"
    assert "no answer within 0.4 s" in completion.detail and "(tried 2 times)" in completion.detail
    assert len(sent) == 2 and all(count < len(head) for count in sent), sent


def test_the_config_reaches_the_backend(tmp_path, monkeypatch) -> None:
    (tmp_path / "config.json").write_text("{}")
    backbone = defaults("backbone=tiny").backbone.replace(
        backend="openai", max_context=64, generation=GenerationConfig(temperature=0, max_new_tokens=8))
    monkeypatch.delenv(OPENAI_URL_ENV, raising=False)
    with pytest.raises(InterlockError, match="backbone.server.base_urls"):
        make_backend(backbone, tmp_path)
    monkeypatch.setenv(OPENAI_URL_ENV, "http://a:8000/v1")  # one address, as before
    assert [e.url for e in make_backend(backbone, tmp_path).endpoints] == ["http://a:8000/v1/chat/completions"]
    monkeypatch.setenv(OPENAI_URL_ENV, "http://a:8000/v1, https://b/v1/")
    assert [e.url for e in make_backend(backbone, tmp_path).endpoints] == [
        "http://a:8000/v1/chat/completions", "https://b/v1/chat/completions"]
    server = backbone.server.replace(base_urls=["http://c:1/v1", "http://d:2/v1"], max_in_flight=3,
                                     max_retries=1, timeout_s=9)
    backend = make_backend(backbone.model_copy(update={"server": server}), tmp_path)
    assert [e.port for e in backend.endpoints] == [1, 2]  # the config wins over the environment
    assert (backend.max_in_flight, backend.max_retries, backend.timeout_s) == (3, 1, 9)
    for bad in ("ftp://e/v1", "c:1/v1", "http://:1/v1", "http://e:port/v1"):
        with pytest.raises(InterlockError, match="not an http"):
            OpenAIBackend([bad], "m", **client_limits())


def _resumable(contexts, out: Path, work: Path, urls: list[str]) -> dict:
    backend = OpenAIBackend(urls, "loopback", **client_limits(max_in_flight=3), backoff_s=0.01)
    episodes = plan_episodes(iter(contexts), policy="loopback", attempts=2, seed=4)
    return run_rollouts(episodes, backend, RolloutLimits(max_turns=12), total=2 * len(contexts), out=out,
                        timings=out.with_name("timings.parquet"), work=work, run_id="run", flush_every=1)


def test_a_killed_async_run_resumes_without_losing_or_duplicating(contexts, tmp_path) -> None:
    with LoopbackServer(replace(AGENT, first_token_s=0.05), 2) as server:
        clean = tmp_path / "clean" / "trajectories.parquet"
        _resumable(contexts, clean, tmp_path / "clean-work", server.urls)

        out, work = tmp_path / "resumed" / "trajectories.parquet", tmp_path / "work"
        parts = kill_when_parts_are_written(_resumable, (contexts, out, work, server.urls), work / "run")
        assert parts and not out.exists()
        summary = _resumable(contexts, out, work, server.urls)
    ids = [row["rollout_id"] for row in read_rows(out, schemas.TRAJECTORIES)]
    assert len(ids) == len(set(ids)) == 2 * len(contexts) == summary["episodes"]
    assert out.read_bytes() == clean.read_bytes()
    assert not work.exists()
