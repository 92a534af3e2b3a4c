"""What every judge returns, and what acceptance means."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from interlock.core.chat import Message, render_turn
from interlock.synthesis.packs import Criterion


@dataclass
class Judgement:
    """One judge's verdicts on one rollout, with what judging it cost.

    ``verdicts`` are rows of :data:`interlock.core.schemas.VERDICTS` (deterministic: no timings);
    the costs go to metrics only."""

    rollout_id: str
    task_id: str
    judge: str
    verdicts: list[dict]
    seconds: float = 0.0
    output_tokens: int = 0
    criterion_seconds: dict[str, float] = field(default_factory=dict)
    criterion_tokens: dict[str, int] = field(default_factory=dict)
    #: records changed that no decision required (agent judge): file, record, reason
    collateral: list[dict] = field(default_factory=list)
    #: the compiled checks on the real final workspace: the ground truth (agent judge only)
    compiled: dict[str, bool] = field(default_factory=dict)

    @property
    def passed(self) -> dict[str, bool]:
        return {v["criterion_id"]: v["passed"] for v in self.verdicts}


def verdict_row(rollout_id: str, task_id: str, judge: str, criterion_id: str, passed: bool,
                evidence: str) -> dict:
    return {"rollout_id": rollout_id, "task_id": task_id, "judge": judge, "criterion_id": criterion_id,
            "passed": bool(passed), "evidence": evidence}


def accepted(passed: dict[str, bool], rubric: list[Criterion]) -> bool:
    """A trajectory is accepted only if every mandatory criterion has a verdict, and it passes."""
    return all(passed.get(c.criterion_id, False) for c in rubric if c.mandatory)


def judging_problems(judgement: Judgement, rubric: list[Criterion]) -> list[str]:
    """Why judging did not run cleanly on every criterion (what an execution gate checks): a
    criterion without a verdict, one the sandbox could not judge, or a trajectory whose tool
    calls do not make its recorded final state. Failing is not a problem."""
    verdicts = {v["criterion_id"]: v for v in judgement.verdicts}
    problems = [f"{c.criterion_id}: no verdict" for c in rubric if c.criterion_id not in verdicts]
    problems += [f"{cid}: {v['evidence']}" for cid, v in verdicts.items()
                 if v["evidence"].startswith(JUDGING_FAILURES)]
    return problems


def check_targets(spec: dict) -> tuple[list[str], list[str]]:
    """(files, case ids) a compiled check is about, for matching what a transcript claims."""
    op = spec.get("op")
    if op == "record":
        return [spec["path"]], [str(spec["key"])]
    if op == "document":
        stem = spec["path"].rsplit("/", 1)[-1].rsplit(".", 1)[0]
        return [spec["path"]], [stem]
    if op == "coupling":
        return [spec["path"]], [str(k) for k in spec["members"]]
    return [], []


#: how a verdict's evidence starts when a trajectory's tool calls do not make its recorded final state
REPLAY_FAILED = "replay:"
#: how a verdict's evidence starts where judging itself failed (not the criterion)
JUDGING_FAILURES = ("sandbox:", "unknown check op", REPLAY_FAILED)
#: how every line of text an agent could have written starts when a model judge reads it: no
#: such line can pass for a header of the transcript or of the judge's own instructions
QUOTE = "\u2502 "
#: control sequences of chat templates and of the tool-call protocol, broken up where they occur
#: in quoted text (a tokenizer would read ``<|im_start|>`` in the text as the real token)
_CONTROL = re.compile(r"<(/?)(\||tool_call|tool_response)")


def quote(text: str) -> str:
    """Agent-written text as a model judge may read it: every line behind :data:`QUOTE`, and chat
    control sequences broken up (``<|`` becomes ``< |``), so nothing in it reads as a message
    boundary, a role, a tool result or an instruction of the judge."""
    text = _CONTROL.sub(lambda m: f"< {m.group(1)}{m.group(2)}", text)
    return "\n".join(QUOTE + line for line in text.split("\n"))


def render_transcript(messages: list[Message], max_chars: int = 12_000,
                      observation_chars: int = 300) -> str:
    """The conversation as plain text (system prompt left out; tool outputs clipped): a header
    line per message (``ASSISTANT:``, ``TOOL (name):``, ``USER:``) and its text quoted below it,
    so text inside a message can never pass for another message.

    Longer transcripts keep their beginning (the request) and their end (what was done last)."""
    parts = []
    for message in messages:
        if message.role == "system":
            continue
        if message.role == "assistant":
            parts.append("ASSISTANT:\n" + quote(render_turn(message.content, message.tool_calls)))
        elif message.role == "tool":
            text = message.content
            if len(text) > observation_chars:
                text = text[:observation_chars] + f" [... {len(text) - observation_chars} characters]"
            parts.append(f"TOOL ({_name(message.name)}):\n{quote(text)}")
        else:
            parts.append(f"{message.role.upper()}:\n{quote(message.content)}")
    text = "\n\n".join(parts)
    if len(text) <= max_chars:
        return text
    return _clip_lines(text.split("\n"), max_chars)


def _clip_lines(lines: list[str], max_chars: int) -> str:
    """The first lines up to a third of ``max_chars`` and the last lines up to the rest, whole
    lines only (a line cut in two would lose its quote mark); a line longer than its share is
    shortened at its end."""
    def take(source: list[str], budget: int) -> list[str]:
        kept = []
        for line in source:
            if budget <= 0:
                break
            kept.append(line[:budget])
            budget -= len(line) + 1
        return kept

    head = take(lines, max_chars // 3)
    tail = take(lines[len(head):][::-1], max_chars - max_chars // 3)[::-1]
    return "\n".join([*head, "", "[... transcript clipped ...]", "", *tail])


def _name(name: str | None) -> str:
    """A tool name as a header shows it: the agent chose it, so only a plain identifier passes."""
    return name if name and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", name) else "?"
