"""Trajectories as training examples: token ids, an assistant-only loss mask and a weight.

The text is rendered exactly as the rollout engine renders prompts (the checkpoint's chat
template with the same tool list), so a model is trained on what it will be asked to continue.
The chat template marks assistant text and its ``<|im_end|>`` with ``{% generation %}``; only
those tokens carry loss. Tool results, the system prompt and the request are context only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from interlock.core import schemas
from interlock.core.errors import InterlockError
from interlock.core.io import iter_row_groups
from interlock.models.chat_template import openai_tools
from interlock.rollout.engine import TOOLS
from interlock.rollout.trajectory import Trajectory


@dataclass(frozen=True)
class Example:
    example_id: str
    input_ids: tuple[int, ...]
    loss_mask: tuple[bool, ...]  # True where the token is one the model must learn to produce
    weight: float = 1.0

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def trained_tokens(self) -> int:
        return sum(self.loss_mask)


@dataclass(frozen=True)
class ExampleSet:
    """The examples a fine-tuning sees, and what was left out and why."""

    examples: list[Example]
    too_long: list[str]  # example ids longer than the context window
    nothing_to_learn: list[str]  # example ids without an assistant token

    @property
    def tokens(self) -> int:
        return sum(len(e) for e in self.examples)

    @property
    def trained_tokens(self) -> int:
        return sum(e.trained_tokens for e in self.examples)

    def sha256(self) -> str:
        """A hash of exactly what is trained on (ids, masks, weights), independent of file encoding."""
        digest = hashlib.sha256()
        for example in self.examples:
            digest.update(example.example_id.encode() + b"\0")
            digest.update(",".join(map(str, example.input_ids)).encode() + b"\0")
            digest.update(bytes(example.loss_mask) + f"{example.weight!r}".encode() + b"\n")
        return digest.hexdigest()


def encode_conversation(tokenizer, messages: list[dict]) -> tuple[list[int], list[bool]]:
    """Token ids and loss mask of a conversation, trailing non-assistant turns dropped."""
    while messages and messages[-1]["role"] != "assistant":
        messages = messages[:-1]
    if not messages:
        return [], []
    encoded = tokenizer.apply_chat_template(messages, tools=openai_tools(TOOLS), tokenize=True,
                                            return_dict=True, return_assistant_tokens_mask=True)
    mask = encoded["assistant_masks"]
    if len(mask) != len(encoded["input_ids"]):
        raise InterlockError("the chat template has no {% generation %} markers: cannot find the "
                             "assistant tokens", field="chat_template")
    return list(encoded["input_ids"]), [bool(m) for m in mask]


def encode_trajectories(trajectories: Iterable[Trajectory], tokenizer, *, max_length: int,
                        weights: Mapping[str, float] | None = None) -> ExampleSet:
    """One example per trajectory (weight 1 unless ``weights`` names it)."""
    examples, too_long, empty = [], [], []
    for trajectory in trajectories:
        ids, mask = encode_conversation(tokenizer, [m.to_dict() for m in trajectory.messages])
        if len(ids) > max_length:
            too_long.append(trajectory.rollout_id)
        elif not any(mask):
            empty.append(trajectory.rollout_id)
        else:
            weight = (weights or {}).get(trajectory.rollout_id, 1.0)
            examples.append(Example(trajectory.rollout_id, tuple(ids), tuple(mask), weight))
    return ExampleSet(examples, too_long, empty)


def read_trajectories(path: Path) -> Iterable[Trajectory]:
    """The trajectories of a Parquet table (TRAJECTORIES schema), streamed."""
    if not path.exists():
        raise InterlockError("no trajectories table; run the stage that writes it", file=str(path))
    for group in iter_row_groups(path, schemas.TRAJECTORIES):
        for row in group:
            yield Trajectory.from_row(row, str(path))
