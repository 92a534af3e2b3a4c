"""A loopback OpenAI-compatible chat-completions server, to test a client backend or the rollout
engine against real HTTP (the asynchronous rollouts' benchmark and tests do): 127.0.0.1 only, one
port per endpoint, bounded in requests and time, each answer what a script makes of the request.

:class:`ScriptedAgent` is the script the benchmark uses: deterministic replies that drive a real
workspace episode (list the files, read a few, submit) with skewed reply lengths, latencies that
follow them, and occasional 429 and 500 answers. Every draw comes from the seed and the request
itself (and, for errors, how often this server has seen that request), so a request gets the same
reply whatever order requests arrive in: the server is deterministic, as the engine's
lockstep-against-async test needs.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from interlock.core.chat import render_turn
from interlock.core.config import declared_server
from interlock.core.seeds import stable_seed
from interlock.rl.environment import TaskPool
from interlock.rollout.scripted import ScriptedBackend

#: a request body larger than this is refused (413): the server is bounded in what it reads too
MAX_REQUEST_BYTES = 64 * 2**20


@dataclass(frozen=True)
class Request:
    """One request as the script sees it."""

    body: dict  # the JSON the client sent
    key: str  # a digest of the body as sent: what names the request
    endpoint: int  # which endpoint it came to
    attempt: int  # how many times this server saw the same body before (a retry: 1, 2, ...)


@dataclass(frozen=True)
class Answer:
    """What the server sends back, after ``delay_s`` seconds (and ``drip_s`` between the body's
    bytes: a server that answers byte by byte)."""

    status: int
    body: bytes
    delay_s: float = 0.0
    headers: tuple[tuple[str, str], ...] = ()
    drip_s: float = 0.0


Script = Callable[[Request], Answer]


def completion_body(content: str, calls: list[tuple[str, dict]] = (), *, prompt_tokens: int = 0,
                    completion_tokens: int = 0, finish_reason: str | None = None, turn: int = 0) -> bytes:
    """A chat completion as OpenAI's API writes it: structured tool calls, arguments as JSON text,
    ids ``call_<turn>_<k>`` (``finish_reason`` None: ``tool_calls`` where there are calls, else
    ``stop``)."""
    tool_calls = [{"id": f"call_{turn}_{i}", "type": "function",
                   "function": {"name": name, "arguments": json.dumps(args)}}
                  for i, (name, args) in enumerate(calls)]
    message = {"role": "assistant", "content": content, **({"tool_calls": tool_calls} if tool_calls else {})}
    finish_reason = finish_reason or ("tool_calls" if tool_calls else "stop")
    return json.dumps({"id": "chatcmpl-loopback", "object": "chat.completion", "created": 0,
                       "model": "loopback",
                       "choices": [{"index": 0, "message": message,
                                    "finish_reason": finish_reason}],
                       "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                 "total_tokens": prompt_tokens + completion_tokens}}).encode()


def error_body(status: int, message: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": "loopback", "code": status}}).encode()


_WORDS = ("the", "ledger", "row", "policy", "case", "record", "check", "decision", "cap", "effect", "so",
          "then", "read", "next", "budget", "clause", "amount", "approve", "deny", "carry")


@dataclass(frozen=True)
class ScriptedAgent:
    """Replies that drive a workspace episode: list the files, read ``reads`` of them (drawn per
    episode), submit. Each reply thinks aloud for a lognormal number of tokens (median
    ``median_tokens``, shape ``sigma``: the skew) and takes ``first_token_s`` plus
    ``seconds_per_token`` per token to come; a try is answered 429 (``Retry-After: 0``) or 500
    instead at ``error_rate``."""

    seed: int = 0
    median_tokens: float = 40.0
    sigma: float = 1.0
    first_token_s: float = 0.005
    seconds_per_token: float = 0.002
    error_rate: float = 0.0
    reads: tuple[int, int] = (1, 4)

    def __call__(self, request: Request) -> Answer:
        body, messages, key = request.body, request.body["messages"], request.key
        if random.Random(stable_seed(self.seed, "error", key, request.attempt)).random() < self.error_rate:
            if request.attempt % 2:
                return Answer(500, error_body(500, "loopback: internal error"), self.first_token_s)
            return Answer(429, error_body(429, "loopback: too many requests"), self.first_token_s,
                          (("Retry-After", "0"),))
        turn = sum(m["role"] == "assistant" for m in messages)
        # the episode's own draws: its opening and its sampling seed (the engine sends seed + turn)
        plan = random.Random(stable_seed(self.seed, "plan", messages[1]["content"], body["seed"] - turn))
        reads = plan.randint(*self.reads)
        listed = next((m["content"].splitlines() for m in messages if m["role"] == "tool"), [])
        if turn == 0:
            call = ("list_files", {})
        elif turn <= reads and listed:
            call = ("read_file", {"path": listed[(turn - 1) % len(listed)]})
        else:
            call = ("submit", {})
        draw = random.Random(stable_seed(self.seed, "reply", key))
        length = math.exp(draw.gauss(math.log(self.median_tokens), self.sigma))
        # a server stops at max_tokens; the call takes about 8 of them
        tokens = max(1, min(round(length), body.get("max_tokens", 256) - 8))
        content = " ".join(draw.choice(_WORDS) for _ in range(tokens))
        prompt_tokens = sum(len(str(m.get("content") or "")) for m in messages) // 4
        reply = completion_body(content, [call], prompt_tokens=prompt_tokens, completion_tokens=tokens + 8)
        return Answer(200, reply, self.first_token_s + self.seconds_per_token * (tokens + 8))


class ScriptedPolicies:
    """Replies of the project's scripted policies (:data:`~interlock.rollout.scripted.PLANS` and the
    abuse suite's attacks, :data:`~interlock.testing.adversaries.PLANS`) on the tasks of ``pool``:
    the request's ``model`` names the policy, the conversation the task, the number of assistant
    turns so far the planned turn. A call the plan writes as a structured
    :class:`~interlock.core.chat.ToolCall` comes as a structured call; markup an attack writes by
    hand (malformed, smuggled) comes as text, as a model would write it.

    The conversation names its task by its first user message, the task's public request; where
    tasks share a request (a domain's template), by what the workspace showed: the tasks whose
    files hold most of what was read. A turn their plans share is played before they are told
    apart (the first turns read files). Unknown policy, or tasks left whose plans part: 404 with
    the reason."""

    def __init__(self, pool: TaskPool, seed: int = 0) -> None:
        from interlock.testing.adversaries import PLANS

        self.pool, self.seed, self.plans = pool, seed, PLANS
        self.by_request: dict[str, list] = {}
        for task in pool.tasks:
            self.by_request.setdefault(task.pack.request, []).append(task)
        self._backends: dict[str, ScriptedBackend] = {}
        self._lock = threading.Lock()

    def __call__(self, request: Request) -> Answer:
        body = request.body
        messages = [m for m in body.get("messages") or () if isinstance(m, dict)] \
            if isinstance(body.get("messages"), list) else []
        policy = body.get("model")
        if policy not in self.plans:
            reason = f"no scripted policy {str(policy)[:80]!r} (one of: {', '.join(self.plans)})"
            return Answer(404, error_body(404, f"loopback: {reason}"))
        turn = sum(m.get("role") == "assistant" for m in messages)
        opening = next((m.get("content") for m in messages if m.get("role") == "user"), None)
        candidates = self.by_request.get(opening, []) if isinstance(opening, str) else []
        plans = [self._plan(policy, task) for task in self._told(candidates, messages)]
        if len({repr(plan[turn:turn + 1]) for plan in plans}) == 1:
            plans = plans[:1]  # the turn is the same whichever of these tasks it is
        if len(plans) != 1:
            reason = ("the conversation opens no task of the pool" if not candidates else
                      f"{len(candidates)} tasks share this request; what was read tells none apart")
            return Answer(404, error_body(404, f"loopback: {reason}"))
        [plan] = plans
        content, calls = plan[turn] if turn < len(plan) else ("", [])
        written = [c for c in calls if isinstance(c, str)]
        structured = [(c.name, c.arguments) for c in calls if not isinstance(c, str)]
        return Answer(200, completion_body(render_turn(content, written), structured, turn=turn))

    @staticmethod
    def _told(candidates: list, messages: list[dict]) -> list:
        """The candidates whose workspace holds the most of what the tools showed (each output
        less its clipping note; a listing or an error is in no file, so it tells nothing)."""
        if len(candidates) < 2:
            return candidates
        shown = [m["content"].split("\n[... ")[0] for m in messages
                 if m.get("role") == "tool" and isinstance(m.get("content"), str) and len(m["content"]) > 40]
        held = [sum(any(text in content for content in task.pack.files.values()) for text in shown)
                for task in candidates]
        return [task for task, count in zip(candidates, held, strict=True) if count == max(held)]

    def _plan(self, policy: str, task) -> list:
        with self._lock:
            backend = self._backends.setdefault(policy, ScriptedBackend(policy, self.seed, plans=self.plans))
            key = f"{policy}:{task.task_id}"
            if key not in backend.plans:
                backend.begin(key, task)
            return backend.plans[key]


def serve_policies(params_file: Path | str, pool: str = "rft", port: int = 8000, seed: int = 0) -> None:
    """Serve :class:`ScriptedPolicies` on the admitted ``pool`` of a finished run until interrupted:
    the loopback model the framework adapters' commands in docs/exports.md run against."""
    from interlock.analysis.artifacts import params_paths
    from interlock.synthesis.tasks import admitted_tasks, load_domains

    paths = params_paths(params_file)
    script = ScriptedPolicies(TaskPool(admitted_tasks(paths, load_domains(paths.domains), pool)), seed)
    with LoopbackServer(script, endpoints=1, max_seconds=math.inf, port=port) as server:
        print(f"scripted policies ({', '.join(script.plans)}) on {len(script.pool.tasks)} {pool} tasks "
              f"at {server.urls[0]}", flush=True)
        threading.Event().wait()


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a handler still sleeping never holds the process up
    request_queue_size = 1024  # a lockstep turn connects all at once: the default backlog of 5 drops some

    def __init__(self, owner: LoopbackServer, index: int, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.owner, self.index = owner, index


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._send(Answer(200, b'{"object": "list", "data": [{"id": "loopback", "object": "model"}]}'))

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 < length <= MAX_REQUEST_BYTES:
            self._send(Answer(413, error_body(413, "loopback: request body missing or too large")))
            return
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            self._send(Answer(400, error_body(400, "loopback: not a chat request")))
            return
        self._send(self.server.owner.answer(body, hashlib.sha256(raw).hexdigest(), self.server.index))

    def _send(self, answer: Answer) -> None:
        owner = self.server.owner
        with owner.lock:  # counted while it waits: strictly within the client's wait for it
            owner.in_flight += 1
            owner.peak_in_flight = max(owner.peak_in_flight, owner.in_flight)
        time.sleep(answer.delay_s)
        with owner.lock:
            owner.in_flight -= 1
        try:
            self.send_response(answer.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer.body)))
            for name, value in answer.headers:
                self.send_header(name, value)
            self.end_headers()
            step = 1 if answer.drip_s else max(1, len(answer.body))  # the wfile is unbuffered
            for start in range(0, len(answer.body), step):
                self.wfile.write(answer.body[start:start + step])
                time.sleep(answer.drip_s)
        except OSError:  # the client gave up (its timeout): nothing to answer
            pass

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's signature)
        pass  # quiet: the benchmark prints its own figures


class LoopbackServer:
    """``endpoints`` servers on 127.0.0.1 (on ports the system picks, or ``port`` onwards),
    answering ``script``'s answers. Bounded: after ``max_requests`` requests, or ``max_seconds``
    after it started, every request is answered 503 at once. Use it as a context manager; ``urls``
    are the ``/v1`` addresses, ``served`` counts the requests each endpoint took, ``peak_in_flight`` the most
    being answered at once."""

    def __init__(self, script: Script, endpoints: int = 2, *, max_requests: int = 100_000,
                 max_seconds: float = 600.0, port: int = 0) -> None:
        self.script, self.max_requests, self.max_seconds = script, max_requests, max_seconds
        self.lock = threading.Lock()
        self.seen: Counter[str] = Counter()
        self.served = [0] * endpoints
        self.in_flight = self.peak_in_flight = 0
        self.started = 0.0
        # port 0: one the system picks for each endpoint; else endpoint i listens on port + i
        self._servers = [_Server(self, index, port + index if port else 0) for index in range(endpoints)]
        self.urls = [f"http://127.0.0.1:{s.server_address[1]}/v1" for s in self._servers]

    def answer(self, body: dict, key: str, endpoint: int) -> Answer:
        with self.lock:
            attempt = self.seen[key]
            self.seen[key] += 1
            self.served[endpoint] += 1
            over = sum(self.served) > self.max_requests or time.monotonic() - self.started > self.max_seconds
        if over:
            return Answer(503, error_body(503, "loopback: past the server's bound on requests or time"))
        return self.script(Request(body, key, endpoint, attempt))

    def __enter__(self) -> LoopbackServer:
        self.started = time.monotonic()
        for server in self._servers:
            threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()


def client_limits(**changes: int | float) -> dict[str, int | float]:
    """The openai client's limits as conf/ declares them (``backbone.server``), with ``changes``:
    what a test or a benchmark hands :class:`~interlock.models.openai_backend.OpenAIBackend` for a
    loopback server."""
    return declared_server().replace(**changes).client_limits()


def _main(argv: list[str] | None = None) -> None:  # pragma: no cover - `python -m ...loopback_server`
    import argparse

    from interlock.frameworks.episodes import add_run_arguments

    parser = argparse.ArgumentParser(
        prog="python -m interlock.testing.loopback_server",
        description="Serve the scripted policies on a run's admitted tasks as an OpenAI-compatible "
                    "model on 127.0.0.1 (the request's model names the policy).")
    add_run_arguments(parser)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    serve_policies(args.params, args.pool, args.port, args.seed)


if __name__ == "__main__":  # pragma: no cover
    _main()
