"""The ``openai`` backend: one or several OpenAI-compatible chat-completions servers (``vllm
serve``, SGLang, ``transformers serve``, a hosted API), over HTTP with ``httpx``.

It is a :class:`~interlock.core.backend.ConcurrentBackend`: the rollout engine sends each
episode's request when it is due, at most ``max_in_flight`` at a time, and ``complete`` (a whole
turn, for the lockstep schedule and the text judge) sends its requests concurrently as well. Each
request goes to the endpoint with the fewest requests in flight, passing over one that failed
until its backoff has run out. Timeouts, refused or broken connections, 429 and 5xx answers are
retried with exponential backoff and jitter seeded by the request (or after the server's
``Retry-After``, capped); a request that still fails, or an answer that is not a chat completion
(too large, not JSON, wrong types), comes back as a completion that ends its episode
(``server_error``, ``bad_reply``) with the reason in its ``detail``, never as an exception:
whatever a server sends is hostile input. Structured ``tool_calls`` in an answer are turned back
into the project's ``<tool_call>`` text, so trajectories look the same whatever the server.

Given the served checkpoint's tokenizer (a server the stage manages: :mod:`interlock.models.serving`),
the backend asks vLLM's server for the completion's token ids and their log-probabilities
(``return_token_ids``, ``logprobs``) and makes the turn's text from those ids exactly as the
in-process backends do (decoded, special tokens kept), so a served rollout records what was
sampled (:class:`~interlock.core.backend.SampledTokens`) and its text is that of the ids, not the
server's tool-call parser's rewriting. An answer without valid ids is a ``bad_reply``.

Sampling is the request's temperature alone, as every in-process backend samples: each request
states the neutral value of every other sampling parameter (:data:`NEUTRAL_SAMPLING`, and vLLM's
own, :data:`VLLM_NEUTRAL_SAMPLING`, where the server is vLLM), since a server fills what a request
leaves out with its model's defaults (vLLM reads ``top_k``, ``top_p``, ``min_p`` and the penalties
from the checkpoint's ``generation_config.json``): it would sample from another distribution than
the one the project declares, and report its log-probabilities to the trainer as the policy's.

A request with a ``response_format`` (a JSON schema: a model judge's answer) asks the server to
constrain its reply to it, as OpenAI's structured outputs (``{"type": "json_schema",
"json_schema": {"name": ..., "schema": ..., "strict": true}}``; vLLM's and SGLang's servers take
the same field). A server that ignores it still has its reply validated by the caller.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import math
import os
import random
import socket
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx

from interlock.core.backend import (
    ChatRequest,
    Completion,
    CompletionEnd,
    EpisodeTask,
    SampledTokens,
    log_probabilities,
)
from interlock.core.chat import Message, call_markup, render_turn
from interlock.core.config import BackboneConfig
from interlock.core.errors import InterlockError
from interlock.core.seeds import stable_seed
from interlock.models.chat_template import openai_tools, stop_token_ids

#: an answer larger than this is not a chat completion (a turn of even 32k tokens is far smaller)
MAX_REPLY_BYTES = 4 * 2**20
#: where the servers are when ``backbone.server.base_urls`` is empty: one ``/v1`` address (e.g. ``vllm
#: serve``, ``transformers serve``), or several separated by commas
OPENAI_URL_ENV = "INTERLOCK_OPENAI_BASE_URL"
#: token counts a server reports must fit the trajectories' columns
MAX_TOKENS = 2**31 - 1
#: the name a constrained reply's schema goes by (OpenAI's ``json_schema.name``)
SCHEMA_NAME = "answer"


@dataclass
class Endpoint:
    """One server, and what this client has sent it (read by benchmarks and tests)."""

    url: str  # its chat-completions address
    port: int | None
    in_flight: int = 0
    requests: int = 0  # tries sent, retries included
    streak: int = 0  # tries since its last answer that timed out, broke, or were answered 429 / 5xx
    cool_until: float = 0.0  # after a failure: passed over until then (time.monotonic), longer each time

    @classmethod
    def parse(cls, base_url: str) -> Endpoint:
        try:
            url = httpx.URL(base_url.strip())
        except (httpx.InvalidURL, TypeError):
            url = None
        if (url is None or url.scheme not in ("http", "https") or not url.host
                or not 0 < (url.port or 80) < 2**16):
            raise InterlockError(f"not an http(s) server address: {base_url!r}",
                                 field="backbone.server.base_urls")
        return cls(str(url.copy_with(path=url.path.rstrip("/") + "/chat/completions")), url.port)


class _Watchdog:
    """Shuts a try's socket down ``seconds`` after the try started: ``httpx``'s timeouts bound each
    read, not a whole answer (a server may send its headers or its body byte by byte)."""

    def __init__(self, seconds: float) -> None:
        self.fired, self._socket, self._lock = False, None, threading.Lock()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def trace(self, event: str, info: dict) -> None:
        """``httpx``'s trace extension: watch the socket of the connection the try opens."""
        if event == "connection.connect_tcp.complete" and info.get("return_value") is not None:
            self.watch(info["return_value"].get_extra_info("socket"))

    def watch(self, sock: socket.socket | None) -> None:
        with self._lock:
            self._socket = sock
            if self.fired:  # it fired while connecting
                self._cut()

    def stop(self) -> None:
        self._timer.cancel()

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            self._cut()

    def _cut(self) -> None:
        if self._socket is not None:
            with contextlib.suppress(OSError):  # already closed
                self._socket.shutdown(socket.SHUT_RDWR)


class _Unanswered(Exception):
    """A try that got no HTTP answer: refused, broken, or past the timeout."""


class _BadReply(Exception):
    """An HTTP 200 whose body is not a chat completion."""


class OpenAIBackend:
    name = "openai"

    def __init__(self, base_urls: str | Sequence[str], model: str, *, max_in_flight: int,
                 max_retries: int, timeout_s: float, backoff_s: float = 0.5,
                 max_backoff_s: float = 30.0, api_key_env: str = "OPENAI_API_KEY", tokenizer=None) -> None:
        urls = [base_urls] if isinstance(base_urls, str) else list(base_urls)
        if not urls:
            raise InterlockError("no server address", field="backbone.server.base_urls")
        self.endpoints = [Endpoint.parse(url) for url in urls]
        self.model, self.max_in_flight, self.max_retries = model, max_in_flight, max_retries
        self.timeout_s, self.backoff_s, self.max_backoff_s = timeout_s, backoff_s, max_backoff_s
        headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
        if os.environ.get(api_key_env):
            headers["Authorization"] = f"Bearer {os.environ[api_key_env]}"
        # a connection per try (no keep-alive: the watchdog watches the one the try opens), no
        # proxy or netrc from the environment, no redirects
        self.client = httpx.Client(headers=headers, timeout=timeout_s, trust_env=False,
                                   limits=httpx.Limits(max_connections=None, max_keepalive_connections=0))
        self.retries = 0
        self._lock = threading.Lock()
        #: the served checkpoint's tokenizer and stop tokens, where the text is made from the ids
        self.tokenizer = tokenizer
        self.stop_ids = stop_token_ids(tokenizer) if tokenizer is not None else set()

    def begin(self, key: str, task: EpisodeTask) -> None:
        pass

    def end(self, key: str) -> None:
        pass

    def complete(self, requests: list[ChatRequest]) -> list[Completion]:
        with ThreadPoolExecutor(max_workers=min(self.max_in_flight, max(1, len(requests)))) as pool:
            return list(pool.map(self.complete_one, requests))

    def complete_one(self, request: ChatRequest) -> Completion:
        payload = request_body(request, self.model)
        if self.tokenizer is not None:
            payload |= {"return_token_ids": True, "logprobs": True, **VLLM_NEUTRAL_SAMPLING}
        body = json.dumps(payload).encode()
        jitter = random.Random(stable_seed("openai-backoff", request.key, request.seed))
        problem, failed_on = "", None
        for attempt in range(self.max_retries + 1):
            endpoint = self._acquire(avoid=failed_on)
            try:
                status, retry_after, data = self._post(endpoint, body)
            except _Unanswered as exc:
                status, retry_after, data = None, None, b""
                problem = f"{endpoint.url}: {exc}"
            finally:
                with self._lock:
                    endpoint.in_flight -= 1
            if status == 200:
                with self._lock:
                    endpoint.streak = 0
                return _completion(data, self)
            if status is not None:
                text = data[:300].decode("utf-8", errors="replace")
                problem = f"{endpoint.url} answered {status}: {text!r}"  # repr: no control characters
                if status == 400 and "context" in text.lower():
                    return Completion("", finish_reason="context")
                if status != 429 and status < 500:  # the request itself is refused: no retry helps
                    return _failed("server_error", problem)
            wait = retry_after if retry_after is not None else (
                self._backoff(attempt) * (0.5 + jitter.random() / 2))
            with self._lock:
                endpoint.cool_until = time.monotonic() + max(wait, self._backoff(endpoint.streak))
                endpoint.streak += 1
            failed_on = endpoint
            if attempt < self.max_retries:
                time.sleep(wait)
        return _failed("server_error", f"{problem} (tried {self.max_retries + 1} times)")


    def _backoff(self, failures: int) -> float:
        return min(self.max_backoff_s, self.backoff_s * 2 ** min(failures, 32))

    def _acquire(self, avoid: Endpoint | None) -> Endpoint:
        """The endpoint with the fewest requests in flight (then the fewest sent), passing over
        those still cooling down after a failure, and a retry over the one it just failed on,
        while another is there."""
        with self._lock:
            now = time.monotonic()
            endpoint = min(self.endpoints,
                           key=lambda e: (e.cool_until > now, e is avoid, e.in_flight, e.requests))
            endpoint.in_flight += 1
            endpoint.requests += 1
            if avoid is not None:
                self.retries += 1
            return endpoint

    def _post(self, endpoint: Endpoint, body: bytes) -> tuple[int, float | None, bytes]:
        """One try: the status, ``Retry-After`` in seconds (capped) and at most
        ``MAX_REPLY_BYTES + 1`` bytes of the body, all within ``timeout_s`` in total (a watchdog
        cuts the connection of a server that answers slowly, byte by byte)."""
        watchdog = _Watchdog(self.timeout_s)
        try:
            with self.client.stream("POST", endpoint.url, content=body,
                                    extensions={"trace": watchdog.trace}) as response:
                data = bytearray()
                for chunk in response.iter_raw():  # as sent: the client asked for no compression
                    data += chunk
                    if len(data) > MAX_REPLY_BYTES:
                        break
                if watchdog.fired:
                    raise httpx.TimeoutException("cut by the watchdog")
                return (response.status_code, self._retry_after(response.headers.get("Retry-After")),
                        bytes(data[:MAX_REPLY_BYTES + 1]))
        except (OSError, httpx.HTTPError, httpx.StreamError) as exc:
            if watchdog.fired or isinstance(exc, httpx.TimeoutException | TimeoutError):
                raise _Unanswered(f"no answer within {self.timeout_s:g} s") from None
            raise _Unanswered(f"cannot reach the server ({exc!r})"[:300]) from None
        finally:
            watchdog.stop()

    def _retry_after(self, value: str | None) -> float | None:
        """A ``Retry-After`` header in seconds (delay or HTTP date), at most ``max_backoff_s``;
        None where absent or unreadable."""
        if not value:
            return None
        try:
            seconds = float(value)
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError, IndexError):
                return None
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
            seconds = (when - datetime.now(UTC)).total_seconds()
        return min(self.max_backoff_s, max(0.0, seconds)) if math.isfinite(seconds) else None


#: OpenAI's sampling parameters besides the temperature, at the values that leave the
#: distribution as the temperature makes it
NEUTRAL_SAMPLING = {"top_p": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}
#: vLLM's own, the same way (sent only to a vLLM server: OpenAI's API refuses parameters it does not know)
VLLM_NEUTRAL_SAMPLING = {"top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0}


def request_body(request: ChatRequest, model: str) -> dict:
    """A request as the JSON body of ``POST /chat/completions``."""
    body = {"model": model, "messages": openai_messages(request.messages),
            "max_tokens": request.max_new_tokens, "temperature": request.temperature,
            **NEUTRAL_SAMPLING, "seed": request.seed, "stream": False}
    if request.tools:  # OpenAI's form: a server that validates requests (vLLM's) refuses bare specs
        body["tools"] = openai_tools(request.tools)
    if request.response_format is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": {
            "name": SCHEMA_NAME, "schema": request.response_format, "strict": True}}
    return body


def _failed(reason: CompletionEnd, detail: str) -> Completion:
    return Completion("", finish_reason=reason, detail=detail[:500])


def _completion(data: bytes, backend: OpenAIBackend) -> Completion:
    """An HTTP 200's body as a completion, or a ``bad_reply`` saying what is wrong with it."""
    if len(data) > MAX_REPLY_BYTES:
        return _failed("bad_reply", f"an answer of over {MAX_REPLY_BYTES} bytes")
    try:
        return _read_answer(json.loads(data), backend)
    except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, nested too deeply, a lone surrogate
        return _failed("bad_reply", f"not a JSON answer ({type(exc).__name__}: {exc})")
    except _BadReply as exc:
        return _failed("bad_reply", f"not a chat completion: {exc}")


def _field(container: object, key: str, kind: type | tuple[type, ...], required: bool = False):
    """``container[key]`` when it has the expected type (None where absent and not required)."""
    if not isinstance(container, dict):
        raise _BadReply(f"expected an object holding {key!r}, got {type(container).__name__}")
    value = container.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise _BadReply(f"{key!r} is {type(value).__name__}")
    return value


def _read_answer(answer: object, backend: OpenAIBackend) -> Completion:
    choices = _field(answer, "choices", list, required=True)
    if not choices:
        raise _BadReply("no choices")
    message = _field(choices[0], "message", dict, required=True)
    content = _field(message, "content", str) or ""
    calls = [_tool_call(call) for call in _field(message, "tool_calls", list) or ()]
    usage = _field(answer, "usage", dict) or {}
    tokens = [_field(usage, key, int) or 0 for key in ("prompt_tokens", "completion_tokens")]
    if not all(0 <= n <= MAX_TOKENS for n in tokens):
        raise _BadReply(f"token counts out of range: {tokens}")
    finish = "length" if _field(choices[0], "finish_reason", str) == "length" else "stop"
    if backend.tokenizer is not None:
        sampled = _sampled(choices[0], backend)
        text = backend.tokenizer.decode(list(sampled.generated), skip_special_tokens=False)
        return Completion(text, tokens[0], len(sampled.ids), finish, sampled=sampled)
    text = render_turn(content, calls) if calls else content
    text.encode("utf-8")  # a lone surrogate (JSON's "\ud800") could not be written to a table
    return Completion(text, tokens[0], tokens[1], finish)


def _sampled(choice: dict, backend: OpenAIBackend) -> SampledTokens:
    """The ids vLLM's server returns for a choice (``return_token_ids``), each in the tokenizer's
    vocabulary, with their log-probabilities where it sent one per id."""
    ids = _field(choice, "token_ids", list, required=True)
    if len(ids) > MAX_TOKENS or not all(type(i) is int and 0 <= i < len(backend.tokenizer) for i in ids):
        raise _BadReply("token_ids holds something that is no id of the served tokenizer")
    steps = _field(_field(choice, "logprobs", dict) or {}, "content", list) or []
    logprobs = [step.get("logprob") if isinstance(step, dict) else None for step in steps]
    return SampledTokens(tuple(ids), log_probabilities(logprobs, len(ids)),
                         bool(ids) and ids[-1] in backend.stop_ids)


def _tool_call(call: object) -> str:
    """A structured call as the text protocol writes it, its arguments as the server sent them:
    arguments that are no JSON object are the model's error (a malformed call, so an error
    observation, read by the one reader of calls), a call without a function name the server's
    (``bad_reply``)."""
    function = _field(call, "function", dict, required=True)
    name = _field(function, "name", str, required=True)
    arguments = function.get("arguments")
    return call_markup(name, {} if arguments is None or arguments == "" else arguments)


def openai_messages(messages: Sequence[Message]) -> list[dict]:
    """Our messages as the server expects them: tool calls structured, arguments as JSON text,
    each call with an id (``call_<message>_<call>``, which OpenAI's schema requires: vLLM refuses
    a conversation whose calls have none, so every turn after a first call failed) and each tool
    message with the id of the call it answers (the calls of the turn before, in order; a result
    with no call left to answer, the engine's observation of a malformed call, by its tool's
    name). No chat template of the project renders the ids: the prompt is the in-process one."""
    wired, pending = [], []
    for position, message in enumerate(messages):
        data = message.to_openai()
        if message.role == "assistant":
            pending = [f"call_{position}_{k}" for k in range(len(message.tool_calls))]
            for call, identifier in zip(data.get("tool_calls", []), pending, strict=True):
                call["id"] = identifier
        elif message.role == "tool":
            data["tool_call_id"] = pending.pop(0) if pending else (message.name or "call")
        wired.append(data)
    return wired


def build(backbone: BackboneConfig, checkpoint: Path) -> OpenAIBackend:
    """Served by ``backbone.server.base_urls``, else ``$INTERLOCK_OPENAI_BASE_URL`` (one address or
    several, comma-separated): servers that must serve ``checkpoint``."""
    server = backbone.server
    urls = server.base_urls or [u for u in os.environ.get(OPENAI_URL_ENV, "").split(",") if u.strip()]
    if not urls:
        raise InterlockError(f"set backbone.server.base_urls, or {OPENAI_URL_ENV}, to the servers' "
                             f"/v1 addresses (they must serve {checkpoint})",
                             field="backbone.server.base_urls")
    return OpenAIBackend(urls, str(checkpoint), **server.client_limits())
