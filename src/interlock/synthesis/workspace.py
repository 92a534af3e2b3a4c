"""Workspaces and the tools an agent uses on them.

A workspace is a set of text files. :class:`MemoryStore` holds one in memory (fast, for the
oracle, the critic and the controls); :class:`DirectoryStore` holds one on disk (for agents),
confined to its root: absolute paths, ``..`` and links that leave the root are refused, never
followed. The tools are written once against either store.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import os
import re
import shutil
import unicodedata
from pathlib import Path, PurePosixPath
from typing import Protocol

from interlock.core.chat import ToolCall, ToolResult, walk
from interlock.core.errors import InterlockError


class PathRefused(ValueError):
    """A path a tool refuses: one that would leave the workspace, or one it would have to rewrite."""


def clean_path(path: str, *, folder: bool = False) -> str:
    """The normalised relative form of a workspace path, or :class:`PathRefused`. Only spellings
    of the same file are normalised (``./`` parts, repeated slashes); a path a tool would have to
    rewrite to make sense of (space around it, a backslash, a control or invisible character, a
    trailing slash, but on a ``folder``) is refused, so the file a tool changes is always the one
    the agent named."""
    if not isinstance(path, str) or not path:
        raise PathRefused("path must be a non-empty string")
    normalised = _normalised if len(path) <= MAX_CACHED_PATH else _normalised.__wrapped__
    return normalised(path, folder)


#: the longest path (UTF-8 bytes) and file or folder name a tool takes: the tools refuse longer
#: ones themselves, so a call gets the same answer wherever its workspace lives (a disk's own limits,
#: 255 bytes a name and 4,096 a path counted from ``/``, would make it depend on the folder's depth)
MAX_PATH_BYTES, MAX_NAME_BYTES = 1024, 255
#: how deep a workspace's own folder may lie: with :data:`MAX_PATH_BYTES` below it, it stays within
#: the disk's 4,096-byte limit
MAX_ROOT_BYTES = 4096 - MAX_PATH_BYTES - 64

#: paths up to this length are normalised once (checks and tools look up the same few paths
#: thousands of times); longer ones, which only hostile input writes, are never kept
MAX_CACHED_PATH = 256


@functools.lru_cache(maxsize=4096)
def _normalised(path: str, folder: bool) -> str:
    if path != path.strip():
        raise PathRefused(f"{path!r} has space at its start or end; write the path exactly")
    if "\\" in path:
        raise PathRefused(f"{path!r} contains a backslash; the separator is /")
    if any(unicodedata.category(c) in {"Cc", "Cf"} for c in path):
        raise PathRefused(f"{path!r} contains a control or invisible character")
    if path.endswith("/") and path.strip("/") and not folder:
        raise PathRefused(f"{path!r} ends with /, which names a folder, not a file")
    try:
        size = len(path.encode("utf-8"))
    except UnicodeEncodeError:
        raise PathRefused(f"{path[:80]!r} is not text a file system can name (a lone surrogate)") from None
    if size > MAX_PATH_BYTES:
        raise PathRefused(f"{path[:80]!r}... is {size} bytes long; a path has at most {MAX_PATH_BYTES}")
    pure = PurePosixPath(path)
    long_part = next((part for part in pure.parts if len(part.encode("utf-8")) > MAX_NAME_BYTES), None)
    if long_part is not None:
        raise PathRefused(f"{long_part[:80]!r}... is a name of {len(long_part.encode('utf-8'))} bytes; "
                          f"a file or folder name has at most {MAX_NAME_BYTES}")
    if pure.is_absolute():
        raise PathRefused(f"{path!r} is absolute; paths are relative to the workspace root")
    if ".." in pure.parts:
        raise PathRefused(f"{path!r} contains '..'; paths must stay inside the workspace")
    return "/".join(part for part in pure.parts if part != ".") or "."


class Store(Protocol):
    def read(self, path: str) -> str | None: ...
    def write(self, path: str, text: str) -> None: ...
    def files(self) -> list[str]: ...


class MemoryStore:
    """A workspace as a dict of path -> text."""

    def __init__(self, files: dict[str, str] | None = None) -> None:
        self.contents = dict(files or {})

    def read(self, path: str) -> str | None:
        return self.contents.get(clean_path(path))

    def write(self, path: str, text: str) -> None:
        relative = clean_path(path)
        if relative == "." or any(f.startswith(f"{relative}/") or relative.startswith(f"{f}/")
                                  for f in self.contents):
            raise PathRefused(f"{path!r} is a folder or lies under a file")
        self.contents[relative] = text

    def files(self) -> list[str]:
        return sorted(self.contents)


class DirectoryStore:
    """A workspace on disk, confined to ``root``."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).resolve()
        if len(str(self.root).encode()) > MAX_ROOT_BYTES:
            raise InterlockError(f"a workspace folder lies deeper than {MAX_ROOT_BYTES} bytes, where the "
                                 "tools' longest paths would pass the disk's limit",
                                 file=str(self.root)[:200])

    def resolve(self, path: str) -> Path:
        relative = clean_path(path)
        target = self.root
        for part in PurePosixPath(relative).parts:
            target = target / part
            if target.is_symlink():
                real = Path(os.path.realpath(target))
                if real != self.root and self.root not in real.parents:
                    raise PathRefused(f"{path!r} goes through a link that leaves the workspace")
        return target

    def read(self, path: str) -> str | None:
        target = self.resolve(path)
        if not target.is_file():
            return None
        return target.read_bytes().decode("utf-8", errors="replace")  # newlines as written

    def write(self, path: str, text: str) -> None:
        target = self.resolve(path)
        if target.is_symlink():
            raise PathRefused(f"{path!r} is a link; links are never written through")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(text.encode("utf-8"))  # encode first: a bad text truncates nothing

    def files(self) -> list[str]:
        found = []
        for folder, dirs, names in os.walk(self.root, followlinks=False):
            base = Path(folder)
            dirs[:] = sorted(d for d in dirs if not (base / d).is_symlink())
            found += [(base / n).relative_to(self.root).as_posix() for n in names
                      if not (base / n).is_symlink()]
        return sorted(found)


def materialize(files: dict[str, str], root: Path | str) -> DirectoryStore:
    """Write a workspace to ``root``, replacing whatever is there: reset to the initial bytes."""
    root = Path(root)
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    store = DirectoryStore(root)
    for path, text in sorted(files.items()):
        store.write(path, text)
    return store


# ----------------------------------------------------------------------------- records

#: the key of a record that could not be read strictly; its value says why
MALFORMED = "__malformed__"
#: the longest field (a CSV cell, a JSON string) a record may hold
MAX_FIELD_CHARS = 4_096
#: how deep a JSONL record may nest objects and lists
MAX_RECORD_NESTING = 16
#: characters other tools take for the end of a line; inside a JSONL record they would split it
_LINE_BREAKS = re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def malformed(reason: str) -> dict[str, str]:
    return {MALFORMED: reason}


def is_malformed(record: object) -> bool:
    return not isinstance(record, dict) or MALFORMED in record


def parse_csv(text: str) -> tuple[list[str], list[dict[str, str]]]:
    """The header and rows of a CSV table, read strictly, never repaired: a row whose cell count
    differs from the header's, a NUL byte, a cell over :data:`MAX_FIELD_CHARS`, or any row of a
    table whose header repeats or leaves out a column name, comes back as :func:`malformed` with
    the reason (what the csv module cannot read at all ends the table the same way). Blank lines
    are skipped, as every CSV reader does. Fresh lists and dicts every call (callers edit them)."""
    if len(text) > MAX_CACHED_TABLE:
        return _read_csv(text)
    header, rows = _read_csv_once(text)
    return list(header), [dict(row) for row in rows]


#: tables up to this many characters are read once (the reviews and the judge read the same
#: small tables of one task many times); larger ones are read every time and never kept
MAX_CACHED_TABLE = 1 << 16


@functools.lru_cache(maxsize=1024)
def _read_csv_once(text: str) -> tuple[tuple[str, ...], tuple[dict[str, str], ...]]:
    header, rows = _read_csv(text)
    return tuple(header), tuple(rows)


def _read_csv(text: str) -> tuple[list[str], list[dict[str, str]]]:
    rows: list[list[str]] = []
    failure = None
    reader = csv.reader(io.StringIO(text))
    try:
        rows.extend(reader)
    except csv.Error as exc:
        failure = f"row {reader.line_num}: unreadable ({exc})"
    if not rows:
        return [], [malformed(failure)] if failure else []
    header = rows[0]
    problem = (_cells_problem(header) or ("a column name repeats" if len(set(header)) < len(header) else None)
               or ("a column has no name" if not all(name.strip() for name in header) else None))
    records = []
    for number, cells in enumerate(rows[1:], start=2):
        if not cells:
            continue
        why = problem and f"header: {problem}" or _cells_problem(cells) or (
            f"{len(cells)} cells under a header of {len(header)}" if len(cells) != len(header) else None)
        records.append(malformed(f"row {number}: {why}") if why else dict(zip(header, cells, strict=True)))
    if failure:
        records.append(malformed(failure))
    return header, records


def _cells_problem(cells: list[str]) -> str | None:
    joined = "".join(cells)
    if len(joined) <= MAX_FIELD_CHARS and "\x00" not in joined:
        return None
    if any("\x00" in cell for cell in cells):
        return "a NUL byte"
    if any(len(cell) > MAX_FIELD_CHARS for cell in cells):
        return f"a cell over {MAX_FIELD_CHARS} characters"
    return None


def format_csv(header: list[str], rows: list[dict[str, object]]) -> str:
    """A table as :func:`parse_csv` reads it back: cells quoted where they hold a comma, a quote or
    a line break (``\\r`` included, which the csv module leaves bare under a ``\\n`` terminator)."""
    lines = [_csv_line(header), *(_csv_line([row.get(column, "") for column in header]) for row in rows)]
    return "".join(line + "\n" for line in lines)


_NEEDS_QUOTES = re.compile('[,"\r\n]')


def _csv_line(cells: list[object]) -> str:
    if len(cells) == 1 and cells[0] == "":
        return '""'  # a lone empty cell, which a bare line would turn into a blank line
    return ",".join(f'"{text.replace(chr(34), chr(34) * 2)}"' if _NEEDS_QUOTES.search(text) else text
                    for text in map(str, cells))


def parse_jsonl(text: str) -> list[dict]:
    """The records of a JSONL file, one JSON object a line (lines end at ``\\n``, a ``\\r`` before
    it allowed), read strictly, never repaired: a line that is not one JSON object, repeats a key,
    holds a NUL byte or another character tools take for a line break, nests deeper than
    :data:`MAX_RECORD_NESTING` or has a string over :data:`MAX_FIELD_CHARS` comes back as
    :func:`malformed` with the reason. Blank lines are skipped, as in a CSV table."""
    lines = (line.removesuffix("\r") for line in text.split("\n"))
    return [_jsonl_record(line, number) for number, line in enumerate(lines, start=1) if line]


def _jsonl_record(line: str, number: int) -> dict:
    if "\x00" in line:
        return malformed(f"line {number}: a NUL byte")
    if _LINE_BREAKS.search(line):
        return malformed(f"line {number}: a line break inside the record")
    try:
        record = json.loads(line, object_pairs_hook=_unique_keys)
    except (ValueError, RecursionError) as exc:
        return malformed(f"line {number}: not one JSON object ({str(exc)[:80]})")
    if not isinstance(record, dict):
        return malformed(f"line {number}: not a JSON object")
    problem = _value_problem(record)
    return malformed(f"line {number}: {problem}") if problem else record


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    keys = [key for key, _ in pairs]
    if len(set(keys)) < len(keys):
        raise ValueError(f"a key repeats: {next(k for k in keys if keys.count(k) > 1)!r}")
    return dict(pairs)


def _value_problem(value: object) -> str | None:
    """Why a parsed JSON value is not a record one may read (too deep, a string too long)."""
    for item, depth in walk(value):
        if depth > MAX_RECORD_NESTING:
            return f"nested deeper than {MAX_RECORD_NESTING} levels"
        if isinstance(item, str) and len(item) > MAX_FIELD_CHARS:
            return f"a string over {MAX_FIELD_CHARS} characters"
    return None


# ----------------------------------------------------------------------------- tools

def _schema(properties: dict, required: list[str]) -> dict:
    return {"type": "object", "properties": properties, "required": required}


_PATH = {"type": "string", "description": "path relative to the workspace root"}
#: OpenAI-style function specs: what a model is told about the tools
TOOL_SPECS = [
    {"name": "list_files", "description": "List the files in the workspace (or under a folder).",
     "parameters": _schema({"path": _PATH}, [])},
    {"name": "read_file", "description": "Read a text file.",
     "parameters": _schema({"path": _PATH}, ["path"])},
    {"name": "write_file", "description": "Create or overwrite a text file.",
     "parameters": _schema({"path": _PATH, "content": {"type": "string"}}, ["path", "content"])},
    {"name": "append_record", "description": "Append a record to a .csv table (columns from its "
     "header) or a .jsonl file.",
     "parameters": _schema({"path": _PATH, "record": {"type": "object"}}, ["path", "record"])},
    {"name": "update_record", "description": "Update fields of the .csv row whose first column "
     "equals id.",
     "parameters": _schema({"path": _PATH, "id": {"type": "string"}, "fields": {"type": "object"}},
                           ["path", "id", "fields"])},
    {"name": "submit", "description": "Declare the task finished.", "parameters": _schema({}, [])},
]
_TYPES = {"string": str, "object": dict}
#: the tools that change a file (the one their ``path`` names), and nothing else
WRITING_TOOLS = frozenset({"write_file", "append_record", "update_record"})


def execute(store: Store, call: ToolCall) -> ToolResult:
    """Run one tool call. Bad calls come back as error observations, never as exceptions."""
    spec = next((s for s in TOOL_SPECS if s["name"] == call.name), None)
    if spec is None:
        names = ", ".join(s["name"] for s in TOOL_SPECS)
        return ToolResult(False, f"error: unknown tool {call.name!r}; tools are {names}")
    args = call.arguments if isinstance(call.arguments, dict) else {}
    params = spec["parameters"]
    for name in params["required"]:
        if name not in args:
            return ToolResult(False, f"error: {call.name} needs the argument {name!r}")
    for name, value in args.items():
        if name not in params["properties"]:
            return ToolResult(False, f"error: {call.name} has no argument {name!r}")
        if not isinstance(value, _TYPES[params["properties"][name]["type"]]):
            return ToolResult(False, f"error: argument {name!r} of {call.name} must be a "
                                     f"{params['properties'][name]['type']}")
    try:
        return _TOOLS[call.name](store, **args)
    except PathRefused as exc:
        return ToolResult(False, f"error: {exc}")
    except (OSError, ValueError) as exc:  # what the disk refuses: a folder, a file in the way, bad text
        reason = getattr(exc, "strerror", None) or exc
        return ToolResult(False, f"error: cannot {call.name} {args.get('path')!r}: {reason}")
    except RecursionError:
        return ToolResult(False, f"error: an argument of {call.name} is nested too deeply")


def _list_files(store: Store, path: str = ".") -> ToolResult:
    prefix = clean_path(path, folder=True)
    names = [f for f in store.files() if prefix == "." or f == prefix or f.startswith(prefix + "/")]
    return ToolResult(True, "\n".join(names) if names else "(no files)")


def _read_file(store: Store, path: str) -> ToolResult:
    text = store.read(path)
    if text is None:
        return ToolResult(False, f"error: no such file {path!r}")
    return ToolResult(True, text)


def _write_file(store: Store, path: str, content: str) -> ToolResult:
    store.write(path, content)
    return ToolResult(True, f"wrote {clean_path(path)} ({len(content)} characters)")


def _append_record(store: Store, path: str, record: dict) -> ToolResult:
    text = store.read(path)
    if text is None:
        return ToolResult(False, f"error: no such file {path!r}")
    if path.endswith(".jsonl"):
        if refused := _not_text("record", record):
            return refused
        prefix = text if not text or text.endswith("\n") else text + "\n"
        return _write_back(store, path, prefix + jsonl_line(record) + "\n", [record],
                           lambda written: [r for r in parse_jsonl(written)][-1:],
                           f"appended a record to {clean_path(path)}")
    if not path.endswith(".csv"):
        return ToolResult(False, "error: append_record works on .csv and .jsonl files")
    header, rows = parse_csv(text)
    if refused := _malformed_table(path, rows):
        return refused
    unknown = [key for key in record if key not in header]
    if unknown:
        return ToolResult(False, f"error: unknown column(s) {', '.join(map(repr, unknown))}; the "
                                 f"columns of {clean_path(path)} are {', '.join(header)}")
    if refused := _not_text("record", record):
        return refused
    rows.append({column: record.get(column, "") for column in header})
    return _write_back(store, path, format_csv(header, rows), rows, lambda written: parse_csv(written)[1],
                       f"appended a row to {clean_path(path)}")


def _update_record(store: Store, path: str, id: str, fields: dict) -> ToolResult:  # noqa: A002
    text = store.read(path)
    if text is None:
        return ToolResult(False, f"error: no such file {path!r}")
    if not path.endswith(".csv"):
        return ToolResult(False, "error: update_record works on .csv files")
    header, rows = parse_csv(text)
    if refused := _malformed_table(path, rows):
        return refused
    unknown = [key for key in fields if key not in header]
    if unknown or not header:
        return ToolResult(False, f"error: unknown column(s) {', '.join(map(repr, unknown))}; the "
                                 f"columns of {clean_path(path)} are {', '.join(header)}")
    if refused := _not_text("fields", fields):
        return refused
    matches = [row for row in rows if row[header[0]] == id]
    if not matches:
        return ToolResult(False, f"error: no row with {header[0]} = {id!r} in {clean_path(path)}")
    for row in matches:
        row.update(fields)
    return _write_back(store, path, format_csv(header, rows), rows, lambda written: parse_csv(written)[1],
                       f"updated {id} in {clean_path(path)}")


def _not_text(argument: str, values: dict) -> ToolResult | None:
    """Record values are text, written as sent: a number, a list or an object would have to be
    rewritten into some text (``3.9e2`` into ``390.0``), so it is refused with what to send."""
    wrong = next(((k, v) for k, v in values.items() if not isinstance(v, str)), None)
    if wrong is None:
        return None
    key, value = wrong
    kind = ("a number" if isinstance(value, (int, float)) and not isinstance(value, bool)
            else "a boolean" if isinstance(value, bool) else "null" if value is None
            else "an object" if isinstance(value, dict) else "a list")
    return ToolResult(False, f"error: {argument} value {key!r} is {kind}; record values are text, "
                             f"written exactly as sent (for example \"390\", not 390)")


def _write_back(store: Store, path: str, text: str, intended: list[dict], read_back, done: str) -> ToolResult:
    """Write ``text`` only if the project's own reader gets back exactly the records meant (a tool
    never leaves a file its reader cannot read, or reads as something else); else refuse and
    change nothing."""
    if read_back(text) != intended:
        problem = next((r[MALFORMED] for r in read_back(text) if is_malformed(r)), "other values")
        return ToolResult(False, f"error: {clean_path(path)} would not read back as written "
                                 f"({problem}); nothing was written")
    store.write(path, text)
    return ToolResult(True, done)


def _malformed_table(path: str, rows: list[dict]) -> ToolResult | None:
    """The record tools rewrite a whole table: on one they cannot read strictly they refuse
    rather than repair it."""
    bad = next((row[MALFORMED] for row in rows if is_malformed(row)), None)
    if bad is None:
        return None
    return ToolResult(False, f"error: {clean_path(path)} has a malformed row ({bad}); rewrite the "
                             "table with write_file")


def jsonl_line(record: dict) -> str:
    """A record as one JSONL line: non-ASCII text kept, but every character other tools take for
    a line break escaped, so the line holds exactly one record."""
    return _LINE_BREAKS.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(record, ensure_ascii=False))


def _submit(store: Store) -> ToolResult:
    return ToolResult(True, "submitted", submitted=True)


_TOOLS = {"list_files": _list_files, "read_file": _read_file, "write_file": _write_file,
          "append_record": _append_record, "update_record": _update_record, "submit": _submit}


# ----------------------------------------------------------------------------- diffs

def changed_files(initial: dict[str, str], final: dict[str, str]) -> dict[str, str | None]:
    """The files a run created or changed (their content) or deleted (None)."""
    changed: dict[str, str | None] = {p: t for p, t in final.items() if initial.get(p) != t}
    changed.update({p: None for p in initial if p not in final})
    return dict(sorted(changed.items()))


def workspace_diff(initial: dict[str, str], final: dict[str, str]) -> list[dict]:
    """Record-level diff: CSV rows by their first column, JSONL records by position, other
    files whole. Each entry: file, record (or None), before, after (None where absent)."""
    entries = []
    for path, after_text in changed_files(initial, final).items():
        before_text = initial.get(path)
        if path.endswith((".csv", ".jsonl")) and before_text is not None and after_text is not None:
            before, after = _keyed(path, before_text), _keyed(path, after_text)
            for key in sorted(set(before) | set(after)):
                if before.get(key) != after.get(key):
                    entries.append({"file": path, "record": key, "before": before.get(key),
                                    "after": after.get(key)})
        else:
            entries.append({"file": path, "record": None, "before": before_text, "after": after_text})
    return entries


def _keyed(path: str, text: str) -> dict[str, dict]:
    if path.endswith(".jsonl"):
        return {f"#{i}": record for i, record in enumerate(parse_jsonl(text))}
    header, rows = parse_csv(text)
    keyed: dict[str, dict] = {}
    for index, row in enumerate(rows):
        key = row.get(header[0], "") if header else ""
        keyed[key if key not in keyed else f"{key}#{index}"] = row
    return keyed
