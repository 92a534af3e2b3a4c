"""The conversation every role has with a model: messages, tool calls, and their text protocol.

Tool calls travel as Hermes/Qwen-style ``<tool_call>{json}</tool_call>`` text inside assistant
turns. Parsing never raises: malformed calls come back as problems the rollout engine turns into
error observations, so the agent can recover. Messages convert to the formats peers read (TRL and
verl rows, OpenAI's API).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ToolResult:
    """What running one call gave: whether it worked, its observation, and whether it ended the
    task (``submit``)."""

    ok: bool
    output: str
    submitted: bool = False


@dataclass(frozen=True)
class Message:
    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = field(default_factory=tuple)
    name: str | None = None  # the tool a tool message answers

    def to_dict(self) -> dict:
        """TRL's conversational format: tool calls as {"type": "function", "function": {...}}."""
        data: dict = {"role": self.role, "content": self.content}
        if self.tool_calls:
            data["tool_calls"] = [{"type": "function",
                                   "function": {"name": c.name, "arguments": c.arguments}}
                                  for c in self.tool_calls]
        if self.name is not None:
            data["name"] = self.name
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Message:
        calls = tuple(ToolCall(c["function"]["name"], tool_arguments(c["function"]["arguments"]))
                      for c in data.get("tool_calls") or ())
        return cls(data["role"], data.get("content") or "", calls, data.get("name"))

    def to_openai(self) -> dict:
        """OpenAI's chat format carries arguments as a JSON string."""
        data = self.to_dict()
        for call in data.get("tool_calls", []):
            call["function"]["arguments"] = json.dumps(call["function"]["arguments"])
        return data


def tool_arguments(value: object) -> dict:
    """A call's arguments as an object, whatever a server or a file holds: JSON text is decoded,
    and what is not an object (or not JSON, or nested too deeply to decode) is kept under
    ``__unparsed__``, which no tool takes, so the call comes back as an error observation."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):  # not JSON, a number too long for int(), too deep
            return {"__unparsed__": value}
    return value if isinstance(value, dict) else {"__unparsed__": value}


# ----------------------------------------------------------------------------- the text protocol

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
#: how deep a call's arguments may nest objects and lists (deeper is a malformed call: every
#: later reader, down to the trajectory's JSON, stays far from Python's recursion limit)
MAX_ARGUMENT_NESTING = 32
_CALL = re.compile(re.escape(CALL_OPEN) + r"(.*?)(?:" + re.escape(CALL_CLOSE) + r"|$)", re.DOTALL)


@dataclass(frozen=True)
class ParsedTurn:
    text: str  # the turn as the model wrote it
    calls: tuple[ToolCall, ...] = ()
    problems: tuple[str, ...] = field(default_factory=tuple)  # one per malformed call
    spans: tuple[tuple[int, int], ...] = ()  # where each call's markup lies in ``text``

    def remainder(self, calls: int | None = None) -> str:
        """The text without the markup of its first ``calls`` calls (None: all of them), stripped:
        a malformed call's markup stays, as the model wrote it."""
        parts, start = [], 0
        for begin, end in self.spans[:calls]:
            parts.append(self.text[start:begin])
            start = end
        return ("".join(parts) + self.text[start:]).strip()


def render_call(call: ToolCall) -> str:
    body = json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
    return f"{CALL_OPEN}{body}{CALL_CLOSE}"


def render_turn(content: str, calls: tuple[ToolCall, ...] | list[ToolCall]) -> str:
    """An assistant turn as the model writes it: optional text, then one line per call."""
    parts = [content.strip()] if content.strip() else []
    return "\n".join(parts + [render_call(c) for c in calls])


def parse_turn(text: str) -> ParsedTurn:
    calls, problems, spans = [], [], []
    for match in _CALL.finditer(text):
        body = match.group(1).strip()
        try:
            data = json.loads(body)
        except ValueError as exc:  # not JSON, or a number too long for int() (over 4,300 digits)
            problems.append(f"malformed tool call (not JSON: {getattr(exc, 'msg', exc)}): {body[:120]}")
            continue
        except RecursionError:
            problems.append(f"malformed tool call (nested too deeply): {body[:120]}")
            continue
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            problems.append(f"malformed tool call (needs a 'name'): {body[:120]}")
            continue
        arguments = data.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except (ValueError, RecursionError):
                problems.append(f"malformed tool call (arguments are not a JSON object): {body[:120]}")
                continue
        if not isinstance(arguments, dict):
            problems.append(f"malformed tool call (arguments must be an object): {body[:120]}")
            continue
        if nesting(arguments) > MAX_ARGUMENT_NESTING:
            problems.append(f"malformed tool call (arguments nested deeper than {MAX_ARGUMENT_NESTING} "
                            f"levels): {body[:120]}")
            continue
        calls.append(ToolCall(data["name"], arguments))
        spans.append(match.span())
    return ParsedTurn(text, tuple(calls), tuple(problems), tuple(spans))


def walk(value: object) -> Iterator[tuple[object, int]]:
    """Every part of a JSON value (object keys included) with its depth, without recursion: a
    value as deep as a hostile writer likes is read in constant stack."""
    todo = [(value, 0)]
    while todo:
        item, depth = todo.pop()
        yield item, depth
        if isinstance(item, dict):
            todo += [(part, depth + 1) for pair in item.items() for part in pair]
        elif isinstance(item, list):
            todo += [(part, depth + 1) for part in item]


def nesting(value: object) -> int:
    """How deep objects and lists nest in a JSON value (a scalar: 0)."""
    return max(depth for _, depth in walk(value))
