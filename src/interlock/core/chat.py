"""The conversation every role has with a model: messages, tool calls, and their text protocol.

Tool calls travel as Hermes/Qwen-style ``<tool_call>{json}</tool_call>`` text inside assistant
turns. Parsing never raises: malformed calls come back as problems the rollout engine turns into
error observations, so the agent can recover. Messages convert to the formats peers read (TRL and
verl rows, OpenAI's API).
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
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
    def from_dict(cls, data: object) -> Message:
        """A message exactly as :meth:`to_dict` writes it, read strictly: anything else (a missing
        or unknown key, a role, a call or arguments of another shape, arguments nested deeper than
        a call may be) raises :class:`RecordError` naming the part, so a record read back is never
        one the rollout engine could not have written."""
        data = _object(data, "", {"role", "content", "tool_calls", "name"}, required={"role", "content"})
        role, content, name = data["role"], data["content"], data.get("name")
        if role not in ROLES:
            raise RecordError(f"role {str(role)[:40]!r} is none of {', '.join(ROLES)}", "role")
        if not isinstance(content, str):
            raise RecordError(f"content is a JSON {_kind(content)}, not a string", "content")
        if name is not None and not isinstance(name, str):
            raise RecordError(f"name is a JSON {_kind(name)}, not a string", "name")
        calls = data.get("tool_calls") or []
        if not isinstance(calls, list):
            raise RecordError(f"tool_calls is a JSON {_kind(calls)}, not a list", "tool_calls")
        if calls and role != "assistant":
            raise RecordError(f"a {role} message carries tool calls; only an assistant's does", "tool_calls")
        return cls(role, content, tuple(_call(c, f"tool_calls[{i}]") for i, c in enumerate(calls)), name)

    def to_openai(self) -> dict:
        """OpenAI's chat format carries arguments as a JSON string."""
        data = self.to_dict()
        for call in data.get("tool_calls", []):
            call["function"]["arguments"] = json.dumps(call["function"]["arguments"])
        return data


class RecordError(ValueError):
    """A recorded message that is not one the rollout engine writes; ``field`` names the part."""

    def __init__(self, reason: str, field: str) -> None:
        super().__init__(reason)
        self.reason, self.field = reason, field

    def within(self, prefix: str) -> RecordError:
        """The same error, its part named from an enclosing record (``messages[3]``)."""
        return RecordError(self.reason, f"{prefix}.{self.field}" if self.field else prefix)


ROLES: tuple[Role, ...] = ("system", "user", "assistant", "tool")


def _kind(value: object) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number")


def _object(value: object, field: str, allowed: set[str], required: set[str]) -> dict:
    if not isinstance(value, dict):
        raise RecordError(f"a JSON {_kind(value)}, not an object", field)
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise RecordError(f"unknown key {unknown[0][:40]!r}", field)
    missing = sorted(required - set(value))
    if missing:
        raise RecordError(f"no {missing[0]!r}", field)
    return value


def _call(value: object, field: str) -> ToolCall:
    """One recorded call, as :meth:`Message.to_dict` writes it (arguments an object, never text)."""
    call = _object(value, field, {"type", "function"}, required={"type", "function"})
    if call["type"] != "function":
        raise RecordError(f"type {str(call['type'])[:40]!r}, not 'function'", f"{field}.type")
    function = _object(call["function"], f"{field}.function", {"name", "arguments"},
                       required={"name", "arguments"})
    name, arguments = function["name"], function["arguments"]
    if not isinstance(name, str):
        raise RecordError(f"a JSON {_kind(name)}, not a string", f"{field}.function.name")
    if not isinstance(arguments, dict):
        raise RecordError(f"a JSON {_kind(arguments)}, not an object: the engine records only calls whose "
                          "arguments parsed as one", f"{field}.function.arguments")
    if nesting(arguments) > MAX_ARGUMENT_NESTING:
        raise RecordError(f"nested deeper than the {MAX_ARGUMENT_NESTING} levels a call may have",
                          f"{field}.function.arguments")
    return ToolCall(name, arguments)


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
    return call_markup(call.name, call.arguments)


def call_markup(name: str, arguments: object) -> str:
    """A call as the text protocol writes it, whatever its arguments are (a server's structured
    call may carry them as JSON text, or as something that is no object): :func:`parse_turn` then
    reads it like any text, a call whose arguments are no JSON object as a malformed call."""
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{CALL_OPEN}{body}{CALL_CLOSE}"


def render_turn(content: str, calls: Sequence[ToolCall | str]) -> str:
    """An assistant turn as the model writes it: optional text, then one line per call (a call, or
    its markup already written)."""
    parts = [content.strip()] if content.strip() else []
    return "\n".join(parts + [c if isinstance(c, str) else render_call(c) for c in calls])


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
        if not storable(data):
            problems.append(f"malformed tool call (a lone surrogate, which is no text): {body[:120]}")
            continue
        calls.append(ToolCall(data["name"], arguments))
        spans.append(match.span())
    return ParsedTurn(text, tuple(calls), tuple(problems), tuple(spans))


def storable(value: object) -> bool:
    """Whether a JSON value can be written back as text (JSON's ``"\\ud800"`` decodes to a lone
    surrogate, which no UTF-8 table takes)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (UnicodeEncodeError, RecursionError):
        return False
    return True


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


# ----------------------------------------------------------------------------- control text

#: the control tokens of the chat-template families backbones use that :data:`_CONTROL_SHAPES` does
#: not cover: Llama 2 / Mistral's, Gemma's, and SmolLM2's (StarCoder's) added special tokens
CONTROL_TOKENS = frozenset({
    "<s>", "</s>", "<unk>", "<pad>", "<bos>", "<eos>", "<mask>", "[INST]", "[/INST]", "<<SYS>>", "<</SYS>>",
    "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_CALLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]",
    "<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>",
    "<repo_name>", "<reponame>", "<file_sep>", "<filename>", "<gh_stars>", "<issue_start>", "<issue_comment>",
    "<issue_closed>", "<jupyter_start>", "<jupyter_text>", "<jupyter_code>", "<jupyter_output>",
    "<jupyter_script>", "<empty_output>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>",
})
#: the shapes of whole families of control tokens: ``<|im_end|>`` (ChatML, Qwen, Phi, SmolLM2),
#: ``<|eot_id|>`` (Llama 3), ``<｜end▁of▁sentence｜>`` (DeepSeek)
_CONTROL_SHAPES = r"<\|[^\s|<>]{1,64}\|>|<\uff5c[^\s\uff5c]{1,64}\uff5c>"
#: what breaks a control text so no tokenizer reads it as its token: WORD JOINER, an invisible
#: format character that no template, tokenizer normalizer or Unicode normalization form removes
JOINER = "\u2060"


@functools.lru_cache(maxsize=64)
def _control_pattern(extra: frozenset[str]) -> re.Pattern:
    texts = sorted(CONTROL_TOKENS | extra, key=len, reverse=True)
    return re.compile("|".join([*map(re.escape, texts), _CONTROL_SHAPES]))


def control_texts(text: str, extra: Iterable[str] = ()) -> list[str]:
    """The control texts ``text`` holds, as written or once Unicode-normalized (NFKC: a
    tokenizer that normalizes reads ``＜|im_end|＞`` as ``<|im_end|>``): the tokens of
    :data:`CONTROL_TOKENS`, of the shapes of whole families, and ``extra`` (a tokenizer's own)."""
    pattern = _control_pattern(frozenset(extra))
    found = pattern.findall(text)
    if not text.isascii():
        found += [t for t in pattern.findall(unicodedata.normalize("NFKC", text)) if t not in found]
    return list(dict.fromkeys(found))


def neutralize(text: str, extra: Iterable[str] = ()) -> str:
    """``text`` with every control text it holds (:func:`control_texts`) broken by a
    :data:`JOINER` after its first character: it reads the same, and no tokenizer turns it into a
    control token. Text a look-alike would make one once normalized is normalized first."""
    pattern = _control_pattern(frozenset(extra))
    if not text.isascii() and pattern.search(unicodedata.normalize("NFKC", text)):
        text = unicodedata.normalize("NFKC", text)
    return pattern.sub(lambda m: m.group()[0] + JOINER + m.group()[1:], text)


def neutralized_message(message: dict, extra: Iterable[str] = ()) -> dict:
    """A message dict (:meth:`Message.to_dict` or OpenAI's form) with :func:`neutralize` applied to
    every text in it that a policy or a tool wrote: its content, its name, its calls' names, and
    their arguments (keys and strings at every depth; JSON text as it is)."""
    extra = frozenset(extra)

    def clean(value: object) -> object:
        if isinstance(value, str):
            return neutralize(value, extra)
        if isinstance(value, dict):
            return {clean(k): clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    return {key: clean(value) if key in ("content", "name", "tool_calls") else value
            for key, value in message.items()}
