"""Executable checks: each rubric criterion's verifier, as data run by one interpreter.

A check spec is JSON (stored beside the rubric, never in the workspace), so nothing an agent
writes can change how it is verified. ``run_check`` reads the workspace only through a
:class:`~interlock.synthesis.workspace.Store`, so the same checks run on disk or in memory.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable

from interlock.synthesis.kinds.couplings import COUPLING_KINDS
from interlock.synthesis.kinds.decisions import Outcome
from interlock.synthesis.kinds.effects import Realization
from interlock.synthesis.workspace import Store, parse_csv, parse_jsonl

_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?")


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def same(actual: object, expected: object) -> bool:
    """Equal up to case, surrounding space and number formatting ("420" == "420.00")."""
    a, e = str(actual).strip().lower(), str(expected).strip().lower()
    if a == e:
        return True
    if not (_NUMBER.fullmatch(a) and _NUMBER.fullmatch(e)):
        return False
    return float(a) == float(e)


class View:
    """Parsed files of one workspace state, each parsed once."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._cache: dict[tuple[str, str], object] = {}

    def read(self, path: str) -> str | None:
        return self.store.read(path)

    def records(self, path: str, fmt: str) -> list[dict] | None:
        key = (path, fmt)
        if key not in self._cache:
            text = self.store.read(path)
            self._cache[key] = None if text is None else (
                parse_csv(text)[1] if fmt == "csv" else parse_jsonl(text))
        return self._cache[key]


Result = tuple[bool, str]


def realization_check(realization: Realization) -> dict:
    """The check that an effect (or register entry) was carried out as specified."""
    if realization.op == "write_file":
        return {"op": "document", "path": realization.path, "lines": realization.fields}
    fmt = "jsonl" if realization.op == "append_jsonl" else "csv"
    key_field = "id" if realization.op == "update_csv" else "case_id"
    return {"op": "record", "path": realization.path, "format": fmt, "key_field": key_field,
            "key": realization.key, "expect": realization.fields}


def _record(spec: dict, view: View) -> Result:
    records = view.records(spec["path"], spec["format"])
    if records is None:
        return False, f"{spec['path']} is missing"
    matches = [r for r in records if same(r.get(spec["key_field"], ""), spec["key"])]
    if len(matches) != 1:
        return False, f"{len(matches)} records with {spec['key_field']}={spec['key']} in {spec['path']}"
    wrong = [f"{k}={matches[0].get(k)!r} (expected {v!r})" for k, v in spec["expect"].items()
             if not same(matches[0].get(k, ""), v)]
    if wrong:
        return False, f"{spec['path']} {spec['key']}: " + "; ".join(wrong)
    return True, f"{spec['path']} {spec['key']} as expected"


def _document(spec: dict, view: View) -> Result:
    text = view.read(spec["path"])
    if text is None:
        return False, f"{spec['path']} is missing"
    lines = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep:
            lines[name.strip().lower()] = value
    wrong = [f"{k}: {lines.get(k.lower())!r} (expected {v!r})" for k, v in spec["lines"].items()
             if not same(lines.get(k.lower(), ""), v)]
    return (False, f"{spec['path']}: " + "; ".join(wrong)) if wrong else (True, f"{spec['path']} as expected")


def _coupling(spec: dict, view: View) -> Result:
    records = view.records(spec["path"], "csv")
    if records is None:
        return False, f"{spec['path']} is missing"
    outcomes = []
    for case_id, allowed in spec["members"].items():
        rows = [r for r in records if same(r.get("case_id", ""), case_id)]
        if len(rows) != 1:
            return False, f"{len(rows)} decisions recorded for member {case_id}"
        value = rows[0].get("outcome", "")
        if same(value, spec["fallback"]):
            outcomes.append(Outcome(spec["fallback"], fallback=True))
            continue
        match = next((v for v in allowed if same(value, v)), None)
        if match is None:
            return False, f"{case_id}: outcome {value!r} is not one the policy allows"
        outcomes.append(Outcome(match, allowed[match]))
    if not COUPLING_KINDS[spec["kind"]].holds(outcomes, spec["rule"]):
        return False, f"{spec['kind']} violated: " + ", ".join(o.value for o in outcomes)
    return True, f"{spec['kind']} holds over {len(outcomes)} decisions"


def _no_collateral(spec: dict, view: View) -> Result:
    problems = []
    for path, digest in spec["unchanged"].items():
        text = view.read(path)
        if text is None or sha(text) != digest:
            problems.append(f"{path} {'deleted' if text is None else 'changed'}")
    for path, table in spec["tables"].items():
        rows = view.records(path, "csv")
        if rows is None:
            problems.append(f"{path} deleted")
            continue
        current = {r.get("id", ""): r for r in rows}
        if sorted(current) != sorted(table["rows"]) or len(rows) != len(current):
            problems.append(f"{path}: rows added, removed or duplicated")
            continue
        for row_id, initial in table["rows"].items():
            mutable = table["mutable"].get(row_id, [])
            changed = [c for c, v in initial.items() if c not in mutable and current[row_id].get(c) != v]
            changed += sorted(set(current[row_id]) - set(initial))  # a column added
            if changed:
                problems.append(f"{path} {row_id}: {', '.join(changed)} changed")
    for path, append in spec["appends"].items():
        text = view.read(path)
        if text is None or not text.startswith(append["prefix"]):
            problems.append(f"{path}: initial content {'deleted' if text is None else 'rewritten'}")
            continue
        added = view.records(path, append["format"])[append["initial_records"]:]
        stray = [r.get("case_id") for r in added if r.get("case_id") not in append["allowed"]]
        if stray:
            problems.append(f"{path}: records for {stray} that no decision requires")
    for folder, allowed in spec["folders"].items():
        names = [f.removeprefix(folder + "/") for f in view.store.files() if f.startswith(folder + "/")]
        stray = [n for n in names if n not in allowed]
        if stray:
            problems.append(f"{folder}: files {stray} that no decision requires")
    return (False, "; ".join(problems)) if problems else (True, "no collateral changes")


_OPS: dict[str, Callable[[dict, View], Result]] = {
    "record": _record, "document": _document, "coupling": _coupling, "no_collateral": _no_collateral,
}


def run_check(spec: dict, view: View) -> Result:
    """(passed, evidence) for one check on one workspace state."""
    op = _OPS.get(spec.get("op"))
    if op is None:
        return False, f"unknown check op {spec.get('op')!r}"
    return op(spec, view)
