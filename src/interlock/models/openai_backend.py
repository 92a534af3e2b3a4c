"""The ``openai`` backend: any OpenAI-compatible chat-completions server (``vllm serve``,
``transformers serve``, a hosted API), over plain HTTP.

Requests for one turn go out concurrently (one thread each), so a server that batches, as
vLLM does, sees the whole turn at once. Structured ``tool_calls`` in an answer are turned back
into the project's ``<tool_call>`` text, so trajectories look the same whatever the server.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from interlock.core.backend import ChatRequest, Completion, EpisodeTask
from interlock.core.chat import Message, render_turn
from interlock.core.errors import InterlockError


class OpenAIBackend:
    name = "openai"

    def __init__(self, base_url: str, model: str, *, api_key_env: str = "OPENAI_API_KEY",
                 timeout: float = 600.0, max_workers: int = 16) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.timeout, self.max_workers = model, timeout, max_workers
        self.api_key = os.environ.get(api_key_env, "")

    def begin(self, key: str, task: EpisodeTask) -> None:
        pass

    def end(self, key: str) -> None:
        pass

    def complete(self, requests: list[ChatRequest]) -> list[Completion]:
        with ThreadPoolExecutor(max_workers=min(self.max_workers, max(1, len(requests)))) as pool:
            return list(pool.map(self._one, requests))

    def _one(self, request: ChatRequest) -> Completion:
        body = {
            "model": self.model,
            "messages": [_wire(m) for m in request.messages],
            "max_tokens": request.max_new_tokens,
            "temperature": request.temperature,
            "seed": request.seed,
            "stream": False,
        }
        if request.tools:
            body["tools"] = list(request.tools)
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        http = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers,
                                      method="POST")
        try:
            with urllib.request.urlopen(http, timeout=self.timeout) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:300]
            if exc.code == 400 and "context" in detail.lower():
                return Completion("", finish_reason="context")
            raise InterlockError(f"server answered {exc.code}: {detail}", file=self.url) from None
        except (urllib.error.URLError, TimeoutError) as exc:
            raise InterlockError(f"cannot reach the server ({exc})", file=self.url) from None
        choice = answer["choices"][0]
        message = choice.get("message") or {}
        text = message.get("content") or ""
        if message.get("tool_calls"):
            text = render_turn(text, Message.from_dict({"role": "assistant", **message}).tool_calls)
        usage = answer.get("usage") or {}
        finish = {"length": "length", "tool_calls": "stop"}.get(choice.get("finish_reason"), "stop")
        return Completion(text, usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0), finish)


def _wire(message: Message) -> dict:
    """Our messages as the server expects them: tool calls structured, arguments as JSON text."""
    data = message.to_openai()
    if message.role == "tool":
        data["tool_call_id"] = message.name or "call"
    return data
