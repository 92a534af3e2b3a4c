"""Trajectories as training examples: token ids, an assistant-only loss mask and a weight.

The text is rendered exactly as the rollout engine renders prompts (the checkpoint's chat
template with the same tool list), so a model is trained on what it will be asked to continue.
The chat template marks assistant text and its ``<|im_end|>`` with ``{% generation %}``; only
those tokens carry loss. Tool results, the system prompt and the request are context only.

An assistant turn whose backend recorded the ids it sampled
(:class:`~interlock.core.backend.SampledTokens`) is learned as those ids, between the template's
own tokens, not as its text rendered and tokenized again:
decoding then encoding does not always give the sampled ids back (a merge across the end of a
call's markup, a call re-serialized by the template, a turn whose text outside its calls the
engine moved), and a model must not learn tokens it never produced. The ids are checked against
the record first (:func:`sampled_turn_ids`); a turn without them (a demonstration, a scripted
policy, a turn carried over from another record) is rendered.

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
from interlock.core.chat import parse_turn
from interlock.core.errors import InterlockError
from interlock.models.chat_template import (
    checked_control_tokens,
    control_token_ids,
    openai_tools,
    stop_token_ids,
    template_messages,
)
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
    #: the examples' assistant turns by how they are learned (:class:`TurnCounts`)
    turns: TurnCounts = field(default_factory=lambda: TurnCounts())

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


@dataclass
class TurnCounts:
    """Assistant turns of a set of examples: learned as the ids their backend sampled
    (``sampled``), or rendered from their text (``rendered``: none recorded, or a turn the engine
    cut); ``retokenized_differ``: sampled turns whose rendered tokens are not the sampled ones,
    which training on the text alone would have learned in their place."""

    sampled: int = 0
    rendered: int = 0
    retokenized_differ: int = 0

    def add(self, other: TurnCounts) -> None:
        self.sampled += other.sampled
        self.rendered += other.rendered
        self.retokenized_differ += other.retokenized_differ

    def summary(self) -> dict:
        share = self.retokenized_differ / self.sampled if self.sampled else None
        return {**self.__dict__, "retokenized_differ_share": None if share is None else round(share, 4)}


def sampled_turn_ids(tokenizer, trajectory: Trajectory) -> list[list[int] | None]:
    """Per assistant message, the ids training learns for it: the ids its backend sampled, its
    stop token left out (the template writes its own end of turn), or None where it is rendered
    from its text (nothing sampled; or a turn the engine cut after the call that ended the episode,
    whose later calls never ran and so are learned by nobody).

    The record is held to its ids: they must decode to text from which the engine makes exactly
    the recorded turn (its calls run, everything else its text), hold no control token of the
    tokenizer (the template's structure is not the policy's to write) and end on one of its stop
    tokens where they say they stopped. Anything else is an :class:`InterlockError` naming the
    turn: the trajectory is refused, never learned in part."""
    turns = [m for m in trajectory.messages if m.role == "assistant"]
    sampled = trajectory.sampled
    if not sampled:
        return [None] * len(turns)
    if len(sampled) != len(turns):
        raise InterlockError(f"{len(sampled)} sampled entries for {len(turns)} assistant turns",
                             field="sampled")
    control, stops = control_token_ids(tokenizer), stop_token_ids(tokenizer)
    ids: list[list[int] | None] = []
    for number, (turn, sample) in enumerate(zip(turns, sampled, strict=True)):
        if sample is None:
            ids.append(None)
            continue
        where = f"sampled[{number}]"
        if sample.stopped and sample.ids[-1] not in stops:
            raise InterlockError(f"ends on token {sample.ids[-1]}, none of the tokenizer's stop tokens",
                                 field=where)
        generated = list(sample.generated)
        if any(i >= len(tokenizer) for i in generated):
            raise InterlockError(f"holds a token id past the tokenizer's {len(tokenizer)}", field=where)
        if control & set(generated):
            token = tokenizer.convert_ids_to_tokens(min(control & set(generated)))
            raise InterlockError(f"holds the control token {token!r}, which the policy may not write "
                                 "into the template's structure", field=where)
        parsed = parse_turn(tokenizer.decode(generated, skip_special_tokens=False))
        ran = len(turn.tool_calls)
        if parsed.calls[:ran] != turn.tool_calls:
            raise InterlockError("decodes to other calls than the turn records", field=where)
        submitted = number == len(turns) - 1 and trajectory.finish_reason == "submitted"
        if turn.content == parsed.remainder(ran):
            ids.append(generated)
        elif submitted and turn.content == parsed.remainder():
            ids.append(None)  # the engine cut it after the call that ended the episode
        else:
            raise InterlockError("decodes to other text than the turn records", field=where)
    return ids


def encode_conversation(tokenizer, messages: list[dict], loss_from_message: int = 0,
                        turn_ids: list[list[int] | None] | None = None,
                        counts: TurnCounts | None = None) -> tuple[list[int], list[bool]]:
    """Token ids and loss mask of a conversation, trailing non-assistant turns dropped. The mask is
    True on the assistant tokens of messages at index ``loss_from_message`` or later only. The
    messages are rendered as the live prompt renders them (:func:`template_messages`: no text a
    policy or a tool wrote becomes a control token), and held to it. ``turn_ids`` (per assistant
    message, :func:`sampled_turn_ids`) puts each turn's sampled ids in place of its rendered text,
    before the template's end-of-turn token; ``counts`` adds up how each turn is learned."""
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
    marks = encoded["assistant_masks"]
    if len(marks) != len(ids):
        raise InterlockError("the chat template has no {% generation %} markers: cannot find the "
                             "assistant tokens", field="chat_template")
    boundary = 0 if loss_from_message < len(messages) else len(ids)
    if 0 < loss_from_message < len(messages):
        prefix = encode(messages[:loss_from_message])
        if ids[:len(prefix)] != prefix:
            raise InterlockError("the chat template is not prefix-stable: the first messages render to "
                                 "other tokens alone than at the start of the whole conversation, so the "
                                 "turns that carry loss cannot be found", field="loss_from_message")
        boundary = len(prefix)
    mask = [bool(m) and i >= boundary for i, m in enumerate(marks)]
    spans = marked_spans(marks)
    if not spans:  # a template that marks no assistant token: nothing is learned, nothing to put in
        return ids, mask
    turn_ids = turn_ids or [None] * len(spans)
    if len(spans) != len(turn_ids):
        raise InterlockError(f"the chat template marks {len(spans)} assistant spans for {len(turn_ids)} "
                             "assistant turns", field="chat_template")
    return _with_sampled(ids, mask, spans, turn_ids, control_token_ids(tokenizer), counts or TurnCounts())


def marked_spans(marks: list[int]) -> list[tuple[int, int]]:
    """Where each run of marked tokens (an assistant turn's) starts and ends."""
    spans, start = [], None
    for index, mark in enumerate([*marks, 0]):
        if mark and start is None:
            start = index
        elif not mark and start is not None:
            spans.append((start, index))
            start = None
    return spans


def _with_sampled(ids: list[int], mask: list[bool], spans: list[tuple[int, int]],
                  turn_ids: list[list[int] | None], control: frozenset[int],
                  counts: TurnCounts) -> tuple[list[int], list[bool]]:
    """``ids`` with each span's text replaced by its turn's sampled ids where it has them, the
    span's last token (the template's end of turn, a control token) kept after them. Only turns
    that carry loss are counted."""
    out_ids, out_mask, position = [], [], 0
    for (start, end), sampled in zip(spans, turn_ids, strict=True):
        out_ids += ids[position:start]
        out_mask += mask[position:start]
        trained = mask[start]
        if sampled is None:
            counts.rendered += trained
            out_ids += ids[start:end]
            out_mask += mask[start:end]
        else:
            if ids[end - 1] not in control:
                raise InterlockError("the chat template does not close an assistant turn with a control "
                                     "token: cannot tell its text from its end", field="chat_template")
            span = [*sampled, ids[end - 1]]
            counts.sampled += trained
            counts.retokenized_differ += trained and span != ids[start:end]
            out_ids += span
            out_mask += [mask[start]] * len(span)
        position = end
    return out_ids + ids[position:], out_mask + mask[position:]


def encode_trajectories(items: Iterable[Trajectory | TrainingItem | BadRow], tokenizer, *,
                        max_length: int) -> ExampleSet:
    """One example per trajectory; a bare :class:`Trajectory` has weight 1 and loss on every
    assistant turn, a :class:`TrainingItem` its own weight and ``loss_from_message``. A bad row of
    the table read, and a trajectory the chat template cannot render safely, is refused with its
    reason (:attr:`ExampleSet.refused`); the others are encoded."""
    examples, too_long, empty, refused, turns = [], [], [], BadRows(), TurnCounts()
    for item in items:
        if isinstance(item, BadRow):
            refused.add(item)
            continue
        if isinstance(item, Trajectory):
            item = TrainingItem(item)
        trajectory, counts = item.trajectory, TurnCounts()
        try:
            ids, mask = trajectory_tokens(tokenizer, trajectory, item.loss_from_message, counts)
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
            turns.add(counts)
    return ExampleSet(examples, too_long, empty, refused.summary(), turns)


def trajectory_tokens(tokenizer, trajectory: Trajectory, loss_from_message: int = 0,
                      counts: TurnCounts | None = None) -> tuple[list[int], list[bool]]:
    """A trajectory's token ids and loss mask (:func:`encode_conversation`), each assistant turn
    its sampled ids where the record holds them and they hold up (:func:`sampled_turn_ids`)."""
    return encode_conversation(tokenizer, [m.to_dict() for m in trajectory.messages], loss_from_message,
                               sampled_turn_ids(tokenizer, trajectory), counts)


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
