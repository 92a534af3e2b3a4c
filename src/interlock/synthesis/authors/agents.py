"""Asking an author: one role, many tasks at once, every reply read by its form and sent back
with the reason when it is refused, at most ``max_attempts`` times; every call recorded.

The tasks' requests of one round go to the backend as one batch (a local model decodes them
together; a server backend sends them concurrently). A reply that is cut off, that a server
never gave, or that is not the role's form costs an attempt; the last refusal is the task's
rejection reason. Nothing a model writes raises: whatever comes back is read as hostile input.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from interlock.core.backend import ChatBackend, ChatRequest
from interlock.core.chat import Message
from interlock.core.config import GeneratorConfig
from interlock.core.errors import InterlockError
from interlock.core.seeds import stable_seed
from interlock.synthesis.authors.forms import Form, FormError, Limits
from interlock.synthesis.authors.prompts import retry_message

T = TypeVar("T")
#: how much of a refused reply goes back to the author with the reason
ECHO_CHARS = 2_000


@dataclass(frozen=True)
class AuthorSettings:
    """How the authors are asked (``generator`` in params.yaml)."""

    temperature: float
    max_new_tokens: int
    max_attempts: int  # replies per task and role, the first included
    seed: int = 0
    limits: Limits = Limits()


@dataclass(frozen=True)
class Call:
    """One model call of one author for one task, as the packs stage records it."""

    task_id: str
    role: str
    attempt: int
    prompt_tokens: int
    completion_tokens: int
    seconds: float  # the batch's wall time, shared by its requests
    accepted: bool
    problem: str  # why the reply was refused ("" when accepted)

    def row(self) -> dict:
        """Its row of ``author_calls`` (:data:`~interlock.core.schemas.AUTHORING_TABLES`)."""
        return {"task_id": self.task_id, "role": self.role, "attempt": self.attempt,
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "accepted": self.accepted, "problem": self.problem}

    def timing(self) -> dict:
        """Its row of the measured timings (:data:`~interlock.core.schemas.AUTHOR_TIMINGS`)."""
        return {"task_id": self.task_id, "role": self.role, "attempt": self.attempt, "seconds": self.seconds}


@dataclass(frozen=True)
class Ask(Generic[T]):
    """One author's job for one task: what it is shown, and the form its answer must have."""

    task_id: str
    messages: tuple[Message, ...]
    form: Form[T]


@dataclass(frozen=True)
class Refusal:
    """A task the author never answered in form: the role, and the last reason."""

    role: str
    reason: str

    def __str__(self) -> str:
        return f"{self.role} writer: {self.reason}"


@dataclass(frozen=True)
class _Task:
    task_id: str  # what the backend is told an episode is about (scripted authors plan by it)


def ask(backend: ChatBackend, asks: list[Ask[T]],
        settings: AuthorSettings) -> tuple[dict[str, T | Refusal], list[Call]]:
    """Every ask's answer (or its :class:`Refusal`), by task id, and the calls made."""
    conversations = {a.task_id: list(a.messages) for a in asks}
    pending = {a.task_id: a for a in asks}
    results: dict[str, T | Refusal] = {}
    calls: list[Call] = []
    keys = {a.task_id: f"{a.task_id}/{a.form.role}" for a in asks}
    for task_id, key in keys.items():
        backend.begin(key, _Task(task_id))
    try:
        for attempt in range(1, settings.max_attempts + 1):
            if not pending:
                break
            order = list(pending)
            requests = [ChatRequest(keys[t], tuple(conversations[t]), max_new_tokens=settings.max_new_tokens,
                                    temperature=settings.temperature, response_format=pending[t].form.schema,
                                    seed=stable_seed(settings.seed, "author", keys[t], attempt) % 2**31)
                        for t in order]
            start = time.perf_counter()
            completions = backend.complete(requests)
            share = (time.perf_counter() - start) / len(requests)
            for task_id, completion in zip(order, completions, strict=True):
                job = pending[task_id]
                value, problem = None, ""
                if completion.finish_reason not in ("stop", "length"):
                    problem = f"no answer came back ({completion.finish_reason}"
                    problem += f": {completion.detail[:200]})" if completion.detail else ")"
                elif completion.finish_reason == "length":
                    problem = f"the answer was cut off at {settings.max_new_tokens} tokens"
                else:
                    try:
                        value = job.form.parse(completion.text, settings.limits)
                    except FormError as exc:
                        problem = str(exc)[:500]
                calls.append(Call(task_id, job.form.role, attempt, completion.prompt_tokens,
                                  completion.completion_tokens, share, not problem, problem))
                if not problem:
                    results[task_id] = value
                    del pending[task_id]
                elif attempt == settings.max_attempts:
                    results[task_id] = Refusal(job.form.role, problem)
                else:
                    conversations[task_id] += [Message("assistant", completion.text[:ECHO_CHARS]),
                                               retry_message(problem)]
    finally:
        for key in keys.values():
            backend.end(key)
    return results, calls


def author_backend(generator: GeneratorConfig) -> ChatBackend:
    """The backend the authors are asked through (``generator.backend``): a server for ``openai``
    (``generator.model`` is the name it serves), else a local checkpoint folder."""
    from interlock.core.config import BackboneConfig, GenerationConfig
    from interlock.core.registry import BACKENDS

    model = Path(str(generator.model))
    if generator.backend != "openai" and not (model / "config.json").is_file():
        raise InterlockError(f"{model} is no checkpoint folder (no config.json); name one, such as "
                             "data/models/base after `dvc repro base_model`", field="generator.model")
    backbone = BackboneConfig(name="generator", weights={"source": "pretrained", "model": str(model)},
                              backend=str(generator.backend), dtype=generator.dtype, gguf=generator.gguf,
                              max_context=generator.max_context, server=generator.server,
                              serve=generator.serve,
                              generation=GenerationConfig(temperature=generator.temperature,
                                                          max_new_tokens=generator.max_new_tokens))
    return BACKENDS.get(backbone.builder())(backbone, model)


def settings_of(generator: GeneratorConfig, seed: int) -> AuthorSettings:
    return AuthorSettings(temperature=generator.temperature, max_new_tokens=generator.max_new_tokens,
                          max_attempts=generator.max_attempts, seed=seed)
