"""The Hermes/Qwen-style tool-call protocol: calls travel as ``<tool_call>{json}</tool_call>``.

Parsing never raises: malformed calls come back as problems the engine turns into error
observations, so the agent can recover.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from interlock.workspace import ToolCall

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
_CALL = re.compile(re.escape(CALL_OPEN) + r"(.*?)(?:" + re.escape(CALL_CLOSE) + r"|$)", re.DOTALL)


@dataclass(frozen=True)
class ParsedTurn:
    content: str  # the text outside the calls
    calls: tuple[ToolCall, ...] = ()
    problems: tuple[str, ...] = field(default_factory=tuple)  # one per malformed call


def render_call(call: ToolCall) -> str:
    body = json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
    return f"{CALL_OPEN}{body}{CALL_CLOSE}"


def render_turn(content: str, calls: tuple[ToolCall, ...] | list[ToolCall]) -> str:
    """An assistant turn as the model writes it: optional text, then one line per call."""
    parts = [content.strip()] if content.strip() else []
    return "\n".join(parts + [render_call(c) for c in calls])


def parse_turn(text: str) -> ParsedTurn:
    calls, problems = [], []
    for match in _CALL.finditer(text):
        body = match.group(1).strip()
        try:
            data = json.loads(body)
        except ValueError as exc:  # not JSON, or a number too long for int() (over 4,300 digits)
            problems.append(f"malformed tool call (not JSON: {getattr(exc, 'msg', exc)}): {body[:120]}")
            continue
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            problems.append(f"malformed tool call (needs a 'name'): {body[:120]}")
            continue
        arguments = data.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                problems.append(f"malformed tool call (arguments are not a JSON object): {body[:120]}")
                continue
        if not isinstance(arguments, dict):
            problems.append(f"malformed tool call (arguments must be an object): {body[:120]}")
            continue
        calls.append(ToolCall(data["name"], arguments))
    content = _CALL.sub("", text).strip()
    return ParsedTurn(content, tuple(calls), tuple(problems))
