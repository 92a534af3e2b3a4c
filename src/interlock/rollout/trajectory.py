"""A rollout's record: the conversation, its counts, why it ended, and what it changed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from interlock.core.chat import Message
from interlock.core.io import dumps, loads

#: why an episode ended: it submitted, ran out of turns, outgrew the context window, wrote a turn
#: without any tool call (it stopped acting), or its server failed it: no usable answer within the
#: retries (``server_error``), or an answer that is not a completion (``bad_reply``)
FinishReason = Literal["submitted", "max_turns", "context", "no_tool_call", "server_error", "bad_reply"]
FINISH_REASONS: tuple[FinishReason, ...] = get_args(FinishReason)


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
    seconds: float = field(default=0.0, compare=False)  # measured: kept out of the artifact

    def to_row(self) -> dict:
        row = {k: v for k, v in self.__dict__.items() if k not in {"messages", "final_files", "diff",
                                                                  "seconds"}}
        return {**row, "messages": dumps([m.to_dict() for m in self.messages], sort_keys=False),
                "final_files": dumps(self.final_files), "diff": dumps(self.diff)}

    @classmethod
    def from_row(cls, row: dict, source: str) -> Trajectory:
        def field_of(name: str) -> object:
            return loads(row[name], file=source, item=row["rollout_id"], field=name)
        plain = {k: v for k, v in row.items() if k not in {"messages", "final_files", "diff"}}
        return cls(**plain, messages=[Message.from_dict(m) for m in field_of("messages")],
                   final_files=field_of("final_files"), diff=field_of("diff"))
