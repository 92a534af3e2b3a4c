"""Reading a model's structured reply: one JSON object, strictly, whatever the model wrote.

Every model-backed role that answers in JSON (a model judge, the generator agents) reads its reply
here, so one definition of "a JSON object" holds for all of them: after stripping surrounding
whitespace and one code fence around everything, the whole reply must be one JSON object, with no
repeated key, no ``NaN`` or ``Infinity``, nested no deeper than the parser allows, and no longer
than the caller's limit. Anything else is :class:`NotAnObject`, whose message says why in a few
words (it goes back to the model, and into a rejection reason).
"""

from __future__ import annotations

import json
import re

#: one markdown code fence around the whole reply (``` or ```json), which a reply may add
_FENCE = re.compile(r"```(?:json)?[ \t]*\n(.*)\n[ \t]*```", re.DOTALL)


class NotAnObject(ValueError):
    """A reply that is not one JSON object; the message says why."""


def read_object(reply: str, max_chars: int | None = None) -> dict:
    """The JSON object ``reply`` is, or :class:`NotAnObject`."""
    if max_chars is not None and len(reply) > max_chars:
        raise NotAnObject(f"a reply of {len(reply)} characters, more than the {max_chars} allowed")
    text = reply.strip()
    fenced = _FENCE.fullmatch(text)
    text = fenced.group(1).strip() if fenced else text
    try:
        value = json.loads(text, object_pairs_hook=_unique, parse_constant=_no_constant)
    except NotAnObject:
        raise
    except RecursionError:
        raise NotAnObject("JSON nested too deeply") from None
    except ValueError as exc:  # not JSON, text around it, two objects
        raise NotAnObject(f"not one JSON object ({getattr(exc, 'msg', type(exc).__name__)})") from None
    if not isinstance(value, dict):
        raise NotAnObject(f"a JSON {type(value).__name__}, not an object")
    return value


def _unique(pairs: list[tuple[str, object]]) -> dict:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise NotAnObject("a repeated key")
    return dict(pairs)


def _no_constant(name: str) -> object:
    raise NotAnObject(f"{name} is not JSON")
