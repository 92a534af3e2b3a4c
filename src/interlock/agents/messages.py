"""Conversation messages, and the formats peers read (TRL/verl rows, OpenAI's API)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from interlock.workspace import ToolCall


@dataclass(frozen=True)
class Message:
    role: str  # system, user, assistant, tool
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
        calls = tuple(ToolCall(c["function"]["name"], _arguments(c["function"]["arguments"]))
                      for c in data.get("tool_calls") or ())
        return cls(data["role"], data.get("content") or "", calls, data.get("name"))

    def to_openai(self) -> dict:
        """OpenAI's chat format carries arguments as a JSON string."""
        data = self.to_dict()
        for call in data.get("tool_calls", []):
            call["function"]["arguments"] = json.dumps(call["function"]["arguments"])
        return data


def _arguments(value: object) -> dict:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return {"__unparsed__": value}
    return value if isinstance(value, dict) else {"__unparsed__": value}
