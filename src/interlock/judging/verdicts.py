"""What every judge returns, and what acceptance means."""

from __future__ import annotations

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
    criterion without a verdict, or one the sandbox could not judge. Failing is not a problem."""
    verdicts = {v["criterion_id"]: v for v in judgement.verdicts}
    problems = [f"{c.criterion_id}: no verdict" for c in rubric if c.criterion_id not in verdicts]
    problems += [f"{cid}: {v['evidence']}" for cid, v in verdicts.items()
                 if v["evidence"].startswith(("sandbox:", "unknown check op"))]
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


def render_transcript(messages: list[Message], max_chars: int = 12_000,
                      observation_chars: int = 300) -> str:
    """The conversation as plain text (system prompt left out; tool outputs clipped).

    Longer transcripts keep their beginning (the request) and their end (what was done last)."""
    parts = []
    for message in messages:
        if message.role == "system":
            continue
        if message.role == "assistant":
            parts.append("ASSISTANT:\n" + render_turn(message.content, message.tool_calls))
        elif message.role == "tool":
            text = message.content
            if len(text) > observation_chars:
                text = text[:observation_chars] + f" [... {len(text) - observation_chars} characters]"
            parts.append(f"TOOL ({message.name}):\n{text}")
        else:
            parts.append(f"{message.role.upper()}:\n{message.content}")
    text = "\n\n".join(parts)
    if len(text) <= max_chars:
        return text
    head = max_chars // 3
    return text[:head] + "\n\n[... transcript clipped ...]\n\n" + text[-(max_chars - head):]
