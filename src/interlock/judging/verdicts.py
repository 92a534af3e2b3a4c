"""What every judge returns, what acceptance means, and the one answer a model judge may give.

A model judge (the text judge's model, the agent judge's model review) answers in one fixed
structure, :class:`AnswerForm`: its final reply must be exactly one JSON object
``{"nonce": "<nonce>", "verdicts": {"C1": true, "C2": false}}`` (optionally with a short
``"reason"``), nothing before or after it. The nonce is a digest of the judge's own request: no
text an agent wrote can hold it, so no verdict an agent planted in a transcript or a file, and no
echo of the judge's prompt, reads as the judge's answer.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from interlock.core.chat import Message, render_turn
from interlock.core.replies import NotAnObject, read_object
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
#: how a verdict's evidence starts where the row holding the episode is not one the engine writes
BAD_ROW = "bad row:"
#: how a verdict's evidence starts where the judge refuses an episode for what its policy wrote
#: (control text of a chat template), whatever its work did: a failed criterion, not a failed judging
REFUSED = "refused:"
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


# ----------------------------------------------------------------------------- a model judge's answer

#: hex digits of an answer's nonce (64 bits)
NONCE_HEX = 16
#: the most characters an answer's optional reason may have
REASON_CHARS = 200
#: the answer's keys: the two it must have, and the one it may add
_REQUIRED, _OPTIONAL = ("nonce", "verdicts"), ("reason",)


class Refused(ValueError):
    """A reply that is not an answer; the message says why."""


@dataclass(frozen=True)
class Answer:
    """What a model judge answered: a verdict for every criterion it was asked about."""

    verdicts: dict[str, bool]
    reason: str = ""


@dataclass(frozen=True)
class AnswerForm:
    """The answer one model-judge request must give: its nonce and the criteria it asks about.

    - :meth:`instructions`: how the prompt asks for it, with an example that is itself no answer
      (its verdicts are the placeholder string ``"true or false"``), so a model that echoes its
      prompt gives no verdict;
    - :meth:`schema`: the JSON schema of the answer, for backends that constrain decoding to it
      (``ChatRequest.response_format``); the strict form: the nonce pinned by ``const``, every
      criterion a required boolean, no other key (no ``reason``: a constrained decoder cannot be
      told to stop a free string in time, and OpenAI's strict mode takes no optional keys);
    - :meth:`parse`: the answer, read strictly from the whole reply, or :class:`Refused`."""

    nonce: str
    criterion_ids: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.criterion_ids:  # its example would then be an answer
            raise ValueError("an answer form asks about at least one criterion")

    @classmethod
    def of(cls, key: str, criterion_ids: Sequence[str], prompt: str) -> AnswerForm:
        """The form of a request: ``key`` is the judge's own name for it, ``prompt`` everything it
        shows the model before the instructions (the agent's quoted text included). The nonce is
        their digest, so the agent's text cannot contain it (it would have to contain a digest of
        itself), and the same request always gets the same nonce (runs are reproducible)."""
        ids = tuple(criterion_ids)
        text = "\0".join(["interlock/answer/v1", key, *ids, prompt])
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        return cls(digest[:NONCE_HEX], ids)

    def instructions(self) -> str:
        example = json.dumps({"nonce": self.nonce,
                              "verdicts": dict.fromkeys(self.criterion_ids, "true or false"),
                              "reason": "one short sentence (optional)"})
        return ("Answer with exactly one JSON object and nothing else (no text before or after it):\n"
                f"{example}\n"
                f"with \"nonce\" exactly \"{self.nonce}\", one key in \"verdicts\" for each of "
                f"{', '.join(self.criterion_ids)} and no other, each \"true or false\" replaced by "
                "the JSON boolean true (met) or false (not met), unquoted, and \"reason\" left out "
                f"or at most {REASON_CHARS} characters.")

    def schema(self) -> dict:
        verdicts = {"type": "object",
                    "properties": {cid: {"type": "boolean"} for cid in self.criterion_ids},
                    "required": list(self.criterion_ids), "additionalProperties": False}
        return {"type": "object", "properties": {"nonce": {"type": "string", "const": self.nonce},
                                                 "verdicts": verdicts},
                "required": list(_REQUIRED), "additionalProperties": False}

    def parse(self, reply: str) -> Answer:
        """The answer ``reply`` is, or :class:`Refused`: after stripping surrounding whitespace
        (and one code fence around everything), the reply must be one JSON object with this
        form's nonce, a boolean for exactly its criteria, no repeated and no other keys."""
        try:
            value = read_object(reply)
        except NotAnObject as exc:
            raise Refused(str(exc)) from None
        keys = set(value)
        if not set(_REQUIRED) <= keys <= {*_REQUIRED, *_OPTIONAL}:
            raise Refused(f"keys {sorted(keys)}, not nonce and verdicts (and reason)")
        if value["nonce"] != self.nonce:
            raise Refused("the wrong nonce")
        verdicts = value["verdicts"]
        if not isinstance(verdicts, dict):
            raise Refused(f"verdicts that are a JSON {type(verdicts).__name__}, not an object")
        if set(verdicts) != set(self.criterion_ids):
            named = ", ".join(sorted(verdicts))[:200]
            raise Refused(f"verdicts for {named or 'nothing'}, not for {', '.join(self.criterion_ids)}")
        wrong = sorted(cid for cid, verdict in verdicts.items() if not isinstance(verdict, bool))
        if wrong:
            raise Refused(f"verdicts that are not true or false: {', '.join(wrong)}")
        reason = value.get("reason", "")
        if not isinstance(reason, str) or len(reason) > REASON_CHARS:
            raise Refused(f"a reason that is not a string of at most {REASON_CHARS} characters")
        return Answer(dict(verdicts), reason)

