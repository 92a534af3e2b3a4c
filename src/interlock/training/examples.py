"""Trajectories as training examples: token ids, an assistant-only loss mask and a weight.

The text is rendered exactly as the rollout engine renders prompts (the checkpoint's chat
template with the same tool list), so a model is trained on what it will be asked to continue.
The chat template marks assistant text and its ``<|im_end|>`` with ``{% generation %}``; only
those tokens carry loss. Tool results, the system prompt and the request are context only.

A training set row (:data:`~interlock.core.schemas.TRAINING_SET`) adds a weight and
``loss_from_message``: the first message whose assistant turns carry loss, so a rollout corrected
from an intervention point is trained on the corrected turns only, its original prefix being
context. A plain trajectories table (:data:`~interlock.core.schemas.TRAJECTORIES`, the
demonstrations) reads as weight 1 and loss on every assistant turn.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from interlock.core import schemas
from interlock.core.errors import InterlockError
from interlock.models.chat_template import checked_control_tokens, openai_tools, template_messages
from interlock.rollout.engine import TOOLS
from interlock.rollout.trajectory import BadRow, BadRows, Row, Trajectory, iter_rows

#: the columns a training set adds to a trajectories table
TRAINING_COLUMNS = tuple(n for n in schemas.TRAINING_SET.names if n not in schemas.TRAJECTORIES.names)


@dataclass(frozen=True)
class Example:
    example_id: str
    input_ids: tuple[int, ...]
    loss_mask: tuple[bool, ...]  # True where the token is one the model must learn to produce
    weight: float = 1.0
    source: str | None = None  # ``policy`` or ``rti`` where the table says; not part of the data hash

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def trained_tokens(self) -> int:
        return sum(self.loss_mask)

    @property
    def targets(self) -> int:
        """The positions whose next token carries loss (the first token has no position before it)."""
        return sum(self.loss_mask[1:])


@dataclass(frozen=True)
class ExampleSet:
    """The examples a fine-tuning sees, and what was left out and why."""

    examples: list[Example]
    too_long: list[str]  # example ids longer than the context window
    nothing_to_learn: list[str]  # example ids without an assistant token (after ``loss_from_message``)
    #: bad rows and trajectories the template cannot render safely (:meth:`BadRows.summary`)
    refused: dict = field(default_factory=lambda: BadRows().summary())

    @property
    def tokens(self) -> int:
        return sum(len(e) for e in self.examples)

    @property
    def trained_tokens(self) -> int:
        return sum(e.trained_tokens for e in self.examples)

    @property
    def by_source(self) -> dict[str, int]:
        """Examples per source (empty where the table had no ``source`` column)."""
        return dict(sorted(Counter(e.source for e in self.examples if e.source is not None).items()))

    def sha256(self) -> str:
        """A hash of exactly what is trained on (ids, masks, weights), independent of file encoding."""
        digest = hashlib.sha256()
        for example in self.examples:
            digest.update(example.example_id.encode() + b"\0")
            digest.update(",".join(map(str, example.input_ids)).encode() + b"\0")
            digest.update(bytes(example.loss_mask) + f"{example.weight!r}".encode() + b"\n")
        return digest.hexdigest()


@dataclass(frozen=True)
class TrainingItem:
    """A trajectory as a training set holds it: its weight, the first message whose assistant
    turns carry loss (0: all of them) and where it came from (None: the table does not say)."""

    trajectory: Trajectory
    weight: float = 1.0
    loss_from_message: int = 0
    source: str | None = None


def encode_conversation(tokenizer, messages: list[dict],
                        loss_from_message: int = 0) -> tuple[list[int], list[bool]]:
    """Token ids and loss mask of a conversation, trailing non-assistant turns dropped. The mask is
    True on the assistant tokens of messages at index ``loss_from_message`` or later only. The
    messages are rendered as the live prompt renders them (:func:`template_messages`: no text a
    policy or a tool wrote becomes a control token), and held to it."""
    if loss_from_message < 0:
        raise InterlockError(f"must be >= 0, not {loss_from_message}", field="loss_from_message")
    while messages and messages[-1]["role"] != "assistant":
        messages = messages[:-1]
    if not messages:
        return [], []
    messages = template_messages(tokenizer, messages)
    tools = openai_tools(TOOLS)

    def encode(conversation: list[dict]) -> list[int]:
        return list(tokenizer.apply_chat_template(conversation, tools=tools, tokenize=True,
                                                  return_dict=True)["input_ids"])

    encoded = tokenizer.apply_chat_template(messages, tools=tools, tokenize=True, return_dict=True,
                                            return_assistant_tokens_mask=True)
    ids = checked_control_tokens(tokenizer, messages, list(encoded["input_ids"]), encode)
    mask = encoded["assistant_masks"]
    if len(mask) != len(ids):
        raise InterlockError("the chat template has no {% generation %} markers: cannot find the "
                             "assistant tokens", field="chat_template")
    if loss_from_message >= len(messages):
        return ids, [False] * len(ids)
    boundary = 0
    if loss_from_message:
        prefix = encode(messages[:loss_from_message])
        if ids[:len(prefix)] != prefix:
            raise InterlockError("the chat template is not prefix-stable: the first messages render to "
                                 "other tokens alone than at the start of the whole conversation, so the "
                                 "turns that carry loss cannot be found", field="loss_from_message")
        boundary = len(prefix)
    return ids, [bool(m) and i >= boundary for i, m in enumerate(mask)]


def encode_trajectories(items: Iterable[Trajectory | TrainingItem | BadRow], tokenizer, *,
                        max_length: int) -> ExampleSet:
    """One example per trajectory; a bare :class:`Trajectory` has weight 1 and loss on every
    assistant turn, a :class:`TrainingItem` its own weight and ``loss_from_message``. A bad row of
    the table read, and a trajectory the chat template cannot render safely, is refused with its
    reason (:attr:`ExampleSet.refused`); the others are encoded."""
    examples, too_long, empty, refused = [], [], [], BadRows()
    for item in items:
        if isinstance(item, BadRow):
            refused.add(item)
            continue
        if isinstance(item, Trajectory):
            item = TrainingItem(item)
        trajectory = item.trajectory
        try:
            ids, mask = encode_conversation(tokenizer, [m.to_dict() for m in trajectory.messages],
                                            item.loss_from_message)
        except InterlockError as exc:
            refused.add(BadRow(exc.reason, file=None, row=None, row_data=trajectory.to_row(),
                               field=exc.field or "messages"))
            continue
        if len(ids) > max_length:
            too_long.append(trajectory.rollout_id)
        elif not any(mask):
            empty.append(trajectory.rollout_id)
        else:
            examples.append(Example(trajectory.rollout_id, tuple(ids), tuple(mask), item.weight, item.source))
    return ExampleSet(examples, too_long, empty, refused.summary())


def table_schema(path: Path) -> pa.Schema:
    """Which of the two trajectory schemas a table has, told by its columns: a training set
    (TRAINING_SET) where any of its extra columns is there, else TRAJECTORIES."""
    if not path.exists():
        raise InterlockError("no trajectories table; run the stage that writes it", file=str(path))
    try:
        names = pq.read_schema(path).names
    except (OSError, pa.ArrowException) as exc:
        raise InterlockError(f"cannot read Parquet ({exc})", file=str(path)) from None
    return schemas.TRAINING_SET if set(TRAINING_COLUMNS) & set(names) else schemas.TRAJECTORIES


#: where a training set's rows come from: an accepted rollout, or a kept rollout-time correction
SOURCES = ("policy", "rti")


def read_training_items(path: Path) -> Iterator[TrainingItem | BadRow]:
    """The rows of a trajectories table or a training set (told apart by :func:`table_schema`),
    streamed, each as :func:`training_item` reads it."""
    for group in iter_rows(path, table_schema(path)):
        for row in group:
            yield training_item(row, str(path))


def training_item(row: Row, source: str) -> TrainingItem | BadRow:
    """A table row as a training example's item: a TRAJECTORIES row is weight 1, loss on every
    assistant turn, no source; a row that is no trajectory the engine writes, or whose weight,
    first trained message or source is none a training set holds, is the :class:`BadRow` it is."""
    trajectory = row.parsed
    if isinstance(trajectory, BadRow):
        return trajectory
    if not set(TRAINING_COLUMNS) <= set(row.data):
        return TrainingItem(trajectory)
    weight, loss_from, origin = (row.data[name] for name in ("weight", "loss_from_message", "source"))
    if not isinstance(weight, float) or not math.isfinite(weight) or weight < 0:
        return row.refused(source, "weight", f"{weight!r} is not a finite number >= 0").parsed
    if not isinstance(loss_from, int) or loss_from < 0:
        return row.refused(source, "loss_from_message", f"{loss_from!r} is not a count >= 0").parsed
    if origin not in SOURCES:
        return row.refused(source, "source", f"{origin!r} is none of {', '.join(SOURCES)}").parsed
    return TrainingItem(trajectory, weight, loss_from, origin)
