"""What each author must answer: one JSON object of its role's form, read strictly.

A :class:`Form` is the JSON schema a backend may constrain decoding to, and the reader that turns
a reply into the role's draft or refuses it with :class:`FormError`, whose message says what is
wrong in a few words (it goes back to the author, and into the task's rejection). The reader
checks the shape of the answer only (keys, types, sizes, paths, ids): whether what an author wrote
is true to the graph is the reviews' to say, as it is for any pack.

- workspace writer: ``{"files": [{"path", "content"}], "index": [{"node_id", "path", "locator",
  "ref"}]}``: every file that holds the graph's evidence, and documents around them (``.md``,
  ``.txt``, ``.eml``: an email, a memo), none at a deliverable's path or the request's; one
  locator per evidence node: ``row`` (a table row by its id), ``clause`` (a policy clause by its
  id, such as ``P-2``) or ``lines`` (a line span ``a-b`` of a file);
- request writer: ``{"request": text}``;
- rubric writer: ``{"criteria": [{"criterion_id", "description"}]}``, one line for each criterion
  it is given and no other;
- the model critic (a reviewer, not an author, asked through the same backend):
  ``{"criteria": [{"criterion_id", "supported", "file", "line"}]}``: for each criterion whether the
  public material supports it, and the public file and line that does (``line`` 0 where not).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from interlock.core.replies import NotAnObject, read_object
from interlock.synthesis.workspace import PathRefused, clean_path

ROLES = ("workspace", "request", "rubric", "critic")
LOCATORS = ("row", "clause", "lines")
#: what a document beside the evidence may be: text a person reads, never a table of cases
DOCUMENT_SUFFIXES = (".md", ".txt", ".eml")
_SPAN = re.compile(r"([1-9][0-9]{0,5})-([1-9][0-9]{0,5})")
T = TypeVar("T")


@dataclass(frozen=True)
class Limits:
    """How much an author may write: bounds that keep a runaway reply from becoming a task."""

    reply_chars: int = 60_000  # one reply, whole
    files: int = 12  # files the workspace writer writes
    file_chars: int = 20_000  # one file
    request_chars: int = 8_000
    description_chars: int = 300  # one criterion's text
    ref_chars: int = 64  # a locator's ref


class FormError(ValueError):
    """A reply that is not the role's answer; the message says why."""


@dataclass(frozen=True)
class Locator:
    """Where an evidence node lives, as the workspace writer says: the file and, in it, a row id,
    a clause id or a line span ``a-b``."""

    path: str
    locator: str
    ref: str


@dataclass(frozen=True)
class WorkspaceDraft:
    files: dict[str, str]
    index: dict[str, Locator]  # evidence node id -> where it is


@dataclass(frozen=True)
class Form(Generic[T]):
    """One role's answer for one task: the schema to constrain decoding to, and its reader."""

    role: str
    schema: dict
    read: Callable[[dict], T]

    def parse(self, reply: str, limits: Limits) -> T:
        try:
            return self.read(read_object(reply, limits.reply_chars))
        except NotAnObject as exc:
            raise FormError(str(exc)) from None


def _object(properties: dict) -> dict:
    return {"type": "object", "properties": properties, "required": list(properties),
            "additionalProperties": False}


#: a schema bounds a string's length only up to this many characters: a grammar sampler builds a
#: rule per character it may take (llama.cpp's crashed on a bound of 20,000); longer text is
#: bounded by the reader alone
SCHEMA_MAX_LENGTH = 512


def _string(max_chars: int) -> dict:
    return {"type": "string", **({"maxLength": max_chars} if max_chars <= SCHEMA_MAX_LENGTH else {})}


def _keys(value: object, keys: Sequence[str], where: str) -> dict:
    if not isinstance(value, dict):
        raise FormError(f"{where} is a JSON {type(value).__name__}, not an object")
    if set(value) != set(keys):
        raise FormError(f"{where} has keys {sorted(value)[:8]}, not exactly {list(keys)}")
    return value


def _list(value: object, where: str, most: int) -> list:
    if not isinstance(value, list):
        raise FormError(f"{where} is a JSON {type(value).__name__}, not an array")
    if len(value) > most:
        raise FormError(f"{where} has {len(value)} items, more than the {most} allowed")
    return value


def _text(value: object, where: str, most: int, *, line: bool = False) -> str:
    if not isinstance(value, str):
        raise FormError(f"{where} is a JSON {type(value).__name__}, not a string")
    if not value.strip():
        raise FormError(f"{where} is empty")
    if len(value) > most:
        raise FormError(f"{where} has {len(value)} characters, more than the {most} allowed")
    if "\x00" in value:
        raise FormError(f"{where} holds a NUL character")
    if line and ("\n" in value or "\r" in value):
        raise FormError(f"{where} is more than one line")
    return value


# ----------------------------------------------------------------------------- workspace writer

def workspace_form(evidence_paths: Mapping[str, str], reserved: set[str],
                   limits: Limits) -> Form[WorkspaceDraft]:
    """The workspace writer's form for one task: ``evidence_paths`` maps each evidence node id to
    the file the graph puts it in (each must be written; the index must place every node);
    ``reserved``: paths the author must leave alone (the request, the deliverables)."""
    schema = _object({
        "files": {"type": "array", "maxItems": limits.files,
                  "items": _object({"path": _string(200), "content": _string(limits.file_chars)})},
        "index": {"type": "array", "maxItems": len(evidence_paths),
                  "items": _object({"node_id": {"type": "string", "enum": sorted(evidence_paths)},
                                    "path": _string(200),
                                    "locator": {"type": "string", "enum": list(LOCATORS)},
                                    "ref": _string(limits.ref_chars)})}})

    def read(value: dict) -> WorkspaceDraft:
        value = _keys(value, ("files", "index"), "the answer")
        files: dict[str, str] = {}
        for n, item in enumerate(_list(value["files"], "files", limits.files)):
            item = _keys(item, ("path", "content"), f"files[{n}]")
            raw = _text(item["path"], f"files[{n}].path", 200, line=True)
            try:
                path = clean_path(raw)
            except PathRefused as exc:
                raise FormError(f"files[{n}].path: {exc}") from None
            if path in files:
                raise FormError(f"files[{n}].path {path!r} is written twice")
            if path in reserved:
                raise FormError(f"files[{n}].path {path!r} is the request or a deliverable: leave it out")
            if path not in evidence_paths.values() and not path.endswith(DOCUMENT_SUFFIXES):
                raise FormError(f"files[{n}].path {path!r} is no file of the evidence; another file may only "
                                f"be a document ({', '.join(DOCUMENT_SUFFIXES)})")
            files[path] = _text(item["content"], f"files[{n}].content", limits.file_chars)
        missing = sorted(set(evidence_paths.values()) - set(files))
        if missing:
            raise FormError(f"the evidence files {', '.join(missing)} are not written")
        index: dict[str, Locator] = {}
        for n, item in enumerate(_list(value["index"], "index", len(evidence_paths))):
            item = _keys(item, ("node_id", "path", "locator", "ref"), f"index[{n}]")
            node = _text(item["node_id"], f"index[{n}].node_id", 32, line=True)
            if node not in evidence_paths:
                raise FormError(f"index[{n}].node_id {node[:32]!r} is no evidence node of the graph")
            if node in index:
                raise FormError(f"index[{n}] places {node} a second time")
            path = _text(item["path"], f"index[{n}].path", 200, line=True)
            if path not in files:
                raise FormError(f"index[{n}].path {path[:80]!r} is not one of the files written")
            kind = item["locator"]
            if kind not in LOCATORS:
                raise FormError(f"index[{n}].locator is {str(kind)[:20]!r}, not one of {', '.join(LOCATORS)}")
            ref = _text(item["ref"], f"index[{n}].ref", limits.ref_chars, line=True)
            if kind == "lines":
                span = _SPAN.fullmatch(ref)
                if span is None or int(span.group(1)) > int(span.group(2)):
                    raise FormError(f"index[{n}].ref {ref!r} is no line span a-b (1 <= a <= b)")
            index[node] = Locator(path, kind, ref)
        unplaced = sorted(set(evidence_paths) - set(index))
        if unplaced:
            raise FormError(f"the index places no {', '.join(unplaced)}")
        return WorkspaceDraft(files, index)

    return Form("workspace", schema, read)


# ----------------------------------------------------------------------------- request writer

def request_form(limits: Limits) -> Form[str]:
    def read(value: dict) -> str:
        return _text(_keys(value, ("request",), "the answer")["request"], "request", limits.request_chars)

    return Form("request", _object({"request": _string(limits.request_chars)}), read)


# ----------------------------------------------------------------------------- rubric writer

def rubric_form(criterion_ids: Sequence[str], limits: Limits) -> Form[dict[str, str]]:
    """One description for each of ``criterion_ids`` (the compiled criteria), and no other."""
    ids = list(criterion_ids)
    schema = _object({"criteria": {"type": "array", "minItems": len(ids), "maxItems": len(ids),
                                   "items": _object({"criterion_id": {"type": "string", "enum": ids},
                                                     "description": _string(limits.description_chars)})}})

    def read(value: dict) -> dict[str, str]:
        items = _list(_keys(value, ("criteria",), "the answer")["criteria"], "criteria", len(ids))
        described: dict[str, str] = {}
        for n, item in enumerate(items):
            item = _keys(item, ("criterion_id", "description"), f"criteria[{n}]")
            cid = item["criterion_id"]
            if cid not in ids:
                raise FormError(f"criteria[{n}].criterion_id {str(cid)[:32]!r} is not one of "
                                f"{', '.join(ids)}")
            if cid in described:
                raise FormError(f"criteria[{n}] describes {cid} a second time")
            described[cid] = _text(item["description"], f"criteria[{n}].description",
                                   limits.description_chars, line=True)
        missing = [cid for cid in ids if cid not in described]
        if missing:
            raise FormError(f"no description for {', '.join(missing)}")
        return described

    return Form("rubric", schema, read)


# ----------------------------------------------------------------------------- the model critic

@dataclass(frozen=True)
class Citation:
    """The model critic's answer for one criterion: supported or not, and where (a public file and
    a line of it; ``line`` 0 where it says not supported)."""

    supported: bool
    path: str
    line: int


def critic_form(criterion_ids: Sequence[str], lines: Mapping[str, int]) -> Form[dict[str, Citation]]:
    """One answer for each of ``criterion_ids``; ``lines``: each public file and its line count
    (a citation must name one of them, and a line it has)."""
    ids = list(criterion_ids)
    schema = _object({"criteria": {"type": "array", "minItems": len(ids), "maxItems": len(ids),
                                   "items": _object({"criterion_id": {"type": "string", "enum": ids},
                                                     "supported": {"type": "boolean"},
                                                     "file": {"type": "string", "enum": sorted(lines)},
                                                     "line": {"type": "integer", "minimum": 0}})}})

    def read(value: dict) -> dict[str, Citation]:
        items = _list(_keys(value, ("criteria",), "the answer")["criteria"], "criteria", len(ids))
        found: dict[str, Citation] = {}
        for n, item in enumerate(items):
            item = _keys(item, ("criterion_id", "supported", "file", "line"), f"criteria[{n}]")
            cid, supported, path, line = (item[k] for k in ("criterion_id", "supported", "file", "line"))
            if cid not in ids or cid in found:
                raise FormError(f"criteria[{n}].criterion_id {str(cid)[:32]!r} is not one of "
                                f"{', '.join(ids)}, once each")
            if not isinstance(supported, bool):
                raise FormError(f"criteria[{n}].supported is not true or false")
            if path not in lines:
                raise FormError(f"criteria[{n}].file {str(path)[:80]!r} is not a public file")
            if not isinstance(line, int) or isinstance(line, bool) or not 0 <= line <= lines[path] or (
                    supported and line == 0):
                raise FormError(f"criteria[{n}].line {str(line)[:12]} is not a line of {path} "
                                f"(1 to {lines[path]}; 0 only where not supported)")
            found[cid] = Citation(supported, path, line)
        missing = [cid for cid in ids if cid not in found]
        if missing:
            raise FormError(f"no answer for {', '.join(missing)}")
        return found

    return Form("critic", schema, read)
