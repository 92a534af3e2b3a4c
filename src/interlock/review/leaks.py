"""The leak review: the public material must not state what the agent is meant to work out.

The secrets are what the private contract says each deliverable holds (a decision's outcome and
basis, an effect's amount, payee or status, a document's lines), each tied to its case. A public
statement leaks one where it names the case and the value together: a line of the request, the
policy or any other file, or a table row that is not one of the graph's evidence rows (the
evidence legitimately puts, say, an option id beside its case). Values are matched as a reader
would take them: words regardless of case and ending ("APPROVED", "approve"), numbers regardless
of formatting ("$1,270.00" for 1270), several words as a phrase.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from interlock.core.io import loads
from interlock.synthesis.graph import CompletionGraph
from interlock.synthesis.packs import TaskPack
from interlock.synthesis.workspace import MALFORMED, parse_csv

_TOKEN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.\-]*[A-Za-z0-9])?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
#: a word value matches words that share all but its last letters ("approved" ~ "approve")
STEM_SLACK = 2
MIN_STEM = 4


def leak_problems(graph: CompletionGraph, pack: TaskPack) -> list[dict]:
    """One problem per leaked secret and place, naming the file, line, field and value."""
    secrets = _secrets(pack)
    evidence = {_row_key(n.attrs["row"]) for n in graph.of_kind("evidence") if "row" in n.attrs}
    problems, seen = [], set()
    for path, text in sorted(pack.public_files().items()):
        for number, statement in _statements(path, text, evidence):
            tokens = _tokens(statement)
            for case, field, value in secrets:
                place = (path, number, case, field)
                if case in tokens and place not in seen and _states(value, tokens, statement):
                    seen.add(place)
                    problems.append({"criterion_id": "", "problem": f"leak: {path} line {number} states the "
                                     f"{field} {value!r} of {case}, which the agent must work out"})
    return problems


def _secrets(pack: TaskPack) -> list[tuple[str, str, str]]:
    """(case id, field, value) for every value the contract's deliverables hold, bar the key."""
    found = set()
    for item in pack.contract:
        realization = loads(item["realization"], file="contract", item=pack.task_id,
                            field=item["deliverable_id"])
        key = str(realization["key"])
        for field, value in realization["fields"].items():
            if str(value).strip() and str(value) != key:
                found.add((key, field, str(value)))
    return sorted(found)


def _row_key(row: dict) -> tuple:
    return tuple(sorted((str(k), str(v)) for k, v in row.items()))


def _statements(path: str, text: str, evidence: set[tuple]) -> Iterator[tuple[int, str]]:
    """(line number, text) of every statement a reader could take from a public file; a table's
    header and its evidence rows state nothing beyond the evidence."""
    if path.endswith(".csv"):
        _, rows = parse_csv(text)
        for number, row in enumerate(rows, start=2):
            clean = {k: v for k, v in row.items() if k != MALFORMED}
            if _row_key(clean) not in evidence:
                yield number, " ".join(f"{k} {v}" for k, v in clean.items())
        return
    yield from enumerate(text.splitlines(), start=1)


def _tokens(statement: str) -> list[str]:
    return _TOKEN.findall(_THOUSANDS.sub("", statement))


def _states(value: str, tokens: list[str], statement: str) -> bool:
    """Whether a statement holds ``value`` as a reader would take it."""
    if " " in value.strip():
        return " ".join(value.lower().split()) in " ".join(_THOUSANDS.sub("", statement).lower().split())
    if _NUMBER.fullmatch(value):
        return any(_NUMBER.fullmatch(t) and float(t) == float(value) for t in tokens)
    word = value.lower()
    stem = word[:-STEM_SLACK] if len(word) - STEM_SLACK >= MIN_STEM else word
    return any(t.lower() == word or (stem != word and t.lower().startswith(stem)) for t in tokens)
