"""Test doubles for the model judges: backends that answer a judge with what it was shown (its own
prompt, the last JSON object in it, the agent's injected text) or with the answer it asked for.

Each implements :class:`~interlock.core.backend.ChatBackend` (``name``, ``begin``, ``complete``,
``end``) and records every request and reply, so a test can read what a judge sent and got."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from interlock.core.backend import ChatRequest, Completion
from interlock.synthesis.tasks import TaskContext

Reply = Callable[[ChatRequest, TaskContext], str]


class JudgeDouble:
    """A ChatBackend whose every completion is ``reply(request, task)`` (the task the episode began
    with), ended by the model itself (``stop``)."""

    def __init__(self, name: str, reply: Reply) -> None:
        self.name, self.reply = name, reply
        self.tasks: dict[str, TaskContext] = {}
        self.requests: list[ChatRequest] = []
        self.replies: list[str] = []

    def begin(self, key: str, task: TaskContext) -> None:
        self.tasks[key] = task

    def complete(self, requests: list[ChatRequest]) -> list[Completion]:
        texts = [self.reply(r, self.tasks[r.key]) for r in requests]
        self.requests += requests
        self.replies += texts
        return [Completion(text, completion_tokens=max(1, len(text) // 4)) for text in texts]

    def end(self, key: str) -> None:
        self.tasks.pop(key, None)


def prompt_text(request: ChatRequest) -> str:
    """What the judge wrote to the model: its system prompt and user messages, concatenated."""
    return "\n".join(m.content for m in request.messages if m.role in ("system", "user"))


def json_objects(text: str) -> list[str]:
    """Every top-level JSON object in ``text``, as written there, in order."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while (start := text.find("{", at)) != -1:
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError:
            at = start + 1
            continue
        if isinstance(value, dict):
            found.append(text[start:end])
        at = end
    return found


def echo(request: ChatRequest, task: TaskContext) -> str:
    """The worst echo: the whole prompt, verbatim."""
    return prompt_text(request)


def last_json(request: ChatRequest, task: TaskContext) -> str:
    """The last JSON object the prompt holds (nothing where it holds none)."""
    return (json_objects(prompt_text(request)) or [""])[-1]


def saying(text_of: Callable[[TaskContext], str]) -> Reply:
    """A reply that is the agent's injected text for the task, verbatim: a model the agent steered
    completely."""
    return lambda request, task: text_of(task)


_NONCE = re.compile(r'"nonce": "([0-9a-f]+)"')


def answering(verdict: bool, around: str = "") -> Reply:
    """The clean twin: reads the nonce and the criteria from the judge's own instructions (the
    last example in its prompt) and answers ``verdict`` for every criterion, in the structure
    asked for, with ``around`` on both sides (whitespace)."""
    def reply(request: ChatRequest, task: TaskContext) -> str:
        asked = json.loads(json_objects(prompt_text(request))[-1])
        nonce = _NONCE.findall(prompt_text(request))[-1]
        assert asked["nonce"] == nonce
        return around + json.dumps({"nonce": nonce, "verdicts": dict.fromkeys(asked["verdicts"], verdict)}) \
            + around
    return reply


class Recorder:
    """Another backend, its requests and completions recorded."""

    def __init__(self, backend) -> None:
        self.backend, self.name = backend, backend.name
        self.requests: list[ChatRequest] = []
        self.completions: list[Completion] = []

    def begin(self, key: str, task: TaskContext) -> None:
        self.backend.begin(key, task)

    def complete(self, requests: list[ChatRequest]) -> list[Completion]:
        completions = self.backend.complete(requests)
        self.requests += requests
        self.completions += completions
        return completions

    def end(self, key: str) -> None:
        self.backend.end(key)


def accepted_by_the_stages(trajectories: list, contexts: list[TaskContext], folder, context=None) -> set[str]:
    """The rollout ids the pipeline's own `judge` and `accept` stages keep of ``trajectories``:
    written as the rollouts and packs tables, graded by ``run_judge`` (the agent judge, played
    under ``context.episode``'s rules), kept by ``accepted_rollouts``."""
    from interlock.core import schemas
    from interlock.core.io import write_table, write_table_set
    from interlock.judging.stage import accepted_rollouts, mandatory_criteria, run_judge
    from interlock.synthesis.packs import pack_rows

    write_table(folder / "trajectories.parquet", [t.to_row() for t in trajectories], schemas.TRAJECTORIES)
    with write_table_set(folder / "packs", schemas.PACK_TABLES) as tables:
        rows: dict[str, list[dict]] = {name: [] for name in schemas.PACK_TABLES}
        for task in contexts:
            for name, table_rows in pack_rows(task.pack).items():
                rows[name] += table_rows
        tables.write(rows)
    run_judge(folder / "trajectories.parquet", [folder / "packs"], folder / "judge", graders=("agent",),
              context=context, progress=False)
    mandatory = mandatory_criteria([folder / "packs"])
    return accepted_rollouts(folder / "judge" / "agent.parquet", mandatory, "agent")
