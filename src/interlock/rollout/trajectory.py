"""A rollout's record: the conversation, its counts, why it ended, and what it changed.

Every stage that reads a trajectories table someone else wrote reads it here, strictly
(:meth:`Trajectory.from_row`): a row that is not one the rollout engine writes (a message without
a role, a call without a function, arguments that are text, JSON nested thousands deep, a count
that is negative or missing, files that are a list) is a :class:`BadRow` naming the file, the
row and the field. The stage fails that row with the reason and goes on with the others
(:func:`iter_rows`); it never stops on one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

import pyarrow as pa

from interlock.core import schemas
from interlock.core.backend import SampledTokens, log_probabilities
from interlock.core.chat import Message, RecordError, storable
from interlock.core.errors import InterlockError
from interlock.core.io import dumps, iter_row_groups

#: why an episode ended: it submitted, ran out of turns, outgrew the context window, wrote a turn
#: without any tool call (it stopped acting), or its server failed it: no usable answer within the
#: retries (``server_error``), or an answer that is not a completion (``bad_reply``)
FinishReason = Literal["submitted", "max_turns", "context", "no_tool_call", "server_error", "bad_reply"]
FINISH_REASONS: tuple[FinishReason, ...] = get_args(FinishReason)
#: what a rollout id may be (the engine's are ``{task_id}.a{attempt}`` and the like): it names
#: folders and files of the exports, so nothing in it can leave one
ROLLOUT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
_TEXT_FIELDS = ("rollout_id", "task_id", "domain_id", "pool", "policy", "finish_reason")
_COUNT_FIELDS = ("attempt", "seed", "turns", "tool_calls", "invalid_calls", "prompt_tokens",
                 "generated_tokens")


@dataclass
class Trajectory:
    rollout_id: str
    task_id: str
    domain_id: str
    pool: str
    policy: str
    attempt: int
    seed: int
    messages: list[Message]
    turns: int
    tool_calls: int
    invalid_calls: int
    prompt_tokens: int
    generated_tokens: int
    finish_reason: FinishReason
    final_files: dict[str, str | None]  # created or changed files, None where deleted
    diff: list[dict]  # file, record, before, after
    #: per assistant message, in order, what its backend sampled (None where it knows nothing: a
    #: scripted policy, a turn carried over from another record); empty: no turn has any
    sampled: list[SampledTokens | None] = field(default_factory=list)
    seconds: float = field(default=0.0, compare=False)  # measured: kept out of the artifact

    def to_row(self) -> dict:
        row = {k: v for k, v in self.__dict__.items() if k not in {*_JSON_FIELDS, "seconds"}}
        return {**row, "messages": dumps([m.to_dict() for m in self.messages], sort_keys=False),
                "final_files": dumps(self.final_files), "diff": dumps(self.diff),
                "sampled": dumps([None if s is None else s.to_dict() for s in self.sampled], sort_keys=False)}

    @classmethod
    def from_row(cls, row: dict, source: str, index: int | None = None) -> Trajectory:
        """The trajectory a TRAJECTORIES row holds, or :class:`BadRow` (``index``: the row's
        place in its table, which the error names beside its rollout id)."""
        def bad(field_name: str, reason: str) -> BadRow:
            return BadRow(reason, file=source, row=index, row_data=row, field=field_name)

        for name in _TEXT_FIELDS:
            if not isinstance(row.get(name), str) or not row[name]:
                raise bad(name, f"{row.get(name)!r} is not a non-empty string")
        if not ROLLOUT_ID.fullmatch(row["rollout_id"]):
            raise bad("rollout_id", "not an id of letters, digits, '.', '_' and '-' (at most 200)")
        if row["finish_reason"] not in FINISH_REASONS:
            raise bad("finish_reason", f"{row['finish_reason'][:40]!r} is none of "
                                       f"{', '.join(FINISH_REASONS)}")
        for name in _COUNT_FIELDS:
            if not isinstance(row.get(name), int) or row[name] < 0:
                raise bad(name, f"{row.get(name)!r} is not a count (an integer >= 0)")
        values = {name: _json(row.get(name), name, bad) for name in _JSON_FIELDS}
        if not isinstance(values["messages"], list):
            raise bad("messages", "not a JSON list of messages")
        messages = []
        for position, message in enumerate(values["messages"]):
            try:
                messages.append(Message.from_dict(message))
            except RecordError as exc:
                error = exc.within(f"messages[{position}]")
                raise bad(error.field, error.reason) from None
        files = values["final_files"]
        if not isinstance(files, dict) or not all(isinstance(v, str | None) for v in files.values()):
            raise bad("final_files", "not a JSON object of paths to texts (or null where deleted)")
        diff = values["diff"]
        if not isinstance(diff, list) or not all(isinstance(e, dict) and set(e) == _DIFF_KEYS for e in diff):
            raise bad("diff", f"not a JSON list of objects with exactly {', '.join(sorted(_DIFF_KEYS))}")
        sampled = _sampled(values["sampled"], sum(m.role == "assistant" for m in messages), bad)
        plain = {k: v for k, v in row.items() if k not in _JSON_FIELDS}
        return cls(**plain, messages=messages, final_files=files, diff=diff, sampled=sampled)


_JSON_FIELDS = ("messages", "final_files", "diff", "sampled")
_DIFF_KEYS = frozenset({"file", "record", "before", "after"})
_SAMPLED_KEYS = frozenset({"ids", "logprobs", "stopped"})
#: the most token ids one recorded turn may hold, and the largest id (a vocabulary's size bound)
MAX_TURN_TOKENS, MAX_TOKEN_ID = 1 << 20, (1 << 31) - 1


def _sampled(value: object, turns: int, bad) -> list[SampledTokens | None]:
    """The ``sampled`` column read strictly: a list with one entry per assistant message (or none
    at all), each null or exactly what :meth:`SampledTokens.to_dict` writes."""
    if not isinstance(value, list) or len(value) not in (0, turns):
        raise bad("sampled", f"not a JSON list with one entry per assistant message ({turns}) or none")
    entries = []
    for position, entry in enumerate(value):
        if entry is None:
            entries.append(None)
            continue
        where = f"sampled[{position}]"
        if not isinstance(entry, dict) or set(entry) != _SAMPLED_KEYS:
            raise bad(where, f"not an object with exactly {', '.join(sorted(_SAMPLED_KEYS))}")
        ids, logprobs, stopped = entry["ids"], entry["logprobs"], entry["stopped"]
        if (not isinstance(ids, list) or len(ids) > MAX_TURN_TOKENS
                or not all(type(i) is int and 0 <= i <= MAX_TOKEN_ID for i in ids)):
            raise bad(f"{where}.ids", f"not a list of at most {MAX_TURN_TOKENS} token ids (integers "
                                      f"0-{MAX_TOKEN_ID})")
        probabilities = None if logprobs is None else log_probabilities(logprobs, len(ids))
        if logprobs is not None and probabilities is None:
            raise bad(f"{where}.logprobs", "neither null nor one finite log-probability (<= 0) per id")
        if not isinstance(stopped, bool) or (stopped and not ids):
            raise bad(f"{where}.stopped", "not a boolean, or true with no id to be the stop token")
        entries.append(SampledTokens(tuple(ids), probabilities, stopped))
    return entries


def _json(text: object, name: str, bad) -> object:
    """A JSON column's value, refused where it is no JSON text, nests too deeply to read, or holds
    a lone surrogate (``"\\ud800"``: no table can store the text it decodes to)."""
    if not isinstance(text, str):
        raise bad(name, f"a {type(text).__name__}, not JSON text")
    try:
        value = json.loads(text)
    except RecursionError:
        raise bad(name, "JSON nested too deeply to read") from None
    except ValueError as exc:
        raise bad(name, f"not valid JSON text ({str(exc)[:120]})") from None
    if not storable(value):
        raise bad(name, "a lone surrogate, which is no text")
    return value


class BadRow(InterlockError):
    """A row of a trajectories table that is not one the rollout engine writes: the stage reading
    it fails that row with this reason and finishes the others."""

    def __init__(self, reason: str, *, file: str | None, row: int | None, row_data: dict, field: str) -> None:
        rollout_id = row_data.get("rollout_id")
        named = isinstance(rollout_id, str) and ROLLOUT_ID.fullmatch(rollout_id)
        self.rollout_id = rollout_id if named else None
        task_id = row_data.get("task_id")
        self.task_id = task_id if isinstance(task_id, str) else None
        self.row = row
        place = f"row {row}" if row is not None else "a row"
        named = f"{place} ({self.rollout_id})" if self.rollout_id else place
        super().__init__(reason, file=file, item=named, field=field)

    def as_dict(self) -> dict:
        return {"file": self.file, "row": self.row, "rollout_id": self.rollout_id, "field": self.field,
                "reason": self.reason}


@dataclass(frozen=True)
class Row:
    """One row of a trajectories table: its place (from 0 over the whole table), its columns as
    read, and the trajectory it holds or the :class:`BadRow` it is."""

    index: int
    data: dict
    parsed: Trajectory | BadRow

    def refused(self, source: str, field_name: str, reason: str, *, named: bool = True) -> Row:
        """The same row as a bad row for a reason found beyond it (``named``: whether the error
        may name it by its rollout id, which it cannot where that id is what is wrong)."""
        data = self.data if named else {**self.data, "rollout_id": None}
        return Row(self.index, self.data, BadRow(reason, file=source, row=self.index, row_data=data,
                                                 field=field_name))


def iter_rows(path: Path | str, schema: pa.Schema = schemas.TRAJECTORIES) -> Iterator[list[Row]]:
    """A trajectories table's rows by row group, each with its trajectory or its :class:`BadRow`
    (read by :meth:`Trajectory.from_row`; a TRAINING_SET table's extra columns stay in ``data``)."""
    index = 0
    for rows in iter_row_groups(path, schema):
        group = []
        for row in rows:
            columns = {name: row[name] for name in schemas.TRAJECTORIES.names}
            try:
                parsed: Trajectory | BadRow = Trajectory.from_row(columns, str(path), index)
            except BadRow as exc:
                parsed = exc
            group.append(Row(index, row, parsed))
            index += 1
        yield group


def own_trajectories(path: Path | str) -> Iterator[list[Trajectory]]:
    """The trajectories of a table the reading stage wrote itself (its resumable parts), by row
    group: a bad row there is no one else's input but a broken file, so it stops the stage (the
    :class:`BadRow`)."""
    for group in iter_rows(path):
        bad = next((row.parsed for row in group if isinstance(row.parsed, BadRow)), None)
        if bad is not None:
            raise bad
        yield [row.parsed for row in group]


@dataclass
class BadRows:
    """The bad rows a stage met (a :class:`BadRow`, or any :class:`InterlockError` that names a row
    of a table): how many, and the first few with their reasons, for its metrics."""

    count: int = 0
    examples: list[dict] = field(default_factory=list)
    keep: int = 10

    def add(self, error: InterlockError) -> None:
        self.count += 1
        if len(self.examples) < self.keep:
            self.examples.append(error.as_dict() if isinstance(error, BadRow) else
                                 {"file": error.file, "row": None, "rollout_id": error.item,
                                  "field": error.field, "reason": error.reason})

    def summary(self) -> dict:
        return {"count": self.count, "examples": self.examples}


def report_bad_rows(stage: str, summary: dict) -> None:
    """One line on the console per stage that met bad rows, naming the first (quiet where none)."""
    if summary["count"]:
        first = summary["examples"][0]
        print(f"{stage}: {summary['count']} bad row(s) failed and left out, e.g. row {first['row']} of "
              f"{first['file']}, {first['field']}: {first['reason']}")
