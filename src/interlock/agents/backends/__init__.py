"""One small interface every model-calling role uses, and its interchangeable backends.

- ``scripted``: deterministic programs (oracle, noisy and adversarial solvers);
- ``transformers``: a local checkpoint, batched, with the conversation prefix cached per episode;
- ``openai``: any OpenAI-compatible HTTP server;
- ``vllm``: vLLM's offline engine on GPUs (the ``gpu`` extra).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from interlock.agents.messages import Message


@dataclass(frozen=True)
class ChatRequest:
    """One generation for one episode. ``key`` names the episode, so a backend may keep the
    conversation prefix cached under it between turns."""

    key: str
    messages: tuple[Message, ...]
    tools: tuple[dict, ...] = ()
    max_new_tokens: int = 256
    temperature: float = 0.0
    seed: int = 0


@dataclass(frozen=True)
class Completion:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = "stop"  # stop, length (max_new_tokens), context (window full)


@dataclass(frozen=True)
class TaskContext:
    """What a scripted policy may know about a task (real models never see it)."""

    task_id: str
    pack: object
    graph: object = None
    domain: object = None
    extras: dict = field(default_factory=dict)


class ChatBackend(Protocol):
    name: str

    def begin(self, key: str, task: TaskContext) -> None:
        """An episode starts (scripted policies plan here; models ignore it)."""

    def complete(self, requests: list[ChatRequest]) -> list[Completion]:
        """All live episodes' next assistant turns, in one batched call."""

    def end(self, key: str) -> None:
        """An episode ended: drop whatever was cached for it."""
