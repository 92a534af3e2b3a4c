"""Sentence templates that render and parse back, so public text stays machine-checkable.

Every policy clause and request instruction is rendered from a :class:`Template`; the
public-input critic parses the same text back with the same template, seeing only what a
solver sees.
"""

from __future__ import annotations

import re
from functools import cached_property

_FIELD = re.compile(r"\{([a-z_]+)\}")
#: a determiner and a preposition, as cue patterns over lower-case words read them
DETERMINER = r"(?:the|a|an|its|their|his|her|each|every|our|your|this|that)"
PREPOSITION = r"(?:on|of|per|for|in|into|to|at|by|with|from|within|under|over)"


def any_of(*patterns: str) -> re.Pattern:
    """One pattern that matches where any of ``patterns`` does."""
    return re.compile("|".join(f"(?:{p})" for p in patterns))


class Template:
    """A sentence with ``{field}`` slots; ``parse`` is the exact inverse of ``render``."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern

    @cached_property
    def _regex(self) -> re.Pattern[str]:
        parts, last, seen = [], 0, set()
        for match in _FIELD.finditer(self.pattern):
            parts.append(re.escape(self.pattern[last:match.start()]))
            name = match.group(1)
            parts.append(f"(?P={name})" if name in seen else f"(?P<{name}>.+?)")
            seen.add(name)
            last = match.end()
        parts.append(re.escape(self.pattern[last:]))
        return re.compile("".join(parts))

    def render(self, **values: object) -> str:
        return self.pattern.format(**values)

    @cached_property
    def _prefix(self) -> str:
        """The literal text before the first slot: most lines a parser is offered fail on it."""
        return self.pattern.split("{", 1)[0]

    def parse(self, text: str) -> dict[str, str] | None:
        text = text.strip()
        if not text.startswith(self._prefix):
            return None
        match = self._regex.fullmatch(text)
        return match.groupdict() if match else None


def join_words(words: list[str]) -> str:
    return ", ".join(words)


def split_words(text: str) -> list[str]:
    return [word.strip() for word in text.split(",") if word.strip()]
